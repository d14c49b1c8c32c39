"""Indexing, selection and max/min reductions as float Relax ops.

Gather, GatherND, Slice, Split, Tile, Expand, DepthToSpace, SpaceToDepth, ReduceMax and
ReduceMin move or pick values without arithmetic, so they are exact on quantized tensors
(``quantized="passthrough"``: QOperator models apply them to uint8/int8 data directly). Pad,
Max, Min and Where take quantized operands themselves: Pad's pad value is a stored integer
(0 by default), Max/Min/Where operands must share their parameters; ArgMax's result is an
index, so a quantized input is just dequantized. Slices are emitted with begin/end normalized
so that Relax's strided_slice (which wraps a negative end) selects what ONNX specifies; Split
becomes one slice per output; DepthToSpace/SpaceToDepth become reshape -> permute_dims ->
reshape (Relax has no such op; the rules recognize the chain)."""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto

from canonqnn import _tvm
from canonqnn._tvm import relax
from canonqnn.qparams import QParams

from ..._base import Attrs, Inputs
from .. import _generic
from .._context import ImportContext, Unsupported, Value, onnx_op
from . import shape as shape_ops
from .qoperator import dq, q
from .quant import dequantize_value, quantize_value


def _rank(ctx: ImportContext, x: Value) -> int:
    return len(ctx.shape(x))


def _like(ctx: ImportContext, x: Value, expr) -> Value:
    """A value computed from ``x`` that keeps its ONNX dtype (int64 shape tensors, ...)."""
    return Value(expr=ctx.emit(expr), dtype=x.dtype)


def _ints(ctx: ImportContext, value: Value | None, what: str) -> list[int] | None:
    if value is None:
        return None
    return [int(v) for v in ctx.constant(value, what).reshape(-1)]


# ---------------------------------------------------------------- Pad
RELAX_PAD_MODE = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
                  "wrap": "circular"}


def _constant_value(ctx: ImportContext, value: Value | None) -> np.ndarray | None:
    if value is None:
        return None
    c = ctx.constant(value, "Pad constant_value").reshape(-1)
    if c.size != 1:
        raise Unsupported(f"constant_value of {c.size} elements (one scalar expected)")
    return c


def _stored_pad_value(x: Value, c: np.ndarray | None) -> float:
    """The real value of the stored integer a quantized tensor is padded with (ONNX pads the
    integers; the default is the integer 0, not the real 0): dequantized with the tensor's
    parameters, it quantizes back to the same integer."""
    qp = x.qparams
    if not qp.per_tensor:
        raise Unsupported("Pad of a tensor quantized per channel")
    stored = 0 if c is None else int(c[0])
    if x.dtype == "uint8":
        stored -= 128
    return float(np.float32(np.float32(stored - qp.scalar_zp) * np.float32(qp.scalar_scale)))


def _pad_widths(ctx: ImportContext, inputs, attrs: dict, rank: int) -> list[int]:
    """ONNX ``pads`` ([begin_0, ..., begin_n, end_0, ..., end_n]) over all axes."""
    if ctx.opset < 11:
        pads = list(attrs.get("pads", []))
        axes = list(range(rank))
    else:
        pads = _ints(ctx, inputs[1], "Pad pads")
        axes = _ints(ctx, inputs[3] if len(inputs) > 3 else None, "Pad axes")
        axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    if len(pads) != 2 * len(axes):
        raise Unsupported(f"{len(pads)} pads for {len(axes)} axes")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    return full


def _crop(ctx: ImportContext, x: Value, begin: list[int], end: list[int]) -> Value:
    """Negative pads remove elements: a slice."""
    shape = ctx.shape(x)
    axes = [i for i in range(len(shape)) if begin[i] or end[i]]
    return slice_value(ctx, x, axes, [begin[i] for i in axes],
                       [shape[i] - end[i] for i in axes], [1] * len(axes))


