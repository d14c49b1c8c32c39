"""``canonqnn.avg_pool2d``, ``canonqnn.global_avg_pool2d`` (NCHW) and ``canonqnn.reduce_mean``
(any axes), int8 -> int8.

global_avg_pool2d (rounding rne_f32, onnxruntime QLinearGlobalAveragePool):
    acc = sum_{h,w} x - x_zp * H*W                         (exact int32)
    scale = f32(x_scale / f32(out_scale * f32(H*W)))
    y = clamp(RNE(f32(acc) * scale), act - out_zp) + out_zp

global_avg_pool2d, reduce_mean (rounding xnnpack, XNNPACK's qs8/qu8 mean over the n = H*W or
the reduced values; measured bit-exact; o = 128 for uint8 sources, which XNNPACK sums stored):
    sc = f32(f32(x_scale / out_scale) * f32(1 / n))
    bias = f32((out_zp + o) - f32(f32(n * (x_zp + o)) * sc))
    y = clamp(RNE(f32(f32(f32(sum x + n*o) * sc) + bias)), act + o) - o   (no FMA)

avg_pool2d (rounding rne_f32, onnxruntime QLinearAveragePool; o = 128 for uint8 sources):
    xf = f32(x_scale * f32(x - x_zp))
    s = 0; for each in-bounds tap of the window, row-major: s = f32(s + xf)
    v = f32(s / f32(count))            count = kh*kw with count_include_pad, else in-bounds taps
    t = f32(f32(v / out_scale) + f32(out_zp + o))
    y = clamp(RNE(t), act_min + o, act_max + o) - o
A window is [i*stride - pad_begin, +kernel) clipped to the input. Windows covering the whole
input with no padding are global pools (onnxruntime switches to that kernel; so do the rules).

reduce_mean (onnxruntime: DequantizeLinear -> float ReduceMean -> QuantizeLinear):
    xf = f32(f32(x - x_zp) * x_scale);  s = float32 sum over axes in onnxruntime's order
    y = clamp(RNE(f32(f32(s / f32(count)) / out_scale)), act - out_zp) + out_zp
The orders (``summation``) are described where they are computed, below, and in docs/spec.md.

Rounding q31_double / q31_single (TFLite reference kernels; the two differ only inside MBQM):
    average (AVERAGE_POOL_2D; input and output parameters must be equal, padded taps never
    count): acc = sum of the stored values of the in-bounds taps, n = their number,
        y = clamp(acc > 0 ? trunc((acc + n//2) / n) : trunc((acc - n//2) / n), act)
    (uint8 sources: y = floor((acc + n//2) / n), TFLite's uint8 kernel on u = x + 128)
    mean (MEAN, any axes, any parameters): n = number of reduced elements,
        (m', s') = mean_multiplier(x_scale, out_scale, n)        (qparams.py)
        y = clamp(MBQM(sum(x) - x_zp * n, m', s') + out_zp, act)
global_avg_pool2d takes either, named by ``q31_kernel`` ("average_pool" | "mean").

int16 (TFLite 16x8 MEAN: zero points 0, an int32 sum, the same ``mean`` arithmetic with int16
saturation; measured bit-exact): global_avg_pool2d with ``q31_kernel`` "mean" and reduce_mean
under the Q31 roundings; the output has the input's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..numerics.arithmetic import divide_round_half_away
from ..numerics.q31 import Q31_ROUNDINGS, requant_q31
from ..qparams import QParams, activation_range, mean_multiplier
from ._arithmetic import te_divide_round_half_away
from ._dtypes import activation_dtype
from ._q31 import te_requant_q31
from ._registry import CanonicalOp, Refusal, UnsupportedRounding, register
from ._requant import requant_accumulator, te_no_contract, te_requant_accumulator
from .elementwise import storage_offset
from .movement import pool_out_size

F32 = np.float32
ROUNDINGS = ("rne_f32", *Q31_ROUNDINGS)
Q31_KERNELS = ("mean", "average_pool")


# ---------------------------------------------------------------- TFLite (q31) arithmetic
def rounded_average(acc, count, source_dtype: str) -> np.ndarray:
    """TFLite AVERAGE_POOL_2D's integer average of stored values: halves away from zero on
    int8 data; on uint8 data (all sums >= 0) halves up, i.e. floor on the int8 form."""
    acc, count = np.asarray(acc, np.int64), np.asarray(count, np.int64)
    if source_dtype == "uint8":
        return (acc + count // 2) // count
    return divide_round_half_away(acc, count)


def te_rounded_average(acc, count, source_dtype: str):
    """TE twin of ``rounded_average`` (int32 ``acc`` and ``count``)."""
    if source_dtype == "uint8":
        return tirx.floordiv(acc + tirx.floordiv(count, 2), count)
    return te_divide_round_half_away(acc, count)


def q31_mean_multiplier(a: dict, count: int) -> tuple[int, int]:
    return mean_multiplier(a["x_scale"], a["out_scale"], count,
                           single_rounding=a["rounding"] == "q31_single")


def q31_average(rounding: str, x_qp: QParams | None, out_qp: QParams | None) -> Refusal | None:
    """TFLite's AVERAGE_POOL_2D under the Q31 roundings: equal input and output parameters."""
    if (rounding in Q31_ROUNDINGS and x_qp is not None and out_qp is not None
            and not x_qp.same_as(out_qp)):
        return Refusal(f"TFLite's AVERAGE_POOL_2D averages stored values and ignores the "
                       f"parameters, so {rounding} needs equal input and output parameters "
                       f"(got {x_qp} -> {out_qp})", UnsupportedRounding)
    return None


