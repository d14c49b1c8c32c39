"""A clamp a model quantizes on its own folds into the producing op's clamp, exactly."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import canonqnn


def _conv_then_separately_quantized(activation: str, out_scale: float = 0.02,
                                    act_scale: float | None = None):
    """x -> conv -> Q -> DQ -> relu|clip -> Q (the activation has its own Q/DQ pair)."""
    rng = np.random.default_rng(0)
    act_scale = out_scale if act_scale is None else act_scale
    inits = [
        numpy_helper.from_array(np.array(0.03, np.float32), "xs"),
        numpy_helper.from_array(np.array(3, np.int8), "xz"),
        numpy_helper.from_array(rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "w"),
        numpy_helper.from_array(np.full(4, 0.004, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
        numpy_helper.from_array(np.array(out_scale, np.float32), "ys"),
        numpy_helper.from_array(np.array(-5, np.int8), "yz"),
        numpy_helper.from_array(np.array(act_scale, np.float32), "as"),
        numpy_helper.from_array(np.array(-5, np.int8), "az"),
        numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
        numpy_helper.from_array(np.array(0.7, np.float32), "hi"),
    ]
    act = (helper.make_node("Relu", ["y"], ["a"]) if activation == "relu" else
           helper.make_node("Clip", ["y", "lo", "hi"], ["a"]))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
        helper.make_node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"]),
        act,
        helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"]),
        helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def test_separately_quantized_relu_and_clip_fold_into_the_conv_clamp():
    for activation, bounds in (("relu", (-5, 127)), ("clip", (-30, 30))):
        model = _conv_then_separately_quantized(activation)
        mod, report = canonqnn.canonicalize(canonqnn.load(model))
        assert dict(report.canonical_ops) == {"conv2d": 1}, activation
        assert report.counts["epilogue_clamp"] == 1
        assert "act_min=%d" % bounds[0] in mod.script().replace(" ", "")
        result = canonqnn.parity(model, runs=2)
        assert result.exact, result.summary()


def test_clamp_with_new_parameters_stays_a_requantize():
    model = _conv_then_separately_quantized("relu", act_scale=0.03)
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {"conv2d": 1, "requantize": 1}
    assert report.counts["epilogue_clamp"] == 0
