"""Fold quantized binary ops.

    q(relu|clip(add(dq(a), dq(b))))       -> canonqnn.add  (also int16: TFLite 16x8 ADD)
    q(relu|clip(multiply(dq(a), dq(b))))  -> canonqnn.mul
    q(relu|clip(subtract(dq(a), dq(b))))  -> canonqnn.sub
    q(relu|clip(square(subtract(dq(a), dq(b)))))  -> canonqnn.squared_difference

``square(subtract(...))`` is the form the TFLite frontend writes for SQUARED_DIFFERENCE (no
other rule claims a square of a difference of two quantized tensors). Its canonical op is
TFLite's own integer kernel, so it folds only under rounding ``q31_double``; under any other
rounding the chain stays float, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from canonqnn import _tvm
from canonqnn.ops import elementwise as ew
from canonqnn.qdq import QUANTIZE, QdqCall
from canonqnn.qparams import xnnpack_takes_binary

from ._engine import Context, Decline, Rule
from ._match import (
    INT8_OR_INT32,
    Activation,
    QuantizedOp,
    dequantized,
    per_tensor_int8,
    quantized_op,
    sixteen_bit,
)

BINARY = {"relax.add": ew.ADD, "relax.multiply": ew.MUL, "relax.subtract": ew.SUB}
SQUARE, SUBTRACT = "relax.square", "relax.subtract"


def binary_chain(ctx: Context, call: Any):
    # int16: TFLite's 16x8 ADD (general scales; the frontend refuses its power-of-two kernel)
    return quantized_op(ctx, call, *BINARY, dtypes=("int8", *sixteen_bit(ctx)))


@dataclass(frozen=True)
class BinaryMatch:
    chain: QuantizedOp
    canonical: Any  # the canonical op (ew.ADD, MUL or SUB)
    a: QdqCall
    b: QdqCall


def binary_operands(ctx: Context, m: QuantizedOp):
    out, y = m.out, m.y
    name = _tvm.op_name(m.inner)
    assert name is not None  # quantized_op matched one of BINARY
    canonical = BINARY[name]
    if out.qparams.dtype == "int16" and canonical is not ew.ADD:
        return None  # no canonical int16 MUL / SUB: the islands rule names the chain
    if out.qparams.dtype == "int16" and (refusal := ew.ADD.accepts(
            a_dtype="int16", b_dtype="int16", out_dtype="int16",
            zero_points=dict(out_zp=out.qparams.scalar_zp))) is not None:
        return Decline(refusal, y)
    dtypes = INT8_OR_INT32 + (out.qparams.dtype,)
    a = dequantized(ctx, m.inner.args[0], dtypes)
    b = dequantized(ctx, m.inner.args[1], dtypes)
    if a is None or b is None:
        return Decline("an operand is not dequantized from int8", y)
    for parsed, what in ((a, "A"), (b, "B")):
        if (why := per_tensor_int8(parsed, what, y, (out.qparams.dtype,))) is not None:
            return why
    return BinaryMatch(m, canonical, a, b)


def binary_arithmetic(ctx: Context, m: BinaryMatch):
    """The profile's add / mul arithmetic must be one canonqnn.add / mul implements (sub is
    TFLite's alone); ``require`` raises the profile's refusal otherwise."""
    if m.canonical is ew.ADD:
        ctx.numerics.require("add", ("f32_fma", "q31", "xnnpack", "mlas_neon"),
                             "its quantized add")
    elif m.canonical is ew.MUL:
        ctx.numerics.require("mul", ("f32", "q31", "xnnpack", "mlas_neon"), "its quantized mul")
    return m


def build_binary(ctx: Context, m: BinaryMatch):
    a, b, out = m.a, m.b, m.chain.out
    bounds = m.chain.act.bounds(out.qparams)
    rounding = ctx.rounding
    if rounding == "xnnpack" and not xnnpack_takes_binary(
            m.canonical.name, a.qparams.scalar_scale, b.qparams.scalar_scale,
            out.qparams.scalar_scale):
        rounding = ctx.undelegated().rounding  # the runtime's other engine computes it
    arithmetic = {ew.ADD: ctx.numerics.add, ew.MUL: ctx.numerics.mul}.get(m.canonical)
    if arithmetic == "mlas_neon":  # onnxruntime's AArch64 kernels: their own rounding
        rounding = "mlas_neon"
    if m.canonical is ew.SUB:
        return ew.sub(a.operand, b.operand, a.qparams, b.qparams, out.qparams, act=bounds,
                      rounding=rounding)
    return ew.binary(m.canonical, a.operand, b.operand, a.qparams, b.qparams, out.qparams,
                     act=bounds, source_dtype=ctx.source_dtype(), rounding=rounding)


def _dequantized_difference(ctx: Context, square: Any):
    """``(a, b)`` parsed dequantizes when ``square`` squares ``dq(a) - dq(b)``, else None."""
    sub = ctx.call(square.args[0], SUBTRACT)
    if sub is None:
        return None
    a, b = dequantized(ctx, sub.args[0]), dequantized(ctx, sub.args[1])
    return None if a is None or b is None else (a, b)


@dataclass(frozen=True)
class SquaredDifference:
    out: QdqCall
    act: Activation
    a: QdqCall
    b: QdqCall


def squared_difference_chain(ctx: Context, call: Any):
    m = quantized_op(ctx, call, SQUARE)
    if m is None:
        return None
    square = ctx.value(m.at) if isinstance(m, Decline) else m.inner
    operands = _dequantized_difference(ctx, square)
    if operands is None:
        return None  # the square of something else: a table's, if anything
    if isinstance(m, Decline):
        return m  # the square has other users
    difference = square.args[0]
    if not ctx.single_use(difference):
        return Decline("the difference is also used outside the squared difference", difference)
    for parsed, what in zip(operands, ("A", "B")):
        if (why := per_tensor_int8(parsed, what, difference)) is not None:
            return why
    if (refusal := ew.SQUARED_DIFFERENCE.accepts(rounding=ctx.rounding)) is not None:
        # Declined at the subtraction: the lut rule names the square (two inputs, no table).
        return Decline(f"canonqnn.squared_difference: {refusal}, so the squared difference "
                       "stays float", difference)
    return SquaredDifference(m.out, m.act, *operands)


def build_squared_difference(ctx: Context, m: SquaredDifference):
    return ew.squared_difference(m.a.operand, m.b.operand, m.a.qparams, m.b.qparams,
                                 m.out.qparams, act=m.act.bounds(m.out.qparams),
                                 rounding=ctx.rounding)


RULES = (
    Rule("binary", QUANTIZE, (binary_chain, binary_operands, binary_arithmetic), build_binary,
         "q(act(add|multiply|subtract(dq a, dq b))) -> canonqnn.add | mul | sub",
         phase="elementwise_pool_movement"),
    Rule("squared_difference", QUANTIZE, (squared_difference_chain,),
         build_squared_difference,
         "q(act(square(subtract(dq a, dq b)))) -> canonqnn.squared_difference (q31_double)",
         phase="elementwise_pool_movement"),
)