def q31_count(count: int | None, rounding: str, dtype: str = "int8") -> Refusal | None:
    """TFLite sums the ``count`` values of a window / mean in int32: no overflow allowed."""
    largest = 255 if dtype == "int8" else 2**15  # |x - x_zp| of int8; |x| of int16 (zp 0)
    if count is not None and rounding in Q31_ROUNDINGS and largest * count > 2**31 - 1:
        return Refusal(f"a sum of {count} {dtype} values can overflow TFLite's int32 "
                       f"accumulator; {rounding} refused", UnsupportedRounding)
    return None


def mean_dtypes(x_dtype: str, out_dtype: str, rounding: str, zero_points=(),
                q31_kernel: str = "mean") -> Refusal | None:
    """int8, or int16 as TFLite's 16x8 MEAN (Q31 roundings, zero points 0, int16 out): the
    constraint global_avg_pool2d and reduce_mean share."""
    if (why := activation_dtype(x_dtype, rounding, zero_points)) is not None:
        return why
    if x_dtype == "int16" and (q31_kernel != "mean" or out_dtype != "int16"):
        return Refusal(f"int16 input is TFLite's 16x8 MEAN only (int16 out), not {q31_kernel} "
                       f"to {out_dtype}", UnsupportedRounding)
    return None


# ---------------------------------------------------------------- global_avg_pool2d
def _global_scale(a: dict, count: int) -> np.float32:
    return F32(F32(a["x_scale"]) / F32(F32(a["out_scale"]) * F32(count)))


# XNNPACK's mean (global_avg_pool2d and reduce_mean, rounding xnnpack): the integer sum of
# the count values, scaled and offset in float32. A uint8 source's kernel (qu8) sums the
# stored uint8 values with its uint8 zero points: the int8-held values are shifted back first,
# as the float32 products differ.
def _xnnpack_mean_constants(a: dict, count: int) -> tuple[np.float32, np.float32, int]:
    shift = 128 if a["source_dtype"] == "uint8" else 0
    sc = F32(F32(F32(a["x_scale"]) / F32(a["out_scale"])) * F32(F32(1) / F32(count)))
    return sc, F32(F32(a["out_zp"] + shift) - F32(F32(count * (a["x_zp"] + shift)) * sc)), shift


