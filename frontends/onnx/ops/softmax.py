"""Softmax (float) and com.microsoft QLinearSoftmax (dequantize -> softmax -> quantize).

ONNX Softmax before opset 13 flattens the input to 2-D at ``axis`` ([prod(shape[:axis]),
prod(shape[axis:])]) and normalizes each row; from opset 13 it normalizes along ``axis`` alone.
The flattening is written as reshape -> softmax(axis 1) -> reshape, which the rewrites fold.
QLinearSoftmax takes the same two meanings from its ``opset`` attribute (the Softmax opset it
was fused from).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto

from canonqnn._tvm import relax

from ..._base import Attrs, Inputs
from .._context import ImportContext, Unsupported, Value, onnx_op
from .qoperator import dq, q
from .shape import reshape_to

FLATTENING_BEFORE = 13  # Softmax opsets 1 and 11 flatten to 2-D; 13 uses one axis


def softmax(ctx: ImportContext, x: Value, axis: int, *, flatten_2d: bool) -> Value:
    shape = ctx.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unsupported("softmax of a scalar (rank-0 input) is not supported")
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} is out of range for a rank-{rank} input")
    axis %= rank
    if not flatten_2d or axis == rank - 1:
        return Value(expr=ctx.emit(relax.op.nn.softmax(ctx.expr(x), axis=axis)))
    rows = reshape_to(ctx, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    y = ctx.emit(relax.op.nn.softmax(ctx.expr(rows), axis=1))
    return reshape_to(ctx, Value(expr=y), shape)


@onnx_op("Softmax")
def softmax_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    flatten = ctx.opset < FLATTENING_BEFORE
    axis = int(attrs.get("axis", 1 if flatten else -1))
    return [softmax(ctx, inputs[0], axis, flatten_2d=flatten)]


def _opset_semantics(ctx: ImportContext, x: Value, attrs: dict) -> tuple[int, bool]:
    """``(axis, flatten_2d)`` of a QLinearSoftmax node.

    onnxruntime refuses a node without ``opset``; such a node is accepted only where both
    meanings coincide: an explicit ``axis`` naming the last dimension.
    """
    if "opset" in attrs:
        flatten = int(attrs["opset"]) < FLATTENING_BEFORE
        return int(attrs.get("axis", 1 if flatten else -1)), flatten
    rank = len(ctx.shape(x))
    if "axis" in attrs and int(attrs["axis"]) % max(rank, 1) == rank - 1:
        return int(attrs["axis"]), False
    raise Unsupported("the opset attribute is missing (onnxruntime requires it), and without it "
                      "the axis is ambiguous: before opset 13 softmax flattens the input to 2-D "
                      "at axis, from 13 it uses that axis alone")


@onnx_op("QLinearSoftmax", quantized="consumes")
def qlinear_softmax(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                    attrs: Attrs) -> list[Value]:
    x, xs, xz, ys, yz = (inputs + [None] * 5)[:5]
    axis, flatten = _opset_semantics(ctx, x, attrs)
    xf = dq(ctx, x, xs, xz, what="X")
    if not xf.dequantized.per_tensor:
        raise Unsupported("X scale/zero point must be scalars (onnxruntime requires it)")
    if yz is not None and yz.dtype != x.dtype:
        raise Unsupported(f"Y zero point of type {yz.dtype} differs from X ({x.dtype})")
    if yz is None:  # the output type is the input type; the zero point defaults to 0
        yz = Value(const=np.zeros((), x.dtype), dtype=x.dtype)
    return [q(ctx, softmax(ctx, xf, axis, flatten_2d=flatten), ys, yz)]
