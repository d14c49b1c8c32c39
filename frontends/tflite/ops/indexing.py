"""TILE, PACK, UNPACK, GATHER_ND of quantized tensors: data movement on stored values.

TFLite's kernels copy stored integers; an output whose parameters differ from the input's gets
those integers read with its own parameters (``dq_stored``), as the interpreter computes it.
PACK is a reshape of each operand and a concat, UNPACK one slice and reshape per output, and
GATHER_ND with constant indices a ``take`` from the tensor flattened over the indexed axes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Inputs
from .._context import ImportContext, Unsupported, Value, constant, tflite_op
from ..reader import Operator, Tensor


def _moved(ctx, real, out, shape):
    """An intermediate of a movement chain, quantized with the output's parameters (exact:
    the values are already on its grid) and read back, so that each step is one rule's
    pattern."""
    return ctx.dq(ctx.quantized(ctx.emit(real), replace(out, shape=tuple(shape))))


def _axis(op, rank: int) -> int:
    return int(op.options.Axis()) % rank if op.options is not None else 0


@tflite_op("TILE")
def tile_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    x = ctx.as_nhwc(inputs[0])
    repeats = [int(r) for r in constant(inputs[1], "TILE multiples").reshape(-1)]
    if len(repeats) != len(x.shape) or min(repeats, default=1) < 1:
        raise Unsupported(f"multiples {repeats} for a rank-{len(x.shape)} input")
    y = ctx.emit(relax.op.tile(ctx.dq_stored(x, outputs[0]), repeats))
    return [ctx.quantized(y, outputs[0])]


@tflite_op("PACK")
def pack_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    out = outputs[0]
    axis = _axis(op, len(out.shape))
    parts = []
    for value in inputs:
        value = ctx.as_nhwc(value)
        shape = list(value.shape)
        shape.insert(axis, 1)
        parts.append(_moved(ctx, relax.op.reshape(ctx.dq_stored(value, out), shape), out, shape))
    return [ctx.quantized(ctx.emit(relax.op.concat(parts, axis=axis)), out)]


@tflite_op("UNPACK")
def unpack_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    x = ctx.as_nhwc(inputs[0])
    axis = _axis(op, len(x.shape))
    results = []
    for i, out in enumerate(outputs):
        shape = list(x.shape)
        shape[axis] = 1
        part = _moved(ctx, relax.op.strided_slice(ctx.dq_stored(x, out), [axis], [i], [i + 1]),
                      out, shape)
        results.append(ctx.quantized(ctx.emit(relax.op.reshape(part, out.shape)),
                                     out))
    return results


@tflite_op("GATHER_ND")
def gather_nd_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                 outputs: list[Tensor]) -> list[Value]:
    x, out = ctx.as_nhwc(inputs[0]), outputs[0]
    indices = constant(inputs[1], "GATHER_ND indices").astype(np.int64)
    depth = indices.shape[-1]
    if depth > len(x.shape):
        raise Unsupported(f"indices of depth {depth} into a rank-{len(x.shape)} tensor")
    indexed = x.shape[:depth]
    if indices.size and (indices.min() < 0 or (indices >= np.asarray(indexed)).any()):
        raise Unsupported(f"an index is outside the tensor's leading shape {list(indexed)}")
    flat_index = np.ravel_multi_index(tuple(np.moveaxis(indices, -1, 0)), indexed) \
        if depth else np.zeros(indices.shape[:-1], np.int64)
    flat_shape = [int(np.prod(indexed))] + list(x.shape[depth:])
    flat = _moved(ctx, relax.op.reshape(ctx.dq_stored(x, out), flat_shape), out, flat_shape)
    y = ctx.emit(relax.op.take(flat, _tvm.const(flat_index.astype(np.int64)),
                               axis=0))
    return [ctx.quantized(y, out)]
