"""benchmarks/runtime.py runs its real code path end to end (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from _benchmark_script import load


def _load():
    return load("runtime")


@pytest.mark.slow  # builds, exports and times the model in child processes: about 20 s
def test_runtime_benchmark_prints_ratios_at_one_and_two_threads(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert _load().main(["--small", "--models", "resnet18", "--runs", "2", "--json",
                         str(out)]) == 0
    text = capsys.readouterr().out
    assert "a/c 1T" in text and "a/c 2T" in text and "constants (a)" in text
    (row,) = json.loads(out.read_text())
    assert row["model"] == "resnet18" and row["ms_canonqnn_1"] > 0 and row["ms_canonqnn_2"] > 0
    assert row["ms_ort_1"] > 0 and row["ms_ort_2"] > 0
    assert row["exact_with_d"] is True  # the timed build computes onnxruntime's bits


def test_kernel_table_prints_mac_rates_against_a_measured_peak(capsys):
    assert _load().main(["--kernels", "--small", "--models", "mobilenet_v1", "--runs", "2"]) == 0
    text = capsys.readouterr().out
    assert "GMAC/s" in text and "of peak" in text and "measured" in text
    header = next(line for line in text.splitlines() if line.startswith("kernel "))
    assert header.split()[:3] == ["kernel", "us", "calls"]  # a kernel called n times counts n


def test_peak_is_measured_on_the_hosts_instruction():
    from canonqnn.build.forms import dot

    isa = dot.host_isa()
    if isa is None:
        pytest.skip("this host has no int8 dot-product ISA")
    assert 1.0 < _load().measured_peak_gmacs(isa, iterations=100_000) < 10_000.0
