"""Data movement: RESHAPE, SQUEEZE, TRANSPOSE, CONCATENATION, PAD, PADV2, STRIDED_SLICE,
GATHER, SPLIT.

Each is ``quantize(op(dequantize(x)))`` with the output's parameters: exact data movement when
they equal the input's (the rewrites then drop the pair). Where they differ, RESHAPE, SQUEEZE,
TRANSPOSE, STRIDED_SLICE, SPLIT and GATHER copy the stored integers (the interpreter's kernels
do; its XNNPACK delegate refuses TRANSPOSE and STRIDED_SLICE then), read with the output's
parameters (``dq_stored``); CONCATENATION and PAD requantize.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Inputs
from .._context import (
    TO_NCHW,
    TO_NHWC,
    ImportContext,
    Unsupported,
    Value,
    constant,
    tensor_qparams,
    tflite_op,
)
from .._fold import slice_ranges
from ..reader import Operator, Tensor
from .activation import fused_activation
from .elementwise import same_layout

NHWC_TO_NCHW_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}


def _out(ctx, moved, out):
    """``moved`` (a Value with the input's parameters) as the operator's output tensor: its
    stored integers, which the interpreter copies whatever the output's parameters are."""
    if (moved.qparams is not None and out.quantized and moved.dtype == out.dtype
            and moved.qparams.same_as(tensor_qparams(out))):
        return moved
    return ctx.quantized(ctx.dq_stored(moved, out), out, nchw=moved.nchw)


@tflite_op("RESHAPE", "SQUEEZE")
def reshape_op(ctx: ImportContext, op: Operator, inputs: Inputs,
               outputs: list[Tensor]) -> list[Value]:
    x, shape = inputs[0], outputs[0].shape
    if math.prod(x.shape) != math.prod(shape):
        # (a dynamic output's shape is computed at import, ``_shapes``: a static one is
        # the model's word)
        raise Unsupported(f"the output's shape {list(shape)} does not hold the "
                          f"{math.prod(x.shape)} elements of the input's {list(x.shape)}")
    return [_out(ctx, ctx.reshape(x, shape), outputs[0])]


@tflite_op("TRANSPOSE")
def transpose_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                 outputs: list[Tensor]) -> list[Value]:
    x = inputs[0]
    perm = [int(p) % len(x.shape) for p in constant(inputs[1], "TRANSPOSE perm").reshape(-1)]
    axes = [TO_NHWC[p] for p in perm] if x.nchw else perm
    y = ctx.emit(relax.op.permute_dims(ctx.dq_stored(x, outputs[0]), axes))
    return [ctx.quantized(y, outputs[0])]


@tflite_op("CONCATENATION")
def concat_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    rank = len(outputs[0].shape)
    axis = int(op.options.Axis()) % rank
    values, nchw = same_layout(ctx, inputs, rank)
    if nchw:
        axis = NHWC_TO_NCHW_AXIS[axis]
    y = ctx.emit(relax.op.concat([ctx.dq(v) for v in values], axis=axis))
    y = fused_activation(ctx, y, op.options.FusedActivationFunction())
    return [ctx.quantized(y, outputs[0], nchw=nchw)]


@tflite_op("PAD", "PADV2")
def pad_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    x = inputs[0]
    widths = constant(inputs[1], "paddings").reshape(-1, 2).astype(np.int64)
    if widths.min() < 0:
        raise Unsupported("negative paddings")
    value = 0.0
    if op.kind == "PADV2" and len(inputs) > 2 and inputs[2] is not None:
        c = inputs[2]
        stored = constant(c, "pad value").reshape(-1)[0]
        if c.qparams is None:
            raise Unsupported("pad value of a quantized tensor is not quantized")
        qp = c.qparams
        value = float(np.float32(qp.scalar_scale) *
                      np.float32(int(stored) - (128 if c.dtype == "uint8" else 0) - qp.scalar_zp))
    if x.nchw:
        widths = widths[list(TO_NCHW)]
    y = ctx.emit(relax.op.nn.pad(ctx.dq(x), [int(w) for w in widths.reshape(-1)], "constant",
                                 value))
    return [ctx.quantized(y, outputs[0], nchw=x.nchw)]


