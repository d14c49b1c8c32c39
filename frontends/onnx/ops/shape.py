"""Reshape, Flatten, Squeeze, Unsqueeze (all static reshapes), Transpose, Concat, Identity,
Shape and Size (constants: shapes are static)."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn._tvm import relax

from ..._base import Attrs, Inputs
from .._context import ImportContext, Unsupported, Value, onnx_op


def reshape_to(ctx: ImportContext, x: Value, shape) -> Value:
    shape = tuple(int(d) for d in shape)
    if x.const is not None:
        return Value(const=x.const.reshape(shape), dtype=x.dtype)
    return Value(expr=ctx.emit(relax.op.reshape(ctx.expr(x), shape)), dtype=x.dtype)


def _axes(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs,
          what: str) -> list[int] | None:
    if ctx.opset >= 13:
        return None if len(inputs) < 2 or inputs[1] is None else \
            ctx.constant(inputs[1], f"{what} axes").reshape(-1).tolist()
    return attrs.get("axes")


@onnx_op("Reshape", quantized="passthrough")
def reshape_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    in_shape = ctx.shape(x)
    target = ctx.constant(inputs[1], "Reshape shape").reshape(-1).tolist()
    if not attrs.get("allowzero", 0):
        target = [in_shape[i] if d == 0 else d for i, d in enumerate(target)]
    if target.count(-1) == 1:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = int(np.prod(in_shape)) // known
    if int(np.prod(target)) != int(np.prod(in_shape)):
        raise Unsupported(f"cannot reshape {list(in_shape)} to {target}")
    return [reshape_to(ctx, x, target)]


@onnx_op("Flatten", quantized="passthrough")
def flatten_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    shape = ctx.shape(inputs[0])
    axis = attrs.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis  # axis == rank is allowed: [prod, 1]
    return [reshape_to(ctx, inputs[0], (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))]


@onnx_op("Squeeze", quantized="passthrough")
def squeeze_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    shape = ctx.shape(inputs[0])
    axes = _axes(ctx, node, inputs, attrs, "Squeeze")
    axes = {a % len(shape) for a in axes} if axes else {i for i, d in enumerate(shape) if d == 1}
    if any(shape[a] != 1 for a in axes):
        raise Unsupported(f"cannot squeeze non-unit axes {sorted(axes)} of {list(shape)}")
    return [reshape_to(ctx, inputs[0], [d for i, d in enumerate(shape) if i not in axes])]


@onnx_op("Unsqueeze", quantized="passthrough")
def unsqueeze_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    shape = list(ctx.shape(inputs[0]))
    axes = _axes(ctx, node, inputs, attrs, "Unsqueeze") or []
    rank = len(shape) + len(axes)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return [reshape_to(ctx, inputs[0], shape)]


def transpose(ctx: ImportContext, x: Value, perm) -> Value:
    return Value(expr=ctx.emit(relax.op.permute_dims(ctx.expr(x), [int(p) for p in perm])),
                 dtype=x.dtype)


@onnx_op("Transpose", quantized="passthrough")
def transpose_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    rank = len(ctx.shape(inputs[0]))
    return [transpose(ctx, inputs[0], attrs.get("perm", list(range(rank))[::-1]))]


def concat(ctx: ImportContext, xs: list[Value], axis: int) -> Value:
    rank = len(ctx.shape(xs[0]))
    return Value(expr=ctx.emit(relax.op.concat([ctx.expr(x) for x in xs], axis=axis % rank)))


@onnx_op("Concat")
def concat_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [concat(ctx, inputs, attrs["axis"])]


@onnx_op("Identity", quantized="consumes")
def identity_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [inputs[0]]


@onnx_op("Shape", quantized="consumes")
def shape_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """The static shape as an int64 constant (canonqnn's shapes are static), so the shape
    subgraph that reads it folds at import."""
    shape = np.asarray(ctx.shape(inputs[0]), dtype=np.int64)
    rank = len(shape)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start, end = (min(max(d + rank if d < 0 else d, 0), rank) for d in (start, end))
    return [Value(const=shape[start:end], dtype="int64")]


@onnx_op("Size", quantized="consumes")
def size_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [Value(const=np.asarray(int(np.prod(ctx.shape(inputs[0]))), dtype=np.int64),
                  dtype="int64")]
