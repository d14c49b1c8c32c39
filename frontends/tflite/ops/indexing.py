"""TILE, PACK, UNPACK, GATHER_ND of quantized tensors: data movement on stored values.

TFLite's kernels copy stored integers; an output whose parameters differ from the input's gets
those integers read with its own parameters (``dq_stored``), as the interpreter computes it.
PACK is a reshape of each operand and a concat, UNPACK one slice and reshape per output, and
GATHER_ND a ``take`` from the tensor flattened over the indexed axes (its indices constant, or
computed at run time).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

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
    """A ``take`` along axis 0 of the tensor flattened over the indexed axes, at the flat index
    of each index tuple: computed here from constant indices, as int32/int64 Relax arithmetic
    from run-time ones (MoveNet's, from an ARG_MAX)."""
    x, indices, out = ctx.as_nhwc(inputs[0]), inputs[1], outputs[0]
    depth = indices.shape[-1] if indices.shape else 0
    if not indices.shape or depth > len(x.shape):
        raise Unsupported(f"indices of shape {list(indices.shape)} into a rank-{len(x.shape)} "
                          "tensor (the last dimension indexes its leading axes)")
    indexed = tuple(x.shape[:depth])
    if indices.const is not None or depth == 0:
        flat_index = _tvm.const(_constant_flat_index(indices, indexed).astype(np.int64))
    else:
        flat_index = _flat_index(ctx, indices, indexed)
    flat_shape = [int(np.prod(indexed))] + list(x.shape[depth:])
    flat = _moved(ctx, relax.op.reshape(ctx.dq_stored(x, out), flat_shape), out, flat_shape)
    # (the flat index is in range: "wrap" is canonqnn.gather's mode, a no-op here)
    y = ctx.emit(relax.op.take(flat, flat_index, axis=0, mode="wrap"))
    return [ctx.quantized(y, out)]


def _constant_flat_index(indices: Value, indexed: tuple[int, ...]) -> np.ndarray:
    values = constant(indices, "GATHER_ND indices").astype(np.int64)
    if not indexed:
        return np.zeros(values.shape[:-1], np.int64)
    if values.size and (values.min() < 0 or (values >= np.asarray(indexed)).any()):
        raise Unsupported(f"an index is outside the tensor's leading shape {list(indexed)}")
    return np.asarray(np.ravel_multi_index(tuple(np.moveaxis(values, -1, 0)), indexed))


def _flat_index(ctx: ImportContext, indices: Value, indexed: tuple[int, ...]) -> Any:
    """The flat index of each run-time index tuple: sum(clamp(i_k) * stride_k). TFLite fails
    the invocation on an index outside its axis; the module clamps each into its axis
    instead, so that no index reads outside the tensor (docs/fq-form.md)."""
    if indices.dtype not in ("int16", "int32", "int64"):
        raise Unsupported(f"indices of type {indices.dtype} (int16, int32 or int64)")
    dtype = "int64" if indices.dtype == "int64" else "int32"
    index = ctx.expr(indices)
    if indices.dtype != dtype:
        index = ctx.emit(relax.op.astype(index, dtype))
    strides = np.cumprod((indexed[1:] + (1,))[::-1])[::-1]
    if int(np.prod(indexed)) > np.iinfo(dtype).max:
        raise Unsupported(f"{int(np.prod(indexed))} indexed rows exceed {dtype} indices")
    clamped = ctx.emit(relax.op.minimum(
        ctx.emit(relax.op.maximum(index, _tvm.const(np.zeros(len(indexed), dtype)))),
        _tvm.const(np.asarray(indexed, dtype) - 1)))
    scaled = ctx.emit(relax.op.multiply(clamped, _tvm.const(strides.astype(dtype))))
    return ctx.emit(relax.op.sum(scaled, axis=[-1]))
