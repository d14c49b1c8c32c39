"""``canonqnn.avg_pool2d``, ``canonqnn.global_avg_pool2d`` (NCHW) and ``canonqnn.reduce_mean``
(any axes), int8 -> int8.

global_avg_pool2d (rounding rne_f32, onnxruntime QLinearGlobalAveragePool):
    acc = sum_{h,w} x - x_zp * H*W                         (exact int32)
    scale = f32(x_scale / f32(out_scale * f32(H*W)))
    y = clamp(RNE(f32(acc) * scale), act - out_zp) + out_zp

global_avg_pool2d (rounding xnnpack, XNNPACK's qs8 mean; measured bit-exact):
    sc = f32(f32(x_scale / out_scale) * f32(1 / (H*W)))
    bias = f32(out_zp - f32(f32(H*W * x_zp) * sc))
    y = clamp(RNE(f32(f32(f32(sum_{h,w} x) * sc) + bias)), act_min, act_max)   (no FMA)

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
from .._tvm import te, tirx, topi
from ..numerics.arithmetic import divide_round_half_away
from ..qparams import QParams, activation_range, mean_multiplier
from ._arithmetic import te_divide_round_half_away
from ._dtypes import check_activation_dtype
from ..numerics.q31 import Q31_ROUNDINGS, requant_q31
from ._q31 import te_requant_q31
from ._registry import CanonicalOp, UnsupportedRounding, register
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


def check_q31_average(op: str, x_qp: QParams, out_qp: QParams, rounding: str) -> None:
    if rounding in Q31_ROUNDINGS and not x_qp.same_as(out_qp):
        raise UnsupportedRounding(
            f"canonqnn.{op}: TFLite's AVERAGE_POOL_2D averages stored values and ignores the "
            f"parameters, so {rounding} needs equal input and output parameters "
            f"(got {x_qp} -> {out_qp})")


def check_q31_count(op: str, count: int, rounding: str, dtype: str = "int8") -> None:
    largest = 255 if dtype == "int8" else 2**15  # |x - x_zp| of int8; |x| of int16 (zp 0)
    if rounding in Q31_ROUNDINGS and largest * count > 2**31 - 1:
        raise UnsupportedRounding(f"canonqnn.{op}: a sum of {count} {dtype} values can overflow "
                                  f"TFLite's int32 accumulator; {rounding} refused")


def check_mean_dtype(op: str, x: Any, x_qp: QParams, out_qp: QParams, rounding: str,
                     q31_kernel: str = "mean") -> None:
    """int8, or int16 as TFLite's 16x8 MEAN (Q31 roundings, zero points 0, int16 out)."""
    check_activation_dtype(op, x, rounding, (x_qp.scalar_zp, out_qp.scalar_zp))
    if _tvm.dtype_of(x) == "int16" and (q31_kernel != "mean" or out_qp.dtype != "int16"):
        raise UnsupportedRounding(f"canonqnn.{op}: int16 input is TFLite's 16x8 MEAN only "
                                  f"(int16 out), not {q31_kernel} to {out_qp.dtype}")


# ---------------------------------------------------------------- global_avg_pool2d
def _global_scale(a: dict, count: int) -> np.float32:
    return F32(F32(a["x_scale"]) / F32(F32(a["out_scale"]) * F32(count)))


def _xnnpack_global_constants(a: dict, count: int) -> tuple[np.float32, np.float32]:
    sc = F32(F32(F32(a["x_scale"]) / F32(a["out_scale"])) * F32(F32(1) / F32(count)))
    return sc, F32(F32(a["out_zp"]) - F32(F32(count * a["x_zp"]) * sc))


def _global_reference(x, **a) -> np.ndarray:
    n, c, h, w = x.shape
    if a["rounding"] == "xnnpack":
        sc, bias = _xnnpack_global_constants(a, h * w)
        total = x.astype(np.int32).sum(axis=(2, 3), keepdims=True)
        v = ((total.astype(F32) * sc).astype(F32) + bias).astype(F32)
        return np.clip(np.rint(v), a["act_min"], a["act_max"]).astype(np.int8)
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
            sc, bias = (tirx.const(float(v), "float32")
                        for v in _xnnpack_global_constants(a, h * w))
            return te.compute((n, c, 1, 1), lambda *i: _te_xnnpack_global(
                acc(*i), sc, bias, a), name="global_avg_pool")

        return te.compute((n, c, 1, 1), lambda *i: te_requant_accumulator(
            acc(*i) - a["x_zp"] * h * w, scale, a["out_zp"], a["act_min"], a["act_max"]),
            name="global_avg_pool")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_global_avg_pool2d")


