"""Max/min reductions of int8 tensors: ``reduce_max``, ``reduce_min`` (int8 -> int8) and
``argmax`` (int8 -> int64 indices).

For a positive scale, dequantization is increasing, so the largest real value is the largest
stored integer: ``max(dq x) == dq(max x)`` and ``argmax(dq x) == argmax(x)`` (ties included,
equal integers being equal reals). ``reduce_max``/``reduce_min`` therefore keep the input's
scale/zero point (differing output parameters add a ``requantize``); ``argmax`` returns
indices, not a quantized tensor, and carries the input's parameters for pattern authors only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import topi
from ..qparams import QParams
from ._registry import CanonicalOp, Refusal, register

FAMILY = "reduce"


def _reduced_shape(shape, axes, keepdims: bool) -> list[int]:
    if keepdims:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes]


def _reduce_infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    return _tvm.tensor_type(_reduced_shape(_tvm.shape_of(call.args[0]), a["axes"],
                                           a["keepdims"]), "int8")


def _int8_positive(x_dtype: str, scale: float) -> Refusal | None:
    if x_dtype != "int8":
        return Refusal(f"{x_dtype} input (int8)")
    if not scale > 0:
        return Refusal(f"scale {scale!r} is not positive (the order of the stored values is "
                       "the order of the real ones only under a positive scale)")
    return None


def reduction_constraint(x_dtype: str = "int8", scale: float = 1.0, axes=(0,),
                         rank: int | None = None) -> Refusal | None:
    """x int8 per tensor, positive scale; non-negative, distinct axes (at least one, below the
    rank); output shares the input's scale and zero point"""
    if (why := _int8_positive(x_dtype, scale)) is not None:
        return why
    axes = [int(a) for a in axes]
    if not axes or len(set(axes)) != len(axes) or min(axes) < 0 or \
            (rank is not None and max(axes) >= rank):
        return Refusal(f"axes {axes} (at least one, distinct, in [0, {rank}))"
                       if rank is not None else f"axes {axes} (at least one, distinct, >= 0)")
    return None


def _reduction(name: str, np_fn, topi_fn) -> CanonicalOp:
    def legalize(bb: Any, call: Any) -> Any:
        a = _tvm.attrs_dict(call)
        return bb.call_te(topi_fn, call.args[0], axis=a["axes"], keepdims=bool(a["keepdims"]),
                          primfunc_name_hint=f"canonqnn_{name}")

    return register(CanonicalOp(
        name=name,
        summary=f"int8 {name.split('_')[1]} over axes; parameters unchanged",
        args=("x",),
        attrs=("axes", "keepdims", "scale", "zp"),
        infer=_reduce_infer,
        legalize=legalize,
        reference=lambda x, axes, keepdims, scale, zp: np_fn(x, axis=tuple(axes),
                                                            keepdims=bool(keepdims)),
        constraint=reduction_constraint,
        family=FAMILY,
    ))


REDUCE_MAX = _reduction("reduce_max", np.max, topi.max)
REDUCE_MIN = _reduction("reduce_min", np.min, topi.min)


def reduce(op: CanonicalOp, x: Any, axes, keepdims: bool, qp: QParams) -> Any:
    """``REDUCE_MAX`` or ``REDUCE_MIN`` of ``x`` over ``axes``."""
    op.require(x_dtype=_tvm.dtype_of(x), scale=qp.scalar_scale, axes=axes,
               rank=len(_tvm.shape_of(x)))
    return op.call([x], dict(axes=sorted(int(a) for a in axes), keepdims=bool(keepdims),
                             scale=qp.scalar_scale, zp=qp.scalar_zp))


# ---------------------------------------------------------------- argmax
def _argmax_reference(x, axis, keepdims, select_last_index, scale, zp):
    if select_last_index:
        flipped = np.flip(x, axis)
        index = x.shape[axis] - 1 - np.argmax(flipped, axis=axis)
    else:
        index = np.argmax(x, axis=axis)
    index = index.astype(np.int64)
    return np.expand_dims(index, axis) if keepdims else index


def _argmax_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)

    def compute(x):
        # topi's argmax reducer starts from (the dtype's minimum, index -1) and keeps the
        # start on ties: a line of -128s would give -1 in int8. Widened, -128 always wins.
        index = topi.argmax(topi.cast(x, "int32"), axis=a["axis"], keepdims=bool(a["keepdims"]),
                            select_last_index=bool(a["select_last_index"]))
        return topi.cast(index, "int64")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_argmax")


def argmax_constraint(x_dtype: str = "int8", scale: float = 1.0, axis: int = 0,
                      rank: int | None = None) -> Refusal | None:
    """x int8 per tensor, positive scale; non-negative axis below the rank; output int64
    indices"""
    if (why := _int8_positive(x_dtype, scale)) is not None:
        return why
    if axis < 0 or (rank is not None and axis >= rank):
        return Refusal(f"axis {axis} (in [0, {rank}))" if rank is not None else
                       f"axis {axis} (non-negative)")
    return None


ARGMAX = register(CanonicalOp(
    name="argmax",
    summary="index of the largest int8 value along an axis (int64 output, not quantized)",
    args=("x",),
    attrs=("axis", "keepdims", "select_last_index", "scale", "zp"),
    infer=lambda call: _tvm.tensor_type(_reduced_shape(
        _tvm.shape_of(call.args[0]), [_tvm.attrs_dict(call)["axis"]],
        _tvm.attrs_dict(call)["keepdims"]), "int64"),
    legalize=_argmax_legalize,
    reference=_argmax_reference,
    constraint=argmax_constraint,
    family=FAMILY,
))


def argmax(x: Any, axis: int, keepdims: bool, select_last_index: bool, qp: QParams) -> Any:
    ARGMAX.require(x_dtype=_tvm.dtype_of(x), scale=qp.scalar_scale, axis=int(axis),
                   rank=len(_tvm.shape_of(x)))
    return ARGMAX.call([x], dict(axis=int(axis), keepdims=bool(keepdims),
                                 select_last_index=bool(select_last_index),
                                 scale=qp.scalar_scale, zp=qp.scalar_zp))
