"""The ONNX importer's handling of what surrounds the quantized regions of real models:
constant (shape) subgraphs fold at import, float ops canonqnn has no converter for go through
TVM's own converters, and a model can be cut before post-processing neither can import."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import _tvm
from canonqnn.errors import InvalidModelError, UnsupportedError
from canonqnn.frontends.onnx import load


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def test_shape_gather_concat_reshape_folds_to_a_constant_target():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
             helper.make_node("Concat", ["b1", "rest"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    model = _model(nodes, [_float("x", [2, 3, 4])], [_float("y", None)],
                   [_const("zero", np.int64(0)), _const("axes", np.array([0], np.int64)),
                    _const("rest", np.array([-1], np.int64))])
    text = _tvm.script(load(model))
    assert "R.reshape(x, R.shape([2, 12]))" in text
    assert text.count(" = R.") == 1  # the reshape: no shape arithmetic left


def test_float_op_without_a_canonqnn_converter_uses_tvms_and_matches_onnxruntime():
    from canonqnn.frontends.onnx.oracle import ort_session

    nodes = [helper.make_node("Softsign", ["x"], ["a"]),
             helper.make_node("Div", ["a", "d"], ["y"])]
    model = _model(nodes, [_float("x", [4, 5])], [_float("y", [4, 5])],
                   [_const("d", np.float32(3.0))])
    x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    lib = canonqnn.build(canonqnn.canonicalize(load(model))[0])
    ref = ort_session(model)[0].run(None, {"x": x})[0]
    np.testing.assert_array_max_ulp(lib.run({"x": x})["y"], ref, maxulp=2)


def test_quantization_ops_never_go_to_tvms_converters():
    node = helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z"], ["y"],
                            domain="com.microsoft")
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 3, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                   [_const("s", np.float32(0.1)), _const("z", np.uint8(3)),
                    _const("w", np.ones((1, 1, 1, 1), np.uint8))])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert "canonqnn.conv2d" in _tvm.script(canonqnn.canonicalize(load(model))[0])


def _nms_model():
    """A float head, then NonMaxSuppression (whose output onnxruntime sizes at run time)."""
    nodes = [helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou"], ["picked"])]
    return _model(nodes, [_float("boxes", [1, 8, 4]), _float("logits", [1, 2, 8])],
                  [helper.make_tensor_value_info("picked", TensorProto.INT64, None)],
                  [_const("k", np.array([3], np.int64)), _const("iou", np.float32(0.5))])


def test_cut_converts_up_to_the_named_tensors_and_parity_compares_them():
    mod = load(_nms_model(), outputs=["scores"])
    assert "vision" not in _tvm.script(mod)
    assert canonqnn.parity(_nms_model(), outputs=["scores"]).outputs[0].max_abs_diff < 1e-6


def test_run_time_sized_post_processing_is_refused_naming_where_to_cut():
    with pytest.raises(UnsupportedError, match="size known only at run time.*\n.*--outputs "
                                               "boxes,scores"):
        load(_nms_model())


def test_cut_at_an_unknown_tensor_is_a_clear_error():
    with pytest.raises(InvalidModelError, match="cannot cut the graph at \\['nope'\\]"):
        load(_nms_model(), outputs=["nope"])


def test_unsupported_tail_error_says_where_to_cut():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Det", ["r"], ["y"])]
    model = _model(nodes, [_float("x", [2, 3, 3])], [_float("y", None)])
    with pytest.raises(UnsupportedError, match="--outputs r "):
        load(model)


def test_a_model_in_memory_naming_external_data_is_refused_not_read_from_the_working_directory(
        tmp_path, monkeypatch):
    """External data lives beside the model file; bytes have no folder, and the working
    directory's file of that name is not the model's."""
    import onnx

    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", [1, 64])],
                   [_float("y", [1, 64])], [_const("w", np.ones((1, 64), np.float32))])
    model.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"]))
    model.graph.output[0].name = "z"
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, size_threshold=0,
              location="m.data")
    monkeypatch.chdir(tmp_path)  # the data file is right here: still not read
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for given in (proto, proto.SerializeToString()):
        with pytest.raises(InvalidModelError, match="tensor 'w' keeps its data in an "
                                                    "external file.*give its path"):
            load(given)
    load(str(tmp_path / "m.onnx"))  # by path, read from its folder
    # a Constant node's tensor attribute too, not only an initializer
    constant = helper.make_node("Constant", [], ["k"], value=proto.graph.initializer[0])
    proto.graph.node.insert(0, constant)
    proto.graph.node[-1].input[1] = "k"
    del proto.graph.initializer[:]
    with pytest.raises(InvalidModelError, match="tensor 'w' keeps its data in an external file"):
        load(proto.SerializeToString())
