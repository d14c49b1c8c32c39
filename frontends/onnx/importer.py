"""ONNX model -> fake-quant Relax module (see docs/fq-form.md).

The importer reads the model, validates it (``validate.py``: invalid models never reach TVM),
checks every node has a converter (reporting all that do not at once), walks the graph in order
and calls one converter per node. uint8 tensors become int8 (q - 128) at the graph boundary
and wherever the model quantizes; the module's interface keeps the model's names and dtypes,
recorded in the module attribute ``canonqnn.io``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from canonqnn import _tvm, qdq
from canonqnn.errors import InvalidModelError, cut_hint
from canonqnn.io import TensorInfo
from canonqnn.qparams import SIGNED

from .._base import Attrs, GraphImporter, Inputs, cut_at
from . import _generic, ops  # noqa: F401  (ops registers the converters)
from ._context import (
    CONVERTERS,
    DOMAINS,
    ONNX_DTYPE,
    REGISTRY,
    SOURCE,
    ImportContext,
    Unsupported,
    Value,
    attributes,
    dtype_name,
    tensor_to_numpy,
    unsupported_error,
)
from ._inputs import consumers, input_infos
from .ops.quant import dequantize_value, quantize_value
from .validate import check_model

# ai.onnx opsets whose semantics every converter was checked against (onnx 1.23 knows up to
# 28; from 21 on, Q/DQ and friends only add types and attributes that the converters reject).
MIN_OPSET, MAX_OPSET = 10, 28


def read_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The ModelProto and the directory its external data would live in. Refuses what is no
    ONNX model at all; ``validate.check_model`` judges whether a model is valid."""
    if isinstance(model, onnx.ModelProto):
        proto, where, base = model, "ModelProto", ""
    else:
        if isinstance(model, (bytes, bytearray)):
            data, where, base = bytes(model), "model bytes", ""
        else:
            path = os.fspath(model)
            if not os.path.isfile(path):
                raise InvalidModelError(f"{path}: no such file")
            with open(path, "rb") as f:
                data = f.read()
            where, base = path, os.path.dirname(os.path.abspath(path))
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise InvalidModelError(f"{where}: not an ONNX model or truncated ({exc})") from None
    if not proto.HasField("graph") or not proto.graph.node or proto.ir_version <= 0:
        raise InvalidModelError(f"{where}: not an ONNX model or truncated (no graph, no node or "
                                "no IR version)")
    if not base:  # external data is read from the model's folder only, never the working one
        from onnx.external_data_helper import uses_external_data

        for tensor in stored_tensors(proto):
            if uses_external_data(tensor):
                raise InvalidModelError(
                    f"{where}: tensor {tensor.name!r} keeps its data in an external file; a "
                    "model given in memory has no folder to read it from: give its path")
    return proto, base


