"""Fold quantized max/min reductions and argmax.

    q([act](max|min(dq(x), axis)))                 -> canonqnn.reduce_max | reduce_min
                                                      [-> requantize]
    argmax(dq(x), axis)                            -> canonqnn.argmax
    (n - 1) - argmax(flip(dq(x), axis), axis)      -> canonqnn.argmax(select_last_index)

With a positive scale the largest (smallest) real value is the largest (smallest) stored
integer, so the reductions run on the integers with the input's parameters, and argmax of the
dequantized tensor is argmax of the integers. The last form is how the ONNX importer writes
ArgMax with select_last_index (Relax's argmax picks the first of equal values).
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn.ops import reduce
from canonqnn.qdq import QUANTIZE

from ._engine import Context, Decline, Rule
from ._match import dequantized, per_tensor_int8, unary_chain
from .movement import _finish

REDUCTIONS = {"relax.max": reduce.REDUCE_MAX, "relax.min": reduce.REDUCE_MIN}
ARGMAX, FLIP, SUBTRACT = "relax.argmax", "relax.flip", "relax.subtract"


def _axes(attrs: dict, rank: int) -> list[int]:
    axis = attrs.get("axis")
    if axis is None:
        return list(range(rank))
    axis = [axis] if isinstance(axis, int) else axis
    return sorted({int(a) % rank for a in axis})


def fold_reduce(ctx: Context, call: Any):
    for name, canonical in REDUCTIONS.items():
        m = unary_chain(ctx, call, name, activation=True)
        if m is None:
            continue
        if not isinstance(m, tuple):
            return m
        out, act, inner, x, _ = m
        a = _tvm.attrs_dict(inner)
        axes = _axes(a, len(_tvm.shape_of(x.operand)))
        moved = reduce.reduce(canonical, x.operand, axes, bool(a.get("keepdims")), x.qparams)
        return _finish(ctx, moved, x.qparams, out.qparams, act.bounds(out.qparams))
    return None


def _argmax_input(ctx: Context, operand: Any, attrs: dict, at: Any):
    """``(x, axis, keepdims)`` of argmax(dq(x)) given argmax's operand and attributes, a
    Decline, or None."""
    x = dequantized(ctx, operand)
    if x is None:
        return None
    if (why := per_tensor_int8(x, "input", at)) is not None:
        return why
    if attrs.get("axis") is None:
        return Decline("argmax over the flattened tensor (no axis)", at)
    return x, int(attrs["axis"]) % len(_tvm.shape_of(x.operand)), bool(attrs["keepdims"])


def fold_argmax(ctx: Context, call: Any):
    m = _argmax_input(ctx, call.args[0], _tvm.attrs_dict(call), ctx.binding_var)
    if not isinstance(m, tuple):
        return m
    x, axis, keepdims = m
    return reduce.argmax(x.operand, axis, keepdims, False, x.qparams)


def fold_argmax_last(ctx: Context, call: Any):
    last, first = call.args
    found = ctx.call(first, ARGMAX)
    flipped = None if found is None else ctx.call(found.args[0], FLIP)
    if flipped is None or not _tvm.is_const(ctx.value(last)):
        return None
    m = _argmax_input(ctx, flipped.args[0], _tvm.attrs_dict(found), found.args[0])
    if not isinstance(m, tuple):
        return m
    x, axis, keepdims = m
    flip_axis = int(_tvm.attrs_dict(flipped)["axis"]) % len(_tvm.shape_of(x.operand))
    n_minus_1 = _tvm.const_value(ctx.value(last))
    if flip_axis != axis or n_minus_1.size != 1 or \
            int(n_minus_1.reshape(())) != _tvm.shape_of(x.operand)[axis] - 1:
        return None
    if not (ctx.single_use(first) and ctx.single_use(found.args[0])):
        return Decline("the reversed tensor or its argmax has other users", found.args[0])
    return reduce.argmax(x.operand, axis, keepdims, True, x.qparams)


RULES = (
    Rule("reduce_max_min", QUANTIZE, fold_reduce,
         "q(act(max|min(dq x, axis))) -> canonqnn.reduce_max | reduce_min"),
    Rule("argmax", ARGMAX, fold_argmax, "argmax(dq x) -> canonqnn.argmax"),
    Rule("argmax_last", SUBTRACT, fold_argmax_last,
         "(n - 1) - argmax(flip(dq x)) -> canonqnn.argmax(select_last_index)"),
)
