"""MAXIMUM, MINIMUM, REDUCE_MAX, REDUCE_MIN, ARG_MAX of quantized tensors.

TFLite's int8 kernels compare stored integers and never rescale: an output with other
parameters than the inputs gets their stored values (``dq_stored``), as the interpreter does.
Dequantization being increasing, the rules fold these into canonqnn.maximum / minimum /
reduce_max / reduce_min / argmax.
"""

from __future__ import annotations

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Inputs
from .._context import ImportContext, Unsupported, Value, constant, tflite_op
from ..reader import Operator, Tensor
from .elementwise import same_layout

EXTREMA = {"MAXIMUM": relax.op.maximum, "MINIMUM": relax.op.minimum}
REDUCTIONS = {"REDUCE_MAX": relax.op.max, "REDUCE_MIN": relax.op.min}


@tflite_op(*EXTREMA)
def extremum_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                outputs: list[Tensor]) -> list[Value]:
    (a, b), nchw = same_layout(ctx, inputs[:2], len(outputs[0].shape))
    y = ctx.emit(EXTREMA[op.kind](ctx.dq_stored(a, outputs[0]), ctx.dq_stored(b, outputs[0])))
    return [ctx.quantized(y, outputs[0], nchw=nchw)]


def _axes(value: Value | None, rank: int, what: str) -> list[int]:
    return sorted({int(a) % rank for a in constant(value, what).reshape(-1)})


@tflite_op(*REDUCTIONS)
def reduce_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    x = ctx.as_nhwc(inputs[0])
    axes = _axes(inputs[1], len(x.shape), f"{op.kind} axes")
    keepdims = bool(op.options.KeepDims()) if op.options is not None else False
    y = ctx.emit(REDUCTIONS[op.kind](ctx.dq_stored(x, outputs[0]), axes, keepdims))
    return [ctx.quantized(y, outputs[0])]


@tflite_op("ARG_MAX")
def argmax_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    """The first index of the largest value (the interpreter keeps the first of equal ones)."""
    x = ctx.as_nhwc(inputs[0])
    (axis,) = _axes(inputs[1], len(x.shape), "ARG_MAX axis")
    out = outputs[0]
    if out.dtype not in ("int32", "int64"):
        raise Unsupported(f"ARG_MAX output of type {out.dtype}")
    index = ctx.emit(relax.op.argmax(ctx.dq(x), axis, False))
    if out.dtype == "int32":
        index = ctx.emit(relax.op.astype(index, "int32"))
    if _tvm.shape_of(index) != tuple(out.shape):
        raise Unsupported(f"computed shape {list(_tvm.shape_of(index))} differs from the "
                          f"model's output shape {list(out.shape)}")
    return [Value(dtype=out.dtype, shape=tuple(out.shape), expr=index)]

