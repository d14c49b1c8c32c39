"""benchmarks/channels_last.py: its channels-last prototypes compute what numpy computes (the
ratios it prints rest on that), and the script runs end to end (no timing asserted)."""

from __future__ import annotations

import pytest
from _benchmark_script import load

from canonqnn.ops import _dot


def _vpdpbusd_host():
    isa = _dot.host_isa()
    if isa is None or isa.pair != 4:
        pytest.skip("the prototypes run on a 4-product dot-product instruction; this host has "
                    "none")
    return isa


@pytest.mark.parametrize("per_tile", [True, False], ids=["per_tile", "second_pass"])
def test_pointwise_prototype_equals_numpy_on_a_plane_not_whole_tiles(per_tile):
    isa = _vpdpbusd_host()
    # 7x7 = 49 pixels in tiles of 6: the last tile runs past the plane's end
    *_, exact = load("channels_last").nhwc_pointwise(32, 64, 7, 6, per_tile, isa)
    assert exact


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_prototype_equals_numpy(stride):
    _vpdpbusd_host()
    *_, exact = load("channels_last").nhwc_depthwise(32, 9, stride, 4)
    assert exact


@pytest.mark.slow  # builds MobileNet-V1 at 224 and compiles and times 30 kernels: about 8 s
def test_channels_last_benchmark_prints_every_shape_exact(capsys):
    _vpdpbusd_host()
    assert load("channels_last").main(["--runs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["conv", "NCHW", "us"]
    assert len(lines) == 16 and all(line.split()[-1] == "yes" for line in lines[1:])
