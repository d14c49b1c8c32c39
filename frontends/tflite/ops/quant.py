"""QUANTIZE and DEQUANTIZE: requantization inside the graph, conversions at its edges."""

from __future__ import annotations

from canonqnn import qdq

from ..._base import Inputs
from .._context import (
    QUANTIZED_DTYPES,
    ImportContext,
    Unsupported,
    Value,
    tensor_qparams,
    tflite_op,
)
from ..reader import Operator, Tensor


@tflite_op("QUANTIZE")
def quantize_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                outputs: list[Tensor]) -> list[Value]:
    x, out = inputs[0], outputs[0]
    if x.quantized:
        return [ctx.quantized(ctx.dq(x), out, nchw=x.nchw)]
    if x.dtype != "float32":
        raise Unsupported(f"QUANTIZE of a {x.dtype} tensor")
    qp = tensor_qparams(out)
    if qp is None or out.dtype not in QUANTIZED_DTYPES or not qp.per_tensor:
        raise Unsupported(f"QUANTIZE to {out.dtype} (int8, uint8 or int16 per tensor "
                          "required)")
    expr = ctx.emit(qdq.quantize(ctx.expr(x), qp, source_dtype=qdq.source_dtype(out.dtype)))
    return [Value(dtype=out.dtype, shape=out.shape, expr=expr, qparams=qp, nchw=x.nchw)]


@tflite_op("DEQUANTIZE")
def dequantize_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                  outputs: list[Tensor]) -> list[Value]:
    x = inputs[0]
    if not x.quantized or x.dtype not in QUANTIZED_DTYPES:
        raise Unsupported(f"DEQUANTIZE of a {x.dtype} tensor (float16 weights are not "
                          "supported)")
    step = x.qparams.scalar_scale if x.qparams.per_tensor else None
    # back in NHWC while still integer: the layout change is then a canonical transpose,
    # not a float permutation after the dequantize
    x = ctx.as_nhwc(x)
    return [Value(dtype="float32", shape=x.shape, expr=ctx.dq(x), nchw=x.nchw, step=step)]
