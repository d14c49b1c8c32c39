"""benchmarks/runtime.py runs its real code path end to end (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from _benchmark_script import load


def _load():
    return load("runtime")


@pytest.mark.slow  # builds, lowers to ExecuTorch and times in child processes: about 70 s
def test_runtime_benchmark_prints_ratios_at_one_and_two_threads(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert _load().main(["--small", "--models", "resnet18", "--runs", "2", "--rounds", "2",
                         "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "a/c 1T" in text and "a/c 2T" in text and "constants (a)" in text
    assert "a/fastest" in text and "fastest peer" in text
    (row,) = json.loads(out.read_text())
    assert row["model"] == "resnet18" and row["ms_canonqnn_1"] > 0 and row["ms_canonqnn_2"] > 0
    assert row["ms_ort_1"] > 0 and row["ms_ort_2"] > 0
    assert row["exact_with_d"] is True  # the timed build computes onnxruntime's bits
    for t in (1, 2):  # both peers ran: their times, the fastest of the three named
        assert row[f"ms_tflite_{t}"] > 0 and row[f"ms_executorch_{t}"] > 0
        fastest = row[f"fastest_peer_{t}"]
        assert row[f"a_over_fastest_{t}"] == pytest.approx(
            row[f"ms_canonqnn_{t}"] / row[f"ms_{fastest}_{t}"])
        assert row[f"ms_{fastest}_{t}"] == min(row[f"ms_{p}_{t}"]
                                               for p in ("ort", "tflite", "executorch"))
    assert row["tflite_note"] is None and row["executorch_note"] is None
    assert row["tflite_lsb_from_canonqnn"] <= 2  # the same network, TFLite's rounding
    assert set(row["busy_cores_2"]) == {"canonqnn", "ort", "tflite", "executorch"}


def test_a_peer_that_did_not_run_has_its_reason_in_its_cell(capsys):
    row = {"model": "net", "ms_canonqnn_1": 2.0, "ms_canonqnn_2": 1.0, "ms_ort_1": 4.0,
           "ms_ort_2": 2.0, "ms_tflite_1": 1.0, "ms_tflite_2": 0.5, "ms_executorch_1": None,
           "ms_executorch_2": None, "tflite_note": None,
           "executorch_note": "not installed: executorch (pip install canonqnn[torch])",
           "fastest_peer_1": "tflite", "fastest_peer_2": "tflite", "a_over_fastest_1": 2.0,
           "a_over_fastest_2": 2.0, "busy_cores_2": {"canonqnn": 2.0}}
    _load().print_peers([row])
    lines = capsys.readouterr().out.splitlines()
    (first,) = [line for line in lines if line.startswith("net ") and " 1 " in line]
    assert "not installed [1]" in first and "(e) TFLite" in first
    assert "[1] not installed: executorch (pip install canonqnn[torch])" in lines


def test_runtimes_take_turns_in_children_and_a_runtime_that_cannot_load_says_why(tmp_path):
    import numpy as np
    import onnxruntime as ort

    from canonqnn.testing import onnx_models as models

    runtimes = _load().RUNTIMES
    model = models.mobilenet_v1_like()  # float: onnxruntime loads it at once
    path, data = tmp_path / "model.onnx", tmp_path / "input.npy"
    path.write_bytes(model.SerializeToString())
    x = models.random_input(3)
    np.save(data, x)
    specs = {"ort": {"kind": "ort", "model": str(path), "input": str(data)},
             "missing": {"kind": "ort", "model": str(tmp_path / "none.onnx"),
                         "input": str(data)}}
    times, outputs, busy = runtimes.time_runtimes(specs, 1, 4, 2, str(tmp_path))
    assert isinstance(times["ort"], float) and times["ort"] > 0 and busy["ort"] > 0
    assert "none.onnx" in times["missing"]  # the reason, where its time would be
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_array_equal(outputs["ort"], expected)


def test_an_unknown_peer_is_refused():
    with pytest.raises(SystemExit):
        _load().main(["--small", "--peers", "tflite,coreml"])


def test_kernel_table_prints_mac_rates_against_a_measured_peak(capsys, monkeypatch):
    # the rates are against the peak of the threads TVM's pool runs the kernels on
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    assert _load().main(["--kernels", "--small", "--models", "mobilenet_v1", "--runs", "2"]) == 0
    text = capsys.readouterr().out
    assert "(1 thread)" in text and " on 1\n" in text
    assert "GMAC/s" in text and "of peak" in text and "measured" in text
    header = next(line for line in text.splitlines() if line.startswith("kernel "))
    assert header.split()[:3] == ["kernel", "us", "calls"]  # a kernel called n times counts n


def test_peak_is_measured_on_the_hosts_instruction():
    from canonqnn.build.forms import dot

    isa = dot.host_isa()
    if isa is None:
        pytest.skip("this host has no int8 dot-product ISA")
    assert 1.0 < _load().measured_peak_gmacs(isa, iterations=100_000) < 10_000.0