def _te_xnnpack_global(total, sc, bias, a: dict):
    v = tirx.round(te_no_contract(total.astype("float32") * sc) + bias)
    lo, hi = (tirx.const(float(a[k]), "float32") for k in ("act_min", "act_max"))
    return te.max(te.min(v, hi), lo).astype("int32").astype("int8")


def _te_q31_global(total, a: dict, count: int, out_dtype: str):
    if a["q31_kernel"] == "average_pool":
        y = te_rounded_average(total, tirx.const(count, "int32"), a["source_dtype"])
        return te.max(te.min(y, a["act_max"]), a["act_min"]).astype("int8")
    m, shift = q31_mean_multiplier(a, count)
    return te_requant_q31(total - a["x_zp"] * count, tirx.const(m, "int32"),
                          tirx.const(shift, "int32"), a["out_zp"], a["act_min"], a["act_max"],
                          a["rounding"], out_dtype)


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
    constraints="x int8 NCHW per tensor; output [N, C, 1, 1] per tensor; q31 roundings: "
                "q31_kernel 'mean' (TFLite MEAN) or 'average_pool' (TFLite AVERAGE_POOL_2D, "
                "equal parameters); x int16 (TFLite 16x8 MEAN, zero points 0): int16 out",
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
    if rounding in Q31_ROUNDINGS:
        if q31_kernel not in Q31_KERNELS:
            raise UnsupportedRounding(
                f"canonqnn.global_avg_pool2d: {rounding} needs q31_kernel 'mean' (TFLite MEAN) "
                f"or 'average_pool' (TFLite AVERAGE_POOL_2D), got {q31_kernel!r}")
        if q31_kernel == "average_pool":
            check_q31_average("global_avg_pool2d", x_qp, out_qp, rounding)
        _, _, h, w = _tvm.shape_of(x)
        check_q31_count("global_avg_pool2d", h * w, rounding, _tvm.dtype_of(x))
    check_mean_dtype("global_avg_pool2d", x, x_qp, out_qp, rounding, q31_kernel or "mean")
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
    constraints="x int8 NCHW per tensor, no dilation; output per tensor; q31 roundings: equal "
                "input and output parameters, count_include_pad false",
    family="pool",
    roundings=ROUNDINGS,
    absorbs_clamp=True,
))


def avg_pool2d(x: Any, x_qp: QParams, out_qp: QParams, *, pool_size, strides, padding,
               ceil_mode: bool, count_include_pad: bool, act=(-128, 127),
               source_dtype: str = "int8", rounding: str = "rne_f32") -> Any:
    check_q31_average("avg_pool2d", x_qp, out_qp, rounding)
    if rounding in Q31_ROUNDINGS and count_include_pad:
        raise UnsupportedRounding("canonqnn.avg_pool2d: TFLite's AVERAGE_POOL_2D divides by the "
                                  f"in-bounds taps only; {rounding} with count_include_pad refused")
    return AVG_POOL2D.call([x], dict(
        pool_size=list(pool_size), strides=list(strides), padding=list(padding),
        ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad),
        x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, act_min=int(act[0]), act_max=int(act[1]), rounding=rounding,
        source_dtype=source_dtype))


# ---------------------------------------------------------------- reduce_mean
# onnxruntime runs DequantizeLinear -> float ReduceMean -> QuantizeLinear (no quantized kernel).
# Its float sum first merges neighbouring axes that are both reduced or both kept ("fast
# shape", size-1 axes included), then adds in an order that depends on that shape: the
# ``summation`` attribute names the order, ``onnxruntime_summation`` picks it as onnxruntime does.
SUMMATIONS = ("sequential", "eigen_sse", "eigen_sse_blocks", "mlas_sgemm_m1")
SSE = 4  # floats per packet of Eigen's x86 build in onnxruntime (baseline SSE, no AVX)


