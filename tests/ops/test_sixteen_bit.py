"""TFLite 16x8 layers (int16 activations, int8 weights, int64 or int32 bias): canonqnn.conv2d,
canonqnn.matmul and canonqnn.add against the interpreter's reference kernels (CONV_2D,
DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD), their numpy references and their TVM builds, all three
identical; the int64 requantization on its own; requantize and the data movement ops on int16;
MEAN (global_avg_pool2d, reduce_mean), SOFTMAX and the int16 lookup table likewise; what is
refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import tflite

from _ort import MultiOp, SingleOp, accumulators_telling_apart, rand_q
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn.numerics import q31
from canonqnn.ops import (
    UnsupportedRounding,
    conv,
    elementwise,
    indexing,
    lut,
    matmul,
    mean,
    movement,
    pool,
    softmax,
)
from canonqnn.qparams import QParams, activation_bounds, quantize_multipliers

INT32_BIAS = dict(quantizedBiasType=tflite.TensorType.INT32)
CLAMPS = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0)}


def q16(scale) -> QParams:
    return QParams.make(np.float32(scale), 0, None, "int16")


def weight_qp(ws: np.ndarray) -> QParams:
    return QParams.make(ws, np.zeros(ws.size), 0) if ws.size > 1 else QParams.make(ws[0], 0)


def int64_requant(acc, reals, zp=0):
    m, s = quantize_multipliers(reals)
    return q31.requant_q31(acc, m, s, zp, -32768, 32767, "q31_double", "int16", "int64")


def int32_requant(acc, reals, zp=0):
    m, s = quantize_multipliers(reals)
    return q31.requant_q31(acc, m, s, zp, -32768, 32767, "q31_double", "int16")


# ---------------------------------------------------------------- the int64 requantization
def _mbqm64_by_the_book(x: int, m: int, shift: int) -> int:
    """TFLite's int64 MultiplyByQuantizedMultiplier in Python integers (no overflow)."""
    reduced = (m + (1 << 15)) >> 16 if m < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    value = (x * reduced + (1 << (total - 1))) >> total
    return (value + 2**31) % 2**32 - 2**31


def test_int64_requantization_numpy_and_te_follow_tflite_formula():
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.integers(-(1 << 40), 1 << 40, 200), [0, 1, -1, 2**31, -(2**31)],
                         rng.integers(-10**6, 10**6, 200)]).astype(np.int64)
    pairs = [(1 << 30, -20), (0x7FFEFFFF, -10), (0x7FFF0000, -12), (0x7FFFFFFF, 0),
             ((1 << 30) + 12345, 7), (1518500250, -31), (0, 0)]
    for m, shift in pairs:
        want = [_mbqm64_by_the_book(int(x), m, shift) for x in xs]
        got = q31.multiply_by_quantized_multiplier_int64(xs, m, shift)
        assert got.tolist() == want, (m, shift)
    # ties go toward +infinity (one rounding): 1.5 -> 2, -1.5 -> -1
    assert q31.multiply_by_quantized_multiplier_int64(np.array([3, -3]), 1 << 30, 0).tolist() \
        == [2, -1]


def test_int64_requantization_te_twin_equals_numpy():
    """conv2d's build (TE) against its reference on accumulators far beyond int32."""
    rng = np.random.default_rng(1)
    x_qp, out_qp = q16(2.0 ** -12), q16(2.0 ** -3)
    ws = rng.uniform(0.002, 0.02, 6).astype(np.float32)
    w = rng.integers(-127, 128, (6, 40, 1, 1)).astype(np.int8)
    bias = rng.integers(-(1 << 40), 1 << 40, 6).astype(np.int64)
    op = SingleOp(lambda x: conv.conv2d(
        x, _tvm.const(w), bias, x_qp, weight_qp(ws), out_qp, strides=(1, 1),
        padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, act=(-32768, 32767),
        rounding="q31_double", accumulator="int64"), {"x": (1, 40, 3, 3)}, "int16")
    feed = rand_q(rng, (1, 40, 3, 3), np.int16)
    ref, built = op.both(x=feed)
    assert ref.dtype == np.int16 and built.dtype == np.int16
    np.testing.assert_array_equal(built, ref)
    assert 0 < np.mean(np.abs(ref) == 32767) < 1  # big biases saturate, the rest do not