def xnnpack_mean_reference(total, count: int, a: dict) -> np.ndarray:
    """The int8 mean of int32 sums ``total`` of ``count`` int8 values, as XNNPACK computes it."""
    sc, bias, shift = _xnnpack_mean_constants(a, count)
    stored = (np.asarray(total, np.int64) + shift * count).astype(F32)
    v = ((stored * sc).astype(F32) + bias).astype(F32)
    return (np.clip(np.rint(v), a["act_min"] + shift, a["act_max"] + shift) - shift) \
        .astype(np.int8)


def te_xnnpack_mean(total, count: int, a: dict):
    """``xnnpack_mean_reference`` of one int32 sum, in TE."""
    sc, bias, shift = _xnnpack_mean_constants(a, count)
    stored = (total + count * shift).astype("float32")
    v = tirx.round(te_no_contract(stored * tirx.const(float(sc), "float32"))
                   + tirx.const(float(bias), "float32"))
    lo, hi = (tirx.const(float(a[k] + shift), "float32") for k in ("act_min", "act_max"))
    return (te.max(te.min(v, hi), lo).astype("int32") - shift).astype("int8")


def _global_reference(x, **a) -> np.ndarray:
    n, c, h, w = x.shape
    if a["rounding"] == "xnnpack":
        return xnnpack_mean_reference(x.astype(np.int32).sum(axis=(2, 3), keepdims=True),
                                      h * w, a)
    if a["rounding"] in Q31_ROUNDINGS:
        total = x.astype(np.int64).sum(axis=(2, 3), keepdims=True)
        if a["q31_kernel"] == "average_pool":
            y = rounded_average(total, h * w, a["source_dtype"])
            return np.clip(y, a["act_min"], a["act_max"]).astype(np.int8)
        m, shift = q31_mean_multiplier(a, h * w)
        return requant_q31(total - a["x_zp"] * h * w, m, shift, a["out_zp"], a["act_min"],
                           a["act_max"], a["rounding"], str(x.dtype))
    acc = x.astype(np.int64).sum(axis=(2, 3), keepdims=True) - a["x_zp"] * h * w
    return requant_accumulator(acc.astype(np.int32), _global_scale(a, h * w), a["out_zp"],
                               a["act_min"], a["act_max"])


def _global_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    n, c, h, w = _tvm.shape_of(call.args[0])
    scale = tirx.const(float(_global_scale(a, h * w)), "float32")

    def compute(x):
        ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
        acc = te.compute((n, c, 1, 1), lambda i, j, _a, _b: te.sum(
            x[i, j, ry, rx].astype("int32"), axis=[ry, rx]), name="acc")
        if a["rounding"] in Q31_ROUNDINGS:
            return te.compute((n, c, 1, 1), lambda *i: _te_q31_global(
                acc(*i), a, h * w, x.dtype), name="global_avg_pool")
        if a["rounding"] == "xnnpack":
            return te.compute((n, c, 1, 1), lambda *i: te_xnnpack_mean(acc(*i), h * w, a),
                              name="global_avg_pool")

        return te.compute((n, c, 1, 1), lambda *i: te_requant_accumulator(
            acc(*i) - a["x_zp"] * h * w, scale, a["out_zp"], a["act_min"], a["act_max"]),
            name="global_avg_pool")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_global_avg_pool2d")


def _te_q31_global(total, a: dict, count: int, out_dtype: str):
    if a["q31_kernel"] == "average_pool":
        y = te_rounded_average(total, tirx.const(count, "int32"), a["source_dtype"])
        return te.max(te.min(y, a["act_max"]), a["act_min"]).astype("int8")
    m, shift = q31_mean_multiplier(a, count)
    return te_requant_q31(total - a["x_zp"] * count, tirx.const(m, "int32"),
                          tirx.const(shift, "int32"), a["out_zp"], a["act_min"], a["act_max"],
                          a["rounding"], out_dtype)