def fast_shape(shape, axes) -> tuple[list[int], list[bool]]:
    """onnxruntime's merged shape: runs of reduced / kept axes collapsed into one axis each."""
    reduced = [i in axes for i in range(len(shape))]
    dims, flags = [int(shape[0])], [reduced[0]]
    for size, flag in zip(shape[1:], reduced[1:]):
        if flag == flags[-1]:
            dims[-1] *= int(size)
        else:
            dims.append(int(size))
            flags.append(flag)
    return dims, flags


def onnxruntime_summation(shape, axes, threads: int = 2) -> str:
    """The order onnxruntime 1.31's float ReduceMean adds in (x86) with ``threads`` intra-op
    threads: the sequential path for the KRK/RKR shapes whose outer or middle kept size is
    below the thread count, or below 2 (measured with 1, 2, 3, 4 and 8 threads)."""
    dims, flags = fast_shape(shape, axes)
    kind = "".join("R" if f else "K" for f in flags)
    least = max(2, int(threads))
    if kind in ("R", "KR"):
        return "eigen_sse"
    if kind == "KRK" and dims[0] >= least:
        return "mlas_sgemm_m1"
    if kind == "RKR" and dims[1] >= least:
        return "eigen_sse_blocks"
    return "sequential"


def _check_summation(shape, axes, summation: str) -> str:
    kind = "".join("R" if f else "K" for f in fast_shape(shape, axes)[1])
    allowed = {"sequential": None, "eigen_sse": ("R", "KR"), "eigen_sse_blocks": ("RKR",),
               "mlas_sgemm_m1": ("KRK",)}
    if summation not in allowed:
        raise ValueError(f"reduce_mean: unknown summation {summation!r}")
    if allowed[summation] is not None and kind not in allowed[summation]:
        raise ValueError(f"reduce_mean: summation {summation!r} needs a reduced/kept pattern "
                         f"{' or '.join(allowed[summation])}, not {kind}")
    return kind


def _eigen_layout(n: int, offset: int) -> tuple[int, int, int]:
    """Eigen's redux split of a row of ``n`` floats starting ``offset`` floats after a 16-byte
    boundary: (aligned start, aligned size, size covered by the two-packet loop)."""
    start = min((SSE - offset % SSE) % SSE, n)
    return start, (n - start) // SSE * SSE, (n - start) // (2 * SSE) * (2 * SSE)


def eigen_sse_sums(rows: np.ndarray, first_offset: int = 0) -> np.ndarray:
    """Sum each row of float32 ``rows`` [R, n] as Eigen's SSE ``redux`` does, row ``r`` starting
    ``first_offset + r * n`` floats after a 16-byte boundary: two packet accumulators over the
    aligned part, added, plus a last packet; (p0 + p2) + (p1 + p3); then the unaligned head and
    the tail one by one. Rows too short for one packet are added one by one."""
    count, n = rows.shape
    out = np.empty(count, F32)
    layouts = [_eigen_layout(n, first_offset + r * n) for r in range(count)]
    for layout in set(layouts):
        which = np.array([lay == layout for lay in layouts])
        v, (start, size, size2) = rows[which], layout
        if not size:
            out[which] = _sequential_sums(v)
            continue
        p0 = v[:, start:start + SSE]
        if size > SSE:
            p1 = v[:, start + SSE:start + 2 * SSE]
            for i in range(start + 2 * SSE, start + size2, 2 * SSE):
                p0 = (p0 + v[:, i:i + SSE]).astype(F32)
                p1 = (p1 + v[:, i + SSE:i + 2 * SSE]).astype(F32)
            p0 = (p0 + p1).astype(F32)
            if size > size2:
                p0 = (p0 + v[:, start + size2:start + size]).astype(F32)
        res = ((p0[:, 0] + p0[:, 2]).astype(F32) + (p0[:, 1] + p0[:, 3]).astype(F32)).astype(F32)
        for i in [*range(start), *range(start + size, n)]:
            res = (res + v[:, i]).astype(F32)
        out[which] = res
    return out


def _sequential_sums(columns: np.ndarray) -> np.ndarray:
    """Sum each row of [R, n] left to right (from 0, which adds exactly)."""
    acc = np.zeros(columns.shape[0], F32)
    for i in range(columns.shape[1]):
        acc = (acc + columns[:, i]).astype(F32)
    return acc