@onnx_op("Pad", quantized="consumes")
def pad_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """A quantized tensor (QOperator models) is dequantized, padded with the real value of the
    stored pad integer and quantized back with its own parameters: exact."""
    x = inputs[0]
    if ctx.opset < 11:  # (Pad-2 takes float tensors only)
        return [padded(ctx, x, attrs, _pad_widths(ctx, inputs, attrs, _rank(ctx, x)),
                          float(attrs.get("value", 0.0)))]
    c = _constant_value(ctx, inputs[2] if len(inputs) > 2 else None)
    widths = _pad_widths(ctx, inputs, attrs, _rank(ctx, x))
    if x.qparams is None:
        value = 0.0 if c is None else float(np.float32(c[0]) if c.dtype.kind == "f" else c[0])
        return [padded(ctx, x, attrs, widths, value)]
    real = dequantize_value(ctx, x, x.qparams)
    result = padded(ctx, real, attrs, widths, _stored_pad_value(x, c))
    return [quantize_value(ctx, result, x.qparams, x.dtype)]


def padded(ctx: ImportContext, x: Value, attrs: dict, widths: list[int], value: float) -> Value:
    """ONNX Pad of ``x`` by ``widths`` (begins then ends, every axis) with ``value``."""
    shape = ctx.shape(x)
    rank = len(shape)
    mode = attrs.get("mode", "constant")
    if mode not in RELAX_PAD_MODE:
        raise Unsupported(f"pad mode {mode!r} is not supported")
    before, after = widths[:rank], widths[rank:]
    if any(p < 0 for p in widths):
        x = _crop(ctx, x, [max(-p, 0) for p in before], [max(-p, 0) for p in after])
        before, after = [max(p, 0) for p in before], [max(p, 0) for p in after]
        shape = ctx.shape(x)
    if not any(before) and not any(after):
        return x
    limit = {"reflect": 1, "wrap": 0}.get(mode)
    if limit is not None and any(max(b, e) > d - limit for b, e, d in zip(before, after, shape)):
        raise Unsupported(f"{mode} padding by more than the axis length"
                          f"{' minus one' if limit else ''} ({widths} for shape {list(shape)})")
    if x.const is not None and mode == "constant":
        return Value(const=np.pad(x.const, list(zip(before, after)), constant_values=value),
                     dtype=x.dtype)
    interleaved = [w for pair in zip(before, after) for w in pair]
    return _like(ctx, x, relax.op.nn.pad(ctx.expr(x), interleaved, RELAX_PAD_MODE[mode], value))


# ---------------------------------------------------------------- Gather
@onnx_op("Gather", quantized="passthrough")
def gather_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x, indices = inputs[:2]
    shape = ctx.shape(x)
    axis = int(attrs.get("axis", 0)) % len(shape)
    n = shape[axis]
    if indices.const is not None:
        values = indices.const.astype(np.int64)
        if values.size and (values.min() < -n or values.max() >= n):
            raise Unsupported(f"Gather index out of range [-{n}, {n}) along axis {axis}")
        if x.const is not None:
            return [Value(const=np.take(x.const, values, axis=axis), dtype=x.dtype)]
        index_expr = _tvm.const(values, "int64")
    elif indices.dtype in ("int32", "int64"):
        index_expr = ctx.expr(indices)
    else:
        raise Unsupported(f"Gather indices of type {indices.dtype}")
    # "wrap": negative indices count from the end, as in ONNX (the rules normalize constants).
    return [_like(ctx, x, relax.op.take(ctx.expr(x), index_expr, axis=axis, mode="wrap"))]