# ---------------------------------------------------------------- conv2d against TFLite
def conv_model(kind, x_shape, w, ws, bias, xs, ys, *, act="NONE", padding="SAME",
               stride=(1, 1), mult=1, bias_dtype="int64"):
    o = w.shape[0] if kind == "CONV_2D" else w.shape[3]
    n, h, wd, _ = x_shape
    pads = conv_pads(kind, x_shape, w, padding, stride)
    oh, ow = conv.out_hw(h, wd, w.shape[1], w.shape[2], dict(
        strides=stride, dilation=(1, 1), padding=pads))
    bscale = (np.float32(xs) * ws).astype(np.float32)
    opts = dict(padding=padding, strideH=stride[0], strideW=stride[1], dilationHFactor=1,
                dilationWFactor=1, fusedActivationFunction=act)
    if kind == "DEPTHWISE_CONV_2D":
        opts["depthMultiplier"] = mult
    elif bias_dtype == "int32":
        opts.update(INT32_BIAS)
    model = single_op(kind, [
        T(x_shape, "int16", xs, 0),
        T(w.shape, "int8", ws, np.zeros(ws.size, np.int64), w,
          0 if kind == "CONV_2D" else 3),
        T((o,), bias_dtype, bscale, np.zeros(bscale.size, np.int64), bias.astype(bias_dtype))],
        [T((n, oh, ow, o), "int16", ys, 0)], **opts)
    return model, pads


