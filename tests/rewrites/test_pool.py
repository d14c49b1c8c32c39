"""Quantized ReduceMean over any axes folds into canonqnn.reduce_mean and matches onnxruntime
(ORT_ENABLE_ALL) bit for bit, on data whose real values cancel so that the output is the float
sum's rounding residue (the order of the additions decides it). GlobalAveragePool, which
onnxruntime fuses into its integer QLinearGlobalAveragePool, still folds into
canonqnn.global_avg_pool2d."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn

SX, ZX, ZY = 0.0371, 5, -2
SY = float(np.float32(SX) * np.float32(2.0 ** -22))  # one output step: a few float32 ulps


def mean_model(shape, axes, keepdims=1, opset=18, op="ReduceMean", activation=None, sy=SY):
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("sx", SX, np.float32), ("zx", ZX, np.int8), ("sy", sy, np.float32),
        ("zy", ZY, np.int8))]
    attrs, inputs = {}, ["x"]
    if op == "ReduceMean":
        attrs["keepdims"] = keepdims
        if opset >= 18:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            inputs.append("axes")
        else:
            attrs["axes"] = axes
    nodes = [helper.make_node("DequantizeLinear", ["X", "sx", "zx"], ["x"]),
             helper.make_node(op, inputs, ["m" if activation else "y"], **attrs)]
    if activation:
        nodes.append(helper.make_node(activation, ["m"], ["y"]))
    nodes.append(helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["Y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.INT8, list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.INT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def cancelling(rng, shape, axes):
    """int8 data whose real values cancel in pairs over ``axes`` (exact mean 0)."""
    axes = sorted(a % len(shape) for a in axes)
    kept = [i for i in range(len(shape)) if i not in axes]
    n = int(np.prod([shape[a] for a in axes]))
    rows = []
    for _ in range(int(np.prod([shape[k] for k in kept]))):
        half = rng.integers(1, 123, n // 2) * rng.choice([-1, 1], n // 2)
        rows.append(rng.permutation(np.concatenate([half, -half, np.zeros(n % 2, int)])) + ZX)
    data = np.array(rows).reshape([shape[k] for k in kept] + [shape[a] for a in axes])
    return np.moveaxis(data, list(range(len(kept), len(shape))), axes).astype(np.int8)


def _fold_and_compare(model, shape, axes, canonical="reduce_mean"):
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {canonical: 1}, report.summary()
    rng = np.random.default_rng(4)
    inputs = [{"X": cancelling(rng, shape, axes)} for _ in range(2)]
    result = canonqnn.parity(model, inputs)
    assert result.exact, result.summary()
    return result


@pytest.mark.parametrize("shape,axes,keepdims", [
    ((1, 197, 192), [-1], 1),        # a transformer's last axis
    ((2, 50, 96), [2], 0),
    ((1, 32, 7, 7), [2, 3], 0),      # spatial mean, rows of 49 at every alignment
    ((4, 16, 6, 6), [1], 1),         # channels, batch 4: a matrix product with ones
    ((1, 16, 6, 6), [1], 0),         # channels, batch 1: one by one
    ((3, 16, 21), [0, 2], 1),        # outer and inner axes
    ((2, 3, 4, 5), [0, 1, 2, 3], 0),
], ids=["last_axis", "last_axis_nokeep", "spatial", "channels_b4", "channels_b1",
        "outer_inner", "all"])
def test_reduce_mean_folds_and_matches_onnxruntime(shape, axes, keepdims):
    _fold_and_compare(mean_model(shape, axes, keepdims), shape, axes)


def test_reduce_mean_opset13_axes_attribute_and_relu_fold():
    shape, axes = (2, 24, 40), [2]
    model = mean_model(shape, axes, opset=13, activation="Relu")
    _fold_and_compare(model, shape, axes)
    mod, _ = canonqnn.canonicalize(canonqnn.load(model))
    assert f"act_min={ZY}" in mod.script().replace(" ", "")


def test_global_average_pool_still_folds_into_the_integer_global_pool():
    shape = (1, 16, 7, 7)
    model = mean_model(shape, None, op="GlobalAveragePool", sy=0.004)
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {"global_avg_pool2d": 1}, report.summary()
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()