# ---------------------------------------------------------------- GatherND
@onnx_op("GatherND", quantized="passthrough")
def gather_nd_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                 attrs: Attrs) -> list[Value]:
    """A ``take`` along axis 0 of ``x`` reshaped to [prod(indexed axes), rest...], at the flat
    index of each index tuple (computed here from constant indices, by int64 Relax arithmetic
    from run-time ones). The reshape of a dequantized tensor is quantized back (exact: the
    values stay on its grid), so that the reshape and the take are each a rule's pattern."""
    x, indices = inputs[:2]
    if int(attrs.get("batch_dims", 0)) != 0:  # (TVM's converter: a float island)
        return _generic.float_op(ctx, node, inputs)
    shape, index_shape = ctx.shape(x), ctx.shape(indices)
    depth = index_shape[-1] if index_shape else 0
    if not index_shape or depth > len(shape):
        raise Unsupported(f"GatherND indices of shape {list(index_shape)} into a "
                          f"rank-{len(shape)} tensor")
    indexed = tuple(shape[:depth])
    if indices.const is not None or depth == 0:
        flat_index = _tvm.const(_constant_flat_index(ctx, indices, indexed))
    elif indices.dtype == "int64":
        flat_index = _flat_index(ctx, ctx.expr(indices), indexed)
    else:
        raise Unsupported(f"GatherND indices of type {indices.dtype}")
    flat_shape = [math.prod(indexed), *shape[depth:]]
    flat = ctx.emit(relax.op.reshape(ctx.expr(x), flat_shape))
    qp = x.dequantized
    if qp is not None and qp.per_tensor:
        flat = ctx.expr(dequantize_value(ctx, quantize_value(ctx, Value(expr=flat), qp, qp.dtype),
                                         qp))
    return [_like(ctx, x, relax.op.take(flat, flat_index, axis=0, mode="wrap"))]


def _constant_flat_index(ctx: ImportContext, indices: Value,
                         indexed: tuple[int, ...]) -> np.ndarray:
    values = ctx.constant(indices, "GatherND indices").astype(np.int64)
    if not indexed:
        return np.zeros(values.shape[:-1], np.int64)
    dims = np.asarray(indexed)
    if values.size and ((values < -dims).any() or (values >= dims).any()):
        raise Unsupported(f"a GatherND index is outside the leading shape {list(indexed)}")
    values = np.where(values < 0, values + dims, values)
    return np.asarray(np.ravel_multi_index(tuple(np.moveaxis(values, -1, 0)), indexed),
                      np.int64)


def _flat_index(ctx: ImportContext, index, indexed: tuple[int, ...]):
    """sum(clamp(i_k) * stride_k), a negative i_k counting from the end: onnxruntime fails
    on an index outside [-n, n); the module clamps it into its axis instead, so that no index
    reads outside the tensor (docs/fq-form.md)."""
    dims = _tvm.const(np.asarray(indexed, np.int64))
    wrapped = ctx.emit(relax.op.where(ctx.emit(relax.op.less(index, _tvm.const(0, "int64"))),
                                      ctx.emit(relax.op.add(index, dims)), index))
    clamped = ctx.emit(relax.op.minimum(
        ctx.emit(relax.op.maximum(wrapped, _tvm.const(np.zeros(len(indexed), np.int64)))),
        _tvm.const(np.asarray(indexed, np.int64) - 1)))
    strides = np.cumprod((indexed[1:] + (1,))[::-1])[::-1].astype(np.int64)
    return ctx.emit(relax.op.sum(ctx.emit(relax.op.multiply(clamped, _tvm.const(strides))),
                                 axis=[-1]))


