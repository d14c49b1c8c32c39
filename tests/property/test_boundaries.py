"""``_boundaries``: the exact value of a QDQ ConvTranspose is what onnxruntime rounds wherever
it is not within float32 error of a rounding boundary, a difference at a near tie is accepted
as float32 rounding, and any other difference is not."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _boundaries import conv_transpose, outliers
from canonqnn.frontends.onnx.oracle import ort_session
from canonqnn.ops.conv_transpose import reference

RANGE = {"int8": (-128, 127), "uint8": (0, 255)}
ELEM = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def qdq_conv_transpose(x_shape, dtype, x_scale, x_zp, w, w_scale, bias, y_scale, y_zp,
                       **attrs):
    """``Q(ConvTranspose(DQ x, DQ w[, DQ b]))``, as onnxruntime's quantizer writes it."""
    w_scale = np.asarray(w_scale, np.float32)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in [
        ("xs", np.float32(x_scale)), ("xz", np.array(x_zp, dtype)), ("w", w.astype(np.int8)),
        ("ws", w_scale), ("wz", np.zeros(w_scale.shape, np.int8)),
        ("ys", np.float32(y_scale)), ("yz", np.array(y_zp, dtype))]]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"],
                              **({"axis": 1} if w_scale.ndim else {}))]
    inputs = ["xf", "wf"]
    if bias is not None:
        per_output = np.tile(w_scale, len(bias) // w_scale.size) if w_scale.ndim else w_scale
        b_scale = (np.float32(x_scale) * per_output).astype(np.float32)
        inits += [numpy_helper.from_array(np.asarray(bias, np.int32), "b"),
                  numpy_helper.from_array(b_scale, "bs"),
                  numpy_helper.from_array(np.zeros(b_scale.shape, np.int32), "bz")]
        nodes.append(helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"],
                                      **({"axis": 0} if b_scale.ndim else {})))
        inputs.append("bf")
    nodes += [helper.make_node("ConvTranspose", inputs, ["yf"], **attrs),
              helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "ct", [helper.make_tensor_value_info("x", ELEM[dtype],
                                                                          list(x_shape))],
                              [helper.make_tensor_value_info("y", ELEM[dtype], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def onnxruntime(model, x):
    return ort_session(model)[0].run(["y"], {"x": x})[0].astype(np.int64)


CASES = {
    "strided, pads, output padding, bias": dict(
        x_shape=(1, 3, 4, 5), dtype="int8", w_shape=(3, 2, 3, 3), per_channel=False,
        bias=True, strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 0], group=1),
    "groups, per channel along axis 1, dilation": dict(
        x_shape=(1, 4, 3, 3), dtype="uint8", w_shape=(4, 3, 2, 2), per_channel=True,
        bias=True, strides=[1, 2], pads=[0, 1, 1, 0], output_padding=[0, 1], group=2,
        dilations=[2, 1]),
    "depthwise, no bias": dict(
        x_shape=(1, 4, 5, 4), dtype="int8", w_shape=(4, 1, 3, 3), per_channel=False,
        bias=False, strides=[2, 2], pads=[0, 0, 0, 0], output_padding=[0, 0], group=4),
    "1-row kernel, per channel": dict(
        x_shape=(1, 2, 3, 4), dtype="uint8", w_shape=(2, 5, 1, 3), per_channel=True,
        bias=True, strides=[1, 1], pads=[0, 1, 0, 2], output_padding=[0, 0], group=1),
}


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_rounds_the_exact_value_away_from_boundaries(case):
    c = dict(CASES[case])
    rng = np.random.default_rng(sorted(CASES).index(case))
    lo, hi = RANGE[c["dtype"]]
    x = rng.integers(lo, hi + 1, c.pop("x_shape")).astype(c["dtype"])
    w = rng.integers(-127, 128, c.pop("w_shape"))
    opg = w.shape[1]
    w_scale = (0.01 * 2.0 ** rng.uniform(-1, 1, opg) if c.pop("per_channel") else
               np.float32(0.01 * 2.0 ** rng.uniform(-1, 1)))
    channels = opg * c["group"]
    bias = rng.integers(-2000, 2001, channels) if c.pop("bias") else None
    x_scale, x_zp = 0.02 * 2.0 ** rng.uniform(-1, 1), (lo + hi + 1) // 2 + 7
    args = (x.shape, c.pop("dtype"), x_scale, x_zp, w, w_scale, bias)
    real = conv_transpose(qdq_conv_transpose(*args, 1.0, 0, **c), "y", {"x": x}.__getitem__)
    y_scale = np.abs(real.value).max() / 120 * 2.0 ** rng.uniform(-0.5, 0)
    model = qdq_conv_transpose(*args, y_scale, (lo + hi + 1) // 2 - 5, **c)
    ort = onnxruntime(model, x)
    exact = conv_transpose(model, "y", {"x": x}.__getitem__)
    far = np.abs(exact.value - (np.floor(exact.value) + 0.5)) > exact.bound
    rounded = np.clip(np.rint(exact.value) + exact.zp, lo, hi)
    assert far.mean() > 0.99, "the bound leaves too few elements to compare"
    assert np.array_equal(ort[far], rounded[far])
    assert len(np.unique(ort)) > 20  # the output scale spreads the values over the range


# The case the random-graph sweep found: the output scale is, to float32 rounding,
# x_scale * w_scale * 127 * 6/5 (the generator's calibrated range with a jitter factor of
# exactly 1), so x * 127 lands on (x * 5/6) output units: a tie for x = 3 mod 6, moved off it
# only by the rounding of the scales (y* = 47.4999998 for x = 57). onnxruntime's float32
# quotient is exactly 47.5 (the nearest float32), rounded to even; canonqnn's multiplier
# f32(f32(x_scale * w_scale) / y_scale) gives 47.499996, rounded down, as y* is.
TIE = dict(x_scale=0.24999827, x_zp=0, w_scale=[0.018757531], y_scale=0.714657, y_zp=3)


def tie_model():
    return qdq_conv_transpose((1, 1, 1, 4), "int8", TIE["x_scale"], TIE["x_zp"],
                              np.array([[[[127]]]]), TIE["w_scale"], None, TIE["y_scale"],
                              TIE["y_zp"], strides=[1, 1], pads=[0, 0, 0, 0])


def canonqnn_reference(x):
    a = dict(x_scale=float(np.float32(TIE["x_scale"])), x_zp=TIE["x_zp"],
             out_scale=float(np.float32(TIE["y_scale"])), out_zp=TIE["y_zp"], strides=[1, 1],
             padding=[0, 0, 0, 0], output_padding=[0, 0], dilation=[1, 1], groups=1,
             act_min=-128, act_max=127, rounding="rne_f32")
    return reference(x, np.array([[[[127]]]], np.int8), np.zeros(1, np.int32),
                     np.asarray(TIE["w_scale"], np.float32), np.zeros(1, np.int8),
                     **a).astype(np.int64)


def test_a_difference_at_a_near_tie_is_float32_rounding():
    x = np.array([[[[57, 10, -30, 1]]]], np.int8)
    model = tie_model()
    ort, ours = onnxruntime(model, x), canonqnn_reference(x)
    exact = conv_transpose(model, "y", {"x": x}.__getitem__)
    assert abs(exact.value[0, 0, 0, 0] - 47.5) < 1e-6
    assert ort[0, 0, 0, 0] == 51 and ours[0, 0, 0, 0] == 50  # 48 + 3, 47 + 3
    assert np.array_equal(ort[..., 1:], ours[..., 1:])
    assert outliers(exact, ort, ours) == []


@pytest.mark.parametrize("index, delta", [(1, 1), (2, -1), (3, 1), (0, -1)])
def test_a_difference_away_from_a_boundary_is_not_rounding(index, delta):
    """x = 10 gives 8.33 output units, -30 exactly -25, 1 gives 0.83; at the tie, a value
    below both roundings (46 + 3) is 1.5 units from the exact value."""
    x = np.array([[[[57, 10, -30, 1]]]], np.int8)
    model = tie_model()
    ort = onnxruntime(model, x)
    exact = conv_transpose(model, "y", {"x": x}.__getitem__)
    wrong = canonqnn_reference(x)
    wrong[0, 0, 0, index] += delta
    found = outliers(exact, ort, wrong)
    assert len(found) == 1 and found[0].startswith(f"(0, 0, 0, {index}): ort")

