"""canonqnn.resize2d against onnxruntime's Resize: DequantizeLinear -> Resize -> QuantizeLinear
(kernel "float") and Resize applied to uint8/int8 data (kernel "integer"); the numpy reference
for every coordinate and nearest mode, the TVM legalization for a representative subset.

uint8 data runs as the int8 tensor u - 128 with zero points - 128.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _ort import F32, SingleOp, assert_bit_exact, rand_q, run_graph, run_node, scalar, to_int8
from canonqnn.ops import REGISTRY, resize
from canonqnn.qparams import QParams

MODES = resize.COORDINATE_MODES
GEOMETRIES = {  # (input shape, output H, W): up, down, and one axis each way
    "up": ((1, 3, 5, 7), (10, 14)),
    "down": ((2, 2, 9, 8), (4, 6)),
    "mixed": ((1, 2, 6, 6), (10, 3)),
}
FLOAT_PARAMS = (F32(0.031), -7, F32(0.02), 11)  # input and output parameters differ


def _sizes(shape, size):
    return np.array([shape[0], shape[1], *size], np.int64)


def ort_qdq(x, si, zi, so, zo, size, **attrs):
    dt = x.dtype
    consts = dict(si=scalar(si, F32), zi=scalar(zi, dt), so=scalar(so, F32), zo=scalar(zo, dt),
                  sizes=_sizes(x.shape, size))
    nodes = [helper.make_node("DequantizeLinear", ["X", "si", "zi"], ["x"]),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], **attrs),
             helper.make_node("QuantizeLinear", ["r", "so", "zo"], ["Y"])]
    return run_graph(nodes, dict(X=x), consts, dt, opset=19)


def ort_integer(x, size, **attrs):
    """Resize run on the uint8/int8 tensor itself (onnxruntime's integer kernel)."""
    return run_node("Resize", ["X", "", "", "sizes"], dict(X=x), dict(sizes=_sizes(x.shape, size)),
                    x.dtype, opset=19, **attrs)


def attrs_for(size, qp_in, qp_out, method, mode, nearest="round_prefer_floor", kernel="float"):
    return dict(size=list(size), method=method, coordinate_transformation_mode=mode,
                nearest_mode=nearest, kernel=kernel, x_scale=qp_in.scalar_scale,
                x_zp=qp_in.scalar_zp, out_scale=qp_out.scalar_scale, out_zp=qp_out.scalar_zp,
                act_min=-128, act_max=127, rounding="rne_f32")


def reference(x, **attrs):
    """The registered numpy reference on stored data (uint8 shifted), result as stored."""
    uint8 = x.dtype == np.uint8
    y = REGISTRY["resize2d"].reference(to_int8(x) if uint8 else x, **attrs)
    return (y.astype(np.int32) + 128).astype(np.uint8) if uint8 else y


def params(dtype, si, zi, so, zo):
    """(stored zero points, int8 QParams) for parameters given in int8 terms."""
    o = 128 if dtype == np.uint8 else 0
    return (zi + o, zo + o), QParams.make(si, zi), QParams.make(so, zo)


# ---------------------------------------------------------------- numpy reference, every mode
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_nearest_matches_onnxruntime_for_every_coordinate_and_nearest_mode(geometry):
    shape, size = GEOMETRIES[geometry]
    x = rand_q(np.random.default_rng(1), shape)
    qp = QParams.make(0.05, 0)
    for mode in MODES:
        for nearest in resize.NEAREST_MODES:
            oracle = ort_integer(x, size, mode="nearest", coordinate_transformation_mode=mode,
                                 nearest_mode=nearest)
            got = reference(x, **attrs_for(size, qp, qp, "nearest", mode, nearest))
            assert np.array_equal(got, oracle), (mode, nearest)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_linear_float_kernel_matches_onnxruntime_qdq_for_every_coordinate_mode(geometry, dtype):
    shape, size = GEOMETRIES[geometry]
    si, zi, so, zo = FLOAT_PARAMS
    (zi_s, zo_s), qi, qo = params(dtype, si, zi, so, zo)
    x = rand_q(np.random.default_rng(2), shape, dtype)
    for mode in MODES:
        oracle = ort_qdq(x, si, zi_s, so, zo_s, size, mode="linear",
                         coordinate_transformation_mode=mode)
        assert np.array_equal(reference(x, **attrs_for(size, qi, qo, "linear", mode)), oracle), \
            mode


def ort_float_resize(x, si, zi, size, **attrs):
    """DequantizeLinear -> Resize with a float output: onnxruntime's interpolated values."""
    consts = dict(si=scalar(si, F32), zi=scalar(zi, x.dtype), sizes=_sizes(x.shape, size))
    nodes = [helper.make_node("DequantizeLinear", ["X", "si", "zi"], ["x"]),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["Y"], **attrs)]
    return run_graph(nodes, dict(X=x), consts, np.float32, opset=19)


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_linear_interpolation_order_matches_onnxruntime_bit_for_bit(geometry):
    # the float32 values before quantization, bitwise: products rounded, added left to right;
    # fusing the additions into FMAs changes some of them
    shape, size = GEOMETRIES[geometry]
    si, zi = F32(0.031), -7
    x = rand_q(np.random.default_rng(10), shape)
    xf = ((x.astype(np.int32) - zi).astype(F32) * si).astype(F32)
    fused_differs = 0
    for mode in MODES:
        oracle = ort_float_resize(x, si, zi, size, mode="linear",
                                  coordinate_transformation_mode=mode)
        a = attrs_for(size, QParams.make(si, zi), QParams.make(si, zi), "linear", mode)
        assert np.array_equal(resize.bilinear(xf, a).view(np.uint32), oracle.view(np.uint32)), \
            mode
        fused_differs += int(np.count_nonzero(_fused_bilinear(xf, a) != oracle))
    assert fused_differs > 0


