"""Rule ``conv_pad``: a zero padding (the input zero point) only a conv reads becomes the conv's
padding; any other padding stays a ``pad``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn


def _pad_conv(pad_value: float) -> onnx.ModelProto:
    """int8 x -> DQ -> Pad(H, W: top 1, left 0, bottom 2, right 1) -> Q -> DQ -> Conv 3x3 -> Q."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(v, n) for n, v in {
        "s": np.float32(0.05), "z": np.int8(3), "so": np.float32(0.1), "zo": np.int8(-2),
        "w": rng.integers(-127, 128, (4, 2, 3, 3)).astype(np.int8),
        "ws": np.full(4, 0.01, np.float32), "wz": np.zeros(4, np.int8),
        "pads": np.array([0, 0, 1, 0, 0, 0, 2, 1], np.int64),
        "value": np.float32(pad_value)}.items()]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node("Pad", ["xf", "pads", "value"], ["pf"]),
             helper.make_node("QuantizeLinear", ["pf", "s", "z"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["pd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["pd", "wf"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "so", "zo"], ["yq"])]
    graph = helper.make_graph(nodes, "pad_conv",
                              [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("yq", TensorProto.INT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("pad_value,ops", [(0.0, {"conv2d": 1}),
                                           (0.5, {"conv2d": 1, "pad": 1})],
                         ids=["zero", "nonzero"])
def test_only_a_zero_padding_folds_into_the_conv(pad_value, ops):
    mod, report = canonqnn.canonicalize(canonqnn.load(_pad_conv(pad_value)))
    assert dict(report.canonical_ops) == ops and report.float_islands == []
    if pad_value == 0.0:
        assert "padding=[1, 0, 2, 1]" in canonqnn._tvm.script(mod)
    assert canonqnn.parity(_pad_conv(pad_value), runs=2).exact