def _slice(ctx, x, axes, begin, end, strides, out):
    y = ctx.emit(relax.op.strided_slice(ctx.dq_stored(x, out), axes, begin, end, strides))
    return ctx.quantized(y, out, nchw=x.nchw)


@tflite_op("STRIDED_SLICE")
def strided_slice_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                     outputs: list[Tensor]) -> list[Value]:
    x = inputs[0]
    o = op.options
    begin, end, strides = (constant(v, what).reshape(-1).astype(np.int64) for v, what in
                           zip(inputs[1:4], ("begin", "end", "strides")))
    if o.ShrinkAxisMask():
        x = ctx.as_nhwc(x)
    ranges, shrink = slice_ranges(o, x.shape, begin, end, strides)
    axes, b_out, e_out, s_out = [], [], [], []
    sliced_shape = list(x.shape)
    for i, ((start, stop, step), dim) in enumerate(zip(ranges, x.shape)):
        if len(range(start, stop, step)) == 0:
            raise Unsupported(f"slice selects no elements along axis {i}")
        sliced_shape[i] = len(range(start, stop, step))
        if (start, stop, step) == (0, dim, 1):
            continue
        axes.append(NHWC_TO_NCHW_AXIS[i] if x.nchw else i)
        b_out.append(start), s_out.append(step)
        e_out.append(stop if stop >= 0 else -(dim + 1))
    if not axes:
        return [_out(ctx, ctx.reshape(x, outputs[0].shape), outputs[0])]
    if not shrink:
        return [_slice(ctx, x, axes, b_out, e_out, s_out, outputs[0])]
    full = _slice(ctx, x, axes, b_out, e_out, s_out,
                  replace(outputs[0], shape=tuple(sliced_shape)))
    return [ctx.reshape(full, outputs[0].shape)]


@tflite_op("GATHER")
def gather_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    x, indices = ctx.as_nhwc(inputs[0]), inputs[1]
    axis = int(op.options.Axis()) % len(x.shape) if op.options is not None else 0
    if op.options is not None and op.options.BatchDims():
        raise Unsupported("batch_dims other than 0")
    if indices.const is not None:
        values = indices.const.astype(np.int64)
        if values.size and (values.min() < 0 or values.max() >= x.shape[axis]):
            raise Unsupported(f"index out of range [0, {x.shape[axis]}) along axis {axis}")
        index_expr = _tvm.const(values, "int64")
    elif indices.dtype in ("int32", "int64"):
        index_expr = ctx.expr(indices)
    else:
        raise Unsupported(f"indices of type {indices.dtype}")
    # the interpreter copies the stored integers, whatever the output's parameters are
    y = ctx.emit(relax.op.take(ctx.dq_stored(x, outputs[0]), index_expr, axis=axis, mode="wrap"))
    return [ctx.quantized(y, outputs[0])]


@tflite_op("SPLIT")
def split_op(ctx: ImportContext, op: Operator, inputs: Inputs,
             outputs: list[Tensor]) -> list[Value]:
    x = inputs[1]
    axis = int(constant(inputs[0], "SPLIT axis").reshape(-1)[0]) % len(x.shape)
    size = x.shape[axis] // len(outputs)
    if size * len(outputs) != x.shape[axis]:
        raise Unsupported(f"{x.shape[axis]} elements do not split into {len(outputs)} parts")
    relax_axis = NHWC_TO_NCHW_AXIS[axis] if x.nchw else axis
    return [_slice(ctx, x, [relax_axis], [i * size], [(i + 1) * size], [1], out)
            for i, out in enumerate(outputs)]
