"""ADD, SUB, MUL (numpy broadcasting, fused activation)."""

from __future__ import annotations

from canonqnn._tvm import relax

from .._context import ImportContext, Value, tflite_op
from .activation import fused_activation

BINARY = {"ADD": relax.op.add, "SUB": relax.op.subtract, "MUL": relax.op.multiply}


def same_layout(ctx: ImportContext, values: list[Value], out_rank: int) -> tuple[list[Value], bool]:
    """Operands of a broadcasting op in one layout: NCHW when the result is 4-D and an operand
    is already held NCHW, else the model's own."""
    if out_rank == 4 and any(v.nchw for v in values):
        return [ctx.as_rank4_nchw(v) for v in values], True
    return [ctx.as_nhwc(v) for v in values], False


@tflite_op(*BINARY)
def binary_op(ctx, op, inputs, outputs):
    (a, b), nchw = same_layout(ctx, inputs[:2], len(outputs[0].shape))
    y = ctx.emit(BINARY[op.kind](ctx.dq(a), ctx.dq(b)))
    fused = op.options.FusedActivationFunction() if op.options is not None else 0
    return [ctx.quantized(fused_activation(ctx, y, fused), outputs[0], nchw=nchw)]
