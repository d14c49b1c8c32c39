"""canonqnn.softmax against onnxruntime QLinearSoftmax (com.microsoft, ``opset`` 13: one axis),
its numpy reference and its TVM legalization: all three must be bit-identical.

uint8 data is compared as int8 (u - 128). Besides random data the cases cover long rows, rows
with many equal maxima, output scales whose reciprocal is not an integer (onnxruntime uses
floor(1 / out_scale)), and rows so short that ``f32(e * floor(1 / out_scale))`` overflows. Two
tests pin details random data cannot see: the float32 row sum runs in order, and the table's
shift uses the C library's ``logf``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from _ort import F32, MS, SingleOp, assert_bit_exact, rand_q, run_graph, scalar, to_int8
from canonqnn import _tvm
from canonqnn.numerics.arithmetic import c_library_function
from canonqnn.ops import softmax
from canonqnn.qparams import QParams


def ort_softmax(x, sx, zx, sy, zy, axis):
    consts = dict(sx=scalar(sx, F32), zx=scalar(zx, x.dtype), sy=scalar(sy, F32),
                  zy=scalar(zy, x.dtype))
    # (run_node's ``opset`` keyword is the model's opset, so the node is made here)
    node = helper.make_node("QLinearSoftmax", ["X", "sx", "zx", "sy", "zy"], ["Y"], domain=MS,
                            axis=axis, opset=13)
    return run_graph([node], dict(X=x), consts, x.dtype)


def canon_softmax(shape, sx, zx, sy, zy, axis, dtype=np.int8) -> SingleOp:
    """The op for data of ``dtype`` (zero points given in that dtype, as onnxruntime takes them)."""
    o = 128 if dtype == np.uint8 else 0
    return SingleOp(lambda x: softmax.softmax(
        x, QParams.make(sx, zx - o), QParams.make(sy, zy - o), axis,
        source_dtype=np.dtype(dtype).name), {"x": shape})


def check(op: SingleOp, x, sx, zx, sy, zy, axis, what=""):
    oracle = ort_softmax(x, sx, zx, sy, zy, axis)
    if x.dtype == np.uint8:
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(x)), what)
    else:
        assert_bit_exact(oracle, *op.both(x=x), what)
    return oracle


def data(rng, shape, dtype, kind: str) -> np.ndarray:
    hi = int(np.iinfo(dtype).max)
    if kind == "many_equal_maxima":  # most of each row at its maximum
        return np.maximum(rand_q(rng, shape, dtype), hi - 3).astype(dtype)
    if kind == "near_max":  # a narrow range: every element contributes to the sum
        return rand_q(rng, shape, dtype, lo=hi - 30)
    return rand_q(rng, shape, dtype)


# shape, axis, x_scale, out_scale, out_zp as int8 (uint8: + 128)
CASES = {
    "last_axis_out_scale_1_256": ((8, 64), -1, 0.05, 1 / 256, -128),
    "middle_axis_out_scale_0_003": ((2, 7, 5), 1, 0.11, 0.003, 10),  # floor(333.3) = 333
    "first_axis_out_scale_1_255": ((5, 3, 4), 0, 0.37, 1 / 255, -128),  # floor(254.99998)
    "long_rows": ((3, 3000), 1, 0.02, 2e-5, -100),
    "rank_4_axis_2": ((2, 3, 9, 4), 2, 0.8, 0.01, 50),
    "out_scale_above_one": ((4, 10), 1, 0.1, 2.0, 7),  # floor(0.5) = 0: every output is zp
}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("name", list(CASES))
def test_softmax_matches_onnxruntime(name, dtype):
    shape, axis, sx, sy, zy8 = CASES[name]
    o = 128 if dtype == np.uint8 else 0
    zx, zy = int(np.iinfo(dtype).min) + 17, zy8 + o
    op = canon_softmax(shape, F32(sx), zx, F32(sy), zy, axis, dtype)
    rng = np.random.default_rng(len(name))
    outputs = []
    for kind in ("random", "many_equal_maxima", "near_max"):
        x = data(rng, shape, dtype, kind)
        outputs.append(check(op, x, F32(sx), zx, F32(sy), zy, axis, f"{name}/{kind}"))
    distinct = len(np.unique(np.concatenate([y.ravel() for y in outputs])))
    assert distinct == 1 if name == "out_scale_above_one" else distinct > 10


def test_input_zero_point_does_not_change_the_result():
    """Softmax is shift-invariant: onnxruntime ignores x_zp, and so does the op."""
    rng = np.random.default_rng(3)
    x = rand_q(rng, (4, 33), np.int8)
    op = canon_softmax(x.shape, F32(0.07), 0, F32(1 / 256), -128, 1)
    for zx in (-128, 0, 99):
        check(op, x, F32(0.07), zx, F32(1 / 256), -128, 1, f"x_zp {zx}")


# rows of length 1 (and 2): f32(e * floor(1 / out_scale)) overflows to inf for the row maximum
OVERFLOW_ZERO_POINTS = {np.int8: (-128, 0), np.uint8: (0, 77)}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_overflowing_rows_store_what_onnxruntime_stores(dtype):
    """int8: INT32_MIN + zp wraps, so -128 for zp >= 0 and 127 for zp < 0; uint8: zp."""
    rng = np.random.default_rng(5)
    for zy in OVERFLOW_ZERO_POINTS[dtype]:
        for shape, sy in (((6, 1), 1 / 256), ((6, 2), 0.003)):
            x = rand_q(rng, shape, dtype)
            op = canon_softmax(shape, F32(0.1), 0, F32(sy), zy, 1, dtype)
            y = check(op, x, F32(0.1), 0, F32(sy), zy, 1, f"zp {zy} shape {shape}")
            if shape[1] == 1:
                expected = zy if dtype == np.uint8 else (127 if zy < 0 else -128)
                assert np.all(y == expected)


def _alternative(x, table, sy, zy, total):
    """int8 results with the row sum computed by ``total(e)`` instead of in order."""
    e = table[255 - (x.max(axis=1, keepdims=True).astype(np.int32) - x)]
    inv = F32(np.floor(F32(1) / F32(sy)))
    r = np.rint((e * inv).astype(F32) / total(e))
    return np.clip(r.astype(np.int64) + zy, -128, 127).astype(np.int8)


def test_row_sum_is_sequential_float32():
    """Data on which a pairwise or float64 sum would give other results: onnxruntime sums each
    row in order in float32, and so do the reference and the TVM build."""
    rng = np.random.default_rng(12)
    shape = (16, 4096)
    x = rand_q(rng, shape, np.int8, lo=120)
    sx, sy = F32(rng.uniform(0.01, 0.1)), F32(1 / 300000)
    op = canon_softmax(shape, sx, 0, sy, -128, 1)
    oracle = check(op, x, sx, 0, sy, -128, 1, "sequential sum")
    table = softmax.exp_table(sx, shape[1])
    pairwise = _alternative(x, table, sy, -128,
                            lambda e: e.sum(axis=1, keepdims=True, dtype=F32))
    float64 = _alternative(x, table, sy, -128,
                           lambda e: e.astype(np.float64).sum(1, keepdims=True).astype(F32))
    assert np.count_nonzero(pairwise != oracle) > 100
    assert np.count_nonzero(float64 != oracle) > 100


@pytest.mark.skipif(c_library_function("logf") is None,
                    reason="no C library logf to compare with")
def test_table_shift_uses_the_c_library_logf():
    """At row length 60594 the C library's logf (glibc 2.36) and the correctly rounded float32
    log differ by one ulp; onnxruntime's results follow the C library."""
    rng = np.random.default_rng(13)
    length = 60594
    sx, sy = F32(rng.uniform(0.001, 0.05)), F32(1 / 1e6)
    x = rand_q(rng, (4, length), np.int8, lo=100)
    headroom = F32(F32(np.finfo(F32).max) / F32(length))
    correctly_rounded = float(F32(math.log(float(headroom))))
    assert softmax._logf(headroom) != correctly_rounded
    op = canon_softmax(x.shape, sx, 0, sy, -128, 1)
    oracle = check(op, x, sx, 0, sy, -128, 1, "C logf")
    shift = max(0.0, correctly_rounded - 5.0) / float(sx)
    other = np.exp((np.arange(256.0) - 255.0 + shift) * float(sx)).astype(F32)
    cumulative = _alternative(x, other, sy, -128,
                              lambda e: np.cumsum(e, axis=1, dtype=F32)[:, -1:])
    assert np.count_nonzero(cumulative != oracle) > 100


