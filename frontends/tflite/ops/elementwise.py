"""ADD, SUB, MUL (numpy broadcasting, fused activation) and SQUARED_DIFFERENCE.

SQUARED_DIFFERENCE is written ``square(subtract(dq a, dq b))``, the form the
``squared_difference`` rule folds into TFLite's own int8 kernel (rewrites/elementwise.py).
"""

from __future__ import annotations

import math

from canonqnn._tvm import relax

from ..._base import Inputs
from .._context import ImportContext, Unsupported, Value, tensor_qparams, tflite_op
from ..reader import Operator, Tensor
from .activation import fused_activation

BINARY = {"ADD": relax.op.add, "SUB": relax.op.subtract, "MUL": relax.op.multiply}


def same_layout(ctx: ImportContext, values: list[Value], out_rank: int) -> tuple[list[Value], bool]:
    """Operands of a broadcasting op in one layout: NCHW when the result is 4-D and an operand
    is already held NCHW, else the model's own."""
    if out_rank == 4 and any(v.nchw for v in values):
        return [ctx.as_rank4_nchw(v) for v in values], True
    return [ctx.as_nhwc(v) for v in values], False


def _log2_is_whole(scale: float) -> bool:
    """TFLite's ``CheckedLog2``: log2 of the scale within 1e-3 of an integer."""
    log2 = math.log(scale) / math.log(2.0)
    return abs(log2 - round(log2)) < 1e-3


def _power_of_two_int16_kernel(op, inputs, out) -> bool:
    """Whether TFLite runs an int16 ADD / SUB with its power-of-two kernel (other arithmetic
    than the general one, which canonqnn.add reproduces): ``pot_scale_int16`` (true unless the
    model says false) and every scale a power of two."""
    if op.kind not in ("ADD", "SUB") or out.dtype != "int16":
        return False
    pot = op.options.PotScaleInt16() if op.options is not None else True
    scales = [v.qparams.scalar_scale for v in inputs[:2] if v.qparams is not None]
    qp = tensor_qparams(out)
    return bool(pot) and qp is not None and len(scales) == 2 and all(
        _log2_is_whole(s) for s in (*scales, qp.scalar_scale))


@tflite_op(*BINARY)
def binary_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    if _power_of_two_int16_kernel(op, inputs, outputs[0]):
        raise Unsupported(f"int16 {op.kind} with power-of-two scales and pot_scale_int16: "
                          "TFLite's power-of-two kernel is not reproduced (the converter writes "
                          "pot_scale_int16 false for 16x8 models)")
    (a, b), nchw = same_layout(ctx, inputs[:2], len(outputs[0].shape))
    y = ctx.emit(BINARY[op.kind](ctx.dq(a), ctx.dq(b)))
    fused = op.options.FusedActivationFunction() if op.options is not None else 0
    return [ctx.quantized(fused_activation(ctx, y, fused), outputs[0], nchw=nchw)]


@tflite_op("SQUARED_DIFFERENCE")
def squared_difference_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                          outputs: list[Tensor]) -> list[Value]:
    if outputs[0].dtype == "uint8":
        raise Unsupported("SQUARED_DIFFERENCE on uint8: TFLite's kernel computes float32, int32 "
                          "and int8 only (the interpreter refuses this model)")
    (a, b), nchw = same_layout(ctx, inputs[:2], len(outputs[0].shape))
    difference = ctx.emit(relax.op.subtract(ctx.dq(a), ctx.dq(b)))
    return [ctx.quantized(ctx.emit(relax.op.square(difference)), outputs[0], nchw=nchw)]
