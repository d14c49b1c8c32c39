"""Quantized Resize folds into canonqnn.resize2d and matches onnxruntime (ORT_ENABLE_ALL):

- QDQ models: onnxruntime drops the Q/DQ pair around a nearest Resize with equal parameters (an
  int8 gather) and runs everything else as DequantizeLinear -> float Resize -> QuantizeLinear;
- QOperator models apply Resize to the uint8/int8 tensor: nearest copies, linear runs
  onnxruntime's integer kernel (in NHWC, fixed point, next to channels-last QLinearConvs),
  folded where its weights are exact and declined, with the reason, elsewhere.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.testing import onnx_models as models

F32 = np.float32
ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def _model(nodes, inputs, inits, output_type, opset=19):
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("Y", output_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def qdq_resize(shape, scales, dtype, out_params=None, **attrs):
    o = 128 if dtype == np.uint8 else 0
    si, zi = 0.031, -7 + o
    so, zo = out_params or (si, zi)
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("si", si, F32), ("zi", zi, dtype), ("so", so, F32), ("zo", zo, dtype),
        ("scales", scales, F32))]
    nodes = [helper.make_node("DequantizeLinear", ["X", "si", "zi"], ["x"]),
             helper.make_node("Resize", ["x", "", "scales"], ["r"], **attrs),
             helper.make_node("QuantizeLinear", ["r", "so", "zo"], ["Y"])]
    return _model(nodes, [helper.make_tensor_value_info("X", ONNX_TYPE[dtype], list(shape))],
                  inits, ONNX_TYPE[dtype])


def qoperator_resize(shape, sizes, dtype, **attrs):
    """float -> QuantizeLinear -> Resize on the quantized tensor -> DequantizeLinear."""
    inits = [numpy_helper.from_array(np.array(0.05, F32), "s"),
             numpy_helper.from_array(np.array(3 + (128 if dtype == np.uint8 else 0), dtype), "z"),
             numpy_helper.from_array(np.array(sizes, np.int64), "sizes")]
    nodes = [helper.make_node("QuantizeLinear", ["X", "s", "z"], ["q"]),
             helper.make_node("Resize", ["q", "", "", "sizes"], ["r"], **attrs),
             helper.make_node("DequantizeLinear", ["r", "s", "z"], ["Y"])]
    return _model(nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
                  inits, TensorProto.FLOAT)


def _onnxruntime_resize_scales(model) -> list[float]:
    """The scales of the Resize in onnxruntime's optimized graph (NHWC: [1, h, w, 1])."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        optimized = onnx.load(so.optimized_model_filepath)
    (node,) = [n for n in optimized.graph.node if n.op_type == "Resize"]
    inits = {i.name: numpy_helper.to_array(i) for i in optimized.graph.initializer}
    return inits[node.input[2]].tolist()


def _canonical(model):
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    return report


QDQ_CASES = {  # name: (dtype, Resize attributes, scales, output (scale, zero point) or same)
    "nearest_same_params_int8": (np.int8, dict(mode="nearest"), [1, 1, 2, 2], None),
    "nearest_requantized_uint8": (np.uint8, dict(
        mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        [1, 1, 0.5, 2], (0.02, 139)),
    "linear_same_params_uint8": (np.uint8, dict(mode="linear"), [1, 1, 2, 2], None),
    "linear_align_corners_requantized_int8": (np.int8, dict(
        mode="linear", coordinate_transformation_mode="align_corners"), [1, 1, 1.5, 0.5],
        (0.02, 11)),
}


@pytest.mark.parametrize("name", list(QDQ_CASES))
def test_qdq_resize_folds_and_matches_onnxruntime(name):
    dtype, attrs, scales, out_params = QDQ_CASES[name]
    model = qdq_resize((1, 4, 6, 8), scales, dtype, out_params, **attrs)
    report = _canonical(model)
    assert dict(report.canonical_ops) == {"resize2d": 1}, report.summary()
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()


@pytest.mark.parametrize("dtype,attrs,sizes", [
    (np.int8, dict(mode="nearest", nearest_mode="ceil"), [1, 3, 9, 4]),
    (np.int8, dict(mode="linear"), [1, 3, 10, 12]),
    (np.uint8, dict(mode="linear", coordinate_transformation_mode="asymmetric"), [1, 3, 10, 3]),
], ids=["nearest_int8", "linear_half_pixel_int8", "linear_asymmetric_uint8"])
def test_qoperator_resize_folds_where_onnxruntime_kernels_agree(dtype, attrs, sizes):
    model = qoperator_resize((1, 3, 5, 6), sizes, dtype, **attrs)
    report = _canonical(model)
    assert report.canonical_ops["resize2d"] == 1 and not report.float_islands, report.summary()
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()


def test_qoperator_linear_resize_with_inexact_weights_is_declined_with_the_reason():
    model = qoperator_resize((1, 3, 5, 6), [1, 3, 10, 12], np.uint8, mode="linear",
                             coordinate_transformation_mode="align_corners")
    report = _canonical(model)
    assert "resize2d" not in report.canonical_ops
    reasons = " ".join(i.reason for i in report.float_islands)
    assert "multiples of 1/256" in reasons


def test_qoperator_linear_resize_between_channels_last_convs_matches_onnxruntime():
    # onnxruntime runs this Resize NHWC with its fixed-point integer kernel (layout optimizer)
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(F32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, 8, 3, 3)).astype(F32), "w2"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], F32), "scales")]
    nodes = [helper.make_node("Conv", [models.INPUT_NAME, "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="linear"),
             helper.make_node("Conv", ["u", "w2"], ["Y"], pads=[1, 1, 1, 1])]
    float_model = _model(nodes, [helper.make_tensor_value_info(
        models.INPUT_NAME, TensorProto.FLOAT, [1, 3, 8, 8])], inits, TensorProto.FLOAT, opset=13)
    model = models.quantize(float_model, fmt="qoperator", activation="u8", per_channel=False)
    assert _onnxruntime_resize_scales(model) == [1.0, 2.0, 2.0, 1.0]  # NHWC in onnxruntime
    report = _canonical(model)
    assert dict(report.canonical_ops) == {"conv2d": 2, "resize2d": 1}, report.summary()
    result = canonqnn.parity(model, runs=3)
    assert result.exact, result.summary()