def conv_pads(kind, x_shape, w, padding, stride) -> list[int]:
    if padding == "VALID":
        return [0, 0, 0, 0]
    out = []
    for size, k, s in zip(x_shape[1:3], w.shape[1:3], stride):
        total = max((-(-size // s) - 1) * s + k - size, 0)
        out.append((total // 2, total - total // 2))
    return [out[0][0], out[1][0], out[0][1], out[1][1]]


def canonical_conv(kind, x, x_shape, w, ws, bias, xs, ys, pads, *, act="NONE", stride=(1, 1),
                   bias_dtype="int64", rounding="q31_double"):
    if kind == "CONV_2D":
        w_oihw, groups = w.transpose(0, 3, 1, 2), 1
    else:
        w_oihw, groups = w[0].transpose(2, 0, 1)[:, None], x_shape[3]
    out_qp = q16(ys)
    return conv.conv2d(x, _tvm.const(np.ascontiguousarray(w_oihw)), bias.astype(bias_dtype),
                       q16(xs), weight_qp(ws), out_qp, strides=stride, padding=pads,
                       dilation=(1, 1), groups=groups,
                       act=activation_bounds(*CLAMPS[act], out_qp, rounding), rounding=rounding,
                       accumulator=bias_dtype)


CONV_CASES = [
    dict(kind="CONV_2D", x_shape=(1, 9, 9, 4), o=8, k=3, act="RELU", stride=(2, 2)),
    dict(kind="CONV_2D", x_shape=(1, 7, 6, 3), o=5, k=3, act="RELU6", padding="VALID"),
    dict(kind="CONV_2D", x_shape=(1, 6, 6, 4), o=6, k=1, bias_dtype="int32"),
    dict(kind="DEPTHWISE_CONV_2D", x_shape=(1, 8, 8, 4), o=8, k=3, mult=2, act="RELU6"),
    dict(kind="DEPTHWISE_CONV_2D", x_shape=(1, 7, 7, 3), o=3, k=3, stride=(2, 2)),
]


def _conv_case(rng, spec):
    spec = dict(spec)
    kind, x_shape, o, k = (spec.pop(key) for key in ("kind", "x_shape", "o", "k"))
    w_shape = (o, k, k, x_shape[3]) if kind == "CONV_2D" else (1, k, k, o)
    w = rng.integers(-127, 128, w_shape).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, o).astype(np.float32)
    xs = float(np.float32(rng.uniform(2.0 ** -12, 1e-3)))
    # outputs spread over the int16 range without saturating most of them
    ys = float(np.float32(xs * float(ws.mean()) * 127 * k * 2))
    bias = rng.integers(-40000, 40000, o)
    return kind, x_shape, w, ws, bias, xs, ys, spec


@pytest.mark.parametrize("rounding_against_tflite", [("q31_double", True),
                                                     ("q31_single", False)])
def test_conv2d_16x8_matches_tflite_reference_and_build(rounding_against_tflite):
    """Per-channel CONV_2D and DEPTHWISE_CONV_2D with int64 bias (and CONV_2D with an int32
    bias, ``quantized_bias_type`` INT32), fused RELU/RELU6, full-range int16 inputs. The
    int64 requantization is the same in single-rounding builds: q31_single differs only for
    the int32 bias, reference against build."""
    rounding, against_tflite = rounding_against_tflite
    rng = np.random.default_rng(3)
    cases = [_conv_case(rng, spec) for spec in CONV_CASES]
    models, names = [], {}
    for i, (kind, x_shape, w, ws, bias, xs, ys, opts) in enumerate(cases):
        models.append(conv_model(kind, x_shape, w, ws, bias, xs, ys, **opts))
        names[f"x{i}"] = ((x_shape[0], x_shape[3], *x_shape[1:3]), "int16")
    geometry = [{k: v for k, v in opts.items() if k in ("act", "stride", "bias_dtype")}
                for *_, opts in cases]
    mod = MultiOp(lambda *xs_: [
        canonical_conv(kind, x, x_shape, w, ws, bias, xs, ys, pads, rounding=rounding, **g)
        for x, (kind, x_shape, w, ws, bias, xs, ys, _), (_, pads), g
        in zip(xs_, cases, models, geometry)], names)
    raw = [rand_q(rng, c[1], np.int16) for c in cases]
    feeds = {f"x{i}": x.transpose(0, 3, 1, 2).copy() for i, x in enumerate(raw)}
    refs, built = mod.references(**feeds), mod.tvm(**feeds)
    for (model, _), x, ref, out in zip(models, raw, refs, built):
        assert ref.dtype == np.int16
        np.testing.assert_array_equal(out, ref)
        if against_tflite:
            np.testing.assert_array_equal(ref, run_tflite(model, [x])[0].transpose(0, 3, 1, 2))
        assert np.mean(np.abs(ref.astype(np.int32)) == 32767) < 0.2


def _tie_conv(kind, accs, xs, ws, ys, bias_dtype="int64"):
    """A 1x1 single-pixel layer whose per-channel accumulators are exactly ``accs`` (x = 1,
    w = 1, bias = acc - 1)."""
    o = len(accs)
    w = np.ones((o, 1, 1, 1) if kind == "CONV_2D" else (1, 1, 1, o), np.int8)
    ws_arr = np.full(o, ws, np.float32)
    model, _ = conv_model(kind, (1, 1, 1, 1), w, ws_arr, np.asarray(accs) - 1, xs, ys,
                          padding="VALID", mult=o, bias_dtype=bias_dtype)
    return run_tflite(model, [np.ones((1, 1, 1, 1), np.int16)])[0].reshape(-1)


@pytest.mark.parametrize("kind", ["CONV_2D", "DEPTHWISE_CONV_2D"])
def test_conv2d_16x8_int64_bias_requantizes_with_the_reduced_multiplier(kind):
    """On accumulators where the int64 requantization (16-bit multiplier, one rounding) and the
    Q31 double rounding differ, the interpreter follows the first on every one."""
    xs, ws, ys = 2.0 ** -12, 0.0137, 1.9e-3
    real = np.float64(np.float32(xs)) * np.float64(np.float32(ws)) / np.float64(np.float32(ys))
    accs = np.array(accumulators_telling_apart(lambda a: int64_requant(a, real),
                                               lambda a: int32_requant(a, real), [real], 0, 24))
    assert len(accs) >= 12
    tfl = _tie_conv(kind, accs, xs, ws, ys)
    assert np.array_equal(tfl, int64_requant(accs, real))
    assert not np.any(tfl == int32_requant(accs, real))


def test_conv2d_16x8_int32_bias_keeps_the_q31_requantization():
    """With an int32 bias (``quantized_bias_type`` INT32) the accumulator is int32 and the
    requantization the int8 kernels' gemmlowp double rounding."""
    xs, ws, ys = 2.0 ** -12, 0.0137, 1.9e-3
    real = np.float64(np.float32(xs)) * np.float64(np.float32(ws)) / np.float64(np.float32(ys))
    accs = np.array(accumulators_telling_apart(lambda a: int32_requant(a, real),
                                               lambda a: int64_requant(a, real), [real], 0, 24))
    tfl = _tie_conv("CONV_2D", accs, xs, ws, ys, "int32")
    assert np.array_equal(tfl, int32_requant(accs, real))
    assert not np.any(tfl == int64_requant(accs, real))


# ---------------------------------------------------------------- matmul against TFLite
FC_CASES = [dict(per_channel=False, bias="int64", act="RELU"),
            dict(per_channel=True, bias="int64", act="NONE"),
            dict(per_channel=False, bias="int32", act="RELU6"),
            dict(per_channel=True, bias=None, act="NONE")]


@pytest.mark.parametrize("rounding_against_tflite", [("q31_double", True),
                                                     ("q31_single", False)])
def test_matmul_16x8_fully_connected_matches_tflite_reference_and_build(rounding_against_tflite):
    """FULLY_CONNECTED int16 x int8: per-tensor and per-channel weights, int64, int32 and no
    bias; under q31_double the same double-precision rounding as the int8 kernel."""
    rounding, against_tflite = rounding_against_tflite
    rng = np.random.default_rng(4)
    rows, k, units = 16, 24, 10
    specs = []
    for spec in FC_CASES:
        ws = rng.uniform(0.002, 0.02, units if spec["per_channel"] else 1).astype(np.float32)
        w = rng.integers(-127, 128, (units, k)).astype(np.int8)
        xs = float(np.float32(rng.uniform(2.0 ** -12, 1e-3)))
        ys = float(np.float32(xs * float(ws.mean()) * 127 * k / 8))
        bias = rng.integers(-40000, 40000, units) if spec["bias"] else None
        ins = [T((rows, k), "int16", xs, 0), T(w.shape, "int8", ws, np.zeros(ws.size, np.int64),
                                                w, 0)]
        if bias is not None:
            bscale = (np.float32(xs) * ws).astype(np.float32)
            ins.append(T((units,), spec["bias"], bscale, np.zeros(bscale.size, np.int64),
                         bias.astype(spec["bias"])))
        model = single_op("FULLY_CONNECTED", ins, [T((rows, units), "int16", ys, 0)],
                          fusedActivationFunction=spec["act"],
                          **(INT32_BIAS if spec["bias"] == "int32" else {}))
        specs.append((spec, model, w, ws, bias, xs, ys))

    def build(*xs_):
        calls = []
        for x, (spec, _, w, ws, bias, xs, ys) in zip(xs_, specs):
            out_qp = q16(ys)
            calls.append(matmul.matmul(
                x, _tvm.const(np.ascontiguousarray(w.T)), bias, q16(xs), QParams(
                    ws.reshape(-1) if ws.size > 1 else ws.reshape(()),
                    np.zeros(ws.size if ws.size > 1 else (), np.int32), 1 if ws.size > 1 else None,
                    "int8"), out_qp,
                act=activation_bounds(*CLAMPS[spec["act"]], out_qp, rounding), rounding=rounding,
                accumulator=spec["bias"] or "int64"))
        return calls

    mod = MultiOp(build, {f"x{i}": ((rows, k), "int16") for i in range(len(specs))})
    feeds = {f"x{i}": rand_q(rng, (rows, k), np.int16) for i in range(len(specs))}
    refs, built = mod.references(**feeds), mod.tvm(**feeds)
    for i, ((_, model, *_), ref, out) in enumerate(zip(specs, refs, built)):
        np.testing.assert_array_equal(out, ref)
        if against_tflite:
            np.testing.assert_array_equal(ref, run_tflite(model, [feeds[f"x{i}"]])[0])


# ---------------------------------------------------------------- add
ADD_CASES = [((1, 16, 16, 8), (1, 16, 16, 8), 2.0 ** -12, 7.3e-4, 1.1e-3, "NONE"),
             ((1, 16, 16, 8), (8,), 6.1e-4, 2.0 ** -11, 9.7e-4, "RELU"),
             ((4, 1, 32), (4, 24, 32), 3.3e-4, 3.1e-4, 3.3e-4, "RELU6")]


@pytest.mark.parametrize("rounding_against_tflite", [("q31_double", True),
                                                     ("q31_single", False)])
def test_add_16x8_matches_tflite_reference_and_build(rounding_against_tflite):
    """int16 ADD with general scales (``pot_scale_int16`` false): the int8 kernel's arithmetic
    with inputs scaled up by 2^15, int16 clamps; broadcasting; fused RELU/RELU6."""
    rounding, against_tflite = rounding_against_tflite
    rng = np.random.default_rng(7)

    def build(*operands):
        calls = []
        for i, (_, _, sa, sb, so, act) in enumerate(ADD_CASES):
            out_qp = q16(so)
            calls.append(elementwise.binary(
                elementwise.ADD, operands[2 * i], operands[2 * i + 1], q16(sa), q16(sb), out_qp,
                act=activation_bounds(*CLAMPS[act], out_qp, rounding), rounding=rounding))
        return calls

    names = {}
    for i, (a_shape, b_shape, *_) in enumerate(ADD_CASES):
        names[f"a{i}"], names[f"b{i}"] = (a_shape, "int16"), (b_shape, "int16")
    mod = MultiOp(build, names)
    feeds = {name: rand_q(rng, shape, np.int16) for name, (shape, _) in names.items()}
    refs, built = mod.references(**feeds), mod.tvm(**feeds)
    for i, ((a_shape, b_shape, sa, sb, so, act), ref, out) in enumerate(zip(ADD_CASES, refs,
                                                                             built)):
        assert ref.dtype == np.int16
        np.testing.assert_array_equal(out, ref)
        if against_tflite:
            out_shape = np.broadcast_shapes(a_shape, b_shape)
            model = single_op("ADD", [T(a_shape, "int16", sa, 0), T(b_shape, "int16", sb, 0)],
                              [T(out_shape, "int16", so, 0)], fusedActivationFunction=act,
                              potScaleInt16=False)
            np.testing.assert_array_equal(ref, run_tflite(model, [feeds[f"a{i}"],
                                                                  feeds[f"b{i}"]])[0])


# ---------------------------------------------------------------- requantize and movement
def test_requantize_int16_matches_tflite_quantize():
    rng = np.random.default_rng(5)
    cases = [(2.0 ** -12, 1e-3), (1e-3, 2.0 ** -12 * 3), (3.1e-4, 3.1e-4 * 1.5)]
    for xs, ys in cases:
        model = single_op("QUANTIZE", [T((1, 64, 32), "int16", xs, 0)],
                          [T((1, 64, 32), "int16", ys, 0)])
        op = SingleOp(lambda x, xs=xs, ys=ys: movement.requantize(
            x, q16(xs), q16(ys), rounding="q31_double"), {"x": (1, 64, 32)}, "int16")
        x = rand_q(rng, (1, 64, 32), np.int16)
        ref, built = op.both(x=x)
        assert ref.dtype == np.int16
        np.testing.assert_array_equal(built, ref)
        np.testing.assert_array_equal(ref, run_tflite(model, [x])[0])


@pytest.mark.parametrize("name", ["reshape", "transpose", "pad", "strided_slice"])
def test_int16_data_movement_reference_equals_build(name):
    qp = q16(1e-3)
    make = {
        "reshape": lambda x: movement.reshape(x, (4, 30), qp),
        "transpose": lambda x: movement.transpose(x, (0, 2, 1), qp),
        "pad": lambda x: indexing.pad(x, qp, (0, 1, 2), (1, 0, 3), pad_value=-30000),
        "strided_slice": lambda x: indexing.strided_slice(x, qp, (1, 2), (3, 1), (-2, 3),
                                                          (2, 3)),
    }[name]
    op = SingleOp(make, {"x": (2, 6, 10)}, "int16")
    x = rand_q(np.random.default_rng(6), (2, 6, 10), np.int16)
    ref, built = op.both(x=x)
    assert ref.dtype == np.int16 and built.dtype == np.int16
    np.testing.assert_array_equal(built, ref)


# ---------------------------------------------------------------- MEAN, SOFTMAX, lookup tables
MEAN_CASES = [  # (NHWC shape, axes, keepdims, in scale, out scale)
    ((1, 7, 7, 16), (1, 2), False, 7e-4, 3e-4),
    ((2, 5, 6, 8), (1, 2), True, 1e-3, 4e-3),
    ((2, 4, 6, 8), (2,), False, 5e-4, 2e-4),
    ((1, 5, 6, 8), (3,), True, 2e-3, 2e-3),
]


@pytest.mark.parametrize("case", MEAN_CASES)
def test_mean_16x8_matches_tflite_reference_and_build(case):
    """H, W of NCHW: global_avg_pool2d; other axes: reduce_mean; TFLite's MEAN arithmetic (the
    multiplier with 1/count folded in and truncated) with int16 saturation."""
    shape, axes, keepdims, xs, ys = case
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keepdims else \
        tuple(d for i, d in enumerate(shape) if i not in axes)
    x = rand_q(np.random.default_rng(11), shape, np.int16)
    model = single_op("MEAN", [T(shape, "int16", xs, 0),
                               T((len(axes),), "int32", data=np.array(axes, np.int32))],
                      [T(out_shape, "int16", ys, 0)], keepDims=keepdims)
    want = run_tflite(model, [x])[0]
    if axes == (1, 2):  # NCHW for the canonical op; [N, C, 1, 1] out
        op = SingleOp(lambda v: pool.global_avg_pool2d(
            v, q16(xs), q16(ys), rounding="q31_double", q31_kernel="mean"),
            {"x": (shape[0], shape[3], shape[1], shape[2])}, "int16")
        ref, built = op.both(x=x.transpose(0, 3, 1, 2))
        ref, built = ref.reshape(want.shape), built.reshape(want.shape)
    else:
        op = SingleOp(lambda v: mean.reduce_mean(
            v, axes, keepdims, q16(xs), q16(ys), rounding="q31_double"),
            {"x": shape}, "int16")
        ref, built = op.both(x=x)
    assert ref.dtype == np.int16 and built.dtype == np.int16
    np.testing.assert_array_equal(built, ref)
    np.testing.assert_array_equal(ref, want)


SOFTMAX_CASES = [((2, 37), 7e-4, 1.0), ((1, 3, 5, 16), 2e-3, 1.0), ((3, 200), 1e-4, 0.5),
                 ((1, 3), 2.0, 1.0)]  # in scale 2: the kernel's left shift wraps in int32


def test_softmax_16x8_matches_tflite_reference_and_build():
    """TFLite's int16 SOFTMAX: interpolated exp and 1/(1 + x) tables, the row sum normalized by
    its leading zeros, Q0.15 out."""
    rng = np.random.default_rng(12)
    out_qp = q16(1 / 32768)
    names = {f"x{i}": (shape, "int16") for i, (shape, _, _) in enumerate(SOFTMAX_CASES)}
    mod = MultiOp(lambda *xs: [softmax.softmax(x, q16(s), out_qp, -1, rounding="q31_double",
                                               beta=beta)
                               for x, (_, s, beta) in zip(xs, SOFTMAX_CASES)], names)
    feeds = {name: rand_q(rng, shape, np.int16) for name, (shape, _) in names.items()}
    for i, (ref, built) in enumerate(zip(mod.references(**feeds), mod.tvm(**feeds))):
        shape, s, beta = SOFTMAX_CASES[i]
        model = single_op("SOFTMAX", [T(shape, "int16", s, 0)], [T(shape, "int16", 1 / 32768, 0)],
                          beta=beta)
        assert ref.dtype == np.int16
        np.testing.assert_array_equal(built, ref)
        np.testing.assert_array_equal(ref, run_tflite(model, [feeds[f"x{i}"]])[0])


def test_int16_lut_reads_one_entry_per_int16_code():
    table = np.random.default_rng(13).integers(-32768, 32768, 1 << 16).astype(np.int16)
    qp = q16(1e-3)
    op = SingleOp(lambda x: lut.lut(x, table, qp, qp, "f"), {"x": (4, 3000)}, "int16")
    x = rand_q(np.random.default_rng(14), (4, 3000), np.int16)
    x[0, :2] = (-32768, 32767)
    ref, built = op.both(x=x)
    np.testing.assert_array_equal(ref, table[x.astype(np.int32) + 32768])
    np.testing.assert_array_equal(built, ref)


# ---------------------------------------------------------------- refusals
def _int16_var(shape=(1, 4, 5, 5)):
    return _tvm.Var("x", _tvm.tensor_type(shape, "int16"))


def _conv16(**overrides):
    a = dict(x_qp=q16(1e-3), out_qp=q16(2e-3), rounding="q31_double", accumulator="int64",
             w_qp=QParams.make(0.01, 0), x=_int16_var())
    a.update(overrides)
    w = _tvm.const(np.ones((2, 4, 1, 1), np.int8))
    return conv.conv2d(a["x"], w, np.zeros(2), a["x_qp"], a["w_qp"], a["out_qp"],
                       strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                       rounding=a["rounding"], accumulator=a["accumulator"])


def test_int16_ops_refuse_what_tflite_16x8_kernels_do_not_compute():
    _conv16()  # the accepted form
    with pytest.raises(UnsupportedRounding, match="16x8"):
        _conv16(rounding="rne_f32")
    with pytest.raises(ValueError, match="int16 input and int8 output"):
        _conv16(out_qp=QParams.make(2e-3, 0))
    with pytest.raises(ValueError, match="zero points 0"):
        _conv16(x_qp=QParams.make(1e-3, 5, None, "int16"))
    with pytest.raises(ValueError, match="int8 input and int8 output"):
        _conv16(x=_tvm.Var("x", _tvm.tensor_type((1, 4, 5, 5), "int8")),
                x_qp=QParams.make(1e-3, 0), out_qp=QParams.make(2e-3, 0))
    with pytest.raises(UnsupportedRounding, match="int64 requantization"):
        _conv16(out_qp=q16(1e-3 * 0.01 / 200))  # multiplier 200 >= 2^7
    with pytest.raises(UnsupportedRounding, match="int16"):
        movement.requantize(_int16_var(), q16(1e-3), q16(2e-3), rounding="rne_f32")
    with pytest.raises(ValueError, match="16x8 ADD only"):
        elementwise.binary(elementwise.MUL, _int16_var(), _int16_var(), q16(1e-3), q16(1e-3),
                           q16(1e-3), rounding="q31_double")
    with pytest.raises(UnsupportedRounding, match="16x8 MEAN only"):
        pool.global_avg_pool2d(_int16_var(), q16(1e-3), q16(1e-3), rounding="q31_double",
                               q31_kernel="average_pool")
    with pytest.raises(UnsupportedRounding, match="int16"):
        mean.reduce_mean(_int16_var(), (1,), False, q16(1e-3), q16(1e-3))
    with pytest.raises(UnsupportedRounding, match="scale 1/32768"):
        softmax.softmax(_int16_var(), q16(1e-3), q16(1 / 256), 1, rounding="q31_double")
    with pytest.raises(ValueError, match="int16 input takes one table"):
        lut.lut(_int16_var(), np.zeros(256, np.int16), q16(1e-3), q16(1e-3), "f")
    with pytest.raises(UnsupportedRounding, match="batch_matmul"):
        matmul.matmul(_int16_var((4, 8)), _tvm.Var("b", _tvm.tensor_type((8, 3), "int8")),
                      None, q16(1e-3), QParams.make(0.01, 0), q16(2e-3),
                      rounding="q31_double", source_op="batch_matmul", accumulator="int64")
