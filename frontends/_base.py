"""What every frontend shares: the exception converters raise for what they do not implement,
the converter registry, the per-import context's core, the import driver and graph cutting.

A frontend supplies the rest: reading its format, its converters, how its values are held, and
how an error names a node (``where``: ONNX says ``node 'conv1' (op Conv)``, TFLite
``operator #3 'conv1' (CONV_2D)``). The driver converts nodes in order and turns every failure
into the error a user sees, never a traceback: a converter's ``Unsupported`` becomes an
``UnsupportedError`` naming node, op and reason; a ``CanonqnnError`` gets the node's name in
front; anything else (a malformed node a converter tripped over) an ``InvalidModelError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax
from canonqnn.errors import CanonqnnError, InvalidModelError, UnsupportedError
from canonqnn.functions import HARD_SWISH_OFFSET, HARD_SWISH_SLOPE
from canonqnn.io import IO_ATTR, ModelIO, TensorInfo


class Unsupported(Exception):
    """Raised by converters; the import driver attaches the node and op."""


class Registry:
    """A frontend's converters by op kind, registered with ``@registry.op("Conv", ...)``;
    keyword ``properties`` are what else the frontend records per kind (``property``)."""

    def __init__(self) -> None:
        self.converters: dict[str, Callable[..., list]] = {}
        self._properties: dict[str, dict[str, Any]] = {}

    def op(self, *kinds: str, **properties: Any) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
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
                    convert: Callable[[], tuple[list, list[TensorInfo]]]) -> Any:
    """The module ``main(inputs...)``: ``bind_inputs(params)`` records the parameters as the
    frontend holds them, ``convert()`` converts the graph and returns the output expressions
    and their interface. The module records the interface (``canonqnn.io``). A conversion
    error is raised once the function is closed (TVM's block builder must not be left open)."""
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
                 rounding=source.rounding)
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