def _fused_bilinear(xf, a):
    """The same interpolation with the three additions fused into multiply-adds."""
    from canonqnn.numerics.arithmetic import fma_f32

    (oh, ow), mode = a["size"], a["coordinate_transformation_mode"]
    y1, y2, dy1, dy2 = resize.linear_taps(xf.shape[2], oh, mode)
    x1, x2, dx1, dx2 = resize.linear_taps(xf.shape[3], ow, mode)
    terms = [(dx2[None] * dy2[:, None], xf[:, :, y1][:, :, :, x1]),
             (dx1[None] * dy2[:, None], xf[:, :, y1][:, :, :, x2]),
             (dx2[None] * dy1[:, None], xf[:, :, y2][:, :, :, x1]),
             (dx1[None] * dy1[:, None], xf[:, :, y2][:, :, :, x2])]
    t = (terms[0][0].astype(F32) * terms[0][1]).astype(F32)
    for coef, taps in terms[1:]:
        t = fma_f32(coef.astype(F32), taps, t)
    return t


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_linear_integer_kernel_matches_onnxruntime_on_stored_values(geometry, dtype):
    shape, size = GEOMETRIES[geometry]
    qp = QParams.make(1.0, -128 if dtype == np.uint8 else 0)
    x = rand_q(np.random.default_rng(3), shape, dtype)
    truncations = 0
    for mode in MODES:
        oracle = ort_integer(x, size, mode="linear", coordinate_transformation_mode=mode)
        got = reference(x, **attrs_for(size, qp, qp, "linear", mode, kernel="integer"))
        assert np.array_equal(got, oracle), mode
        # where rounding to nearest would give another value, onnxruntime truncated
        a = attrs_for(size, qp, qp, "linear", mode, kernel="integer")
        xs = (x.astype(np.int32) - (128 if dtype == np.uint8 else 0)).astype(F32)
        t = resize.bilinear(xs, a)
        truncations += int(np.count_nonzero(np.rint(t) != np.trunc(t)))
    assert truncations > 100


def test_integer_kernels_agree_exactly_where_weights_are_multiples_of_1_256():
    # onnxruntime's layout optimizer runs Resize NHWC next to channels-last QLinearConvs: the
    # NHWC integer kernel uses 10-bit fixed-point weights; canonqnn folds the integer kernel
    # only where those equal the NCHW float weights' results.
    x = rand_q(np.random.default_rng(4), (1, 4, 5, 6), np.uint8)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    qp = QParams.make(1.0, -128)
    for mode, size, exact in (("half_pixel", (10, 12), True), ("asymmetric", (10, 12), True),
                              ("pytorch_half_pixel", (10, 3), True),
                              ("align_corners", (10, 12), False), ("half_pixel", (7, 9), False)):
        predicate = (resize.weights_are_fixed_point_exact(5, size[0], mode)
                     and resize.weights_are_fixed_point_exact(6, size[1], mode))
        assert predicate == exact, (mode, size)
        oracle = run_node("Resize", ["X", "", "", "sizes"], dict(X=nhwc),
                          dict(sizes=np.array([1, *size, 4], np.int64)), np.uint8, opset=19,
                          mode="linear", coordinate_transformation_mode=mode)
        got = reference(x, **attrs_for(size, qp, qp, "linear", mode, kernel="integer"))
        same = np.array_equal(got.transpose(0, 2, 3, 1), oracle)
        assert same == exact, (mode, size)


