"""Fold quantized binary ops.

    q(relu|clip(add(dq(a), dq(b))))       -> canonqnn.add
    q(relu|clip(multiply(dq(a), dq(b))))  -> canonqnn.mul
    q(relu|clip(subtract(dq(a), dq(b))))  -> canonqnn.sub
"""

from __future__ import annotations

from typing import Any

from canonqnn.ops import elementwise as ew
from canonqnn.qdq import QUANTIZE

from ._engine import Context, Decline, Rule
from ._match import dequantized, output, per_tensor_int8, strip_activation

BINARY = {"relax.add": ew.ADD, "relax.multiply": ew.MUL, "relax.subtract": ew.SUB}


def fold_binary(ctx: Context, call: Any):
    out = output(call)
    if out is None or out.qparams.dtype != "int8":
        return None
    y, act = strip_activation(ctx, out.operand)
    op = ctx.value(y)
    canonical = BINARY.get(getattr(getattr(op, "op", None), "name", None))
    if canonical is None:
        return None
    if not ctx.single_use(y):
        return Decline("the float result has other users", y)
    a, b = dequantized(ctx, op.args[0]), dequantized(ctx, op.args[1])
    if a is None or b is None:
        return Decline("an operand is not dequantized from int8", y)
    for parsed, what in ((a, "A"), (b, "B")):
        if (why := per_tensor_int8(parsed, what, y)) is not None:
            return why
    bounds = act.bounds(out.qparams)
    if canonical is ew.SUB:
        return ew.sub(a.operand, b.operand, a.qparams, b.qparams, out.qparams, act=bounds)
    return ew.binary(canonical, a.operand, b.operand, a.qparams, b.qparams, out.qparams,
                     act=bounds, source_dtype=ctx.source_dtype())


RULES = (
    Rule("binary", QUANTIZE, fold_binary,
         "q(act(add|multiply|subtract(dq a, dq b))) -> canonqnn.add | mul | sub"),
)