def test_builder_normalizes_the_axis_and_builds_the_table():
    op = canon_softmax((2, 5, 3), F32(0.25), 0, F32(1 / 256), -128, -2)
    assert _tvm.attrs_dict(op.call)["axis"] == 1
    table = _tvm.const_value(op.call.args[1])
    np.testing.assert_array_equal(table, softmax.exp_table(F32(0.25), 5))
    assert table.dtype == np.float32 and table[255] >= 1.0 and np.all(np.diff(table) >= 0)


# ---------------------------------------------------------------- slow sweep
def _slow_only(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("long sweep: pytest -m slow tests/ops/test_softmax.py")


@pytest.mark.slow
def test_random_configurations_match_onnxruntime(request):
    """120 random shapes / axes / scales / zero points per dtype."""
    _slow_only(request)
    rng = np.random.default_rng(2024)
    shapes = [(4, 10), (3, 5, 7), (2, 3, 4, 5), (2, 300), (1, 3000), (5, 1), (8, 64), (6, 2),
              (3, 1000)]
    for dtype in (np.int8, np.uint8):
        info = np.iinfo(dtype)
        for trial in range(120):
            shape = shapes[trial % len(shapes)]
            axis = int(rng.integers(-len(shape), len(shape)))
            sx = F32(rng.choice([0.1, 0.05, 0.02, 1 / 16, 0.3, 0.007, 1.0, 2.5, 0.0005])
                     * rng.uniform(0.5, 1.5))
            sy = F32(rng.choice([1 / 256, 1 / 255, 1 / 128, 0.003, 0.01, 0.5, 2.0, 1e-3, 1e-5]))
            zx = int(rng.integers(info.min, info.max + 1))
            zy = int(rng.choice([info.min, info.min + 100, 0 if dtype == np.int8 else 128,
                                 info.max]))
            op = canon_softmax(shape, sx, zx, sy, zy, axis, dtype)
            for kind in ("random", "many_equal_maxima", "near_max"):
                check(op, data(rng, shape, dtype, kind), sx, zx, sy, zy, axis,
                      f"{np.dtype(dtype).name} trial {trial} {kind}")