def global_avg_pool2d_constraint(x_dtype: str, out_dtype: str, rounding: str, zero_points=(),
                                 q31_kernel: str | None = "mean", x_qp: QParams | None = None,
                                 out_qp: QParams | None = None,
                                 count: int | None = None) -> Refusal | None:
    """x int8 NCHW per tensor; output [N, C, 1, 1] per tensor; q31 roundings: q31_kernel 'mean'
    (TFLite MEAN) or 'average_pool' (TFLite AVERAGE_POOL_2D, equal parameters), a sum of the
    H*W values (count) that int32 holds; x int16 (TFLite 16x8 MEAN, zero points 0): int16 out"""
    if rounding in Q31_ROUNDINGS:
        if q31_kernel not in Q31_KERNELS:
            return Refusal(f"{rounding} needs q31_kernel 'mean' (TFLite MEAN) or "
                           f"'average_pool' (TFLite AVERAGE_POOL_2D), got {q31_kernel!r}",
                           UnsupportedRounding)
        if q31_kernel == "average_pool" and (why := q31_average(rounding, x_qp, out_qp)):
            return why
        if (why := q31_count(count, rounding, x_dtype)) is not None:
            return why
    return mean_dtypes(x_dtype, out_dtype, rounding, zero_points, q31_kernel or "mean")


GLOBAL_AVG_POOL2D = register(CanonicalOp(
    name="global_avg_pool2d",
    layout="NCHW",
    summary="int8 NCHW mean over H and W (keeps dims), exact integer sum, one float32 rescale",
    args=("x",),
    attrs=("x_scale", "x_zp", "out_scale", "out_zp", "act_min", "act_max", "rounding",
           "q31_kernel", "source_dtype"),
    infer=lambda call: _tvm.tensor_type((*_tvm.shape_of(call.args[0])[:2], 1, 1),
                                        _tvm.dtype_of(call.args[0])),
    legalize=_global_legalize,
    reference=_global_reference,
    constraint=global_avg_pool2d_constraint,
    family="pool",
    roundings=(*ROUNDINGS, "xnnpack"),
    absorbs_clamp=True,
))


def global_avg_pool2d(x: Any, x_qp: QParams, out_qp: QParams, act=None,
                      rounding: str = "rne_f32", *, q31_kernel: str | None = None,
                      source_dtype: str = "int8") -> Any:
    """Build ``canonqnn.global_avg_pool2d``. Under the q31 roundings ``q31_kernel`` must say
    which TFLite builtin's arithmetic to reproduce: "mean" or "average_pool" (they differ).
    ``act``: the integer clamp, by default the whole range of ``x``'s dtype."""
    act = activation_range(_tvm.dtype_of(x)) if act is None else act
    _, _, h, w = _tvm.shape_of(x)
    GLOBAL_AVG_POOL2D.require(x_dtype=_tvm.dtype_of(x), out_dtype=out_qp.dtype, rounding=rounding,
                              zero_points=(x_qp.scalar_zp, out_qp.scalar_zp),
                              q31_kernel=q31_kernel, x_qp=x_qp, out_qp=out_qp, count=h * w)
    return GLOBAL_AVG_POOL2D.call([x], dict(
        x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, act_min=int(act[0]), act_max=int(act[1]), rounding=rounding,
        q31_kernel=q31_kernel or "mean", source_dtype=source_dtype))


# ---------------------------------------------------------------- avg_pool2d
POOL_ATTRS = ("pool_size", "strides", "padding", "ceil_mode", "count_include_pad", "x_scale",
              "x_zp", "out_scale", "out_zp", "act_min", "act_max", "rounding", "source_dtype")


def _avg_shape(shape, a: dict) -> tuple[int, int, int, int]:
    n, c, h, w = shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = a["pool_size"], a["strides"], a["padding"]
    return (n, c, pool_out_size(h, kh, sh, 1, pt, pb, a["ceil_mode"]),
            pool_out_size(w, kw, sw, 1, pl, pr, a["ceil_mode"]))


def _window(o: int, k: int, s: int, p: int, size: int) -> tuple[int, int]:
    start = o * s - p
    return max(start, 0), min(start + k, size)


