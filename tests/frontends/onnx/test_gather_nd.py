"""GatherND of quantized data (DQ -> GatherND -> Q, and QOperator-style on the integers
themselves) with constant or run-time indices, negative ones counting from the end: canonical
data movement (canonqnn.reshape then canonqnn.gather at a flat index), bit-exact with
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.io import module_io

SHAPE = (4, 5, 2, 3)
TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def gather_nd_model(dtype: str, index_shape, constant=None, qdq: bool = True):
    """x (float, quantized in the model; or ``dtype`` given directly with ``qdq`` False) ->
    GatherND(indices) -> Q -> DQ; indices a graph input unless ``constant``."""
    zp = np.array(3 if dtype == "int8" else 131, dtype)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(zp, "z")]
    nodes = []
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
                  helper.make_node("GatherND", ["xf", "i"], ["g"]),
                  helper.make_node("QuantizeLinear", ["g", "s", "z"], ["gq"]),
                  helper.make_node("DequantizeLinear", ["gq", "s", "z"], ["y"])]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))
    else:
        nodes.append(helper.make_node("GatherND", ["x", "i"], ["y"]))
        x = helper.make_tensor_value_info("x", TYPES[dtype], list(SHAPE))
    inputs = [x]
    if constant is None:
        inputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, list(index_shape)))
    else:
        inits.append(numpy_helper.from_array(np.asarray(constant, np.int64), "i"))
    out_type = TensorProto.FLOAT if qdq else TYPES[dtype]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", out_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def _indices(seed: int, index_shape) -> np.ndarray:
    """Index tuples over the leading axes of SHAPE, each in [-n, n)."""
    rng = np.random.default_rng(seed)
    depth = index_shape[-1]
    dims = np.asarray(SHAPE[:depth])
    return rng.integers(-dims, dims, (*index_shape[:-1], depth)).astype(np.int64)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("index_shape", [(3, 2), (2, 2, 3), (4, 1)], ids=str)
def test_run_time_indices_gather_canonically_and_bit_exact(dtype, index_shape):
    model = gather_nd_model(dtype, index_shape)
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert report.float_islands == [], report.summary()
    assert report.canonical_ops["gather"] == 1
    feeds = [{"x": np.random.default_rng(seed).normal(0, 3, SHAPE).astype(np.float32),
              "i": _indices(seed, index_shape)} for seed in range(3)]
    assert any((f["i"] < 0).any() for f in feeds)  # negative indices are exercised
    result = canonqnn.parity(model, feeds)
    assert result.exact, result.summary()


def test_gather_nd_of_integer_data_given_directly_is_bit_exact():
    model = gather_nd_model("uint8", (3, 2), qdq=False)
    module = canonqnn.load(model)
    assert module_io(module).outputs[0].dtype == "uint8"
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.integers(0, 256, SHAPE).astype(np.uint8), "i": _indices(s, (3, 2))}
             for s in range(3)]
    result = canonqnn.parity(model, feeds)
    assert result.exact, result.summary()


def test_constant_indices_fold_to_a_constant_flat_index():
    model = gather_nd_model("int8", (3, 2), constant=[[1, -1], [-4, 0], [3, 2]])
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert report.float_islands == [] and report.canonical_ops["gather"] == 1
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()
