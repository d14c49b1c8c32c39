"""``canonqnn.avg_pool2d`` and ``canonqnn.global_avg_pool2d`` (NCHW, int8 -> int8).

global_avg_pool2d (rounding rne_f32, onnxruntime QLinearGlobalAveragePool):
    acc = sum_{h,w} x - x_zp * H*W                         (exact int32)
    scale = f32(x_scale / f32(out_scale * f32(H*W)))
    y = clamp(RNE(f32(acc) * scale), act - out_zp) + out_zp

avg_pool2d (rounding rne_f32, onnxruntime QLinearAveragePool; o = 128 for uint8 sources):
    xf = f32(x_scale * f32(x - x_zp))
    s = 0; for each in-bounds tap of the window, row-major: s = f32(s + xf)
    v = f32(s / f32(count))            count = kh*kw with count_include_pad, else in-bounds taps
    t = f32(f32(v / out_scale) + f32(out_zp + o))
    y = clamp(RNE(t), act_min + o, act_max + o) - o
A window is [i*stride - pad_begin, +kernel) clipped to the input. Windows covering the whole
input with no padding are global pools (onnxruntime switches to that kernel; so do the rules).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..qparams import QParams
from ._registry import CanonicalOp, register
from ._requant import requant_accumulator, te_no_contract, te_requant_accumulator
from .elementwise import storage_offset
from .movement import pool_out_size

F32 = np.float32


# ---------------------------------------------------------------- global_avg_pool2d
def _global_scale(a: dict, count: int) -> np.float32:
    return F32(F32(a["x_scale"]) / F32(F32(a["out_scale"]) * F32(count)))


def _global_reference(x, **a) -> np.ndarray:
    n, c, h, w = x.shape
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

        return te.compute((n, c, 1, 1), lambda *i: te_requant_accumulator(
            acc(*i) - a["x_zp"] * h * w, scale, a["out_zp"], a["act_min"], a["act_max"]),
            name="global_avg_pool")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_global_avg_pool2d")


GLOBAL_AVG_POOL2D = register(CanonicalOp(
    name="global_avg_pool2d",
    summary="int8 NCHW mean over H and W (keeps dims), exact integer sum, one float32 rescale",
    args=("x",),
    attrs=("x_scale", "x_zp", "out_scale", "out_zp", "act_min", "act_max", "rounding"),
    infer=lambda call: _tvm.tensor_type((*_tvm.shape_of(call.args[0])[:2], 1, 1), "int8"),
    legalize=_global_legalize,
    reference=_global_reference,
    constraints="x int8 NCHW per tensor; output [N, C, 1, 1] per tensor",
    family="pool",
))


def global_avg_pool2d(x: Any, x_qp: QParams, out_qp: QParams, act=(-128, 127),
                      rounding: str = "rne_f32") -> Any:
    return GLOBAL_AVG_POOL2D.call([x], dict(
        x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, act_min=int(act[0]), act_max=int(act[1]), rounding=rounding))


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


def _avg_reference(x, **a) -> np.ndarray:
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

    def compute(x):
        h, w = int(x.shape[2]), int(x.shape[3])
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


AVG_POOL2D = register(CanonicalOp(
    name="avg_pool2d",
    summary="int8 NCHW average pooling (float32 window sum, onnxruntime QLinearAveragePool)",
    args=("x",),
    attrs=POOL_ATTRS,
    infer=lambda call: _tvm.tensor_type(_avg_shape(_tvm.shape_of(call.args[0]),
                                                   _tvm.attrs_dict(call)), "int8"),
    legalize=_avg_legalize,
    reference=_avg_reference,
    constraints="x int8 NCHW per tensor, no dilation; output per tensor",
    family="pool",
))


def avg_pool2d(x: Any, x_qp: QParams, out_qp: QParams, *, pool_size, strides, padding,
               ceil_mode: bool, count_include_pad: bool, act=(-128, 127),
               source_dtype: str = "int8", rounding: str = "rne_f32") -> Any:
    return AVG_POOL2D.call([x], dict(
        pool_size=list(pool_size), strides=list(strides), padding=list(padding),
        ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad),
        x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, act_min=int(act[0]), act_max=int(act[1]), rounding=rounding,
        source_dtype=source_dtype))
