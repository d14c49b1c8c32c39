"""benchmarks/conv_transpose.py runs end to end (no timing asserted) and finds the transposed
conv lowered by output phases equal to the conv of the upsampled input its definition is."""

from __future__ import annotations

import pytest

from _benchmark_script import load


@pytest.mark.slow  # two builds: about 10 s
def test_conv_transpose_benchmark_prints_both_times_and_equal_outputs(capsys):
    assert load("conv_transpose").main(["--channels", "8,4", "--size", "6", "--kernel", "3",
                                        "--runs", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("conv2d_transpose 8->4 channels, 3x3, stride 2, input 6x6 -> ")
    assert out[1].startswith("by output phases") and "phases / upsampled" in out[2]
    assert out[-1] == "outputs equal: yes"
