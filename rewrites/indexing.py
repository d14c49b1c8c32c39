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

Under the Q31 roundings pad and strided_slice also fold int16 in and int16 out (TFLite's 16x8
activations).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import indexing
from canonqnn.qdq import QUANTIZE
from canonqnn.qparams import quantize_value

from ._engine import Context, Decline, Rule
from ._match import (INT8_OR_INT32, dequantized, output, per_tensor_int8, quantized_op,
                     sixteen_bit, strip_activation, unary_chain)
from .movement import _finish

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


def fold_pad(ctx: Context, call: Any):
    dtypes = ("int8", *sixteen_bit(ctx))
    m = quantized_op(ctx, call, PAD, dtypes=dtypes)
    if not isinstance(m, tuple):
        return m
    out, act, inner, y = m
    source = _pad_source(ctx, inner.args[0], y, dtypes)
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
    if any(w < 0 for w in widths):
        return Decline("negative padding (cropping)", y)
    limit = {"reflect": 1, "wrap": 0}.get(mode)
    shape = _tvm.shape_of(inner.args[0])
    if limit is not None and any(w > shape[i // 2] - limit for i, w in enumerate(widths)):
        return Decline(f"{mode} padding wider than the axis allows", y)
    bounds = act.bounds(out.qparams)
    pad_value = 0
    if mode == "constant":
        value = np.float32(a["pad_value"])
        if math.isnan(value):
            return Decline("the pad value is NaN (no quantized value)", y)
        lo, hi = bounds
        pad_value = min(max(quantize_value(value, out.qparams), lo), hi)
    operand = x.operand if cropped is None else ctx.emit(cropped)
    moved = _emitted(ctx, _finish(ctx, operand, x.qparams, out.qparams, bounds), operand)
    return indexing.pad(moved, out.qparams, widths[::2], widths[1::2], mode, pad_value)


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


def fold_gather(ctx: Context, call: Any):
    m = unary_chain(ctx, call, TAKE, activation=True)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    a = _tvm.attrs_dict(inner)
    if a.get("axis") is None:
        return Decline("take over the flattened tensor (no axis)", at)
    shape = _tvm.shape_of(x.operand)
    axis = int(a["axis"]) % len(shape)
    indices = _gather_indices(ctx, inner.args[1], shape[axis], str(a.get("mode", "fast")), at)
    if isinstance(indices, Decline):
        return indices
    moved = indexing.gather(x.operand, indices, axis, x.qparams)
    return _finish(ctx, moved, x.qparams, out.qparams, act.bounds(out.qparams))


# ---------------------------------------------------------------- strided_slice
def _static_ints(expr: Any) -> list[int] | None:
    values = [getattr(f, "value", None) for f in getattr(expr, "fields", [None])]
    return values if all(isinstance(v, int) for v in values) else None


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


def fold_strided_slice(ctx: Context, call: Any):
    m = unary_chain(ctx, call, SLICE, activation=True, int16=True)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    moved = _canonical_slice(inner, x, at, (out.qparams.dtype,))
    if isinstance(moved, Decline):
        return moved
    return _finish(ctx, moved, x.qparams, out.qparams, act.bounds(out.qparams))


# ---------------------------------------------------------------- tile / broadcast_to
def fold_tile(ctx: Context, call: Any):
    m = unary_chain(ctx, call, TILE, activation=True)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    rank = len(_tvm.shape_of(x.operand))
    repeats = [int(r) for r in _tvm.attrs_dict(inner)["repeats"]]
    if len(repeats) != rank:  # Relax pads the shorter of the two with ones
        return Decline(f"{len(repeats)} repeats for a rank-{rank} input", at)
    moved = indexing.tile(x.operand, repeats, x.qparams)
    return _finish(ctx, moved, x.qparams, out.qparams, act.bounds(out.qparams))


def fold_broadcast_to(ctx: Context, call: Any):
    m = unary_chain(ctx, call, BROADCAST, activation=True)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    moved = indexing.broadcast_to(x.operand, _tvm.shape_of(inner), x.qparams)
    return _finish(ctx, moved, x.qparams, out.qparams, act.bounds(out.qparams))


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


def fold_depth_space(ctx: Context, call: Any):
    out = output(call)
    if out is None or out.qparams.dtype != "int8":
        return None
    y, act = strip_activation(ctx, out.operand)
    merge = ctx.call(y, RESHAPE)
    permute = None if merge is None else ctx.call(merge.args[0], PERMUTE)
    split = None if permute is None else ctx.call(permute.args[0], RESHAPE)
    x = None if split is None else dequantized(ctx, split.args[0])
    axes = None if x is None else _tvm.attrs_dict(permute).get("axes")
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
    return _finish(ctx, moved, x.qparams, out.qparams, act.bounds(out.qparams))


RULES = (
    Rule("pad", QUANTIZE, fold_pad, "q(act(nn.pad(dq x))) -> [requantize] canonqnn.pad"),
    Rule("gather", QUANTIZE, fold_gather, "q(act(take(dq x, idx))) -> canonqnn.gather"),
    Rule("strided_slice", QUANTIZE, fold_strided_slice,
         "q(act(strided_slice(dq x))) -> canonqnn.strided_slice"),
    Rule("tile", QUANTIZE, fold_tile, "q(act(tile(dq x))) -> canonqnn.tile"),
    Rule("broadcast_to", QUANTIZE, fold_broadcast_to,
         "q(act(broadcast_to(dq x))) -> canonqnn.broadcast_to"),
    Rule("depth_space", QUANTIZE, fold_depth_space,
         "q(act(reshape(permute_dims(reshape(dq x))))) -> canonqnn.depth_to_space | "
         "space_to_depth"),
)
