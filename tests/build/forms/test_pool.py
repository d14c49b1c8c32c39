"""The build's max pool (``forms.pool``: row loops, stride-2 taps read as 16-bit pairs) is the
op's arithmetic: equal to ``canonqnn.max_pool2d``'s numpy reference on every geometry it
takes, and the op's own compute where it does not take one."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import canonqnn
from canonqnn import _tvm
from canonqnn.build.forms import pool
from canonqnn.ops import movement
from canonqnn.qparams import QParams

# (shape, kernel, strides, pads [t, l, b, r], dilation, ceil_mode)
GEOMETRIES = {
    "resnet_stem_k3_s2_p1": ((1, 8, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    "odd_width_k3_s2_p1": ((2, 3, 9, 13), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    "k2_s2": ((1, 4, 10, 10), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    "k3_s2_ceil_mode": ((1, 3, 9, 8), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),
    "k5_s2_p2_wide_row_in_chunks": ((1, 2, 6, 150), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), False),
    "k4_s2_odd_left_pad": ((1, 2, 8, 11), (4, 4), (2, 2), (3, 3, 0, 0), (1, 1), True),
    "k3_s1_p1_same": ((1, 5, 7, 70), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
    "k5_s1_p2_spp": ((1, 2, 13, 13), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),
    "rows_dilated_s3_cols_s2": ((1, 3, 15, 12), (3, 2), (3, 2), (2, 0, 1, 1), (2, 1), False),
    "window_past_the_row": ((1, 1, 3, 3), (3, 3), (2, 2), (2, 2, 2, 2), (1, 1), False),
}


def _module(shape, kernel, strides, pads, dilation, ceil_mode):
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(movement.max_pool2d(x, QParams.make(0.05, 3), pool_size=kernel,
                                            strides=strides, padding=pads, dilation=dilation,
                                            ceil_mode=ceil_mode))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_row_loop_max_pool_equals_the_reference(name):
    shape, kernel, strides, pads, dilation, ceil_mode = GEOMETRIES[name]
    built = canonqnn.build(_module(*GEOMETRIES[name]))
    rng = np.random.default_rng(7)
    for x in (rng.integers(-128, 128, shape).astype(np.int8),
              rng.integers(-128, -120, shape).astype(np.int8)):  # pads must never win
        expected = movement.MAX_POOL2D.reference(
            x, pool_size=kernel, strides=strides, padding=pads, dilation=dilation,
            ceil_mode=ceil_mode, scale=0.05, zp=3)
        got = next(iter(built.run({"x": x}).values()))
        assert got.shape == expected.shape, name
        assert np.array_equal(got, expected), (
            f"{name}: {np.count_nonzero(got != expected)} of {got.size} differ")


def test_stride_two_rows_are_read_as_pairs_and_other_strides_take_the_ops_compute():
    def kernel_script(geometry):
        fused = canonqnn.build.fuse(_module(*geometry))
        return "\n".join(f.script() for name, f in _tvm.module_functions(fused).items()
                         if "max_pool" in name)

    assert 'view("int16")' in kernel_script(GEOMETRIES["resnet_stem_k3_s2_p1"])
    stride_three = ((1, 2, 9, 9), (3, 3), (3, 3), (0, 0, 0, 0), (1, 1), False)
    assert "x_pad" in kernel_script(stride_three)  # the op's own compute pads in one pass
    assert "x_pad" not in kernel_script(GEOMETRIES["k3_s1_p1_same"])


@pytest.mark.parametrize(("w", "ow", "kw", "sw", "pl"), [
    (112, 56, 3, 2, 1), (13, 7, 3, 2, 1), (11, 5, 4, 2, 3), (70, 70, 3, 1, 1), (3, 3, 3, 2, 2)])
def test_the_row_buffer_holds_every_tap_in_whole_pairs(w, ow, kw, sw, pl):
    left, length = pool.row_length(w, ow, kw, sw, pl)
    assert left >= pl and left + w <= length
    last_tap = sw * (ow - 1) + kw - 1 - pl + left
    assert last_tap < length
    if sw == 2:
        assert left % 2 == 0 and length % 2 == 0
        assert 2 * ((last_tap) // 2) + 1 < length  # the pair holding the last tap