def _avg_reference_q31(x, a: dict) -> np.ndarray:
    n, c, oh, ow = _avg_shape(x.shape, a)
    (kh, kw), (sh, sw), (pt, pl, _, _) = a["pool_size"], a["strides"], a["padding"]
    out = np.empty((n, c, oh, ow), np.int8)
    for i in range(oh):
        h0, h1 = _window(i, kh, sh, pt, x.shape[2])
        for j in range(ow):
            w0, w1 = _window(j, kw, sw, pl, x.shape[3])
            acc = x[:, :, h0:h1, w0:w1].astype(np.int64).sum(axis=(2, 3))
            y = rounded_average(acc, max((h1 - h0) * (w1 - w0), 1), a["source_dtype"])
            out[:, :, i, j] = np.clip(y, a["act_min"], a["act_max"])
    return out


def _avg_reference(x, **a) -> np.ndarray:
    if a["rounding"] in Q31_ROUNDINGS:
        return _avg_reference_q31(x, a)
    n, c, oh, ow = _avg_shape(x.shape, a)
    (kh, kw), (sh, sw), (pt, pl, _, _) = a["pool_size"], a["strides"], a["padding"]
    o = storage_offset(a["source_dtype"])
    xf = ((x.astype(np.int32) - a["x_zp"]).astype(F32) * F32(a["x_scale"])).astype(F32)
    out = np.empty((n, c, oh, ow), np.int8)
    for i in range(oh):
        h0, h1 = _window(i, kh, sh, pt, x.shape[2])
        for j in range(ow):
            w0, w1 = _window(j, kw, sw, pl, x.shape[3])
            s = np.zeros((n, c), F32)
            for y in range(h0, h1):
                for z in range(w0, w1):
                    s = (s + xf[:, :, y, z]).astype(F32)
            count = kh * kw if a["count_include_pad"] else max((h1 - h0) * (w1 - w0), 1)
            v = (s / F32(count)).astype(F32)
            t = ((v / F32(a["out_scale"])).astype(F32) + F32(a["out_zp"] + o)).astype(F32)
            t = np.clip(t, F32(a["act_min"] + o), F32(a["act_max"] + o))
            out[:, :, i, j] = (np.rint(t).astype(np.int32) - o).astype(np.int8)
    return out


def _avg_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    n, c, oh, ow = _avg_shape(_tvm.shape_of(call.args[0]), a)
    (kh, kw), (sh, sw), (pt, pl, _, _) = a["pool_size"], a["strides"], a["padding"]
    o = storage_offset(a["source_dtype"])
    f = lambda v: tirx.const(float(v), "float32")  # noqa: E731

    q31 = a["rounding"] in Q31_ROUNDINGS

    def compute(x):
        h, w = int(x.shape[2]), int(x.shape[3])
        if q31:
            return _te_avg_q31(x, (n, c, oh, ow), a)
        # The fence keeps f32(x_scale * (x - x_zp)) rounded on its own even if this stage is
        # inlined into the window sum (LLVM would otherwise be free to fuse it into an FMA).
        xf = te.compute(x.shape, lambda *i: te_no_contract(
            (x(*i).astype("int32") - a["x_zp"]).astype("float32") * f(a["x_scale"])),
            name="dequantize")
        ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

        def tap(nn, cc, i, j):
            y, z = i * sh - pt + ry, j * sw - pl + rx
            inside = tirx.all(y >= 0, y < h, z >= 0, z < w)
            return tirx.if_then_else(inside, xf[nn, cc, tirx.max(tirx.min(y, h - 1), 0),
                                                 tirx.max(tirx.min(z, w - 1), 0)], f(0.0))

        total = te.compute((n, c, oh, ow), lambda *i: te.sum(tap(*i), axis=[ry, rx]), name="sum")

        def out(nn, cc, i, j):
            if a["count_include_pad"]:
                count = f(kh * kw)
            else:
                hs, ws = tirx.max(i * sh - pt, 0), tirx.max(j * sw - pl, 0)
                he, we = tirx.min(i * sh - pt + kh, h), tirx.min(j * sw - pl + kw, w)
                count = tirx.max((he - hs) * (we - ws), 1).astype("float32")
            v = total[nn, cc, i, j] / count
            t = v / f(a["out_scale"]) + f(a["out_zp"] + o)
            t = te.max(te.min(t, f(a["act_max"] + o)), f(a["act_min"] + o))
            return (tirx.round(t).astype("int32") - o).astype("int8")

        return te.compute((n, c, oh, ow), out, name="avg_pool")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_avg_pool2d")


