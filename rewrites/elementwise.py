"""Fold quantized binary ops.

    q(relu|clip(add(dq(a), dq(b))))       -> canonqnn.add
    q(relu|clip(multiply(dq(a), dq(b))))  -> canonqnn.mul
    q(relu|clip(subtract(dq(a), dq(b))))  -> canonqnn.sub
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn.ops import elementwise as ew
from canonqnn.qdq import QUANTIZE

from ._engine import Context, Decline, Rule
from ._match import dequantized, per_tensor_int8, quantized_op

BINARY = {"relax.add": ew.ADD, "relax.multiply": ew.MUL, "relax.subtract": ew.SUB}


def fold_binary(ctx: Context, call: Any):
    m = quantized_op(ctx, call, *BINARY)
    if not isinstance(m, tuple):
        return m
    out, act, op, y = m
    canonical = BINARY[_tvm.op_name(op)]
    a, b = dequantized(ctx, op.args[0]), dequantized(ctx, op.args[1])
    if a is None or b is None:
        return Decline("an operand is not dequantized from int8", y)
    for parsed, what in ((a, "A"), (b, "B")):
        if (why := per_tensor_int8(parsed, what, y)) is not None:
            return why
    bounds = act.bounds(out.qparams)
    # The profile's add / mul arithmetic must be one canonqnn.add / mul implements (sub is
    # TFLite's alone).
    if canonical is ew.ADD:
        ctx.numerics.require("add", ("f32_fma", "q31"), "its quantized add")
    elif canonical is ew.MUL:
        ctx.numerics.require("mul", ("f32", "q31"), "its quantized mul")
    if canonical is ew.SUB:
        return ew.sub(a.operand, b.operand, a.qparams, b.qparams, out.qparams, act=bounds,
                      rounding=ctx.rounding)
    return ew.binary(canonical, a.operand, b.operand, a.qparams, b.qparams, out.qparams,
                     act=bounds, source_dtype=ctx.source_dtype(), rounding=ctx.rounding)


RULES = (
    Rule("binary", QUANTIZE, fold_binary,
         "q(act(add|multiply|subtract(dq a, dq b))) -> canonqnn.add | mul | sub"),
)
