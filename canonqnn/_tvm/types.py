"""Relax types of expressions: dtypes, static shapes, tensor types shared within a conversion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tvm
import tvm_ffi
from tvm import relax, tirx

from .caches import _CACHES, remembered
from .compat import _ARRAY_ITEM, _ARRAY_SIZE


def ty(expr: Any) -> Any:
    """The Relax type of an expression (``TensorType``, ``TupleType``, ...)."""
    return expr.ty


def is_tensor(expr: Any) -> bool:
    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def dtype_of(expr: Any) -> str:
    return str(expr.ty.dtype)


def ndim_of(expr: Any) -> int:
    """The rank of a tensor expression (known even where its shape is symbolic)."""
    return int(expr.ty.ndim)


def shape_of(expr: Any) -> tuple[int, ...]:
    """Static shape of a tensor expression; raises ``ValueError`` when it is symbolic. Within
    ``converting`` each expression's shape is read once (a type never changes)."""
    caches = _CACHES.get()
    return _read_shape(expr) if caches is None else remembered(caches.shapes, expr, _read_shape)


def _read_shape(expr: Any) -> tuple[int, ...]:
    shape = expr.ty.shape
    if shape is None:
        raise ValueError("tensor has no known shape")
    values = getattr(shape, "values", shape)
    out = []
    for dim in items(values):
        if not isinstance(dim, tirx.IntImm):
            raise ValueError(f"dimension {dim} is not static")
        out.append(dim.value)
    return tuple(out)


def items(array: Any) -> list[Any]:
    """The elements of a TVM array (a call's arguments, a shape, ``free_vars``) as a list: one
    FFI call an element, where iterating the array makes three Python calls an element (the
    largest single cost of walking a graph's bindings)."""
    return [_ARRAY_ITEM(array, i) for i in range(_ARRAY_SIZE(array))]


def tensor_var(name: str, shape: Sequence[int], dtype: str) -> Any:
    """A Relax variable of a static tensor type (a function's parameter, or a probe to infer
    a call's type with)."""
    return relax.Var(name, tensor_type(shape, dtype))


def tensor_type(shape: Sequence[int], dtype: str) -> Any:
    """The tensor type of static ``shape`` and ``dtype``; within ``converting``, one object
    for each (a module's JSON then holds each type once: types were most of its nodes)."""
    dims = tuple(int(d) for d in shape)
    caches = _CACHES.get()
    if caches is None:
        return relax.TensorType(list(dims), dtype)
    known = caches.types.get((dims, dtype))
    if known is None:
        known = caches.types[(dims, dtype)] = relax.TensorType(list(dims), dtype)
    return known


def is_var(expr: Any) -> bool:
    return isinstance(expr, relax.Var)


def is_const(expr: Any) -> bool:
    return isinstance(expr, tvm.ir.expr.GenericConst)


def is_function(expr: Any) -> bool:
    return isinstance(expr, relax.Function)


def tensor_types(expr: Any) -> list[tuple[str, tuple[int, ...]]]:
    """``(dtype, static shape)`` of a tensor expression, or of each field of a tuple."""
    t = expr.ty
    fields = list(t.fields) if isinstance(t, relax.TupleType) else [t]
    return [(str(f.dtype), tuple(int(d.value) for d in f.shape.values)) for f in fields]


def tensor_dtypes(t: Any) -> list[str]:
    """The dtypes of a tensor type or of the tensors in a tuple type."""
    if isinstance(t, relax.TupleType):
        return [d for f in t.fields for d in tensor_dtypes(f)]
    return [str(t.dtype)] if isinstance(t, relax.TensorType) else []


def same_type(a: Any, b: Any) -> bool:
    return bool(tvm_ffi.structural_equal(a, b))


def inferred_type(call: Any) -> Any:
    """The type ``call``'s operator infers from its arguments and attributes now."""
    fresh = relax.Call(call.op, list(call.args), call.attrs, list(call.ty_args))
    return ty(relax.BlockBuilder().normalize(fresh))