def _te_window(i, k: int, s: int, p: int, size: int):
    """(start, end) of output index ``i``'s window clipped to [0, size)."""
    return tirx.max(i * s - p, 0), tirx.min(i * s - p + k, size)


def _te_avg_q31(x, out_shape, a: dict):
    (kh, kw), (sh, sw), (pt, pl, _, _) = a["pool_size"], a["strides"], a["padding"]
    h, w = int(x.shape[2]), int(x.shape[3])
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def tap(nn, cc, i, j):
        y, z = i * sh - pt + ry, j * sw - pl + rx
        inside = tirx.all(y >= 0, y < h, z >= 0, z < w)
        value = x[nn, cc, tirx.max(tirx.min(y, h - 1), 0), tirx.max(tirx.min(z, w - 1), 0)]
        return tirx.if_then_else(inside, value.astype("int32"), tirx.const(0, "int32"))

    total = te.compute(out_shape, lambda *i: te.sum(tap(*i), axis=[ry, rx]), name="sum")

    def out(nn, cc, i, j):
        (hs, he), (ws, we) = _te_window(i, kh, sh, pt, h), _te_window(j, kw, sw, pl, w)
        count = tirx.max((he - hs) * (we - ws), 1)
        y = te_rounded_average(total[nn, cc, i, j], count, a["source_dtype"])
        return te.max(te.min(y, a["act_max"]), a["act_min"]).astype("int8")

    return te.compute(out_shape, out, name="avg_pool")


def avg_pool2d_constraint(x_dtype: str = "int8", x_rank: int = 4, rounding: str = "rne_f32",
                          x_qp: QParams | None = None, out_qp: QParams | None = None,
                          count_include_pad: bool = False) -> Refusal | None:
    """x int8 NCHW per tensor (the op has no dilation); output per tensor; q31 roundings: equal
    input and output parameters, count_include_pad false"""
    if x_dtype != "int8":
        return Refusal(f"{x_dtype} input (int8)")
    if x_rank != 4:
        return Refusal(f"rank-{x_rank} input (NCHW)")
    if (why := q31_average(rounding, x_qp, out_qp)) is not None:
        return why
    if rounding in Q31_ROUNDINGS and count_include_pad:
        return Refusal("TFLite's AVERAGE_POOL_2D divides by the in-bounds taps only; "
                       f"{rounding} with count_include_pad refused", UnsupportedRounding)
    return None


AVG_POOL2D = register(CanonicalOp(
    name="avg_pool2d",
    layout="NCHW",
    summary="int8 NCHW average pooling (float32 window sum, onnxruntime QLinearAveragePool)",
    args=("x",),
    attrs=POOL_ATTRS,
    infer=lambda call: _tvm.tensor_type(_avg_shape(_tvm.shape_of(call.args[0]),
                                                   _tvm.attrs_dict(call)), "int8"),
    legalize=_avg_legalize,
    reference=_avg_reference,
    constraint=avg_pool2d_constraint,
    family="pool",
    roundings=ROUNDINGS,
    absorbs_clamp=True,
))


def avg_pool2d(x: Any, x_qp: QParams, out_qp: QParams, *, pool_size, strides, padding,
               ceil_mode: bool, count_include_pad: bool, act=(-128, 127),
               source_dtype: str = "int8", rounding: str = "rne_f32") -> Any:
    AVG_POOL2D.require(x_dtype=_tvm.dtype_of(x), x_rank=len(_tvm.shape_of(x)), rounding=rounding,
                       x_qp=x_qp, out_qp=out_qp, count_include_pad=bool(count_include_pad))
    return AVG_POOL2D.call([x], dict(
        pool_size=list(pool_size), strides=list(strides), padding=list(padding),
        ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad),
        x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, act_min=int(act[0]), act_max=int(act[1]), rounding=rounding,
        source_dtype=source_dtype))
