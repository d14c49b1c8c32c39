"""The command line on a PyTorch program saved with torch.export.save (.pt2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _pt2e import network, save
from canonqnn.cli import main
from canonqnn.frontends.torch import runtime as torch_runtime


# The README's `canonqnn parity model.pt2` checks the same on a terminal, through the installed
# command (tests/cli/test_readme_commands.py); this one reads its JSON.
@pytest.mark.slow
def test_parity_of_a_pt2_file_compares_executorch_and_reports_eager(tmp_path, capsys):
    path = save(network("gated_upsample"), tmp_path)  # its sigmoid is a lookup table
    assert main(["parity", path, "--json", "--runs", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reference"].startswith("ExecuTorch 1.5.1, XNNPACK delegate")
    assert [o["exact_fraction"] for o in report["outputs"]] == [1.0]
    profile = torch_runtime.profile()
    assert len(report["float_islands"]) == (profile.tables == "unverified")
    assert report["numerics"] == report["runtime_numerics"] == profile.name
    (eager,) = report["also_compared"]
    assert eager["reference"].startswith("PyTorch 2.13.0")
    assert all(o["max_abs_diff"] <= 1 + 1e-3 for o in eager["outputs"])  # LSB (docs/parity.md)


@pytest.mark.slow  # the parity test above builds the same file
def test_convert_build_run_a_pt2_file(tmp_path, capsys):
    path = save(network("cnn"), tmp_path)
    lib = str(tmp_path / "model.so")
    assert main(["build", path, "-o", lib]) == 0
    x = np.random.default_rng(0).standard_normal((2, 3, 24, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "out.npz")
    assert main(["run", lib, "--input", f"x={tmp_path / 'x.npy'}", "-o", out]) == 0
    with np.load(out) as result:
        assert len(result.files) == 2


def test_view_exports_the_canonical_graph_of_a_pt2_file(tmp_path, capsys):
    path = save(network("gated_upsample"), tmp_path)  # its sigmoid is a lookup table
    graph = tmp_path / "graph.json"
    # (a named profile: no probe of ExecuTorch's XNNPACK, which parity tests)
    assert main(["view", path, "--numerics", "xnnpack-x86-avx2", "--export", str(graph),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == [str(graph)]
    nodes = [n for g in json.loads(graph.read_text())["graphs"] for n in g["nodes"]]
    assert {"canonqnn.lut", "canonqnn.conv2d"} <= {n["label"] for n in nodes}
