"""Fold quantized indexing and layout ops.

    q([act](nn.pad(dq(x), v)))          -> [requantize] canonqnn.pad(pad_value = Q_out(act(v)))
    q([act](nn.pad(strided_slice(dq(x)))))  (negative ONNX pads) -> canonqnn.strided_slice, pad
    q([act](take(dq(x), idx)))          -> canonqnn.gather [-> requantize]
    q([act](strided_slice(dq(x))))      -> canonqnn.strided_slice [-> requantize]
    q([act](tile(dq(x))))               -> canonqnn.tile [-> requantize]
    q([act](broadcast_to(dq(x))))       -> canonqnn.broadcast_to [-> requantize]
    q([act](reshape(permute_dims(reshape(dq(x))))))
                                        -> canonqnn.depth_to_space | space_to_depth [-> requantize]

Moving values commutes with requantization and with a relu/clip (both act on each value
alone), so the int8 op moves the input's integers and a ``requantize`` (with the activation as
its clamp) follows when parameters or clamp differ. ``pad`` requantizes first instead (on the
smaller tensor): a constant pad value is then simply the output-parameter integer ``Q_out(v)``,
exactly what a DQ -> Pad -> Q chain produces, whatever the input's parameters.

Under the Q31 roundings pad, strided_slice and gather also fold int16 in and int16 out
(TFLite's 16x8 activations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import indexing
from canonqnn.qdq import QUANTIZE, QdqCall
from canonqnn.qparams import quantize_value

from ._engine import Context, Decline, Rule
from ._match import (
    INT8_OR_INT32,
    Moved,
    QuantizedOp,
    UnaryChain,
    build_moved,
    dequantized,
    output,
    per_tensor_int8,
    quantized_op,
    requantized,
    sixteen_bit,
    strip_activation,
    unary_step,
)

PAD, TAKE, SLICE = "relax.nn.pad", "relax.take", "relax.strided_slice"
TILE, BROADCAST = "relax.tile", "relax.broadcast_to"
RESHAPE, PERMUTE = "relax.reshape", "relax.permute_dims"
PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
             "circular": "wrap"}


def _emitted(ctx: Context, expr: Any, operand: Any) -> Any:
    return operand if expr is operand else ctx.emit(expr)


# ---------------------------------------------------------------- pad
def _pad_source(ctx: Context, operand: Any, at: Any, dtypes: tuple[str, ...]):
    """``(x, crop)`` for the pad's operand dq(x) (crop None) or strided_slice(dq(x)) (crop: the
    canonical slice; how the ONNX importer writes negative pads), or a Decline; ``x`` of one
    of ``dtypes`` (int8, and int16 where ``sixteen_bit``)."""
    x = dequantized(ctx, operand, INT8_OR_INT32 + dtypes)
    if x is not None:
        return x, None
    crop = ctx.call(operand, SLICE)
    x = None if crop is None else dequantized(ctx, crop.args[0], INT8_OR_INT32 + dtypes)
    if x is None:
        return Decline("input is not dequantized from int8", at)
    if not ctx.single_use(operand):
        return Decline("the cropped float tensor has other users", at)
    sliced = _canonical_slice(crop, x, at, dtypes)
    return sliced if isinstance(sliced, Decline) else (x, sliced)


@dataclass(frozen=True)
class Pad:
    out: QdqCall
    x: QdqCall
    cropped: Any  # a canonqnn.strided_slice of x (not yet emitted), or None
    bounds: tuple[int, int]
    widths: list[int]
    mode: str
    pad_value: int


def pad_chain(ctx: Context, call: Any):
    return quantized_op(ctx, call, PAD, dtypes=("int8", *sixteen_bit(ctx)))


def pad_geometry(ctx: Context, m: QuantizedOp):
    out, y, inner = m.out, m.y, m.inner
    source = _pad_source(ctx, inner.args[0], y, ("int8", *sixteen_bit(ctx)))
    if isinstance(source, Decline):
        return source
    x, cropped = source
    if (why := per_tensor_int8(x, "input", y, (out.qparams.dtype,))) is not None:
        return why
    a = _tvm.attrs_dict(inner)
    mode = PAD_MODES.get(str(a["pad_mode"]))
    if mode is None:
        return Decline(f"pad mode {a['pad_mode']} has no canonical form", y)
    widths = [int(w) for w in a["pad_width"]]
    if (refusal := indexing.PAD.accepts(
            x_dtype=x.qparams.dtype, mode=mode, x_shape=_tvm.shape_of(inner.args[0]),
            pad_before=widths[::2], pad_after=widths[1::2])) is not None:
        return Decline(refusal, y)
    bounds = m.act.bounds(out.qparams)
    pad_value = 0
    if mode == "constant":
        value = np.float32(a["pad_value"])
        if math.isnan(value):
            return Decline("the pad value is NaN (no quantized value)", y)
        lo, hi = bounds
        pad_value = min(max(quantize_value(value, out.qparams), lo), hi)
    return Pad(out, x, cropped, bounds, widths, mode, pad_value)


def build_pad(ctx: Context, m: Pad):
    operand = m.x.operand if m.cropped is None else ctx.emit(m.cropped)
    moved = _emitted(ctx, requantized(ctx, operand, m.x.qparams, m.out.qparams, m.bounds),
                     operand)
    return indexing.pad(moved, m.out.qparams, m.widths[::2], m.widths[1::2], m.mode,
                        m.pad_value)


# ---------------------------------------------------------------- gather
def _gather_indices(ctx: Context, indices: Any, n: int, mode: str, at: Any):
    """Constant indices normalized to [0, n) as Relax's take ``mode`` reads them; run-time
    indices as they are (canonqnn.gather wraps negative ones)."""
    value = ctx.value(indices)
    if not _tvm.is_const(value):
        if mode == "clip":
            return Decline("run-time indices with mode clip (canonqnn.gather wraps)", at)
        return indices
    raw = _tvm.const_value(value).astype(np.int64)
    if mode == "wrap":
        normalized = np.mod(raw, n)
    elif mode == "clip":
        normalized = np.clip(raw, 0, n - 1)
    elif raw.size and (raw.min() < 0 or raw.max() >= n):
        return Decline(f"index out of range [0, {n}) with mode {mode}", at)
    else:
        normalized = raw
    return _tvm.const(normalized.astype(raw.dtype if raw.dtype == np.int32 else np.int64))


def gather_indices(ctx: Context, m: UnaryChain):
    a = _tvm.attrs_dict(m.inner)
    if a.get("axis") is None:
        return Decline("take over the flattened tensor (no axis)", m.at)
    shape = _tvm.shape_of(m.x.operand)
    axis = int(a["axis"]) % len(shape)
    indices = _gather_indices(ctx, m.inner.args[1], shape[axis], str(a.get("mode", "fast")),
                              m.at)
    if isinstance(indices, Decline):
        return indices
    return Moved(m.out, m.act, m.x, indexing.gather(m.x.operand, indices, axis, m.x.qparams))


# ---------------------------------------------------------------- strided_slice
def _static_ints(expr: Any) -> list[int] | None:
    values = [getattr(f, "value", None) for f in getattr(expr, "fields", [None])]
    ints = [v for v in values if isinstance(v, int)]
    return ints if len(ints) == len(values) else None


def relax_slice_begin(begin: int, dim: int, stride: int) -> int:
    """The first index Relax's strided_slice reads (topi's begin canonicalization: a negative
    begin counts from the end, then it is clamped into the axis)."""
    lo, hi = (-1, dim - 1) if stride < 0 else (0, dim)
    return min(max(begin + dim if begin < 0 else begin, lo), hi)


def _canonical_slice(inner: Any, x, at: Any, dtypes: tuple[str, ...] = ("int8",)):
    """canonqnn.strided_slice of int8 ``x`` (or of another of ``dtypes``) equal to Relax's
    strided_slice ``inner`` of dq(x), or a Decline."""
    axes, begin = _static_ints(inner.args[1]), _static_ints(inner.args[2])
    strides = _static_ints(inner.args[4]) if len(inner.args) > 4 else [1] * len(axes or [])
    if axes is None or begin is None or strides is None:
        return Decline("slice bounds are not constants", at)
    if (why := per_tensor_int8(x, "input", at, dtypes)) is not None:
        return why
    shape, out_shape = _tvm.shape_of(x.operand), _tvm.shape_of(inner)
    axes = [a % len(shape) for a in axes]
    begin = [relax_slice_begin(b, shape[a], s) for a, b, s in zip(axes, begin, strides)]
    sizes = [out_shape[a] for a in axes]
    if 0 in sizes:
        return Decline("the slice is empty", at)
    if _tvm.attrs_dict(inner).get("assume_inbound") and any(
            not 0 <= b < shape[a] for a, b in zip(axes, begin)):
        return Decline("assume_inbound with a begin outside the axis", at)
    return indexing.strided_slice(x.operand, x.qparams, axes, begin, strides, sizes)


def slice_bounds(ctx: Context, m: UnaryChain):
    moved = _canonical_slice(m.inner, m.x, m.at, (m.out.qparams.dtype,))
    return moved if isinstance(moved, Decline) else Moved(m.out, m.act, m.x, moved)


# ---------------------------------------------------------------- tile / broadcast_to
def tile_repeats(ctx: Context, m: UnaryChain):
    rank = len(_tvm.shape_of(m.x.operand))
    repeats = [int(r) for r in _tvm.attrs_dict(m.inner)["repeats"]]
    # Relax pads the shorter of the two with ones; canonqnn.tile takes one per axis
    if (why := indexing.TILE.accepts(rank=rank, repeats=repeats)) is not None:
        return Decline(why, m.at)
    return Moved(m.out, m.act, m.x, indexing.tile(m.x.operand, repeats, m.x.qparams))


def broadcast_shape(ctx: Context, m: UnaryChain):
    moved = indexing.broadcast_to(m.x.operand, _tvm.shape_of(m.inner), m.x.qparams)
    return Moved(m.out, m.act, m.x, moved)


# ---------------------------------------------------------------- depth_to_space / space_to_depth
def block_layout(in_shape, split, perm, out_shape) -> tuple[str, int] | None:
    """``("DCR" | "CRD" | "S2D", block)`` when reshape(in -> split), permute_dims(perm),
    reshape(-> out) is ONNX DepthToSpace (DCR/CRD) or SpaceToDepth on NCHW, else None."""
    if len(in_shape) != 4 or len(split) != 6:
        return None
    n, c, h, w = in_shape
    perm, split, out_shape = tuple(perm), tuple(split), tuple(out_shape)
    for kind, b, want_perm in (("DCR", split[1], (0, 3, 4, 1, 5, 2)),
                               ("CRD", split[2], (0, 1, 4, 2, 5, 3)),
                               ("S2D", split[3], (0, 3, 5, 1, 2, 4))):
        if perm != want_perm or b < 1:
            continue
        if kind == "S2D":
            ok = (h % b == 0 and w % b == 0 and split == (n, c, h // b, b, w // b, b)
                  and out_shape == (n, c * b * b, h // b, w // b))
        else:
            cb = c // (b * b)
            want = (n, b, b, cb, h, w) if kind == "DCR" else (n, cb, b, b, h, w)
            ok = (c % (b * b) == 0 and split == want
                  and out_shape == (n, cb, h * b, w * b))
        if ok:
            return kind, b
    return None


def depth_space_chain(ctx: Context, call: Any):
    out = output(call)
    if out is None or out.qparams.dtype != "int8":
        return None
    y, act = strip_activation(ctx, out.operand)
    merge = ctx.call(y, RESHAPE)
    if merge is None:
        return None
    permute = ctx.call(merge.args[0], PERMUTE)
    if permute is None:
        return None
    split = ctx.call(permute.args[0], RESHAPE)
    if split is None:
        return None
    x = dequantized(ctx, split.args[0])
    if x is None:
        return None
    axes = _tvm.attrs_dict(permute).get("axes")
    if axes is None:
        return None
    layout = block_layout(_tvm.shape_of(x.operand), _tvm.shape_of(split), axes,
                          _tvm.shape_of(merge))
    if layout is None:
        return None
    if not all(ctx.single_use(v) for v in (y, merge.args[0], permute.args[0])):
        return Decline("an intermediate float result has other users", y)
    if (why := per_tensor_int8(x, "input", y)) is not None:
        return why
    kind, block = layout
    moved = (indexing.space_to_depth(x.operand, block, x.qparams) if kind == "S2D" else
             indexing.depth_to_space(x.operand, block, kind, x.qparams))
    return Moved(out, act, x, moved)


RULES = (
    Rule("pad", QUANTIZE, (pad_chain, pad_geometry), build_pad,
         "q(act(nn.pad(dq x))) -> [requantize] canonqnn.pad", phase="elementwise_pool_movement"),
    Rule("gather", QUANTIZE, (unary_step(TAKE, int16=True), gather_indices), build_moved,
         "q(act(take(dq x, idx))) -> canonqnn.gather", phase="elementwise_pool_movement"),
    Rule("strided_slice", QUANTIZE, (unary_step(SLICE, int16=True), slice_bounds), build_moved,
         "q(act(strided_slice(dq x))) -> canonqnn.strided_slice",
         phase="elementwise_pool_movement"),
    Rule("tile", QUANTIZE, (unary_step(TILE), tile_repeats), build_moved,
         "q(act(tile(dq x))) -> canonqnn.tile", phase="elementwise_pool_movement"),
    Rule("broadcast_to", QUANTIZE, (unary_step(BROADCAST), broadcast_shape), build_moved,
         "q(act(broadcast_to(dq x))) -> canonqnn.broadcast_to", phase="elementwise_pool_movement"),
    Rule("depth_space", QUANTIZE, (depth_space_chain,), build_moved,
         "q(act(reshape(permute_dims(reshape(dq x))))) -> canonqnn.depth_to_space | "
         "space_to_depth", phase="elementwise_pool_movement"),
)
