"""Fold quantized data movement and requantization.

    q(reshape(dq(x)))        -> canonqnn.reshape [-> requantize]
    q(permute_dims(dq(x)))   -> canonqnn.transpose [-> requantize]
    q(concat(dq(x_i)...))    -> canonqnn.concat
    q(act(dq(x)))            -> x (same parameters) | canonqnn.requantize
    dq(permute_dims(x))      -> dq(canonqnn.transpose(x))   x int8 without parameters
    dq(reshape(x))           -> dq(canonqnn.reshape(x))     x int8 without parameters

The last two cover int8 moved before any op names its parameters: a QOperator model whose
int8 NHWC input is transposed to NCHW before its first QLinearConv (tf2onnx layout). The
move is exact whatever the parameters; the dequantize that reads it gives them.

Under the Q31 roundings reshape, transpose and requantize also fold int16 in and int16 out
(TFLite's 16x8 activations, zero points 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from canonqnn import _tvm
from canonqnn.ops import movement
from canonqnn.qdq import DEQUANTIZE, QUANTIZE, QdqCall, dequantize

from ._engine import Context, Decline, Rule
from ._match import (
    INT8_OR_INT32,
    Activation,
    Moved,
    UnaryChain,
    build_moved,
    dequantized,
    output,
    per_tensor_int8,
    requantized,
    sixteen_bit,
    strip_activation,
    unary_step,
)

RESHAPE, PERMUTE, CONCAT = "relax.reshape", "relax.permute_dims", "relax.concat"


def reshaped(ctx: Context, m: UnaryChain):
    moved = movement.reshape(m.x.operand, _tvm.shape_of(m.inner), m.x.qparams)
    return Moved(m.out, m.act, m.x, moved)


def _permutation(permute: Any) -> list[int]:
    """The axes of a ``permute_dims`` call, non-negative (None: reverse them all)."""
    axes = _tvm.attrs_dict(permute).get("axes")
    rank = len(_tvm.shape_of(permute.args[0]))
    return list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]


def transposed(ctx: Context, m: UnaryChain):
    moved = movement.transpose(m.x.operand, _permutation(m.inner), m.x.qparams)
    return Moved(m.out, m.act, m.x, moved)


@dataclass(frozen=True)
class ConcatMatch:
    out: QdqCall
    parts: list[QdqCall]
    axis: int


def concat_chain(ctx: Context, call: Any):
    out = output(call)
    if out is None or out.qparams.dtype != "int8":
        return None
    inner = ctx.call(out.operand, CONCAT)
    if inner is None:
        return None
    at = out.operand
    if not ctx.single_use(at):
        return Decline("the float result has other users", at)
    fields = ctx.value(inner.args[0])
    found = [dequantized(ctx, f) for f in getattr(fields, "fields", [])]
    parts = [p for p in found if p is not None]
    if not parts or len(parts) < len(found):
        return Decline("an input is not dequantized from int8", at)
    for i, parsed in enumerate(parts):
        if (why := per_tensor_int8(parsed, f"input {i}", at)) is not None:
            return why
    axis = int(_tvm.attrs_dict(inner)["axis"]) % len(_tvm.shape_of(parts[0].operand))
    return ConcatMatch(out, parts, axis)


def build_concat(ctx: Context, m: ConcatMatch):
    return movement.concat([p.operand for p in m.parts], [p.qparams for p in m.parts],
                           m.out.qparams, m.axis, rounding=ctx.rounding,
                           source_dtype=ctx.source_dtype())


@dataclass(frozen=True)
class RequantizeMatch:
    out: QdqCall
    act: Activation
    x: QdqCall


def requantize_chain(ctx: Context, call: Any):
    dtypes = ("int8", *sixteen_bit(ctx))
    out = output(call, dtypes)
    if out is None or out.qparams.dtype not in dtypes:
        return None
    y, act = strip_activation(ctx, out.operand)
    x = dequantized(ctx, y, INT8_OR_INT32 + dtypes)
    if x is None:
        return None
    if (why := per_tensor_int8(x, "input", y, (out.qparams.dtype,))) is not None:
        return why
    if out.qparams.dtype == "int16" and (refusal := movement.REQUANTIZE.accepts(
            x_dtype="int16", zero_points=(out.qparams.scalar_zp,))) is not None:
        return Decline(f"int16 output with a non-zero zero point ({out.qparams.scalar_zp}): "
                       f"{refusal}", y)
    return RequantizeMatch(out, act, x)


def build_requantize(ctx: Context, m: RequantizeMatch):
    return requantized(ctx, m.x.operand, m.x.qparams, m.out.qparams, m.act.bounds(m.out.qparams))


@dataclass(frozen=True)
class MovedInt8:
    """``dq(permute_dims|reshape(data))`` of a run-time int8 ``data``."""

    x: QdqCall
    inner: Any


def moved_int8(ctx: Context, call: Any):
    # The structure first: nearly every dequantize reads a constant or a quantize.
    inner = ctx.call(call.args[0], PERMUTE, RESHAPE)
    if inner is None:
        return None
    x = dequantized(ctx, call)
    if x is None or x.qparams.dtype != "int8" or not x.qparams.per_tensor:
        return None
    if not ctx.single_use(x.operand):
        return None
    data = inner.args[0]
    if _tvm.is_const(data) or _tvm.dtype_of(data) != "int8":
        return None  # constant weights stay constants for the compute rules
    return MovedInt8(x, inner)


def build_int8_movement(ctx: Context, m: MovedInt8):
    data = m.inner.args[0]
    if _tvm.op_name(m.inner) == PERMUTE:
        moved = movement.transpose(data, _permutation(m.inner), m.x.qparams)
    else:
        moved = movement.reshape(data, _tvm.shape_of(m.inner), m.x.qparams)
    return dequantize(ctx.emit(moved), m.x.qparams, source_dtype=m.x.source_dtype)


RULES = (
    # In the compute phase: the compute rules read the moved int8 tensor as their operand.
    Rule("int8_movement", DEQUANTIZE, (moved_int8,), build_int8_movement,
         "dq(permute_dims|reshape(x int8)) -> dq(canonqnn.transpose|reshape(x))", phase="compute"),
    Rule("reshape", QUANTIZE, (unary_step(RESHAPE, activation=False, int16=True), reshaped),
         build_moved, "q(reshape(dq x)) -> canonqnn.reshape",
         phase="elementwise_pool_movement"),
    Rule("transpose", QUANTIZE, (unary_step(PERMUTE, activation=False, int16=True), transposed),
         build_moved, "q(permute_dims(dq x)) -> canonqnn.transpose",
         phase="elementwise_pool_movement"),
    Rule("concat", QUANTIZE, (concat_chain,), build_concat,
         "q(concat(dq x_i ...)) -> canonqnn.concat", phase="elementwise_pool_movement"),
    Rule("requantize", QUANTIZE, (requantize_chain,), build_requantize,
         "q(act(dq x)) -> x | canonqnn.requantize", phase="requantize"),
)
