"""parity's first diverging layer: the first canonical op whose output differs, between the
build, the numpy reference and onnxruntime's value of the same tensor."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from _onnx_chains import attention_scores, extreme_inputs
from canonqnn import _tvm
from canonqnn.frontends.onnx import runtime as onnx_runtime


def test_parity_names_the_op_whose_arithmetic_the_runtime_does_not_share():
    # Converted for the other x86 class than this host's onnxruntime: the matmul differs.
    other = {"x86-avx2": "onnxruntime-1.31-x86-vnni", "x86-vnni": "onnxruntime-1.31-x86-avx2"}
    model = attention_scores(np.uint8, np.int8)
    result = canonqnn.parity(model, [extreme_inputs(np.uint8, np.int8, 1)],
                             numerics=other[onnx_runtime.profile().host])
    assert not result.exact
    found = result.extra["first_divergence"]
    assert (found["op"], found["tensor"], found["build_vs_reference"]) == ("matmul", "Y", None)
    assert found["reference_vs_runtime"] > 0
    assert "u8s8_runtime_b" in result.summary()
    assert "first diverging layer: canonqnn.matmul" in result.summary()


def tile_then_relu():
    """x -> DQ -> Tile -> Q (t) -> DQ -> Relu -> Q (y), int8 [1, 5, 8, 3]."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(2, np.int8), "z"),
             numpy_helper.from_array(np.array([1, 2, 2, 1], np.int64), "r")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node("Tile", ["xf", "r"], ["tf"]),
             helper.make_node("QuantizeLinear", ["tf", "s", "z"], ["t"]),
             helper.make_node("DequantizeLinear", ["t", "s", "z"], ["tf2"]),
             helper.make_node("Relu", ["tf2"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.INT8, [1, 5, 8, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.INT8, [1, 10, 16, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def test_parity_names_a_miscompiled_kernel_before_the_layers_after_it(monkeypatch):
    # topi.tile's modulo addressing, miscompiled by LLVM for int8 on x86 (docs/random-graphs.md).
    monkeypatch.setattr(_tvm, "te_tile", lambda x, repeats: _tvm.topi.tile(x, repeats))
    result = canonqnn.parity(tile_then_relu(), runs=1,
                             target={"kind": "llvm", "mcpu": "haswell"})
    assert not result.exact
    found = result.extra["first_divergence"]
    assert (found["op"], found["tensor"]) == ("tile", "t")
    assert found["build_vs_reference"] > 0 and found["reference_vs_runtime"] == 0
    assert "a compiler fault" in result.summary()


def test_exact_parity_reports_no_divergence():
    result = canonqnn.parity(tile_then_relu(), runs=1)
    assert result.exact and "first_divergence" not in result.extra


def test_layers_compare_every_op_whose_tensor_the_runtime_exposes():
    result = canonqnn.parity(tile_then_relu(), runs=1, layers=True)
    assert result.exact
    assert [(layer["tensor"], layer["differing"], layer["max_lsb"], layer["elements"])
            for layer in result.extra["layers"]] == [("t", 0, 0, 480), ("y", 0, 0, 480)]
