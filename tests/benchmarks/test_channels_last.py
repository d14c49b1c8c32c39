"""benchmarks/channels_last.py runs end to end (no timing asserted): it pairs the conv kernels
of a build without the layout pass with those of a build with it, in model order."""

from __future__ import annotations

import pytest

from _benchmark_script import load
from canonqnn.build import isa as dot_isa


@pytest.mark.slow  # fuses, schedules and times a small MobileNet-V1 twice: about 15 s
def test_channels_last_benchmark_pairs_every_conv_with_its_channels_last_kernel(capsys):
    # the channels-last kernels are legalized for AVX512-VNNI whatever the host (they run
    # untensorized where it lacks the instruction)
    with dot_isa.emulating("avx512_vnni"):
        assert load("channels_last").main(["--small", "--runs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["conv", "(NCHW", "kernel)"]
    rows = [line for line in lines[1:-1] if "transpose" not in line]
    assert len(rows) >= 5  # the stem, 4 blocks of depthwise + 1x1 (repeats counted in calls)
    assert any("channels_last_depthwise" in row for row in rows)
    assert any(" channels_last " in f" {row} " for row in rows)
    assert lines[-1].startswith("all convs (and transposes), x calls")