def stored_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every tensor of ``proto`` that may hold data: initializers and tensor attributes, in
    subgraphs and functions too, and sparse initializers."""
    from onnx.external_data_helper import _get_all_tensors  # the walk onnx.load uses

    sparse = [t for s in proto.graph.sparse_initializer for t in (s.values, s.indices)]
    return [*_get_all_tensors(proto), *sparse]


def default_opset(proto: onnx.ModelProto) -> int | None:
    """The ai.onnx opset the model imports; None when it imports only other domains (e.g. a
    model made of com.microsoft QOperator ops). Opsets outside MIN_OPSET..MAX_OPSET are
    refused: their operator semantics were not checked."""
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            version = int(entry.version)
            if not MIN_OPSET <= version <= MAX_OPSET:
                reason = (f"opset {version} is not supported (canonqnn imports ai.onnx opsets "
                          f"{MIN_OPSET}-{MAX_OPSET})")
                raise unsupported_error([("(model)", f"ai.onnx opset {version}", reason)])
            return version
    return None


def cut_graph(graph: onnx.GraphProto, outputs: list[str]) -> onnx.GraphProto:
    """``graph`` computing the tensors ``outputs`` only: the nodes they depend on, in order."""
    produced = {name: node for node in graph.node for name in node.output if name}
    known = produced.keys() | {v.name for v in graph.input} | {i.name for i in graph.initializer}
    needed = cut_at(outputs, known, "graph", produced,
                    lambda node: [name for name in node.input if name])
    cut = onnx.GraphProto()
    cut.CopyFrom(graph)
    del cut.node[:]
    cut.node.extend(n for n in graph.node if id(n) in needed)
    declared = {v.name: v for v in (*graph.output, *graph.value_info, *graph.input)}
    del cut.output[:]
    cut.output.extend(declared[name] if name in declared else onnx.ValueInfoProto(name=name)
                      for name in outputs)
    return cut


class OnnxImporter(GraphImporter[ImportContext, onnx.NodeProto, str]):
    """The import of one ONNX graph (``frontends._base.GraphImporter``): tensors by name, a
    node named by its name or, unnamed, by its position (``#3``)."""

    source = SOURCE

    def __init__(self, graph: onnx.GraphProto, opset: int | None) -> None:
        super().__init__(ImportContext(_tvm.BlockBuilder(), opset or 0), graph.node)
        self.graph, self.opset = graph, opset
        # (``self.nodes`` holds the nodes: their ids stay theirs)
        self._labels = {id(node): node.name or f"#{i}" for i, node in enumerate(self.nodes)}

    def label(self, node: onnx.NodeProto) -> str:
        return self._labels[id(node)]

    def kind(self, node: onnx.NodeProto) -> str:
        return node.op_type

    def where(self, node: onnx.NodeProto) -> str:
        return f"node {self.label(node)!r} (op {node.op_type})"

    def refusal(self, node: onnx.NodeProto) -> tuple[str, str] | None:
        if node.domain not in DOMAINS:
            return f"{node.domain}.{node.op_type}", f"domain {node.domain!r} is not supported"
        if node.op_type not in CONVERTERS and node.domain not in ("", "ai.onnx"):
            return node.op_type, "operator is not supported by canonqnn"
        if node.op_type not in CONVERTERS and \
                (why := _generic.refusal(node.op_type, self.opset or 0)) is not None:
            return node.op_type, why
        return None

    def cut_hint(self, refused: list[onnx.NodeProto]) -> str:
        unsupported = {self.label(node) for node in refused}
        constants = {i.name for i in self.graph.initializer}
        return cut_hint([t for node in self.nodes if self.label(node) in unsupported
                         for t in node.input if t and t not in constants])

    def enter(self, node: onnx.NodeProto | None) -> None:
        if node is not None:
            self.ctx.node_output = node.output[0] if node.output else self.label(node)

    def convert(self, node: onnx.NodeProto) -> list[Value]:
        inputs = self.read([name or None for name in node.input],
                           lambda name: f"input {name!r} is not produced before this node "
                                        "(graph not in topological order?)")
        return _convert(self.ctx, node, inputs)

    def output_keys(self, node: onnx.NodeProto) -> list[str | None]:
        return [name or None for name in node.output]

    def bind_inputs(self, inputs: Sequence[TensorInfo], params: list[Any]) -> None:
        for info, param in zip(inputs, params):
            if info.dtype in SIGNED:  # unsigned: held as the signed type, shifted
                self.ctx.node_output = info.name
                self.values[info.name] = Value(expr=self.ctx.emit(qdq.to_signed(param, info.dtype)),
                                               dtype=info.dtype)
            else:
                self.values[info.name] = Value(expr=param, dtype=info.dtype)

    def graph_outputs(self) -> list[tuple[str, str]]:
        return [(vi.name, vi.name) for vi in self.graph.output]

    def output(self, position: int, name: str, value: Value) -> tuple[Any, float | None]:
        declared = self.graph.output[position].type.tensor_type.elem_type
        if declared and dtype_name(declared) != value.dtype:
            producer = next((self.where(n) for n in self.nodes if name in n.output),
                            "its producer")
            raise InvalidModelError(f"graph output {name!r} is declared {dtype_name(declared)}, "
                                    f"but {producer} computes {value.dtype}")
        expr = self.ctx.expr(value)
        if value.dtype in SIGNED:
            expr = self.ctx.emit(qdq.to_unsigned(expr, value.dtype))
        quantized = value.qparams is not None or \
            value.dtype in ("int8", "uint8", "int16", "uint16", "int32")
        return expr, 1.0 if quantized else value.step


def load(model: str | os.PathLike | bytes | onnx.ModelProto,
         input_shapes: dict[str, Any] | None = None,
         bind: dict[str, np.ndarray] | None = None,
         outputs: list[str] | None = None) -> Any:
    """Import an ONNX model (path, bytes or ModelProto) into the fake-quant Relax form.

    ``input_shapes`` fixes dynamic input dimensions (a dynamic batch dimension left unset is
    1, and the module's interface notes it: ``ModelIO.notes``, ``_inputs``);
    ``bind`` turns graph inputs into constants (e.g. scales and zero points a model takes at
    run time, which canonqnn needs at compile time); ``outputs`` names the tensors the module
    computes instead of the model's outputs (the graph is cut there: e.g. before
    post-processing canonqnn cannot import).
    """
    proto, base_dir = read_model(model)
    opset = default_opset(proto)
    check_model(proto)
    graph = proto.graph if outputs is None else cut_graph(proto.graph, outputs)
    importer = OnnxImporter(graph, opset)
    importer.prescan()

    values = importer.values
    for init in graph.initializer:
        try:
            values[init.name] = Value(const=tensor_to_numpy(init, base_dir),
                                      dtype=dtype_name(init.data_type))
        except Exception as exc:  # noqa: BLE001  (corrupt tensor data)
            raise InvalidModelError(f"initializer {init.name!r} cannot be read: {exc}") from None
    for name, array in (bind or {}).items():
        vi = next((v for v in graph.input if v.name == name), None)
        if vi is None:
            raise InvalidModelError(f"cannot bind {name!r}: the model has no such input")
        dtype = dtype_name(vi.type.tensor_type.elem_type)
        if dtype not in ONNX_DTYPE.values():
            reason = f"dtype {dtype} is not supported{consumers(graph, name)}"
            raise unsupported_error([(name, "graph input", reason)])
        values[name] = Value(const=np.asarray(array, dtype=dtype), dtype=dtype)
    unknown = sorted(set(input_shapes or {}) - {vi.name for vi in graph.input})
    if unknown:
        raise InvalidModelError(f"shapes given for {unknown}, which are not inputs of the "
                                f"model (its inputs: {[vi.name for vi in graph.input]})")
    inputs, notes = input_infos(graph, [vi for vi in graph.input if vi.name not in values],
                                input_shapes or {})
    return importer.build(inputs, notes)


def _convert(ctx: ImportContext, node: onnx.NodeProto, inputs: Inputs) -> list[Value]:
    if _generic.foldable(node, inputs):
        try:
            return _generic.fold(ctx, node, inputs)
        except Unsupported:
            pass  # too large or not evaluable: the op runs at run time instead
    converter = CONVERTERS.get(node.op_type, _float_op)
    attrs = attributes(node)
    handling = REGISTRY.property(node.op_type, "quantized")
    if handling == "consumes":
        return converter(ctx, node, inputs, attrs)
    quantized = [v for v in inputs if v is not None and v.qparams is not None]
    if not quantized:
        return converter(ctx, node, inputs, attrs)
    x = inputs[0]
    if handling != "passthrough" or x.qparams is None or len(quantized) > 1:
        raise Unsupported(f"{node.op_type} applied to a quantized {quantized[0].dtype} tensor "
                          "(expected DequantizeLinear first or a QLinear operator)")
    real = dequantize_value(ctx, x, x.qparams)
    outs = converter(ctx, node, [real, *inputs[1:]], attrs)
    return [quantize_value(ctx, out, x.qparams, x.dtype) for out in outs]


def _float_op(ctx: ImportContext, node: onnx.NodeProto, inputs: Inputs,
              attrs: Attrs) -> list[Value]:
    return _generic.float_op(ctx, node, inputs)
