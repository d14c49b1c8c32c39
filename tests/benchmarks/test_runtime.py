"""benchmarks/runtime.py runs its real code path end to end (no timing is asserted)."""

from __future__ import annotations

import json

from _benchmark_script import load


def _load():
    return load("runtime")


def test_runtime_benchmark_prints_latency_ratios_and_constant_bytes(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert _load().main(["--small", "--models", "resnet", "--runs", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "a/b" in text and "a/c 1T" in text and "constants (a)" in text
    (row,) = json.loads(out.read_text())
    assert row["model"] == "resnet" and row["ms_canonqnn"] > 0 and row["ms_tvm"] > 0
    # int8 weights against TVM's folded float32 ones: the canonical module carries fewer bytes
    assert row["constants_canonqnn"]["int8"] > 0 and "int8" not in row["constants_tvm"]
    assert sum(row["constants_canonqnn"].values()) < sum(row["constants_tvm"].values())
