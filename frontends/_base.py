"""What every frontend shares: the tensor type converters exchange (``Value``), the exception
they raise for what they do not implement, the converter registry and the types of converters,
the per-import context's core, and the import skeleton (``GraphImporter``): every unsupported
node reported at once before converting, a graph cut at named tensors, the conversion loop, the
outputs and the module.

A frontend supplies the rest: reading its format, its converters, and a ``GraphImporter``
subclass saying how its graph is walked and how an error names a node (``where``: ONNX says
``node 'conv1' (op Conv)``, TFLite ``operator #3 'conv1' (CONV_2D)``). The driver converts
nodes in order and turns every failure into the error a user sees, never a traceback: a
converter's ``Unsupported`` becomes an ``UnsupportedError`` naming node, op and reason; a
``CanonqnnError`` gets the node's name in front; anything else (a malformed node a converter
tripped over) an ``InvalidModelError``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax
from canonqnn.errors import CanonqnnError, InvalidModelError, UnsupportedError
from canonqnn.io import IO_ATTR, ModelIO, TensorInfo
from canonqnn.numerics.functions import HARD_SWISH_OFFSET, HARD_SWISH_SLOPE
from canonqnn.qparams import QParams


@dataclass(kw_only=True)
class Value:
    """One tensor of the source model as imported, in every frontend. The fields past ``qparams``
    are what one frontend needs and the others leave at their default (few enough that one
    type serves all three: the shared driver and helpers speak of one ``Value``).

    ``expr``: its Relax expression (int8 or int16 for quantized tensors, uint8 ones held as
    int8 shifted by -128); None for a constant not yet materialized (``ctx.expr`` does) or a
    PyTorch zero padding not yet emitted. ``const``: the numpy value of a constant known at
    import time (the model's layout and dtype). ``dtype``: the dtype the model declares (ONNX,
    TFLite; PyTorch's converters read dtypes off the expressions and leave the default).
    ``qparams``: the int8-normalized parameters of a quantized integer tensor, when known.
    ``step``: the quantization step of a float tensor a dequantize produced (parity's LSB for a
    float output).
    """

    expr: Any = None
    const: np.ndarray | None = None
    dtype: str = "float32"
    qparams: QParams | None = None
    step: float | None = None
    # ONNX: the parameters of the integer tensor a float value was dequantized from (QOperator
    # converters rebuild int32 biases from them)
    dequantized: QParams | None = None
    # TFLite: the model's (NHWC) shape; ONNX and PyTorch read shapes off ``expr`` (ctx.shape)
    shape: tuple[int, ...] | None = None
    # TFLite: ``expr`` is the NCHW permutation of this 4-D NHWC tensor
    nchw: bool = False
    # TFLite: the model's tensor, for constants and variables: it keeps parameters QParams
    # cannot (int16 tensors such as SVDF's time weights and an int8 LSTM's cell state)
    tensor: Any = None
    # PyTorch: ``(value, [top, left, bottom, right])``, a zero padding of the last two axes
    # not yet emitted, which a conv reading it takes as its own
    padded: tuple[Value, list[int]] | None = None

    @property
    def quantized(self) -> bool:
        return self.qparams is not None

    @property
    def layout_shape(self) -> tuple[int, ...]:
        """The shape of ``expr`` (TFLite: ``shape``, permuted to NCHW when held so)."""
        assert self.shape is not None
        return tuple(self.shape[i] for i in (0, 3, 1, 2)) if self.nchw else self.shape


# What converters are given and return. A converter's ``inputs`` hold None for omitted optional
# inputs; ONNX's ``extra`` is the node's attributes, TFLite's the operator's output tensors.
Inputs = list[Value | None]
Attrs = dict[str, Any]
ContextT = TypeVar("ContextT", bound="ImportContext")
NodeT = TypeVar("NodeT")
ExtraT = TypeVar("ExtraT")
# ``fn(ctx, node, inputs, extra) -> [one Value per output]`` (ONNX, TFLite)
Converter = Callable[[ContextT, NodeT, Inputs, ExtraT], list[Value]]
# ``fn(ctx, node, args) -> Value``, ``args`` the node's arguments with every node replaced by its
# Value; None where the form TVM's converter writes is the one (PyTorch)
ArgsConverter = Callable[[ContextT, NodeT, list[Any]], Value | None]
ConverterT = TypeVar("ConverterT", bound=Callable[..., Any])


class Unsupported(Exception):
    """Raised by converters; the import driver attaches the node and op."""


class Registry(Generic[ConverterT]):
    """A frontend's converters (of type ``ConverterT``) by op kind, registered with
    ``@registry.op("Conv", ...)``; keyword ``properties`` are what else the frontend records
    per kind (``property``)."""

    def __init__(self) -> None:
        self.converters: dict[str, ConverterT] = {}
        self._properties: dict[str, dict[str, Any]] = {}

    def op(self, *kinds: str, **properties: Any) -> Callable[[ConverterT], ConverterT]:
        def register(fn: ConverterT) -> ConverterT:
            for kind in kinds:
                self.converters[kind] = fn
                self._properties[kind] = properties
            return fn

        return register

    def property(self, kind: str, name: str) -> Any:
        """A property ``kind`` was registered with, or None."""
        return self._properties.get(kind, {}).get(name)


class ImportContext:
    """The core of what converters get: the block builder and the error they raise."""

    def __init__(self, bb: Any) -> None:
        self.bb = bb

    def emit(self, expr: Any) -> Any:
        return self.bb.emit(expr)

    @staticmethod
    def unsupported(reason: str) -> Unsupported:
        return Unsupported(reason)


def hard_sigmoid(ctx: ImportContext, x: Any, alpha: float, beta: float) -> Any:
    """clip(x * alpha + beta, 0, 1) with float32 ``alpha`` and ``beta``: a multiply, an add, a
    clamp (onnxruntime's order; no FMA)."""
    scaled = ctx.emit(relax.op.multiply(x, _tvm.const(np.float32(alpha))))
    shifted = ctx.emit(relax.op.add(scaled, _tvm.const(np.float32(beta))))
    return ctx.emit(_tvm.clip_float(shifted, 0.0, 1.0))


def hard_swish(ctx: ImportContext, x: Any) -> Any:
    """x * clip(x * f32(1/6) + 1/2, 0, 1): the one form every frontend writes for hard swish,
    which the lookup-table rule recognizes as that function (rewrites/lut.py)."""
    gate = hard_sigmoid(ctx, x, HARD_SWISH_SLOPE, HARD_SWISH_OFFSET)
    return ctx.emit(relax.op.multiply(x, gate))


@dataclass(frozen=True)
class Source:
    """A frontend as its errors and its module's interface name it."""

    name: str  # in error messages: "ONNX", "TFLite"
    io_source: str  # ModelIO.source: "onnx", "tflite"
    rounding: str  # the rounding family of its runtime's kernels (ModelIO.rounding)

    def unsupported(self, problems: list[tuple[str, str, str]], hint: str = "") -> UnsupportedError:
        """Every unsupported ``(node, op, reason)`` at once."""
        return UnsupportedError(problems, source=self.name, hint=hint)


def convert_node(source: Source, label: str, kind: str, where: str,
                 convert: Callable[[], Any]) -> Any:
    """``convert()`` for one node, its failures as the errors a user sees (module doc)."""
    try:
        return convert()
    except Unsupported as exc:
        raise source.unsupported([(label, kind, str(exc))]) from None
    except CanonqnnError as exc:
        raise type(exc)(f"{where}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (malformed node: report, never a traceback)
        raise InvalidModelError(f"{where}: cannot import: {type(exc).__name__}: {exc}") from None


def import_function(source: Source, bb: Any, inputs: Sequence[TensorInfo],
                    bind_inputs: Callable[[list], None],
                    convert: Callable[[], tuple[list, list[TensorInfo]]],
                    notes: Sequence[str] = ()) -> Any:
    """The module ``main(inputs...)``: ``bind_inputs(params)`` records the parameters as the
    frontend holds them, ``convert()`` converts the graph and returns the output expressions
    and their interface. The module records the interface (``canonqnn.io``, with ``notes``).
    A conversion error is raised once the function is closed (TVM's block builder must not be
    left open)."""
    params = [_tvm.Var(info.name, _tvm.tensor_type(info.shape, info.dtype)) for info in inputs]
    failure: CanonqnnError | None = None
    out_infos: list[TensorInfo] = []
    with bb.function("main", params), _tvm.converting():
        with bb.dataflow():
            bind_inputs(params)
            try:
                outputs, out_infos = convert()
            except CanonqnnError as exc:
                failure, outputs = exc, [params[0] if params else _tvm.const(0)]
            result = bb.emit_output(outputs[0] if len(outputs) == 1 else _tvm.relax.Tuple(outputs))
        bb.emit_func_output(result)
    if failure is not None:
        raise failure
    io = ModelIO(source=source.io_source, inputs=list(inputs), outputs=out_infos,
                 rounding=source.rounding, notes=list(notes))
    return bb.get().with_attr(IO_ATTR, json.dumps(io.to_json()))


def needed_nodes(outputs: Iterable[Any], producer: dict[Any, Any],
                 inputs_of: Callable[[Any], Iterable[Any]]) -> set[int]:
    """``id()`` of every node the tensors ``outputs`` depend on (``producer``: tensor -> node;
    ``inputs_of(node)``: the tensors it reads): what a graph cut at ``outputs`` keeps."""
    needed: set[int] = set()
    stack = list(outputs)
    while stack:
        node = producer.get(stack.pop())
        if node is not None and id(node) not in needed:
            needed.add(id(node))
            stack.extend(inputs_of(node))
    return needed


def cut_at(outputs: Sequence[str], known: Collection[str], what: str, producer: dict[Any, Any],
           inputs_of: Callable[[Any], Iterable[Any]],
           key: Callable[[str], Any] = lambda name: name) -> set[int]:
    """``id()`` of every node a cut at the tensors named ``outputs`` keeps (``key(name)``: the
    tensor as ``producer`` knows it); refuses names no tensor of ``known`` has, and no name at
    all (``what``, "graph" or "model", names the model in the message)."""
    missing = [name for name in outputs if name not in known]
    if missing or not outputs:
        raise InvalidModelError(f"cannot cut the {what} at {missing or outputs}: no such tensor"
                                if missing else "no output tensor named")
    return needed_nodes([key(name) for name in outputs], producer, inputs_of)


KeyT = TypeVar("KeyT")


class GraphImporter(ABC, Generic[ContextT, NodeT, KeyT]):
    """The import of one model: the skeleton every frontend shares, with the format's specifics
    as the methods a subclass defines. ``values`` holds each imported tensor by the format's
    key (ONNX: tensor name, TFLite: tensor index, PyTorch: the fx node).

    A frontend's ``load`` reads its model, makes the importer, calls ``prescan()`` (every
    unsupported node reported at once, before converting), records constants in ``values``
    and calls ``build(inputs)``: the module converting every node in order (``convert``, each
    failure as ``convert_node`` reports it) and returning the model's outputs (``output``)."""

    source: ClassVar[Source]
    node_noun: ClassVar[str] = "node"  # how "graph output 'y' is not produced by any node" says it

    def __init__(self, ctx: ContextT, nodes: Sequence[NodeT]) -> None:
        self.ctx = ctx
        self.nodes = list(nodes)
        self.values: dict[KeyT, Any] = {}

    # -------------------------------------------------------------- the format's specifics
    @abstractmethod
    def label(self, node: NodeT) -> str:
        """How problems name ``node``: its name."""

    @abstractmethod
    def kind(self, node: NodeT) -> str:
        """Its op as the registry and errors name it."""

    @abstractmethod
    def where(self, node: NodeT) -> str:
        """``node`` in front of an error's message: ``node 'conv1' (op Conv)``."""

    @abstractmethod
    def refusal(self, node: NodeT) -> tuple[str, str] | None:
        """``(op as reported, reason)`` when no converter takes ``node`` (``prescan``)."""

    def cut_hint(self, refused: list[NodeT]) -> str:
        """How to import the model up to the ``refused`` nodes (``errors.cut_hint``)."""
        return ""

    def converts(self, node: NodeT) -> bool:
        """Whether ``node`` is converted (not a graph input or output marker)."""
        return True

    def enter(self, node: NodeT | None) -> None:
        """``node`` is converted next (None: every node is); the context may record it."""

    @abstractmethod
    def convert(self, node: NodeT) -> Any:
        """``node``'s results (``read`` gives its inputs)."""

    def output_keys(self, node: NodeT) -> Sequence[KeyT | None]:
        """The keys ``node``'s results are stored under, None for an unused one."""
        raise NotImplementedError

    def store(self, node: NodeT, results: Any) -> None:
        for key, value in zip(self.output_keys(node), results):
            if key is not None:
                self.values[key] = value

    @abstractmethod
    def bind_inputs(self, inputs: Sequence[TensorInfo], params: list[Any]) -> None:
        """Record the module's parameters ``params`` (one per input) in ``values``."""

    def graph_outputs(self) -> Iterable[tuple[str, KeyT]]:
        """The model's outputs: ``(name, key)``."""
        raise NotImplementedError

    def output(self, position: int, name: str, value: Value) -> tuple[Any, float | None]:
        """The expression of the model's output ``position`` (named ``name``) as its interface
        has it, and its LSB (parity's unit of difference)."""
        raise NotImplementedError

    # -------------------------------------------------------------- the skeleton
    def prescan(self) -> None:
        """Every node no converter takes, reported at once."""
        problems, refused = [], []
        for node in self.nodes:
            refusal = self.refusal(node)
            if refusal is not None:
                problems.append((self.label(node), *refusal))
                refused.append(node)
        if problems:
            raise self.source.unsupported(problems, self.cut_hint(refused))

    def read(self, keys: Iterable[KeyT | None], missing: Callable[[KeyT], str]) -> Inputs:
        """The values of the tensors ``keys`` a node reads (None for an omitted one); one not
        produced yet is an invalid model (``missing(key)`` says so)."""
        inputs: Inputs = []
        for key in keys:
            if key is not None and key not in self.values:
                raise InvalidModelError(missing(key))
            inputs.append(self.values[key] if key is not None else None)
        return inputs

    def convert_nodes(self) -> None:
        for node in self.nodes:
            if not self.converts(node):
                continue
            self.enter(node)
            results = convert_node(self.source, self.label(node), self.kind(node),
                                   self.where(node), partial(self.convert, node))
            self.store(node, results)
        self.enter(None)

    def outputs(self) -> tuple[list[Any], list[TensorInfo]]:
        """The model's outputs: their expressions and interface."""
        exprs, infos = [], []
        for position, (name, key) in enumerate(self.graph_outputs()):
            if key not in self.values:
                raise InvalidModelError(f"graph output {name!r} is not produced by any "
                                        f"{self.node_noun}")
            expr, lsb = self.output(position, name, self.values[key])
            infos.append(TensorInfo(name, _tvm.dtype_of(expr), _tvm.shape_of(expr), lsb))
            exprs.append(expr)
        return exprs, infos

    def build(self, inputs: Sequence[TensorInfo], notes: Sequence[str] = ()) -> Any:
        """The module: ``main(inputs...)`` computing the model's outputs (``import_function``;
        ``notes``: ``ModelIO.notes``)."""

        def convert() -> tuple[list[Any], list[TensorInfo]]:
            self.convert_nodes()
            return self.outputs()

        return import_function(self.source, self.ctx.bb, inputs,
                               partial(self.bind_inputs, inputs), convert, notes)
