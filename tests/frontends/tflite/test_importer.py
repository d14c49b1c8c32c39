"""The TFLite importer: interface, uint8 normalization, layout, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from _tflite import T, single_op
from canonqnn import _tvm, qdq
from canonqnn.errors import InvalidModelError, UnsupportedError
from canonqnn.frontends import tflite
from canonqnn.io import module_io
from canonqnn.testing.tflite_writer import GraphWriter


def _conv_model(dtype="int8", h=6, w=5, c=3, o=4):
    rng = np.random.default_rng(0)
    off = 128 if dtype == "uint8" else 0
    wt = rng.integers(-127, 128, (o, 3, 3, c)).astype(np.int8)
    return single_op(
        "CONV_2D", [T((1, h, w, c), dtype, 0.05, 3 + off),
                    T(wt.shape, "int8", np.full(o, 0.01, np.float32), np.zeros(o, np.int64), wt),
                    T((o,), "int32", np.full(o, 0.0005, np.float32), np.zeros(o, np.int64),
                      rng.integers(-99, 99, o).astype(np.int32))],
        [T((1, h, w, o), dtype, 0.1, -2 + off)], padding="SAME", strideH=1, strideW=1,
        fusedActivationFunction="RELU", dilationHFactor=1, dilationWFactor=1)


def _ops(mod) -> list[str]:
    text = _tvm.script(mod)
    return [line.split("= R.")[1].split("(")[0] for line in text.splitlines() if "= R." in line]


def test_interface_keeps_model_names_dtypes_and_nhwc_shapes():
    mod = tflite.load(_conv_model())
    io = module_io(mod)
    assert (io.source, io.rounding) == ("tflite", "q31_double")
    assert [(i.name, i.dtype, i.shape) for i in io.inputs] == [("in0", "int8", (1, 6, 5, 3))]
    assert [(o.name, o.dtype, o.shape, o.lsb) for o in io.outputs] == \
        [("out0", "int8", (1, 6, 5, 4), 1.0)]


def test_activations_are_nchw_inside_and_the_conv_is_a_fake_quant_chain():
    ops = _ops(tflite.load(_conv_model()))
    # NHWC input -> NCHW (a requantization-free transpose), the conv chain, and back
    assert ops == ["dequantize", "permute_dims", "quantize", "dequantize", "dequantize",
                   "nn.conv2d", "dequantize", "reshape", "add", "nn.relu", "quantize",
                   "dequantize", "permute_dims", "quantize"]


def test_uint8_tensors_are_int8_shifted_and_their_qdq_calls_say_so():
    mod = tflite.load(_conv_model("uint8"))
    calls = [v for _, v in _tvm.function_bindings(mod["main"])]
    parsed = [p for c in calls if (p := qdq.read_dequantize(c) or qdq.read_quantize(c))]
    uint8 = [p for p in parsed if p.source_dtype == "uint8"]
    # the input's dequantize, the conv output's quantize and dequantize, the output's
    assert len(uint8) >= 4 and all(p.qparams.dtype == "int8" for p in uint8)
    io = module_io(mod)
    assert io.inputs[0].dtype == "uint8" and io.outputs[0].dtype == "uint8"
    # the model's uint8 zero point 131 reads the shifted int8 data with zero point 3
    assert int(uint8[0].qparams.zero_point) == 3


def test_single_channel_and_unit_plane_tensors_change_layout_by_reshape():
    g = GraphWriter()
    x = g.tensor("x", (1, 1, 1, 8), "int8", scale=0.1, zero_point=0)
    y = g.tensor("y", (1, 1, 1, 8), "int8", scale=0.1, zero_point=0)
    g.op("AVERAGE_POOL_2D", [x], [y], padding="VALID", strideH=1, strideW=1, filterHeight=1,
         filterWidth=1, fusedActivationFunction="NONE")
    ops = _ops(tflite.load(g.finish([x], [y])))
    assert "permute_dims" not in ops and ops.count("reshape") == 2


def test_every_unsupported_operator_is_reported():
    """Quantized ABS and SQRT (TVM converts them on float tensors only) and RNN (neither
    canonqnn nor TVM converts it), all named at once, before any conversion."""
    g = GraphWriter()
    x = g.tensor("x", (1, 4), "int8", scale=0.1, zero_point=0)
    y = g.tensor("y", (1, 4), "int8", scale=0.1, zero_point=0)
    z = g.tensor("z", (1, 4), "int8", scale=0.1, zero_point=0)
    f = g.tensor("f", (1, 4), "float32")
    r = g.tensor("r", (1, 4), "float32")
    g.op("ABS", [x], [y])
    g.op("SQRT", [y], [z])
    g.op("RNN", [f], [r])
    with pytest.raises(UnsupportedError) as err:
        tflite.load(g.finish([x, f], [z, r]))
    assert [p[1] for p in err.value.problems] == ["ABS", "SQRT", "RNN"]
    reasons = [p[2] for p in err.value.problems]
    assert reasons[0] == reasons[1] and "TVM's converts it on float tensors only" in reasons[0]
    assert reasons[2] == "operator is not supported by canonqnn or TVM's TFLite importer"


def test_unsupported_fused_activation_names_operator_and_reason():
    g = GraphWriter()
    a = g.tensor("a", (1, 4), "int8", scale=0.1, zero_point=0)
    b = g.tensor("b", (1, 4), "int8", scale=0.1, zero_point=0)
    y = g.tensor("y", (1, 4), "int8", scale=0.1, zero_point=0)
    g.op("ADD", [a, b], [y], fusedActivationFunction="TANH")
    with pytest.raises(UnsupportedError, match=r"'#0' \(op ADD\): fused activation TANH"):
        tflite.load(g.finish([a, b], [y]))


def test_not_a_tflite_model():
    with pytest.raises(InvalidModelError, match="not a TFLite model"):
        tflite.load(b"\x00" * 64)
    with pytest.raises(InvalidModelError, match="no such file"):
        tflite.load("/nonexistent/model.tflite")


def test_cut_converts_up_to_the_named_tensor_before_an_unsupported_operator():
    """A detector's TFLite_Detection_PostProcess (a custom operator) at the end: the error says
    where to cut, and the cut model converts and matches the interpreter there."""
    import canonqnn

    g = GraphWriter()
    x = g.tensor("x", (1, 8), "int8", scale=0.05, zero_point=3)
    y = g.tensor("y", (1, 8), "int8", scale=1 / 256, zero_point=-128)
    z = g.tensor("z", (1, 8), "float32")
    g.op("LOGISTIC", [x], [y])
    g.op("EXP", [y], [z])
    model = g.finish([x], [z])
    with pytest.raises(UnsupportedError, match="--outputs y "):
        tflite.load(model)
    assert [o.name for o in module_io(tflite.load(model, outputs=["y"])).outputs] == ["y"]
    assert canonqnn.parity(model, outputs=["y"]).exact
