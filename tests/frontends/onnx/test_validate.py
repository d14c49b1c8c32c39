"""ONNX model validation (``frontends/onnx/validate.py``): invalid models are refused before
import with a CanonqnnError naming the node, its op and the reason; valid ones, including what
real exporters write (contrib ops, one-element shapes written as [] or [1]), pass."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _benchmark_script import load as load_benchmark
from canonqnn.errors import (
    CanonqnnError,
    InvalidModelError,
    InvalidQuantizationError,
    UnsupportedError,
)
from canonqnn.frontends.onnx import load, read_model
from canonqnn.frontends.onnx.validate import check_model

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8


def _model(nodes, inputs, outputs, inits=(), opset=17, ir=10, opsets=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=opsets or [helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _t(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _relu(x="x", y="y", shape=(2, 3), **kw):
    return _model([helper.make_node("Relu", [x], [y])], [_t("x", list(shape))],
                  [_t("y", list(shape))], **kw)


def _refused(model, error, message):
    with pytest.raises(error, match=message) as info:
        check_model(model)
    assert type(info.value) is error
    return str(info.value)


# ------------------------------------------------------------------------------ model level
def test_a_valid_model_passes_and_loads():
    check_model(_relu())
    load(_relu())


@pytest.mark.parametrize("ir", [3, 7, 10, 11, 12, 13])
def test_ir_versions_the_installed_onnx_writes_are_accepted(ir):
    check_model(_relu(ir=ir))


def test_ir_version_beyond_the_installed_onnx_is_refused():
    _refused(_relu(ir=2**40), InvalidModelError,
             r"IR version 1099511627776 is newer than the installed onnx package reads")


@pytest.mark.parametrize("second", ["", "ai.onnx"])
def test_two_opset_imports_for_the_default_domain_are_refused(second):
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(second, 13)]
    _refused(_relu(opsets=opsets), InvalidModelError,
             r"opset_import lists the default \(ai\.onnx\) domain twice \(versions 17 and 13\)")


def test_default_domain_node_without_its_opset_import_is_refused():
    model = _relu(opsets=[helper.make_opsetid("com.microsoft", 1)])
    _refused(model, InvalidModelError, r"node '#0' \(op Relu\) is in the default ONNX domain, "
                                       "but the model imports no ai.onnx opset")


# ------------------------------------------------------------------------------ single assignment
def test_two_nodes_writing_one_tensor_are_refused():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"),
             helper.make_node("Sigmoid", ["x"], ["y"], name="b")]
    model = _model(nodes, [_t("x", [2])], [_t("y", [2])])
    _refused(model, InvalidModelError,
             r"node 'b' \(op Sigmoid\): output 'y' is also written by node 'a' \(op Relu\)")


def test_node_writing_a_graph_input_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["x"])], [_t("x", [2])], [_t("x", [2])])
    _refused(model, InvalidModelError, r"node '#0' \(op Relu\): output 'x' is also a graph input")


def test_node_writing_an_initializer_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["w"]), helper.make_node("Add", ["x", "w"], ["y"])]
    model = _model(nodes, [_t("x", [2])], [_t("y", [2])], [_const("w", np.ones(2, np.float32))])
    _refused(model, InvalidModelError, r"node '#0' \(op Relu\): output 'w' is also an initializer")


def test_initializer_defined_twice_is_refused_even_with_the_same_value():
    w = _const("w", np.ones(2, np.float32))
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_t("x", [2])], [_t("y", [2])],
                   [w, w])
    _refused(model, InvalidModelError, r"initializer 'w' is defined twice")


# ------------------------------------------------------------------------------ interface
@pytest.mark.parametrize("shape,error,message", [
    ([2, -3], InvalidModelError, r"graph input 'x': dimension 1 is -3 \(negative\)"),
    ([2, 0], UnsupportedError, r"node 'x' \(op graph input\): dimension 1 is 0: zero-sized "
                               "tensors are not supported"),
    ([2**31], InvalidModelError, r"graph input 'x' of shape \[2147483648\] would hold at least "
                                 r"8589934592 bytes: tensors of 2 GiB or more"),
    ([2**62, "n"], InvalidModelError, r"graph input 'x' of shape \[4611686018427387904, 'n'\]"),
], ids=["negative", "zero", "2^31", "2^62"])
def test_impossible_input_dimensions_are_refused(shape, error, message):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_t("x", shape)], [_t("y", None)])
    _refused(model, error, message)


def test_impossible_output_dimensions_are_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_t("x", ["n"])],
                   [_t("y", [-1])])
    _refused(model, InvalidModelError, r"graph output 'y': dimension 0 is -1 \(negative\)")


def test_initializers_listed_as_inputs_are_constants_not_interface():
    """IR 3 lists every initializer among the graph inputs, empty ones (a Resize roi) too."""
    node = helper.make_node("Concat", ["x", "e"], ["y"], axis=0)
    model = _model([node], [_t("x", [2]), _t("e", [0])], [_t("y", [2])],
                   [_const("e", np.zeros(0, np.float32))], opset=11, ir=3)
    check_model(model)


def test_graph_without_outputs_is_refused():
    model = _relu()
    del model.graph.output[:]
    _refused(model, InvalidModelError, r"the graph has no outputs")


def test_undefined_input_type_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])],
                   [_t("x", [2], TensorProto.UNDEFINED)], [_t("y", None)])
    _refused(model, InvalidModelError, r"graph input 'x' has an undefined element type")


@pytest.mark.parametrize("value_info,kind", [
    (helper.make_tensor_sequence_value_info("s", F, [2]), "a sequence"),
    (helper.make_value_info("s", helper.make_map_type_proto(TensorProto.INT64,
                                                            helper.make_tensor_type_proto(F, []))),
     "a map"),
    (helper.make_value_info("s", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F, [2]))), "an optional"),
])
@pytest.mark.parametrize("where", ["input", "output"])
def test_non_tensor_graph_inputs_and_outputs_are_refused(value_info, kind, where):
    node = helper.make_node("Identity", ["s"] if where == "input" else ["x"],
                            ["y"] if where == "input" else ["s"])
    inputs = [value_info] if where == "input" else [_t("x", [2])]
    outputs = [_t("y", None)] if where == "input" else [value_info]
    _refused(_model([node], inputs, outputs), UnsupportedError,
             rf"node 's' \(op graph {where}\): {kind} is not supported \(tensors only\)")


def test_declared_output_shape_contradicting_inference_is_refused():
    model = _model([helper.make_node("Transpose", ["x"], ["y"], name="t")], [_t("x", [2, 3])],
                   [_t("y", [2, 3])])
    _refused(model, InvalidModelError, r"graph output 'y' is declared of shape \[2, 3\], but "
                                       r"node 't' \(op Transpose\) computes \[3, 2\]")


def test_declared_output_type_contradicting_inference_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_t("x", [2])], [_t("y", [2], I8)])
    _refused(model, InvalidModelError,
             r"graph output 'y' is declared int8, but node '#0' \(op Relu\) computes float32")


def test_one_element_output_declared_as_scalar_or_vector_is_accepted():
    reduce = helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)  # computes []
    check_model(_model([reduce], [_t("x", [4])], [_t("y", [1])]))
    check_model(_model([reduce], [_t("x", [4])], [_t("y", ["n"])]))


# ------------------------------------------------------------------------------ windows
def _conv(op="Conv", x_shape=(1, 4, 8, 8), w_shape=(4, 2, 3, 3), extra=(), **attrs):
    inits = [_const("w", np.ones(w_shape, np.float32)), _const("b", np.zeros(4, np.float32))]
    node = helper.make_node(op, ["x", "w", *extra], ["y"], name="c", **attrs)
    return _model([node], [_t("x", list(x_shape))], [_t("y", None)], inits)


@pytest.mark.parametrize("attrs,message", [
    (dict(dilations=[0, 1]), r"dilations \[0, 1\] must be positive"),
    (dict(strides=[1, -1]), r"strides \[1, -1\] must be positive"),
    (dict(pads=[0, -1, 0, 0]), r"pads \[0, -1, 0, 0\] must be non-negative"),
    (dict(pads=[1, 1]), r"pads \[1, 1\] has 2 values, but a 2-D window takes 4"),
    (dict(kernel_shape=[3]), r"kernel_shape \[3\] has 1 values, but a 2-D window takes 2"),
    (dict(strides=[1, 1, 1]), r"strides \[1, 1, 1\] has 3 values, but a 2-D window takes 2"),
    (dict(dilations=[1]), r"dilations \[1\] has 1 values, but a 2-D window takes 2"),
    (dict(group=3), r"group 3 does not divide the 4 input channels"),
    (dict(group=0), r"group 0 must be a positive integer"),
    (dict(group=2, foo=1), r"unknown attribute 'foo' \(not in the Conv-11 schema\)"),
])
def test_conv_attributes_out_of_range_are_refused(attrs, message):
    attrs.setdefault("group", 2)
    _refused(_conv(**attrs), InvalidModelError, r"node 'c' \(op Conv\): " + message)


def test_conv_group_not_dividing_the_output_channels_is_refused():
    _refused(_conv(w_shape=(3, 2, 3, 3), group=2), InvalidModelError,
             r"node 'c' \(op Conv\): group 2 does not divide the 3 output channels")


def test_conv_with_an_input_too_many_is_refused():
    _refused(_conv(extra=["b", "b"], group=2), InvalidModelError,
             r"node 'c' \(op Conv\): 4 inputs, but Conv-11 takes at most 3")


def test_conv_transpose_and_pooling_windows_are_checked():
    _refused(_conv("ConvTranspose", w_shape=(4, 2, 3, 3), strides=[0, 1]), InvalidModelError,
             r"node 'c' \(op ConvTranspose\): strides \[0, 1\] must be positive")
    pool = helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2, 2],
                            pads=[0, 0, 0])
    _refused(_model([pool], [_t("x", [1, 4, 8, 8])], [_t("y", None)]), InvalidModelError,
             r"node 'p' \(op MaxPool\): pads \[0, 0, 0\] has 3 values, but a 2-D window "
             "takes 4")
    pool = helper.make_node("AveragePool", ["x"], ["y"], name="p", kernel_shape=[2, 0])
    _refused(_model([pool], [_t("x", [1, 4, 8, 8])], [_t("y", None)]), InvalidModelError,
             r"node 'p' \(op AveragePool\): kernel_shape \[2, 0\] must be positive")


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
def test_qlinearconv_windows_are_checked_in_both_domains(domain):
    inits = [_const("s", np.float32(0.1)), _const("z", np.uint8(3)),
             _const("w", np.ones((4, 2, 3, 3), np.uint8))]
    node = helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z"], ["y"],
                            name="q", domain=domain, group=3)
    model = _model([node], [_t("x", [1, 4, 8, 8], U8)], [_t("y", None, U8)], inits)
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    _refused(model, InvalidModelError,
             r"node 'q' \(op QLinearConv\): group 3 does not divide the 4 input channels")


# ------------------------------------------------------------------------------ quantization
def _dq(x_shape=(4, 3, 2), x_elem=I8, zp=None, scale=None, **attrs):
    scale = np.full(4, 0.1, np.float32) if scale is None else scale
    zp = np.zeros(np.shape(scale), np.int8) if zp is None else zp
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq", **attrs)
    return _model([node], [_t("x", list(x_shape), x_elem)], [_t("y", None)],
                  [_const("s", scale), _const("z", zp)], opset=21)


@pytest.mark.parametrize("axis", [0, -3])
def test_per_axis_dequantize_in_range_is_accepted(axis):
    check_model(_dq(axis=axis))


@pytest.mark.parametrize("axis", [3, -4, 6])
def test_per_axis_axis_out_of_range_is_refused_not_wrapped(axis):
    _refused(_dq(axis=axis), InvalidQuantizationError,
             rf"node 'dq' \(op DequantizeLinear\): axis {axis} is out of range for the rank-3 "
             "input 'x'")


def test_axis_out_of_range_is_refused_where_only_the_importer_knows_the_rank():
    """ONNX shape inference knows no contrib op: the importer refuses the axis instead."""
    inits = [_const("s", np.float32(0.1)), _const("z", np.uint8(3)),
             _const("w", np.ones((4, 4, 1, 1), np.uint8)),
             _const("cs", np.full(4, 0.1, np.float32)), _const("cz", np.full(4, 3, np.uint8))]
    nodes = [helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z"], ["q"],
                              domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["q", "cs", "cz"], ["y"], name="dq", axis=5)]
    model = _model(nodes, [_t("x", [1, 4, 3, 3], U8)], [_t("y", None)], inits, opset=13)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(InvalidQuantizationError, match=r"node 'dq' \(op DequantizeLinear\): "
                                                       "axis 5 is out of range for the rank-4"):
        load(model)


def test_per_axis_scale_length_must_match_the_axis_dimension():
    _refused(_dq(axis=1), InvalidQuantizationError,
             r"node 'dq' \(op DequantizeLinear\): 4 per-axis scales \('s'\) along axis 1, but "
             r"the input 'x' of shape \[4, 3, 2\] has 3 there")


def test_zero_point_type_must_be_the_quantized_tensors():
    _refused(_dq(x_elem=U8, axis=0), InvalidQuantizationError,
             r"node 'dq' \(op DequantizeLinear\): zero point 'z' is int8, but the quantized "
             "input 'x' is uint8")


@pytest.mark.parametrize("value", [0.0, -0.5, float("nan"), float("inf")])
def test_scales_must_be_finite_and_positive(value):
    scale = np.array([0.1, 0.2, value, 0.1], np.float32)
    _refused(_dq(scale=scale, axis=0), InvalidQuantizationError,
             rf"node 'dq' \(op DequantizeLinear\): input scale {value!r} is not a finite "
             "positive number")


def test_one_element_scale_and_zero_point_may_differ_in_shape():
    """Exporters write per-tensor parameters as [] or [1], the two not always alike."""
    check_model(_dq(scale=np.array([0.1], np.float32), zp=np.int8(0)))
    check_model(_dq(scale=np.float32(0.1), zp=np.zeros(1, np.int8)))


def test_input_of_a_type_the_schema_does_not_take_is_refused_naming_the_node():
    node = helper.make_node("Where", ["c", "x", "x"], ["y"], name="w")
    model = _model([node], [_t("x", [2])], [_t("y", None)], [_const("c", np.ones(2, np.int64))])
    _refused(model, InvalidModelError,
             r"node 'w' \(op Where\): input 'c' is int64, but Where-16 takes bool for "
             "'condition'")


@pytest.mark.parametrize("x_zp, w_zp, inputs", [
    (np.int8(0), np.int8(0), "'x' and 'xz'"), (np.uint8(3), np.uint8(0), "'w' and 'wz'")])
def test_inputs_sharing_a_type_variable_must_have_one_type(x_zp, w_zp, inputs):
    """QLinearConv's T1 binds x and x_zero_point, T2 w and w_zero_point (onnxruntime refuses
    the model): refused naming both inputs and their types."""
    inits = [_const("s", np.float32(0.1)), _const("xz", x_zp), _const("yz", np.uint8(3)),
             _const("w", np.ones((4, 4, 3, 3), np.int8)), _const("wz", w_zp)]
    node = helper.make_node("QLinearConv", ["x", "s", "xz", "w", "s", "wz", "s", "yz"], ["y"],
                            name="q")
    model = _model([node], [_t("x", [1, 4, 8, 8], U8)], [_t("y", None, U8)], inits)
    _refused(model, InvalidModelError,
             rf"node 'q' \(op QLinearConv\): inputs {inputs} have different types "
             r"\(tensor\((u?int8)\), tensor\((u?int8)\)\), but QLinearConv-10 takes one type for T")


# ------------------------------------------------------------------------------ exporters' forms
def _qlinear_add(domain):
    inits = [_const("s", np.float32(0.1)), _const("z", np.uint8(3))]
    node = helper.make_node("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"], ["y"],
                            domain=domain)
    model = _model([node], [_t("a", [2, 3], U8)], [_t("y", None, U8)], inits, opset=13)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


@pytest.mark.parametrize("domain", ["com.microsoft", ""])
def test_contrib_qoperator_ops_are_accepted_in_their_domain_and_the_default_one(domain):
    check_model(_qlinear_add(domain))
    load(_qlinear_add(domain))


def test_other_domains_and_undeclared_output_shapes_are_accepted():
    model = _relu()
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    del model.graph.output[:]
    model.graph.output.append(_t("y", None))
    check_model(model)


def test_initializers_with_external_data_are_accepted(tmp_path):
    """onnx.checker, given no path, would look for the data in the working directory."""
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_t("x", [1, 64])],
                   [_t("y", [1, 64])], [_const("w", np.ones((64, 64), np.float32))])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="m.data",
                    size_threshold=0)
    load(str(path))


@pytest.mark.slow
def test_validation_time_grows_linearly_with_the_graph():
    generate = load_benchmark("convert_scaling").conv_stack
    seconds = []
    for n in (2000, 20000):
        model = generate(n)
        seconds.append(min(_seconds(check_model, model) for _ in range(3)))
    assert seconds[1] < 25 * seconds[0], seconds  # 10x the nodes: 10x the time, not 100x


def _seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------ import path
def test_load_refuses_an_invalid_model_before_conversion():
    with pytest.raises(InvalidModelError, match=r"node 'c' \(op Conv\): dilations \[0, 1\]"):
        load(_conv(group=2, dilations=[0, 1]))


@pytest.mark.parametrize("data", [b"", b"not a model at all", b"\x08\x0a\x12\xff\xff\xff\xff"],
                         ids=["empty", "text", "garbled"])
def test_unparseable_bytes_are_refused(data):
    with pytest.raises(InvalidModelError, match="not an ONNX model or truncated"):
        load(data)


def test_every_truncation_of_a_model_is_a_clear_error_or_loads():
    data = _conv(group=2).SerializeToString()
    for end in range(0, len(data), 7):
        with contextlib.suppress(CanonqnnError):
            load(data[:end])


def test_names_that_are_not_utf8_text_are_refused():
    """protobuf hands such names (a damaged file) over as bytes."""
    data = _relu().SerializeToString().replace(b"Relu", b"Rel\xff")
    with pytest.raises(InvalidModelError, match=r"node #0: b'Rel\\xff' is not UTF-8 text"):
        load(data)


def test_garbled_but_parseable_structure_is_refused():
    model = _relu()
    model.graph.node[0].op_type = ""
    with pytest.raises(InvalidModelError):
        load(model)
    model = _relu()
    model.graph.node.append(helper.make_node("Relu", ["nowhere"], ["z"]))
    with pytest.raises(InvalidModelError, match="nowhere"):
        load(model)
    with pytest.raises(InvalidModelError, match="no graph"):
        read_model(onnx.ModelProto(ir_version=10))


@pytest.mark.parametrize("op, inputs, inits", [
    ("ConstantOfShape", ["s"], [_const("s", np.array([1 << 27], np.int64))]),
    ("Expand", ["one", "s"], [_const("one", np.ones(1, np.float32)),
                              _const("s", np.array([1 << 27], np.int64))]),
])
def test_a_result_beyond_the_memory_budget_is_refused_before_anything_is_made(op, inputs, inits):
    """A 16-byte shape asks for 512 MiB: refused from shape inference, naming the node and the
    tensor, before constant folding (or TVM's converter) would fill it."""
    import tracemalloc

    from canonqnn import budget
    from canonqnn.errors import ResourceError

    nodes = [helper.make_node(op, inputs, ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    model = _model(nodes, [_t("x", [1])], [_t("y", [1 << 27])], inits)
    tracemalloc.start()
    try:
        with budget.limit("64M"), pytest.raises(
                ResourceError, match=rf"node '#0' \(op {op}\): tensor 'c' \(float32 "
                                     r"\[134217728\]\) needs 512 MiB; the memory budget is 64 MiB"):
            load(model.SerializeToString())
        assert tracemalloc.get_traced_memory()[1] < 16 * 2**20
    finally:
        tracemalloc.stop()
