"""The frontend base every frontend shares (``frontends._base``): one unsupported-op exception,
one registry type, one import driver that turns each failure of a node into the error a user
sees: never a traceback."""

from __future__ import annotations

import pytest

from canonqnn.errors import InvalidModelError, UnsupportedError
from canonqnn.frontends import _base
from canonqnn.frontends.onnx import _context as onnx_context
from canonqnn.frontends.tflite import _context as tflite_context

SOURCE = _base.Source("ONNX", "onnx", "rne_f32")


def test_every_frontend_uses_the_shared_exception_registry_and_context():
    for context in (onnx_context, tflite_context):
        assert context.Unsupported is _base.Unsupported
        assert isinstance(context.REGISTRY, _base.Registry)
        assert context.CONVERTERS is context.REGISTRY.converters
        assert issubclass(context.ImportContext, _base.ImportContext)
    assert onnx_context.REGISTRY.property("QLinearConv", "quantized") == "consumes"
    assert onnx_context.REGISTRY.property("Relu", "quantized") is None


def _raising(exc: Exception):
    def convert():
        raise exc
    return convert


def test_a_converters_unsupported_names_the_node_op_and_reason():
    with pytest.raises(UnsupportedError) as info:
        _base.convert_node(SOURCE, "conv1", "Conv", "node 'conv1' (op Conv)",
                           _raising(_base.Unsupported("dilations 0")))
    assert str(info.value) == "ONNX: node 'conv1' (op Conv): dilations 0"
    assert info.value.problems == [("conv1", "Conv", "dilations 0")]


def test_a_canonqnn_error_gets_the_node_in_front_and_keeps_its_type():
    with pytest.raises(InvalidModelError, match=r"^node 'a' \(op Add\): shapes differ$"):
        _base.convert_node(SOURCE, "a", "Add", "node 'a' (op Add)",
                           _raising(InvalidModelError("shapes differ")))


def test_any_other_exception_is_an_invalid_model_naming_the_node():
    with pytest.raises(InvalidModelError, match=r"^node 'r' \(op Reshape\): cannot import: "
                                                r"IndexError: tuple index out of range$"):
        _base.convert_node(SOURCE, "r", "Reshape", "node 'r' (op Reshape)",
                           _raising(IndexError("tuple index out of range")))


def test_a_cut_keeps_exactly_the_nodes_the_outputs_depend_on():
    # a -> n1 -> b -> n2 -> c ; a -> n3 -> d
    n1, n2, n3 = ("n1", ["a"]), ("n2", ["b"]), ("n3", ["a"])
    producer = {"b": n1, "c": n2, "d": n3}
    assert _base.needed_nodes(["c"], producer, lambda node: node[1]) == {id(n1), id(n2)}
    assert _base.needed_nodes(["d", "b"], producer, lambda node: node[1]) == {id(n3), id(n1)}
