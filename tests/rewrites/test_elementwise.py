"""Quantized Add / Mul / Sub models fold into canonqnn.add / mul / sub and match onnxruntime
(ORT_ENABLE_ALL, the parity settings) bit for bit: Sub with a folded activation, and Add with a
bias-like [C, 1, 1] operand or a [1, C] row vector (broadcast operands onnxruntime fuses into
QLinearAdd like any other)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from _canonical import canonical_calls
from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.io import IO_ATTR, ModelIO
from canonqnn.qparams import QParams

ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def binary_model(op: str, a_shape, b, dtype, activation: str | None = None):
    """DQ(A) op DQ(B) [-> activation] -> Q -> Y; B is a graph input (a shape) or an int
    constant (an array)."""
    o = 128 if dtype == np.uint8 else 0
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("sa", 0.043, np.float32), ("za", 3 + o, dtype), ("sb", 0.021, np.float32),
        ("zb", -9 + o, dtype), ("sy", 0.05, np.float32), ("zy", -4 + o, dtype))]
    inputs = [helper.make_tensor_value_info("A", ONNX_TYPE[dtype], list(a_shape))]
    if isinstance(b, np.ndarray):
        inits.append(numpy_helper.from_array(b.astype(dtype), "B"))
    else:
        inputs.append(helper.make_tensor_value_info("B", ONNX_TYPE[dtype], list(b)))
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["a"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["b"]),
             helper.make_node(op, ["a", "b"], ["c" if activation else "y"])]
    if activation:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    nodes.append(helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["Y"]))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("Y", ONNX_TYPE[dtype], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def _check(model, canonical, runs=2):
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {canonical: 1}, report.summary()
    result = canonqnn.parity(model, runs=runs, seed=3)
    assert result.exact, result.summary()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_sub_with_relu_folds_into_canonqnn_sub_and_matches_onnxruntime(dtype):
    _check(binary_model("Sub", (2, 16, 8, 8), (2, 16, 8, 8), dtype, activation="Relu"), "sub")


def test_sub_from_a_constant_broadcast_operand_matches_onnxruntime():
    b = np.random.default_rng(0).integers(-128, 128, (16, 1, 1))
    _check(binary_model("Sub", (1, 16, 8, 8), b, np.int8), "sub")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_bias_add_of_a_c11_constant_folds_and_matches_onnxruntime(dtype):
    b = np.random.default_rng(1).integers(0, 256, (32, 1, 1)) - (0 if dtype == np.uint8 else 128)
    _check(binary_model("Add", (1, 32, 6, 6), b, dtype), "add")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_row_vector_add_and_mul_fold_and_match_onnxruntime(dtype):
    b = np.random.default_rng(2).integers(0, 256, (1, 64)) - (0 if dtype == np.uint8 else 128)
    _check(binary_model("Add", (8, 64), b, dtype), "add")
    _check(binary_model("Mul", (8, 64), (1, 64), dtype), "mul")


# ---------------------------------------------------------------- squared_difference (TFLite)
def squared_difference_module(source: str = "tflite"):
    """main(a, b) = q(square(dq(a) - dq(b))), the form the TFLite frontend writes for
    SQUARED_DIFFERENCE, ``b`` broadcast along the last axis."""
    bb = relax.BlockBuilder()
    a = relax.Var("a", _tvm.tensor_type((1, 8, 16), "int8"))
    b = relax.Var("b", _tvm.tensor_type((1, 8, 1), "int8"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            d = bb.emit(relax.op.subtract(bb.emit(qdq.dequantize(a, QParams.make(0.05, 3))),
                                          bb.emit(qdq.dequantize(b, QParams.make(0.02, 8)))))
            y = bb.emit(relax.op.square(d))
            out = bb.emit_output(qdq.quantize(y, QParams.make(0.16, -128)))
        bb.emit_func_output(out)
    io = ModelIO(source, [], [], rounding="q31_double" if source == "tflite" else "rne_f32")
    return bb.get().with_attr(IO_ATTR, json.dumps(io.to_json()))


def test_square_of_a_difference_folds_into_squared_difference_under_q31_double():
    mod, report = canonqnn.canonicalize(squared_difference_module(), numerics="tflite-reference")
    assert dict(report.canonical_ops) == {"squared_difference": 1}, report.summary()
    assert report.counts["squared_difference"] == 1 and not report.float_islands
    [(name, attrs, _)] = canonical_calls(mod)
    assert name == "squared_difference" and attrs["rounding"] == "q31_double"


@pytest.mark.parametrize("source, numerics", [("tflite", "exact"), ("onnx", None)])
def test_squared_difference_under_another_rounding_stays_float_with_the_reason(source, numerics):
    _, report = canonqnn.canonicalize(squared_difference_module(source), numerics=numerics)
    assert "squared_difference" not in report.canonical_ops
    reasons = {i.op: i.reason for i in report.float_islands}
    assert "TFLite's int8 SQUARED_DIFFERENCE kernel (rounding q31_double)" in \
        reasons["relax.subtract"] and "rounding is rne_f32" in reasons["relax.subtract"]
    assert "relax.square" in reasons  # the lut rule names it: two inputs, no table