# ---------------------------------------------------------------- TVM builds
def _check(op, x, oracle, what):
    uint8 = x.dtype == np.uint8
    if uint8:
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(x)), what)
    else:
        assert_bit_exact(oracle, *op.both(x=x), what)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_nearest_builds_match_onnxruntime_gather_and_requantize(dtype):
    shape, size = GEOMETRIES["mixed"]
    x = rand_q(np.random.default_rng(5), shape, dtype)
    (zi, zo), qi, qo = params(dtype, F32(0.05), 3, F32(0.05), 3)
    op = SingleOp(lambda v: resize.resize2d(v, size, qi, qo, method="nearest",
                                            coordinate_transformation_mode="half_pixel",
                                            nearest_mode="round_prefer_ceil"), {"x": shape})
    oracle = ort_qdq(x, 0.05, zi, 0.05, zo, size, mode="nearest", nearest_mode="round_prefer_ceil")
    _check(op, x, oracle, "same parameters")
    si, zi8, so, zo8 = FLOAT_PARAMS
    (zi, zo), qi, qo = params(dtype, si, zi8, so, zo8)
    act = (zo8, 90)
    op = SingleOp(lambda v: resize.resize2d(v, size, qi, qo, method="nearest",
                                            coordinate_transformation_mode="asymmetric",
                                            nearest_mode="floor", act=act), {"x": shape})
    oracle = ort_qdq(x, si, zi, so, zo, size, mode="nearest",
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    o = 128 if dtype == np.uint8 else 0
    oracle = np.clip(oracle, act[0] + o, act[1] + o).astype(dtype)
    _check(op, x, oracle, "requantized and clamped")


@pytest.mark.parametrize("dtype,mode", [(np.int8, "align_corners"), (np.uint8, "half_pixel")])
def test_linear_float_kernel_build_matches_onnxruntime(dtype, mode):
    shape, size = GEOMETRIES["up"]
    si, zi8, so, zo8 = FLOAT_PARAMS
    (zi, zo), qi, qo = params(dtype, si, zi8, so, zo8)
    op = SingleOp(lambda v: resize.resize2d(v, size, qi, qo, method="linear",
                                            coordinate_transformation_mode=mode), {"x": shape})
    for seed in (6, 7):
        x = rand_q(np.random.default_rng(seed), shape, dtype)
        oracle = ort_qdq(x, si, zi, so, zo, size, mode="linear",
                         coordinate_transformation_mode=mode)
        _check(op, x, oracle, f"seed {seed}")


@pytest.mark.parametrize("dtype,mode", [(np.int8, "pytorch_half_pixel"),
                                        (np.uint8, "tf_half_pixel_for_nn")])
def test_linear_integer_kernel_build_matches_onnxruntime(dtype, mode):
    shape, size = GEOMETRIES["down"]
    qp = QParams.make(1.0, -128 if dtype == np.uint8 else 0)
    op = SingleOp(lambda v: resize.resize2d(v, size, qp, qp, method="linear",
                                            coordinate_transformation_mode=mode,
                                            kernel="integer"), {"x": shape})
    x = rand_q(np.random.default_rng(8), shape, dtype)
    _check(op, x, ort_integer(x, size, mode="linear", coordinate_transformation_mode=mode), mode)


def test_integer_kernel_needs_one_set_of_parameters():
    with pytest.raises(ValueError, match="one set of parameters"):
        SingleOp(lambda v: resize.resize2d(
            v, (4, 4), QParams.make(1.0, 0), QParams.make(0.5, 0), method="linear",
            coordinate_transformation_mode="half_pixel", kernel="integer"), {"x": (1, 1, 2, 2)})


@pytest.mark.slow
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_every_mode_builds_and_matches_onnxruntime(geometry):
    """TVM builds of every coordinate mode (and nearest mode), both kernels, int8 and uint8."""
    shape, size = GEOMETRIES[geometry]
    si, zi8, so, zo8 = FLOAT_PARAMS
    for dtype in (np.int8, np.uint8):
        x = rand_q(np.random.default_rng(9), shape, dtype)
        (zi, zo), qi, qo = params(dtype, si, zi8, so, zo8)
        stored = QParams.make(1.0, -128 if dtype == np.uint8 else 0)
        for mode in MODES:
            for nearest in resize.NEAREST_MODES:
                op = SingleOp(lambda v, qi=qi, qo=qo, mode=mode, nearest=nearest: resize.resize2d(
                    v, size, qi, qo, method="nearest", coordinate_transformation_mode=mode,
                    nearest_mode=nearest), {"x": shape})
                _check(op, x, ort_qdq(x, si, zi, so, zo, size, mode="nearest",
                                      coordinate_transformation_mode=mode,
                                      nearest_mode=nearest), f"{mode} {nearest}")
            op = SingleOp(lambda v, qi=qi, qo=qo, mode=mode: resize.resize2d(
                v, size, qi, qo, method="linear", coordinate_transformation_mode=mode),
                {"x": shape})
            _check(op, x, ort_qdq(x, si, zi, so, zo, size, mode="linear",
                                  coordinate_transformation_mode=mode), f"{mode} float")
            op = SingleOp(lambda v, stored=stored, mode=mode: resize.resize2d(
                v, size, stored, stored, method="linear", coordinate_transformation_mode=mode,
                kernel="integer"), {"x": shape})
            _check(op, x, ort_integer(x, size, mode="linear",
                                      coordinate_transformation_mode=mode), f"{mode} integer")
