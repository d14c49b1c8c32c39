"""The frontend base every frontend shares (``frontends._base``): one unsupported-op exception,
one registry type, one import driver that turns each failure of a node into the error a user
sees: never a traceback."""

from __future__ import annotations

import pytest

from canonqnn.errors import InvalidModelError, UnsupportedError
from canonqnn.frontends import _base
from canonqnn.frontends.onnx import _context as onnx_context
from canonqnn.frontends.onnx import importer as onnx_importer
from canonqnn.frontends.tflite import _context as tflite_context
from canonqnn.frontends.tflite import importer as tflite_importer
from canonqnn.frontends.torch import _context as torch_context

SOURCE = _base.Source("ONNX", "onnx", "rne_f32")


def test_every_frontend_uses_the_shared_value_exception_registry_context_and_importer():
    for context in (onnx_context, tflite_context, torch_context):
        assert context.Value is _base.Value
        assert context.Unsupported is _base.Unsupported
        assert isinstance(context.REGISTRY, _base.Registry)
        assert context.CONVERTERS is context.REGISTRY.converters
        assert issubclass(context.ImportContext, _base.ImportContext)
    for importer in (onnx_importer.OnnxImporter, tflite_importer.TFLiteImporter):
        assert issubclass(importer, _base.GraphImporter)
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


class _Chain(_base.GraphImporter):
    """A graph of ``(name, op, inputs)`` nodes, each computing the tensor it names."""

    source = SOURCE

    def __init__(self, nodes):
        super().__init__(None, nodes)

    def label(self, node):
        return node[0]

    def kind(self, node):
        return node[1]

    def where(self, node):
        return f"node {node[0]!r} (op {node[1]})"

    def refusal(self, node):
        return (node[1], "not supported") if node[1].startswith("X") else None

    def cut_hint(self, refused):
        return "cut before " + ",".join(node[0] for node in refused)

    def convert(self, node):
        inputs = self.read(node[2], lambda name: f"input {name!r} is not produced before")
        if node[1] == "Bad":
            raise _base.Unsupported("attribute 0")
        return [_base.Value(const=sum(v.const for v in inputs))]

    def output_keys(self, node):
        return [node[0]]

    def bind_inputs(self, inputs, params):
        raise NotImplementedError


def test_the_prescan_reports_every_refused_node_at_once_in_graph_order():
    chain = _Chain([("a", "Xa", []), ("b", "Add", []), ("c", "Xc", ["a"])])
    with pytest.raises(UnsupportedError) as info:
        chain.prescan()
    assert info.value.problems == [("a", "Xa", "not supported"), ("c", "Xc", "not supported")]
    assert str(info.value).endswith("\ncut before a,c")
    _Chain([("b", "Add", [])]).prescan()  # nothing refused: no error


def test_the_conversion_loop_reads_stores_and_names_the_failing_node():
    chain = _Chain([("b", "Add", ["a"]), ("c", "Add", ["a", "b"]), ("d", "Add", ["e"])])
    chain.values["a"] = _base.Value(const=2)
    with pytest.raises(InvalidModelError, match=r"^node 'd' \(op Add\): input 'e' is not "):
        chain.convert_nodes()
    assert chain.values["c"].const == 4
    chain = _Chain([("b", "Bad", [])])
    with pytest.raises(UnsupportedError) as info:
        chain.convert_nodes()
    assert info.value.problems == [("b", "Bad", "attribute 0")]
