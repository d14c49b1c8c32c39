"""Every command on every kind of input, as a user runs them: each command on each kind of
file (ONNX QDQ and float, TFLite, module file, library, something else), through the
command-line process (``_commands``); the README's command lines, PyTorch programs among them,
are ``test_readme_commands``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import dacite
import numpy as np
import pytest
from model_explorer import graph_builder, node_data_builder

from _commands import command_runner, make_files, run_command

runner = pytest.fixture(scope="module")(command_runner)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, runner) -> Path:
    """The models, and the library and module file of model.onnx."""
    where = make_files(tmp_path_factory.mktemp("commands"), program=False)
    run_command(runner, where, ["build", "model.onnx", "-o", "model.so"])
    run_command(runner, where, ["convert", "model.onnx", "-o", "model.canonqnn.json"])
    np.save(where / "x_tflite.npy", np.arange(-32, 32, dtype=np.int8).reshape(1, 64))
    return where


# Each command on each kind of input: (argv, status, what stderr or stdout must say).
MATRIX = [
    (["convert", "model.tflite", "--json", "-o", "tflite.canonqnn.json"], 0, None),
    (["convert", "float.onnx"], 0, "nothing was quantized"),
    (["convert", "model.canonqnn.json"], 2, "it is converted already"),
    (["convert", "model.so"], 2, "it is built already"),
    (["convert", "notes.onnx"], 2, "notes.onnx: not an ONNX model, it is a text file"),
    (["build", "model.canonqnn.json", "-o", "again.so", "--json"], 0, None),
    (["build", "model.tflite", "-o", "tflite.so", "--json"], 0, None),
    (["build", "model.so"], 2, "canonqnn run model.so runs it"),
    (["run", "model.so", "--input", "feeds.npz", "--json"], 0, None),
    (["run", "tflite.so", "--input", "input=x_tflite.npy", "--json"], 0, None),
    (["run", "model.canonqnn.json", "--input", "feeds.npz"], 2,
     "canonqnn run --reference model.canonqnn.json"),
    (["run", "model.onnx", "--input", "feeds.npz"], 2, "build it (canonqnn build model.onnx)"),
    (["run", "model.so", "--input", "feeds.npz", "--numerics", "exact"], 2,
     "--numerics applies to --reference only"),
    (["run", "--reference", "model.canonqnn.json", "--input", "feeds.npz", "--json"], 0, None),
    (["inspect", "model.canonqnn.json", "--json"], 0, None),
    (["inspect", "model.tflite", "--json"], 0, None),
    (["inspect", "--built", "model.so", "--json"], 0, None),
    (["inspect", "model.so"], 2, "inspect --built model.so lists its kernels"),
    (["parity", "model.canonqnn.json"], 2, "needs the model it was converted from"),
    (["parity", "x.npy"], 2, "inputs are given with --input"),
    (["ops", "--json"], 0, None),
    (["ops", "--name", "nope"], 2, "no canonical op 'nope'"),
    (["patterns", "--json"], 0, None),
    (["patterns", "model.canonqnn.json", "--json"], 0, None),
    (["patterns", "model.tflite", "--json"], 0, None),
    (["view", "model.canonqnn.json", "--export", "module-graph.json", "--json"], 0, None),
    (["view", "model.tflite", "--parity", "--export", "tflite-graph.json"], 0,
     "does not expose the model's inner tensors: no op gets a parity overlay"),
    (["view", "model.canonqnn.json", "--parity"], 2,
     "view --parity runs the model in its source runtime"),
    (["view", "model.onnx", "--export", "g.json", "--port", "9000"], 2,
     "--port apply to serving, not to --export"),
    (["view", "model.onnx", "--runs", "2"], 2, "--runs apply to view --parity only"),
    (["demo", "--workdir", "kept", "--json"], 0, None),
    (["convert", "model.onnx", "-o", "quiet.canonqnn.json", "--quiet"], 0, None),
    # the interpreter's announcement of its delegate, shown with --verbose only
    (["parity", "model.tflite", "--runs", "1", "--json", "--verbose"], 0, "XNNPACK delegate"),
]


@pytest.mark.parametrize("argv, status, says", MATRIX, ids=[" ".join(m[0]) for m in MATRIX])
def test_each_command_on_each_kind_of_input(runner, workdir, argv, status, says):
    if "tflite.so" in argv and argv[0] == "run" and not (workdir / "tflite.so").exists():
        run_command(runner, workdir, ["build", "model.tflite", "-o", "tflite.so"])
    run = run_command(runner, workdir, argv, status)
    if says is not None:
        assert says in run.stdout + run.stderr, run
    if status:
        assert not run.stdout, run  # an error writes nothing on stdout, with --json too
        assert run.stderr.startswith("canonqnn: error: "), run
    if "--quiet" in argv:
        assert not run.stdout and not run.stderr, run
    if argv[0] == "demo":  # its files kept where asked
        assert json.loads(run.stdout)["kept"]
        assert (workdir / "kept" / "resnet_like_qdq_u8.so").exists()


def test_an_export_is_model_explorers_graph_and_node_data_format(runner, workdir):
    """What ``view --export`` writes loads into Model Explorer's own dataclasses, converted
    strictly (no field unknown to them, none of another type)."""
    run = run_command(runner, workdir, ["view", "model.onnx", "--parity", "--export",
                                        "graph.json", "--json"])
    files = json.loads(run.stdout)["files"]
    assert [Path(f).name for f in files] == ["graph.json", "graph.parity-differing.json",
                                             "graph.parity-max-lsb.json"]
    strict = dacite.Config(strict=True)
    collection = dacite.from_dict(graph_builder.GraphCollection,
                                  json.loads((workdir / files[0]).read_text()), config=strict)
    assert collection.label == "model.onnx" and len(collection.graphs) == 2
    for path in files[1:]:
        per_graph = json.loads((workdir / path).read_text())
        assert set(per_graph) == {g.id for g in collection.graphs}
        for data in per_graph.values():
            typed = dacite.from_dict(node_data_builder.GraphNodeData, data, config=strict)
            assert typed.results  # every conv and add of the model has onnxruntime's tensor


def test_a_module_files_report_is_its_own_not_an_empty_one(runner, workdir):
    run = run_command(runner, workdir, ["inspect", "model.canonqnn.json", "--json"])
    report = json.loads(run.stdout)
    assert report["canonical_ops"]["conv2d"] == 8 and report["rules"] is None
    assert report["quantized"] and report["numerics"]
    run = run_command(runner, workdir, ["build", "float.onnx", "-o", "float.so", "--json"])
    assert not json.loads(run.stdout)["report"]["quantized"]


def test_a_missing_extra_is_named_not_a_traceback(workdir):
    """On an install without the torch, tflite and view extras (their modules unimportable)."""
    blocked = ["torch", "torchao", "executorch", "tflite", "ai_edge_litert", "flatbuffers",
               "model_explorer"]
    code = (f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
            "from canonqnn.cli import main; "
            "sys.exit(100 * main(['convert', 'model.pt2', '-o', 'unused.json']) "
            "+ 10 * main(['convert', 'model.tflite', '-o', 'unused.json']) "
            "+ main(['view', 'model.onnx']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 222, done.stderr
    pt2, tflite, view = done.stderr.splitlines()
    assert pt2 == ("canonqnn: error: PyTorch programs need the torch extra (torch is not "
                   "installed): pip install 'canonqnn[torch]'")
    # (the first of the extra's modules the frontend imports)
    assert re.fullmatch(r"canonqnn: error: TFLite models need the tflite extra \(\w+ is not "
                        r"installed\): pip install 'canonqnn\[tflite\]'", tflite), tflite
    assert view == ("canonqnn: error: the graph viewer (canonqnn view) needs the view extra "
                    "(model_explorer is not installed): pip install 'canonqnn[view]'")