def mlas_m1_sums(m: np.ndarray) -> np.ndarray:
    """Column sums of ``m`` [..., K, N] as MLAS's AVX SGEMM kernel for M = 1 forms ones x m:
    rows four at a time ((r0 + r1) + r2) + r3, each group added to the running result, then a
    last pair and a last single row."""
    k, acc = m.shape[-2], np.zeros(m.shape[:-2] + m.shape[-1:], F32)
    g = 0
    for size in [SSE] * (k // SSE) + [2] * (k % SSE // 2) + [1] * (k % 2):
        part = m[..., g, :]
        for i in range(1, size):
            part = (part + m[..., g + i, :]).astype(F32)
        acc, g = (part + acc).astype(F32), g + size
    return acc


def float_mean(xf: np.ndarray, axes, summation: str) -> np.ndarray:
    """The float32 mean of ``xf`` over ``axes`` summed in the order ``summation`` names (the
    value onnxruntime's float ReduceMean computes), shaped as the kept axes merged."""
    axes = sorted(int(i) for i in axes)
    dims, flags = fast_shape(xf.shape, axes)
    _check_summation(xf.shape, axes, summation)
    xf = np.asarray(xf, F32).reshape(dims)
    if summation == "eigen_sse":
        total = eigen_sse_sums(xf.reshape(-1, dims[-1]))
    elif summation == "eigen_sse_blocks":
        blocks = eigen_sse_sums(xf.reshape(-1, dims[2])).reshape(dims[0], dims[1])
        total = _sequential_sums(blocks.T)
    elif summation == "mlas_sgemm_m1":
        total = mlas_m1_sums(xf).reshape(-1)
    else:
        red = [i for i, f in enumerate(flags) if f]
        kept = [i for i, f in enumerate(flags) if not f]
        total = _sequential_sums(np.transpose(xf, kept + red).reshape(
            int(np.prod([dims[i] for i in kept])), -1))
    count = int(np.prod([d for d, f in zip(dims, flags) if f]))
    return (total / F32(count)).astype(F32)


def _reduce_mean_reference(x, **a) -> np.ndarray:
    if a["rounding"] in Q31_ROUNDINGS:
        axes = tuple(int(i) for i in a["axes"])
        count = int(np.prod([x.shape[i] for i in axes]))
        m, shift = q31_mean_multiplier(a, count)
        total = x.astype(np.int64).sum(axis=axes)
        y = requant_q31(total - a["x_zp"] * count, m, shift, a["out_zp"], a["act_min"],
                        a["act_max"], a["rounding"], str(x.dtype))
        return y.reshape(_reduce_shape(x.shape, list(axes), a["keepdims"]))
    xf = ((x.astype(np.int32) - a["x_zp"]).astype(F32) * F32(a["x_scale"])).astype(F32)
    mean = float_mean(xf, a["axes"], a["summation"])
    # QuantizeLinear: f32(mean / out_scale), clamped, rounded half to even, + out_zp
    y = requant_accumulator((mean / F32(a["out_scale"])).astype(F32), F32(1.0), a["out_zp"],
                            a["act_min"], a["act_max"])
    return y.reshape(_reduce_shape(x.shape, [int(i) for i in a["axes"]], a["keepdims"]))


def _reduce_shape(shape, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else int(d) for i, d in enumerate(shape))
    return tuple(int(d) for i, d in enumerate(shape) if i not in axes)


def _f32c(value: float):
    return tirx.const(float(value), "float32")


def _te_eigen_sse_sums(m, rows: int, n: int):
    """TE twin of ``eigen_sse_sums`` for a tensor ``m`` [rows, n] (offsets from 0)."""
    def clamp(i):
        return tirx.max(tirx.min(i, n - 1), 0)

    def layout(r):
        start = tirx.min(tirx.floormod(SSE - tirx.floormod(r * n, SSE), SSE), n)
        size = tirx.floordiv(n - start, SSE) * SSE
        return start, size, tirx.floordiv(n - start, 2 * SSE) * (2 * SSE)

    loops = n // (2 * SSE)  # two-packet steps of the best-aligned row
    if loops:
        j = te.reduce_axis((0, loops), "j")

        def packet(r, w, lane):
            start, _, size2 = layout(r)
            take = m[r, clamp(start + 2 * SSE * j + SSE * w + lane)]
            return te.sum(tirx.if_then_else(j * 2 * SSE < size2, take, _f32c(0.0)), axis=j)

        packets = te.compute((rows, 2, SSE), packet, name="packets")

    def total(r):
        start, size, size2 = layout(r)
        lanes = []
        for lane in range(SSE):
            value = m[r, clamp(start + lane)]  # exactly one packet
            if loops:
                both = packets[r, 0, lane] + packets[r, 1, lane]
                both = tirx.Select(size > size2, both + m[r, clamp(start + size2 + lane)], both)
                value = tirx.Select(size > SSE, both, value)
            lanes.append(value)
        res = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])
        for i in range(SSE - 1):  # the unaligned head, then the tail
            res = tirx.Select(i < start, res + m[r, clamp(i)], res)
        for i in range(SSE - 1):
            res = tirx.Select(start + size + i < n, res + m[r, clamp(start + size + i)], res)
        if n < 2 * SSE - 1:  # some rows may be too short for a packet: added one by one
            one_by_one = m[r, 0]
            for i in range(1, n):
                one_by_one = one_by_one + m[r, i]
            res = tirx.Select(size == 0, one_by_one, res)
        return res

    return te.compute((rows,), total, name="eigen_sum")


