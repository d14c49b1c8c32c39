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

from dataclasses import dataclass
from typing import Any

from canonqnn import _tvm
from canonqnn.ops import reduce
from canonqnn.qdq import QUANTIZE, QdqCall

from ._engine import Context, Decline, Rule
from ._match import Moved, UnaryChain, build_moved, dequantized, per_tensor_int8, unary_chain

REDUCTIONS = {"relax.max": reduce.REDUCE_MAX, "relax.min": reduce.REDUCE_MIN}
ARGMAX, FLIP, SUBTRACT = "relax.argmax", "relax.flip", "relax.subtract"


def _axes(attrs: dict, rank: int) -> list[int]:
    axis = attrs.get("axis")
    if axis is None:
        return list(range(rank))
    axis = [axis] if isinstance(axis, int) else axis
    return sorted({int(a) % rank for a in axis})


def reduction_chain(ctx: Context, call: Any):
    for name, canonical in REDUCTIONS.items():
        m = unary_chain(ctx, call, name, activation=True)
        if isinstance(m, UnaryChain):
            a = _tvm.attrs_dict(m.inner)
            axes = _axes(a, len(_tvm.shape_of(m.x.operand)))
            return Moved(m.out, m.act, m.x, reduce.reduce(canonical, m.x.operand, axes,
                                                           bool(a.get("keepdims")), m.x.qparams))
        if m is not None:
            return m
    return None


@dataclass(frozen=True)
class Argmax:
    x: QdqCall
    axis: int
    keepdims: bool
    select_last_index: bool = False


def _argmax_input(ctx: Context, operand: Any, attrs: dict, at: Any):
    """``Argmax`` of argmax(dq(x)) given argmax's operand and attributes, a Decline, or None."""
    x = dequantized(ctx, operand)
    if x is None:
        return None
    if (why := per_tensor_int8(x, "input", at)) is not None:
        return why
    if attrs.get("axis") is None:
        return Decline("argmax over the flattened tensor (no axis)", at)
    return Argmax(x, int(attrs["axis"]) % len(_tvm.shape_of(x.operand)), bool(attrs["keepdims"]))


def argmax_chain(ctx: Context, call: Any):
    return _argmax_input(ctx, call.args[0], _tvm.attrs_dict(call), ctx.binding_var)


def build_argmax(ctx: Context, m: Argmax):
    return reduce.argmax(m.x.operand, m.axis, m.keepdims, m.select_last_index, m.x.qparams)


def argmax_last_chain(ctx: Context, call: Any):
    last, first = call.args
    found = ctx.call(first, ARGMAX)
    flipped = None if found is None else ctx.call(found.args[0], FLIP)
    if flipped is None or not _tvm.is_const(ctx.value(last)):
        return None
    m = _argmax_input(ctx, flipped.args[0], _tvm.attrs_dict(found), found.args[0])
    if not isinstance(m, Argmax):
        return m
    flip_axis = int(_tvm.attrs_dict(flipped)["axis"]) % len(_tvm.shape_of(m.x.operand))
    n_minus_1 = _tvm.const_value(ctx.value(last))
    if flip_axis != m.axis or n_minus_1.size != 1 or \
            int(n_minus_1.reshape(())) != _tvm.shape_of(m.x.operand)[m.axis] - 1:
        return None
    if not (ctx.single_use(first) and ctx.single_use(found.args[0])):
        return Decline("the reversed tensor or its argmax has other users", found.args[0])
    return Argmax(m.x, m.axis, m.keepdims, select_last_index=True)


RULES = (
    Rule("reduce_max_min", QUANTIZE, (reduction_chain,), build_moved,
         "q(act(max|min(dq x, axis))) -> canonqnn.reduce_max | reduce_min",
         phase="elementwise_pool_movement"),
    Rule("argmax", ARGMAX, (argmax_chain,), build_argmax, "argmax(dq x) -> canonqnn.argmax",
         phase="elementwise_pool_movement"),
    Rule("argmax_last", SUBTRACT, (argmax_last_chain,), build_argmax,
         "(n - 1) - argmax(flip(dq x)) -> canonqnn.argmax(select_last_index)",
         phase="elementwise_pool_movement"),
)
