"""The ONNX ConvTranspose converter: padding as onnxruntime derives it (pads, auto_pad,
output_shape, output_padding), groups, dilations, 1-D, and clear refusals.

Scales are powers of two, so onnxruntime's float ConvTranspose is exact and the canonical op
must agree with it bit for bit: any disagreement is a geometry error of the import.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.errors import UnsupportedError
from canonqnn.frontends.onnx.ops.nn import _transpose_pads

# attributes of one ConvTranspose per branch; input [1, 4, 5, 6], weights [4, 6/group, 3, 3]
BRANCHES = [
    dict(strides=[2, 2], pads=[1, 0, 2, 1], output_padding=[1, 0]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 3], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], auto_pad="VALID"),
    dict(strides=[3, 2], output_shape=[14, 11]),              # trims 1 (odd) and 2
    dict(strides=[2, 2], output_shape=[12, 12]),              # one beyond the full size
    dict(strides=[2, 2], output_shape=[10, 11], auto_pad="SAME_UPPER"),
    dict(strides=[2, 1], pads=[5, 0, 1, 3], dilations=[2, 1]),  # pads beyond (k-1)*d: cropped
    dict(strides=[1, 1], pads=[1, 1, 1, 1], group=2),
]


def _branchy_model(x_dtype) -> object:
    """One quantized input feeding every ``BRANCHES`` ConvTranspose, each quantized out."""
    rng = np.random.default_rng(0)
    off = 128 if x_dtype == np.uint8 else 0
    elem = TensorProto.UINT8 if off else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(2.0 ** -4, np.float32), "sx"),
             numpy_helper.from_array(np.array(off + 3, x_dtype), "zx"),
             numpy_helper.from_array(np.array(2.0 ** -3, np.float32), "sy"),
             numpy_helper.from_array(np.array(off - 5, x_dtype), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["X", "sx", "zx"], ["xf"])]
    outputs = []
    for i, attrs in enumerate(BRANCHES):
        opg = 6 // attrs.get("group", 1)
        inits += [numpy_helper.from_array(rng.integers(-20, 20, (4, opg, 3, 3)).astype(np.int8),
                                          f"w{i}"),
                  numpy_helper.from_array(np.full(opg, 2.0 ** -5, np.float32), f"sw{i}"),
                  numpy_helper.from_array(np.zeros(opg, np.int8), f"zw{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"sw{i}", f"zw{i}"], [f"wf{i}"],
                                   axis=1),
                  helper.make_node("ConvTranspose", ["xf", f"wf{i}"], [f"yf{i}"], **attrs),
                  helper.make_node("QuantizeLinear", [f"yf{i}", "sy", "zy"], [f"y{i}"])]
        outputs.append(helper.make_tensor_value_info(f"y{i}", elem, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", elem, [1, 4, 5, 6])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_conv_transpose_geometries_match_onnxruntime(x_dtype):
    model = _branchy_model(x_dtype)
    result = canonqnn.parity(model, runs=2)
    assert result.canonical_ops == {"conv2d_transpose": len(BRANCHES)}, result.summary()
    assert result.exact, result.summary()


def test_transpose_pads_split_odd_totals_as_onnx_specifies():
    # full output (5 - 1) * 2 + 3 = 11; SAME asks for 10: one unit to trim.
    args = ([5], [3], [2], [1], [0])
    assert _transpose_pads({"auto_pad": "SAME_UPPER"}, *args) == ([0], [1], [0])
    assert _transpose_pads({"auto_pad": "SAME_LOWER"}, *args) == ([1], [0], [0])
    assert _transpose_pads({"output_shape": [8]}, *args) == ([2], [1], [0])
    assert _transpose_pads({"output_shape": [12]}, *args) == ([0], [0], [1])
    assert _transpose_pads({"pads": [2, 1]}, *args) == ([2], [1], [0])


def _single(x_shape, w_shape, **attrs):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "W")
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["X", "W"], ["Y"], **attrs)],
                              "g", [x], [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                                       None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_conv_transpose_3d_is_refused_with_reason():
    with pytest.raises(UnsupportedError, match=r"ConvTranspose.*rank-5 input is not supported "
                                               r"\(1-D and 2-D only"):
        canonqnn.load(_single((1, 2, 3, 3, 3), (2, 2, 2, 2, 2)))


def test_conv_transpose_output_padding_not_below_stride_is_refused_with_reason():
    with pytest.raises(UnsupportedError, match=r"output padding \[2, 0\] not below the strides"):
        canonqnn.load(_single((1, 2, 4, 4), (2, 2, 3, 3), strides=[2, 2], output_padding=[2, 0]))


def test_float_conv_transpose_1d_imports_and_runs_like_onnxruntime():
    model = _single((1, 2, 7), (2, 3, 3), strides=[2], pads=[1, 0], output_padding=[1])
    mod = canonqnn.load(model)
    assert "R.nn.conv1d_transpose(" in mod.script()
    result = canonqnn.parity(model, runs=1)
    assert result.outputs[0].max_abs_diff < 1e-5, result.summary()
