"""ONNX Softmax and com.microsoft QLinearSoftmax import: both axis meanings (before opset 13
the input is flattened to 2-D at ``axis``), and QDQ / QOperator softmax models bit-exact with
onnxruntime (ORT_ENABLE_ALL, session.qdqisint8allowed=1) through ``canonqnn.parity``."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.build import build
from canonqnn.errors import UnsupportedError

ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def _model(nodes, inputs, outputs, inits, opset):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return model


def _qparams(dtype, x_zp, y_scale, y_zp):
    return [numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
            numpy_helper.from_array(np.array(x_zp, dtype), "xz"),
            numpy_helper.from_array(np.array(y_scale, np.float32), "ys"),
            numpy_helper.from_array(np.array(y_zp, dtype), "yz")]


def qdq_softmax(shape, dtype, opset, axis=None, *, y_scale=1 / 256, y_zp=None, relu=False):
    """X (int) -> DequantizeLinear -> Softmax [-> Relu] -> QuantizeLinear -> Y."""
    y_zp = int(np.iinfo(dtype).min) if y_zp is None else y_zp
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("DequantizeLinear", ["X", "xs", "xz"], ["xf"]),
             helper.make_node("Softmax", ["xf"], ["sf"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["sf"], ["rf"]))
    nodes.append(helper.make_node("QuantizeLinear", ["rf" if relu else "sf", "ys", "yz"], ["Y"]))
    io = [helper.make_tensor_value_info(n, ONNX_TYPE[dtype], list(shape)) for n in "XY"]
    return _model(nodes, io[:1], io[1:], _qparams(dtype, 7, y_scale, y_zp), opset)


def qlinear_softmax(shape, dtype, **attrs):
    node = helper.make_node("QLinearSoftmax", ["X", "xs", "xz", "ys", "yz"], ["Y"],
                            domain="com.microsoft", **attrs)
    io = [helper.make_tensor_value_info(n, ONNX_TYPE[dtype], list(shape)) for n in "XY"]
    y_zp = int(np.iinfo(dtype).min) + 10
    return _model([node], io[:1], io[1:], _qparams(dtype, 3, 0.003, y_zp), 13)


def onnxruntime_output(model, x) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(["Y"], {"X": x})[0]


def assert_parity(model, folded=("softmax",)):
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    assert not report.float_islands, report.summary()
    assert set(report.canonical_ops) == set(folded), report.summary()
    result = canonqnn.parity(model, runs=3)
    assert result.exact, result.summary()


# ---------------------------------------------------------------- QDQ models
QDQ_CASES = {  # opset, axis, shape, canonical ops
    "opset13_last_axis": (13, -1, (4, 50), ("softmax",)),
    "opset21_middle_axis": (21, 1, (2, 6, 5), ("softmax",)),
    "opset11_flattens_at_axis_1": (11, 1, (2, 6, 5), ("reshape", "softmax")),
    "opset11_default_axis_is_1": (11, None, (2, 3, 4, 5), ("reshape", "softmax")),
    "opset10_axis_0_one_row": (10, 0, (3, 40), ("reshape", "softmax")),
}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("name", list(QDQ_CASES))
def test_qdq_softmax_is_bit_exact_with_onnxruntime(name, dtype):
    opset, axis, shape, folded = QDQ_CASES[name]
    assert_parity(qdq_softmax(shape, dtype, opset, axis), folded)


def test_qdq_softmax_with_a_relu_the_zero_point_implies_folds():
    assert_parity(qdq_softmax((4, 20), np.uint8, 13, -1, relu=True))


def test_unfused_qdq_softmax_stays_float_with_the_reason():
    model = qdq_softmax((4, 20), np.int8, 13, -1, y_zp=-100, relu=True)
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    reasons = {i.op: i.reason for i in report.float_islands}
    assert "does not fuse this group into QLinearSoftmax" in reasons["relax.nn.softmax"]


# ---------------------------------------------------------------- QLinearSoftmax
@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_qlinear_softmax_opset_attribute_selects_the_axis_meaning(dtype):
    """axis 1 of [2, 6, 5]: rows of 30 with opset 11, columns of 6 with opset 13."""
    shape = (2, 6, 5)
    x = np.random.default_rng(4).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1,
                                          shape).astype(dtype)
    results = []
    for opset, folded in ((11, {"reshape": 2, "softmax": 1}), (13, {"softmax": 1})):
        model = qlinear_softmax(shape, dtype, axis=1, opset=opset)
        mod, report = canonqnn.canonicalize(canonqnn.load(model))
        assert dict(report.canonical_ops) == folded and not report.float_islands
        got = build(mod).run({"X": x})["Y"]
        np.testing.assert_array_equal(got, onnxruntime_output(model, x))
        results.append(got)
    assert np.count_nonzero(results[0] != results[1]) > shape[0] * shape[1]


def test_qlinear_softmax_without_opset_is_accepted_only_on_the_last_axis():
    """onnxruntime requires ``opset``; without it both meanings agree on the last axis only."""
    shape = (2, 2, 3)
    model = qlinear_softmax(shape, np.uint8, axis=-1)
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {"softmax": 1}
    x = np.arange(12, dtype=np.uint8).reshape(shape) * 20
    with_opset = qlinear_softmax(shape, np.uint8, axis=-1, opset=13)
    np.testing.assert_array_equal(build(mod).run({"X": x})["Y"],
                                  onnxruntime_output(with_opset, x))
    for attrs in ({"axis": 1}, {}):
        with pytest.raises(UnsupportedError, match=r"\(op QLinearSoftmax\): the opset attribute "
                                                   r"is missing .* the axis is ambiguous"):
            canonqnn.load(qlinear_softmax(shape, np.uint8, **attrs))


# ---------------------------------------------------------------- float Softmax
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, None), (13, 1), (13, None), (11, -1)])
def test_float_softmax_follows_the_opset_axis_meaning(opset, axis):
    shape = (2, 3, 4, 5)
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("Softmax", ["X"], ["Y"], **attrs)]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in "XY"]
    model = _model(nodes, io[:1], io[1:], [], opset)
    x = np.random.default_rng(opset).normal(0, 3, shape).astype(np.float32)
    got = build(canonqnn.load(model)).run({"X": x})["Y"]
    np.testing.assert_allclose(got, onnxruntime_output(model, x), rtol=1e-5, atol=1e-7)
