"""Calls: their attributes as Python values, op names, notes carried in spans."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import tvm
from tvm import relax, tirx

from .types import items


def make_attrs(**attrs: Any) -> Any:
    return tvm.ir.make_node("ir.DictAttrs", **attrs)


def attrs_dict(call: Any) -> dict[str, Any]:
    """Attributes of a call as plain Python values (lists for arrays)."""
    attrs = call.attrs
    if attrs is None:
        return {}
    if hasattr(attrs, "keys"):  # DictAttrs (canonical ops): its map, read once
        return {str(key): to_python(value) for key, value in attrs.items()}
    cls: type = type(attrs)
    return {name: to_python(getattr(attrs, name)) for name in _attr_fields(cls)}


@functools.cache
def _attr_fields(cls: type) -> tuple[str, ...]:
    """The fields an attrs class registers (its type info; ``dir`` was a tenth of the time of
    canonicalizing a graph)."""
    names: list[str] = []
    info = getattr(cls, "__tvm_ffi_type_info__", None)
    while info is not None:
        names = [f.name for f in info.fields] + names
        info = info.parent_type_info
    return tuple(names)


def attr(call: Any, name: str) -> Any:
    """One attribute of a call as a plain Python value (``attrs_dict`` lists them all, slowly)."""
    return to_python(getattr(call.attrs, name))


def to_python(value: Any) -> Any:
    """A TVM attribute value (immediates, strings, arrays, maps) as a plain Python value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tirx.IntImm,)):
        return int(value.value)
    if isinstance(value, (tirx.FloatImm,)):
        return float(value.value)
    if hasattr(value, "items") and hasattr(value, "keys"):  # a Map (annotations)
        return {str(k): to_python(v) for k, v in value.items()}
    if hasattr(value, "__len__") and not isinstance(value, (str, bytes)):
        return [to_python(v) for v in value]
    return str(value)


_OP_NAMES: dict[Any, str | None] = {}  # op -> its name (None: a function, not an op)


def op_name(call: Any) -> str | None:
    """``"relax.nn.conv2d"`` for a call to a registered op, else None."""
    if not isinstance(call, relax.Call):
        return None
    op = call.op
    name = _OP_NAMES.get(op, "")  # ("": not seen yet; an op's name is never empty)
    if name == "":  # (the rewrite walks ask this of every binding, many times)
        name = str(op.name) if isinstance(op, tvm.ir.Op) else None
        if name is not None:  # ops live as long as the process; functions do not
            _OP_NAMES[op] = name
    return name


def call_of_op(expr: Any) -> bool:
    """A call of a registered operator (not of a function)."""
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)


def with_note(call: Any, note: str) -> Any:
    """``call`` carrying ``note`` in its span (the span's source name). A span is the call's
    own metadata: JSON serialization, common-subexpression elimination, constant folding and
    binding canonicalization keep it (measured, TVM 0.27); printing to TVMScript drops it."""
    noted = relax.Call(call.op, items(call.args), call.attrs, call.ty_args, span=_span(note))
    if isinstance(call.ty, relax.TensorType):  # a type already set stays (``_typed_like``)
        relax.expr._update_type(noted, call.ty)
    return noted


@functools.lru_cache(maxsize=4096)
def _span(note: str) -> Any:
    """One span per note (immutable, so calls share it: a canonical op carries its quantize's)."""
    return tvm.ir.Span(tvm.ir.SourceName(note), 0, 0, 0, 0)


def note_of(call: Any) -> str | None:
    """The note ``with_note`` put on ``call``, or None."""
    span = getattr(call, "span", None)
    return None if span is None else str(span.source_name.name)


def make_call(op: Any, args: Sequence[Any], attrs: dict[str, Any]) -> Any:
    return relax.Call(op, list(args), make_attrs(**attrs))


def scalar_arg(expr: Any) -> float:
    """The number held by a scalar immediate argument (e.g. ``clip`` bounds)."""
    return float(expr.value)