# ---------------------------------------------------------------- Slice / Split
def onnx_slice_range(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """``(first index, element count)`` that ONNX Slice selects along an axis of length
    ``dim`` (starts/ends clamped as the operator specifies; negative values count from the
    end)."""
    if step == 0:
        raise Unsupported("Slice step 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, max(0, math.ceil((end - start) / step))


def slice_value(ctx: ImportContext, x: Value, axes, starts, ends, steps) -> Value:
    """ONNX Slice of ``x`` (constant values sliced here)."""
    shape = ctx.shape(x)
    index = [slice(None)] * len(shape)
    r_axes, r_begin, r_end, r_steps = [], [], [], []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = axis % len(shape)
        first, count = onnx_slice_range(shape[axis], start, end, step)
        if count == 0:
            raise Unsupported(f"Slice selects no elements along axis {axis} (empty tensors are "
                              "not supported)")
        if (first, count, step) == (0, shape[axis], 1):
            continue
        stop = first + count * step
        # Relax wraps a negative end; -(dim + 1) wraps to -1, "before the first element".
        r_axes.append(axis), r_begin.append(first), r_steps.append(step)
        r_end.append(stop if stop >= 0 else -(shape[axis] + 1))
        index[axis] = slice(first, stop if stop >= 0 else None, step)
    if not r_axes:
        return x
    if x.const is not None:
        return Value(const=x.const[tuple(index)].copy(), dtype=x.dtype)
    return _like(ctx, x, relax.op.strided_slice(ctx.expr(x), r_axes, r_begin, r_end, r_steps))


@onnx_op("Slice", quantized="passthrough")
def slice_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    rank = _rank(ctx, x)
    # (opset 10 moved starts/ends/axes from attributes to inputs; the importer starts at 10)
    starts = _ints(ctx, inputs[1], "Slice starts")
    ends = _ints(ctx, inputs[2], "Slice ends")
    axes = _ints(ctx, inputs[3] if len(inputs) > 3 else None, "Slice axes")
    steps = _ints(ctx, inputs[4] if len(inputs) > 4 else None, "Slice steps")
    axes = list(range(len(starts))) if axes is None else [a % rank for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Unsupported("Slice starts, ends, axes and steps differ in length")
    return [slice_value(ctx, x, axes, starts, ends, steps)]


def _split_sizes(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs,
                 dim: int) -> list[int]:
    split = (attrs.get("split") if ctx.opset < 13 else
             _ints(ctx, inputs[1] if len(inputs) > 1 else None, "Split split"))
    outputs = len(node.output)
    if split is not None:
        if sum(split) != dim or len(split) != outputs:
            raise Unsupported(f"split {list(split)} does not cover {dim} elements in {outputs} "
                              "outputs")
        return [int(s) for s in split]
    if "num_outputs" in attrs:  # opset 18: the last chunk may be smaller
        chunk = math.ceil(dim / int(attrs["num_outputs"]))
        sizes = [min(chunk, dim - i * chunk) for i in range(int(attrs["num_outputs"]))]
    else:
        if dim % outputs:
            raise Unsupported(f"cannot split {dim} elements into {outputs} equal parts")
        sizes = [dim // outputs] * outputs
    if len(sizes) != outputs:
        raise Unsupported(f"num_outputs {attrs['num_outputs']} for {outputs} outputs")
    return sizes


@onnx_op("Split", quantized="passthrough")
def split_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    shape = ctx.shape(x)
    axis = int(attrs.get("axis", 0)) % len(shape)
    sizes = _split_sizes(ctx, node, inputs, attrs, shape[axis])
    if any(s <= 0 for s in sizes):
        raise Unsupported(f"split sizes {sizes}: empty outputs are not supported")
    outs, offset = [], 0
    for size in sizes:
        outs.append(slice_value(ctx, x, [axis], [offset], [offset + size], [1]))
        offset += size
    return outs


# ---------------------------------------------------------------- Tile / Expand
@onnx_op("Tile", quantized="passthrough")
def tile_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    repeats = _ints(ctx, inputs[1], "Tile repeats")
    if len(repeats) != _rank(ctx, x) or any(r < 1 for r in repeats):
        raise Unsupported(f"repeats {repeats} for a rank-{_rank(ctx, x)} input (one count >= 1 "
                          "per axis)")
    if all(r == 1 for r in repeats):
        return [x]
    if x.const is not None:
        return [Value(const=np.tile(x.const, repeats), dtype=x.dtype)]
    return [_like(ctx, x, relax.op.tile(ctx.expr(x), repeats))]


@onnx_op("Expand", quantized="passthrough")
def expand_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    shape = ctx.shape(x)
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(
            shape, tuple(_ints(ctx, inputs[1], "Expand shape"))))
    except ValueError:
        raise Unsupported(f"cannot expand {list(shape)} to {_ints(ctx, inputs[1], 'shape')}") \
            from None
    if out == tuple(shape):
        return [x]
    if x.const is not None:
        return [Value(const=np.broadcast_to(x.const, out).copy(), dtype=x.dtype)]
    return [_like(ctx, x, relax.op.broadcast_to(ctx.expr(x), out))]


# ---------------------------------------------------------------- DepthToSpace / SpaceToDepth
def _nchw_block(ctx: ImportContext, x: Value, attrs: dict, op: str) -> tuple:
    shape = ctx.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"{op} on a rank-{len(shape)} input (NCHW only)")
    return (*shape, int(attrs["blocksize"]))


@onnx_op("DepthToSpace", quantized="passthrough")
def depth_to_space_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                      attrs: Attrs) -> list[Value]:
    n, c, h, w, b = _nchw_block(ctx, inputs[0], attrs, "DepthToSpace")
    if c % (b * b):
        raise Unsupported(f"{c} channels are not divisible by blocksize^2 = {b * b}")
    if b == 1:
        return [inputs[0]]
    if attrs.get("mode", "DCR") == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    elif attrs["mode"] == "CRD":
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise Unsupported(f"DepthToSpace mode {attrs['mode']!r}")
    moved = shape_ops.transpose(ctx, shape_ops.reshape_to(ctx, inputs[0], split), perm)
    return [shape_ops.reshape_to(ctx, moved, (n, c // (b * b), h * b, w * b))]


@onnx_op("SpaceToDepth", quantized="passthrough")
def space_to_depth_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                      attrs: Attrs) -> list[Value]:
    n, c, h, w, b = _nchw_block(ctx, inputs[0], attrs, "SpaceToDepth")
    if h % b or w % b:
        raise Unsupported(f"spatial size {h}x{w} is not divisible by blocksize {b}")
    if b == 1:
        return [inputs[0]]
    split = shape_ops.reshape_to(ctx, inputs[0], (n, c, h // b, b, w // b, b))
    moved = shape_ops.transpose(ctx, split, (0, 3, 5, 1, 2, 4))
    return [shape_ops.reshape_to(ctx, moved, (n, c * b * b, h // b, w // b))]


# ---------------------------------------------------------------- Max / Min / Where
def _shared_qparams(values: list[Value], op: str) -> QParams | None:
    """The one set of parameters of the quantized operands of ``op`` (None if there are none).

    ONNX applies Max/Min/Where to the stored integers; that is the same selection on the real
    values only when every operand has the same parameters (a constant operand of the same type
    is read with them too)."""
    quantized = [v for v in values if v.qparams is not None]
    if not quantized:
        return None
    qp, dtype = quantized[0].qparams, quantized[0].dtype
    for v in values:
        if v.qparams is None and not (v.const is not None and v.dtype == dtype):
            raise Unsupported(f"{op} of a quantized {dtype} tensor and a {v.dtype} tensor")
        if v.qparams is not None and not (v.qparams.same_as(qp) and v.dtype == dtype):
            raise Unsupported(f"{op} of quantized tensors with different parameters")
    if not qp.per_tensor:
        raise Unsupported(f"{op} of tensors quantized per channel")
    return qp


def _real_operands(ctx: ImportContext, values: list[Value], qp: QParams) -> list[Value]:
    return [dequantize_value(ctx, v, qp) for v in values]


@onnx_op("Max", "Min", quantized="consumes")
def extremum_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """Variadic, folded pairwise: max(max(a, b), c)."""
    np_fn, relax_fn = ((np.maximum, relax.op.maximum) if node.op_type == "Max" else
                       (np.minimum, relax.op.minimum))
    values = [v for v in inputs if v is not None]
    qp = _shared_qparams(values, node.op_type)
    if qp is None and all(v.const is not None for v in values):
        return [Value(const=np_fn.reduce([v.const for v in values]),
                      dtype=values[0].dtype)]
    operands = values if qp is None else _real_operands(ctx, values, qp)
    result = operands[0]
    for other in operands[1:]:
        result = _like(ctx, result, relax_fn(ctx.expr(result), ctx.expr(other)))
    if qp is None:
        return [result]
    dtype = next(v.dtype for v in values if v.qparams is not None)
    return [quantize_value(ctx, result, qp, dtype)]


def _condition(ctx: ImportContext, cond: Value):
    if cond.dtype != "bool":
        raise Unsupported(f"Where condition of type {cond.dtype} (bool expected)")
    return ctx.expr(cond)


@onnx_op("Where", quantized="consumes")
def where_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    cond, a, b = inputs[:3]
    qp = _shared_qparams([a, b], "Where")
    if qp is None and all(v.const is not None for v in (cond, a, b)):
        return [Value(const=np.where(cond.const, a.const, b.const), dtype=a.dtype)]
    ra, rb = (a, b) if qp is None else _real_operands(ctx, [a, b], qp)
    result = _like(ctx, ra, relax.op.where(_condition(ctx, cond), ctx.expr(ra), ctx.expr(rb)))
    if qp is None:
        return [result]
    return [quantize_value(ctx, result, qp, (a if a.qparams is not None else b).dtype)]


@onnx_op("QLinearWhere", quantized="consumes")
def qlinear_where(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    cond, x, xs, xz, y, ys, yz, zs, zz = (inputs + [None] * 9)[:9]
    xf = dq(ctx, x, xs, xz, what="X")
    yf = dq(ctx, y, ys, yz, what="Y")
    chosen = Value(expr=ctx.emit(relax.op.where(_condition(ctx, cond), ctx.expr(xf),
                                                ctx.expr(yf))))
    return [q(ctx, chosen, zs, zz)]


# ---------------------------------------------------------------- ReduceMax / ReduceMin / ArgMax
@onnx_op("ReduceMax", "ReduceMin", quantized="passthrough")
def reduce_extremum_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                       attrs: Attrs) -> list[Value]:
    x = inputs[0]
    rank = _rank(ctx, x)
    if ctx.opset < 18:
        axes = attrs.get("axes")
    else:
        axes = _ints(ctx, inputs[1] if len(inputs) > 1 else None, f"{node.op_type} axes")
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({int(a) % rank for a in axes})
    keepdims = bool(attrs.get("keepdims", 1))
    if x.const is not None:
        np_fn = np.max if node.op_type == "ReduceMax" else np.min
        return [Value(const=np_fn(x.const, axis=tuple(axes), keepdims=keepdims),
                      dtype=x.dtype)]
    relax_fn = relax.op.max if node.op_type == "ReduceMax" else relax.op.min
    return [_like(ctx, x, relax_fn(ctx.expr(x), axes, keepdims))]


@onnx_op("ArgMax", quantized="consumes")
def argmax_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """Index of the largest value; a quantized input is dequantized first (its parameters must
    not vary along the reduced axis, so that the largest integer is the largest real value)."""
    x = inputs[0]
    shape = ctx.shape(x)
    axis = int(attrs.get("axis", 0)) % len(shape)
    keepdims = bool(attrs.get("keepdims", 1))
    if x.qparams is not None:
        if not x.qparams.per_tensor and x.qparams.axis == axis:
            raise Unsupported("ArgMax along the axis of per-channel quantization")
        x = dequantize_value(ctx, x, x.qparams)
    if not attrs.get("select_last_index", 0):
        return [Value(expr=ctx.emit(relax.op.argmax(ctx.expr(x), axis, keepdims)),
                      dtype="int64")]
    # The last largest: the first in the reversed axis, counted from the end.
    flipped = ctx.emit(relax.op.flip(ctx.expr(x), axis))
    first = ctx.emit(relax.op.argmax(flipped, axis, keepdims))
    last = relax.op.subtract(_tvm.const(np.int64(shape[axis] - 1)), first)
    return [Value(expr=ctx.emit(last), dtype="int64")]
