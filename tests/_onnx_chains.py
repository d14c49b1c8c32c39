"""Small QDQ ONNX graphs shared by tests of different layers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_then_separately_quantized(activation: str, out_scale: float = 0.02,
                                    act_scale: float | None = None):
    """x -> conv -> Q -> DQ -> ``activation`` (an ONNX op; Clip to [-0.5, 0.7]) -> Q: the
    activation has its own Q/DQ pair."""
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
    act = (helper.make_node("Clip", ["y", "lo", "hi"], ["a"]) if activation == "Clip" else
           helper.make_node(activation, ["y"], ["a"]))
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


def qdq_layer_norm() -> onnx.ModelProto:
    """x -> Q -> DQ -> LayerNormalization (node 'ln', last axis of [1, 8, 16]) -> Q -> DQ."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ys"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.uniform(-0.2, 0.2, 16).astype(np.float32), "beta")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("LayerNormalization", ["xf", "gamma", "beta"], ["y"], name="ln",
                              axis=-1, epsilon=1e-5),
             helper.make_node("QuantizeLinear", ["y", "ys", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["out"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


# ---------------------------------------------------------------- QDQ products of two activations
ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8,
             np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32}


def qdq_model(nodes, inputs: dict, inits: dict, opset: int = 21):
    """``inputs``: name -> (numpy dtype, shape); ``inits``: name -> array, with the output zero
    point ``zy``; output ``Y``."""
    out_type = ONNX_TYPE[np.asarray(inits["zy"]).dtype.type]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, ONNX_TYPE[t], list(s))
                     for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("Y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def scalar(value, dtype):
    return np.array(value, dtype)


def offset(dtype) -> int:
    return 128 if dtype == np.uint8 else 0


def attention_scores(a_dtype, b_dtype, perm=(0, 1, 3, 2), b_shape=(2, 3, 6, 16)):
    """Q [2,3,6,16] x K^T: DQ(Q), DQ(K) -> Transpose(perm) -> MatMul -> Q."""
    inits = dict(sa=scalar(0.02, np.float32), za=scalar(offset(a_dtype) - 3, a_dtype),
                 sb=scalar(0.03, np.float32), zb=scalar(offset(b_dtype) + 5, b_dtype),
                 sy=scalar(0.02 * 0.03 * 4 * 120 * 70 / 60, np.float32),
                 zy=scalar(offset(a_dtype) + 2, a_dtype))
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["bf"]),
             helper.make_node("Transpose", ["bf"], ["bt"], perm=list(perm)),
             helper.make_node("MatMul", ["af", "bt"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["Y"])]
    return qdq_model(nodes, {"A": (a_dtype, (2, 3, 6, 16)), "B": (b_dtype, b_shape)}, inits)


def extreme_inputs(a_dtype, b_dtype, seed: int):
    """Largest magnitudes: uint8 x int8 pair sums leave int16 on most pairs."""
    rng = np.random.default_rng(seed)
    lows = {np.uint8: (0, 250, 255), np.int8: (-128, 120, 127)}
    return {"A": rng.choice(np.array(lows[a_dtype], a_dtype), (2, 3, 6, 16)),
            "B": rng.choice(np.array(lows[b_dtype], b_dtype), (2, 3, 6, 16))}