def _te_sums(xf, dims, flags, summation: str):
    """The float32 sums of ``xf`` (fast shape ``dims``) over its reduced axes, in the order
    ``summation`` names; shaped as the kept axes (``(1,)`` when none is kept)."""
    if summation == "eigen_sse":
        n = dims[-1]
        rows = topi.reshape(xf, (int(np.prod(dims)) // n, n))
        return _te_eigen_sse_sums(rows, int(np.prod(dims)) // n, n)
    if summation == "eigen_sse_blocks":
        d0, d1, d2 = dims
        blocks = _te_eigen_sse_sums(topi.reshape(xf, (d0 * d1, d2)), d0 * d1, d2)
        i = te.reduce_axis((0, d0), "i")
        return te.compute((d1,), lambda d: te.sum(blocks[i * d1 + d], axis=i), name="sum")
    if summation == "mlas_sgemm_m1":
        d0, k, n = dims
        groups = k // SSE
        if groups:
            j = te.reduce_axis((0, groups), "j")
            quads = te.compute((d0, n), lambda d, c: te.sum(
                ((xf[d, SSE * j, c] + xf[d, SSE * j + 1, c]) + xf[d, SSE * j + 2, c])
                + xf[d, SSE * j + 3, c], axis=j), name="quads")

        def finish(d, c):
            acc, g = (quads[d, c] if groups else None), groups * SSE
            for size in [2] * (k % SSE // 2) + [1] * (k % 2):
                part = xf[d, g, c] if size == 1 else xf[d, g, c] + xf[d, g + 1, c]
                acc, g = (part if acc is None else part + acc), g + size
            return acc

        return te.compute((d0, n), finish, name="sum")
    kept = [d for d, f in zip(dims, flags) if not f]
    raxes = [te.reduce_axis((0, d), f"r{i}") for i, (d, f) in enumerate(zip(dims, flags)) if f]

    def sequential(*k):
        ki, ri, idx = iter(k), iter(raxes), []
        for flag in flags:
            idx.append(next(ri) if flag else next(ki))
        return te.sum(xf[tuple(idx)], axis=raxes)

    if not kept:
        return te.compute((1,), lambda _: sequential(), name="sum")
    return te.compute(kept, sequential, name="sum")


def _reduce_mean_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    shape = _tvm.shape_of(call.args[0])
    axes = [int(i) for i in a["axes"]]
    dims, flags = fast_shape(shape, axes)
    _check_summation(shape, axes, a["summation"])
    count = int(np.prod([shape[i] for i in axes]))
    out_shape = _reduce_shape(shape, axes, a["keepdims"])

    if a["rounding"] in Q31_ROUNDINGS:
        m, shift = q31_mean_multiplier(a, count)
        return bb.call_te(lambda x: _te_reduce_mean_q31(x, axes, count, (m, shift), out_shape, a),
                          call.args[0], primfunc_name_hint="canonqnn_reduce_mean")

    def compute(x):
        xr = topi.reshape(x, dims)
        # fenced: the product must be rounded before it is added (no FMA into the sum)
        xf = te.compute(dims, lambda *i: te_no_contract(
            (xr(*i).astype("int32") - a["x_zp"]).astype("float32") * _f32c(a["x_scale"])),
            name="dequantize")
        total = _te_sums(xf, dims, flags, a["summation"])
        y = te.compute(total.shape, lambda *i: te_requant_accumulator(
            (total(*i) / _f32c(count)) / _f32c(a["out_scale"]), _f32c(1.0), a["out_zp"],
            a["act_min"], a["act_max"]), name="reduce_mean")
        return topi.reshape(y, out_shape)

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_reduce_mean")


def _te_reduce_mean_q31(x, axes, count: int, multiplier, out_shape, a: dict):
    shape = [int(d) for d in x.shape]
    kept = [d for i, d in enumerate(shape) if i not in axes]
    raxes = [te.reduce_axis((0, shape[i]), f"r{i}") for i in axes]

    def total(*k):
        ki, ri = iter(k), iter(raxes)
        idx = [next(ri) if i in axes else next(ki) for i in range(len(shape))]
        return te.sum(x[tuple(idx)].astype("int32"), axis=raxes)

    sums = te.compute(kept or (1,), total if kept else (lambda _: total()), name="sum")
    m, shift = multiplier
    y = te.compute(sums.shape, lambda *i: te_requant_q31(
        sums(*i) - a["x_zp"] * count, tirx.const(m, "int32"), tirx.const(shift, "int32"),
        a["out_zp"], a["act_min"], a["act_max"], a["rounding"], x.dtype), name="reduce_mean")
    return topi.reshape(y, out_shape)


def _reduce_mean_infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    return _tvm.tensor_type(_reduce_shape(_tvm.shape_of(call.args[0]), [int(i) for i in a["axes"]],
                                          a["keepdims"]), _tvm.dtype_of(call.args[0]))


REDUCE_MEAN = register(CanonicalOp(
    name="reduce_mean",
    summary="int8 mean over any axes (onnxruntime's float ReduceMean between DequantizeLinear "
            "and QuantizeLinear, its summation order reproduced)",
    args=("x",),
    attrs=("axes", "keepdims", "x_scale", "x_zp", "out_scale", "out_zp", "act_min", "act_max",
           "rounding", "summation"),
    infer=_reduce_mean_infer,
    legalize=_reduce_mean_legalize,
    reference=_reduce_mean_reference,
    constraints="x int8 per tensor, static shape, axes sorted and non-negative; output per "
                "tensor; summation one of " + ", ".join(SUMMATIONS) + " (unused by the q31 "
                "roundings: TFLite's MEAN sums integers); x int16 (TFLite 16x8 MEAN, Q31 "
                "roundings, zero points 0): int16 out",
    family="pool",
    roundings=ROUNDINGS,
    absorbs_clamp=True,
))


def reduce_mean(x: Any, axes, keepdims: bool, x_qp: QParams, out_qp: QParams, *,
                act=None, summation: str | None = None, rounding: str = "rne_f32") -> Any:
    """Build ``canonqnn.reduce_mean``; ``summation`` defaults to onnxruntime's order, ``act``
    (the integer clamp) to the whole range of ``x``'s dtype."""
    act = activation_range(_tvm.dtype_of(x)) if act is None else act
    shape = _tvm.shape_of(x)
    axes = sorted(int(i) % len(shape) for i in axes)
    summation = summation or onnxruntime_summation(shape, axes)
    _check_summation(shape, axes, summation)
    check_q31_count("reduce_mean", int(np.prod([shape[i] for i in axes])), rounding,
                    _tvm.dtype_of(x))
    check_mean_dtype("reduce_mean", x, x_qp, out_qp, rounding)
    return REDUCE_MEAN.call([x], dict(
        axes=axes, keepdims=bool(keepdims), x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp,
        out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp, act_min=int(act[0]),
        act_max=int(act[1]), rounding=rounding, summation=summation))
