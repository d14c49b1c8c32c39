"""rewrites/compute.py on small QDQ models: what folds into canonqnn.matmul (two runtime
operands, batched, keys transposed in float), canonqnn.conv2d_transpose and canonqnn.conv2d
(float bias), what stays float and why, and parity with onnxruntime.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

import canonqnn
from _onnx_chains import attention_scores, extreme_inputs, offset, qdq_model, scalar
from canonqnn import numerics
from canonqnn.frontends.onnx import runtime as onnx_runtime


def canonical(model):
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    return mod.script(), report



# ---------------------------------------------------------------- matmul of two activations
@pytest.mark.parametrize("a_dtype,b_dtype", [
    (np.int8, np.int8), (np.uint8, np.uint8), (np.uint8, np.int8)], ids=["s8s8", "u8u8", "u8s8"])
def test_attention_scores_with_keys_transposed_in_float_match_onnxruntime(a_dtype, b_dtype):
    # The default profile is this host's onnxruntime's, as probed: uint8 x int8 pair sums
    # saturate without VNNI and are exact with it; the product is exact everywhere else.
    model = attention_scores(a_dtype, b_dtype)
    text, report = canonical(model)
    assert dict(report.canonical_ops) == {"transpose": 1, "matmul": 1}, report.summary()
    assert not report.float_islands
    profile = onnx_runtime.profile()
    assert report.numerics == profile.name
    u8s8 = (a_dtype, b_dtype) == (np.uint8, np.int8)
    assert re.findall(r'accumulate="(\w+)"', text) == [
        profile.u8s8_runtime_b if u8s8 else "exact"]
    feeds = [extreme_inputs(a_dtype, b_dtype, s) for s in (1, 2)]
    result = canonqnn.parity(model, feeds + [canonqnn.api.random_inputs(
        canonqnn.io.module_io(canonqnn.load(model)), 3)])
    assert result.exact, result.summary()


@pytest.mark.parametrize("name,accumulate", [
    ("onnxruntime-1.31-x86-avx2", "u8s8_pair_sat16"), ("onnxruntime-1.31-x86-vnni", "exact"),
    ("exact", "exact")])
def test_uint8_by_runtime_int8_accumulation_follows_the_profile_not_the_host(name, accumulate,
                                                                             monkeypatch):
    model = attention_scores(np.uint8, np.int8)
    mod, report = canonqnn.canonicalize(canonqnn.load(model), numerics=name)
    text = mod.script()
    assert re.findall(r'accumulate="(\w+)"', text) == [accumulate]
    assert f'"canonqnn.numerics": "{name}"' in text and report.numerics == name
    # The same text whatever this host's onnxruntime computes.
    other = next(p for p in numerics.PROFILES.values()
                 if p.runtime == "onnxruntime" and p.name != onnx_runtime.profile().name)
    monkeypatch.setattr(onnx_runtime, "profile", lambda: other)
    assert canonqnn.canonicalize(canonqnn.load(model), numerics=name)[0].script() == text


def test_int8_scores_of_uint8_keys_differ_from_float_onnxruntime_by_one_lsb_rarely():
    # onnxruntime has no int8 x uint8 QLinearMatMul: DQ -> float MatMul -> Q, whose float32
    # sums round; canonqnn sums exactly. Measured on this shape: 5-7 of 65,536 per run.
    inits = dict(sa=scalar(0.05, np.float32), za=scalar(3, np.int8),
                 sb=scalar(0.04, np.float32), zb=scalar(126, np.uint8),
                 sy=scalar(0.05 * 0.04 * 8 * 74 * 74 / 40, np.float32), zy=scalar(0, np.int8))
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["bf"]),
             helper.make_node("Transpose", ["bf"], ["bt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["af", "bt"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["Y"])]
    model = qdq_model(nodes, {"A": (np.int8, (1, 4, 128, 64)),
                              "B": (np.uint8, (1, 4, 128, 64))}, inits)
    text, report = canonical(model)
    assert dict(report.canonical_ops) == {"transpose": 1, "matmul": 1}
    assert 'accumulate="exact"' in text
    out = canonqnn.parity(model, runs=1).outputs[0]
    differing = round((1 - out.exact_fraction) * out.elements)
    assert 0 < differing <= 3e-4 * out.elements and out.max_abs_diff == 1, (differing, out)


def test_permutation_other_than_the_last_two_axes_stays_float_with_reason():
    model = attention_scores(np.int8, np.int8, perm=(1, 0, 2, 3), b_shape=(3, 2, 16, 6))
    _, report = canonical(model)
    reasons = {i.op: i.reason for i in report.float_islands}
    assert "matmul" not in report.canonical_ops
    assert reasons["relax.matmul"] == "matmul: an operand is not dequantized from int8"


def test_uint8_times_constant_int8_weights_keeps_exact_accumulation():
    # A constant B is converted to uint8 by onnxruntime's x64quantprecision (opset < 21).
    rng = np.random.default_rng(4)
    inits = dict(sa=scalar(0.02, np.float32), za=scalar(100, np.uint8),
                 B=rng.choice(np.array([-128, 127, 120], np.int8), (24, 5)),
                 sb=scalar(0.03, np.float32), zb=scalar(0, np.int8),
                 sy=scalar(0.02 * 0.03 * 255 * 128 * 24 / 300, np.float32),
                 zy=scalar(128, np.uint8))
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["bf"]),
             helper.make_node("MatMul", ["af", "bf"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["Y"])]
    model = qdq_model(nodes, {"A": (np.uint8, (4, 24))}, inits, opset=13)
    text, report = canonical(model)
    assert re.findall(r'accumulate="(\w+)"', text) == ["exact"]
    feeds = {"A": rng.choice(np.array([0, 255, 250], np.uint8), (4, 24))}
    result = canonqnn.parity(model, feeds)
    assert result.exact, result.summary()


# ---------------------------------------------------------------- transposed convolution
def conv_transpose(x_dtype=np.int8, *, bias="int32", relu=False, w_axis=1, rank=2, sw=2.0 ** -5,
                   sx=2.0 ** -4, sy=2.0 ** -3, w_range=20, **attrs):
    """DQ(x [1,4,5(,5)]) , DQ(w [4,3,3(,3)]) [, DQ(int32 b) | float b] -> ConvTranspose
    [-> Relu] -> Q."""
    rng = np.random.default_rng(rank)
    spatial = (5,) * rank
    w = rng.integers(-w_range, w_range, (4, 3) + (3,) * rank).astype(np.int8)
    scales = np.full(w.shape[w_axis], sw, np.float32) if w_axis is not None else \
        np.float32(sw)
    inits = dict(sx=scalar(sx, np.float32), zx=scalar(offset(x_dtype) + 3, x_dtype), W=w,
                 sw=scales, zw=np.zeros(np.shape(scales), np.int8), sy=scalar(sy, np.float32),
                 zy=scalar(offset(x_dtype) - 5, x_dtype))
    axis = {} if w_axis is None else {"axis": w_axis}
    nodes = [helper.make_node("DequantizeLinear", ["X", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["W", "sw", "zw"], ["wf"], **axis)]
    inputs = ["xf", "wf"]
    if isinstance(bias, str) and bias == "int32":
        inits.update(B=rng.integers(-300, 300, 3).astype(np.int32),
                     sb=np.full(3, sx * sw, np.float32), zb=np.zeros(3, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["bf"], axis=0))
        inputs.append("bf")
    elif bias is not None:  # float values
        inits.update(bf=np.asarray(bias, np.float32))
        inputs.append("bf")
    nodes.append(helper.make_node("ConvTranspose", inputs, ["yf"], **attrs))
    if relu:
        nodes.append(helper.make_node("Relu", ["yf"], ["yr"]))
    nodes.append(helper.make_node("QuantizeLinear", ["yr" if relu else "yf", "sy", "zy"],
                                  ["Y"]))
    return qdq_model(nodes, {"X": (x_dtype, (1, 4) + spatial)}, inits)


@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_conv_transpose_with_bias_and_relu_folds_into_one_op(x_dtype):
    model = conv_transpose(x_dtype, relu=True, strides=[2, 2], pads=[1, 0, 1, 1],
                           output_padding=[1, 0])
    text, report = canonical(model)
    assert dict(report.canonical_ops) == {"conv2d_transpose": 1}, report.summary()
    assert not report.float_islands
    assert "act_min=-5," in text.replace(" ", "")  # Relu: clamp at the output zero point
    result = canonqnn.parity(model, runs=2)  # power-of-two scales: onnxruntime's float is exact
    assert result.exact, result.summary()


def test_conv_transpose_float_bias_is_quantized_like_onnxruntime():
    # Bias values half-way between accumulator steps (ties: Round goes to even) and an output
    # step equal to the accumulator's, so that any other bias rounding shows in the output.
    step = 2.0 ** -4 * 2.0 ** -5
    bias = (np.array([-3.5, 0.5, 6.5]) * step).astype(np.float32)
    model = conv_transpose(bias=bias, w_axis=None, sy=step, w_range=3, strides=[2, 2])
    _, report = canonical(model)
    assert dict(report.canonical_ops) == {"conv2d_transpose": 1}, report.summary()
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()


def test_conv1d_transpose_folds_as_a_2d_one_over_unit_height():
    model = conv_transpose(rank=1, strides=[2], pads=[1, 0], dilations=[2])
    _, report = canonical(model)
    assert dict(report.canonical_ops) == {"reshape": 2, "conv2d_transpose": 1}, report.summary()
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()


def test_conv_transpose_weights_quantized_per_input_channel_stay_float_with_reason():
    model = conv_transpose(w_axis=0, strides=[2, 2])
    _, report = canonical(model)
    assert "conv2d_transpose" not in report.canonical_ops
    reasons = {i.op: i.reason for i in report.float_islands}
    assert reasons["relax.nn.conv2d_transpose"] == \
        "conv2d_transpose: weight quantized along axis 0, not output channels"


# ---------------------------------------------------------------- conv2d with a float bias
def test_conv2d_float_bias_matches_onnxruntime_weight_bias_quantization():
    # onnxruntime quantizes a float Conv bias to int32 at x_scale * w_scale[o] (Round: ties to
    # even) and runs QLinearConv: with real scales the result must still be bit-exact. The
    # multipliers are near 1, so a bias off by one accumulator step would show.
    rng = np.random.default_rng(9)
    sx = np.float32(0.037)
    sw = rng.uniform(0.002, 0.01, 8).astype(np.float32)
    sy = np.float32(sx * sw.mean())
    bias = (rng.uniform(-20, 20, 8) * sx * sw).astype(np.float32)
    inits = dict(sx=scalar(sx, np.float32), zx=scalar(4, np.int8),
                 W=rng.integers(-4, 5, (8, 4, 3, 3)).astype(np.int8), sw=sw,
                 zw=np.zeros(8, np.int8), bf=bias, sy=scalar(sy, np.float32),
                 zy=scalar(-3, np.int8))
    nodes = [helper.make_node("DequantizeLinear", ["X", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["W", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["Y"])]
    model = qdq_model(nodes, {"X": (np.int8, (1, 4, 9, 9))}, inits)
    _, report = canonical(model)
    assert dict(report.canonical_ops) == {"conv2d": 1}, report.summary()
    feeds = [{"X": np.random.default_rng(s).integers(0, 9, (1, 4, 9, 9)).astype(np.int8)}
             for s in (1, 2)]
    result = canonqnn.parity(model, feeds)
    assert result.exact, result.summary()


def test_folded_modules_print_and_parse_back():
    import tvm

    for model in (conv_transpose(np.uint8, relu=True, strides=[2, 2]),
                  attention_scores(np.uint8, np.int8)):
        mod, _ = canonqnn.canonicalize(canonqnn.load(model))
        parsed = tvm.script.from_source(mod.script(show_meta=True))
        tvm.ir.assert_structural_equal(parsed["main"], mod["main"])
