"""``canonqnn.resize2d``: int8 NCHW resize of H and W, nearest or bilinear (onnxruntime's Resize).

Each output row/column maps to input coordinates exactly as onnxruntime's CPU Resize computes
them in float32, with the scale ``f32(out_len) / f32(in_len)`` (a scale of exactly 1 maps
every index to itself):

    asymmetric            c = o / scale
    half_pixel            c = f32(f32(o + 0.5) / scale) - 0.5
    pytorch_half_pixel    c = as half_pixel if out_len > 1 else 0
    tf_half_pixel_for_nn  c = f32(o + 0.5) / scale
    align_corners         c = f32(o * (in_len - 1)) / (out_len - 1)    (0 if out_len == 1)

nearest: the index ``round_prefer_floor`` / ``round_prefer_ceil`` (halves away from zero) /
``floor`` / ``ceil`` of c, clamped to [0, in_len - 1]; a pure gather, followed by a
requantization (dequantize then quantize in float32) when the output parameters differ.

linear (bilinear over H and W, onnxruntime's NCHW ``UpsampleBilinear``): c clamped to
[0, in_len - 1], i1 = int(c), i2 = min(i1 + 1, in_len - 1), d1 = |c - i1|, d2 = |c - i2|
(both 0.5 when i1 == i2); with X the input as float32,

    t = f32(f32(f32((dx2*dy2) * X11) + f32((dx1*dy2) * X21)) + f32((dx2*dy1) * X12))
        + f32((dx1*dy1) * X22)                       (every product rounded: no FMA)

kernel="float"   (QDQ models: DequantizeLinear -> float Resize -> QuantizeLinear)
    X = f32(f32(x - x_zp) * x_scale);  y = clamp(RNE(f32(t / out_scale)), act - out_zp) + out_zp
kernel="integer" (onnxruntime's int8/uint8 Resize kernel, run on the stored values)
    X = x - x_zp;  y = clamp(trunc(t) + out_zp, act)     (same parameters in and out)

Rounding q31_double / q31_single: TFLite's RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR reference
kernels (no multiplier is involved, so the two are the same). They move stored values and ignore
the parameters, which must therefore be equal. (align_corners, half_pixel_centers) is read from
the attributes: nearest (asymmetric, floor) = (F, F), (align_corners, round_prefer_ceil) = (T, F),
(tf_half_pixel_for_nn, floor) = (F, T); linear asymmetric = (F, F), align_corners = (T, F),
half_pixel = (F, T). Other combinations are refused (UnsupportedRounding).

    scale  = f32(in) / f32(out), or f32(in - 1) / f32(out - 1) with align_corners and out > 1
nearest:  v = f32(f32(o + (0.5 if half_pixel_centers else 0)) * scale);
          i = min(round_half_away(v) if align_corners else floor(v), in - 1)  (>= 0 with hpc)
linear, int8 sources (10-bit fixed point on the stored values):
    s10 = (1024 * in + out // 2) // out   (align_corners: (1024 * (in - 1) + (out - 1) // 2)
          // (out - 1));  v = o * s10 (+ s10 // 2 - 512 with half_pixel_centers)
    lo = max(trunc(v / 1024), 0), hi = min(trunc((v + 1023) / 1024), in - 1), d = v - 1024 lo
    t = sum over the four taps of x * wy * wx (w_lo = 1024 - d, w_hi = d), exact int64
    y = clamp(trunc((t + (t > 0 ? 2^19 : -2^19)) / 2^20), act)
linear, uint8 sources (float32 on u = x + 128, every product rounded, no FMA):
    v = f32(o * scale) (half_pixel_centers: f32(f32(f32(o + 0.5) * scale) - 0.5)),
    lo = max(floor(v), 0), hi = min(ceil(v), in - 1), f = f32(v - lo), g = f32(1 - f)
    t = ((f32(f32(u_ll gy) gx) + f32(f32(u_hl fy) gx)) + f32(f32(u_lh gy) fx))
        + f32(f32(u_hh fy) fx)
    y = clamp(round_half_away(t) - 128, act)        (ll = (lo_y, lo_x), hl = (hi_y, lo_x), ...)

Rounding xnnpack: XNNPACK's int8 bilinear resize (TFLite's default interpreter delegates
RESIZE_BILINEAR to it), linear only, the flags and parameters as for the q31 roundings:
    scale = as above;  c = min(f32(o * scale), in - 1)  (align_corners, or no half_pixel_centers)
            c = clamp(f32(f32(o * scale) + f32(f32(0.5 * scale) - 0.5)), 0, in - 1)  (otherwise)
    lo = floor(c), hi = min(lo + 1, in - 1), a = lrintf(f32(c - lo) * 2^11)
    top = (x_tl << 11) + (x_tr - x_tl) * a_x,  bottom = (x_bl << 11) + (x_br - x_bl) * a_x
    y = clamp(((top << 11) + (bottom - top) * a_y + 2^21) >> 22, act)      (int32, ties up)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..numerics.arithmetic import divide_round_half_away, fma_f32, round_half_away, trunc_div
from ..numerics.q31 import Q31_ROUNDINGS
from ..qparams import QParams
from ._arithmetic import te_divide_round_half_away, te_fma, te_round_half_away
from ._registry import CanonicalOp, Refusal, UnsupportedRounding, register
from ._requant import (
    requant_accumulator,
    requant_via_real,
    te_no_contract,
    te_requant_accumulator,
    te_requant_via_real,
)

F32 = np.float32
COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners",
                    "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
METHODS = ("nearest", "linear")
KERNELS = ("float", "integer")
ATTRS = ("size", "method", "coordinate_transformation_mode", "nearest_mode", "kernel",
         "x_scale", "x_zp", "out_scale", "out_zp", "act_min", "act_max", "rounding",
         "source_dtype")
ROUNDINGS = ("rne_f32", "mlas_neon", "xnnpack", *Q31_ROUNDINGS)
# TFLite's (align_corners, half_pixel_centers) as the attributes that stand for them
TFLITE_NEAREST = {("asymmetric", "floor"): (False, False),
                  ("align_corners", "round_prefer_ceil"): (True, False),
                  ("tf_half_pixel_for_nn", "floor"): (False, True)}
TFLITE_LINEAR = {"asymmetric": (False, False), "align_corners": (True, False),
                 "half_pixel": (False, True)}


# ---------------------------------------------------------------- coordinates (static, numpy)
def source_coordinate(mode: str, o: int, in_len: int, out_len: int) -> np.float32:
    """onnxruntime's ``get_original_coordinate`` for output index ``o``, in float32."""
    scale = F32(F32(out_len) / F32(in_len))
    if scale == F32(1.0):
        return F32(o)
    x, half = F32(o), F32(0.5)
    if mode == "asymmetric":
        return F32(x / scale)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and out_len <= 1:
            return F32(0.0)
        return F32(F32(F32(x + half) / scale) - half)
    if mode == "tf_half_pixel_for_nn":
        return F32(F32(x + half) / scale)
    if mode == "align_corners":
        if out_len == 1:
            return F32(0.0)
        return F32(F32(x * F32(in_len - 1)) / F32(out_len - 1))
    raise ValueError(f"resize2d: coordinate_transformation_mode {mode!r} is not supported")


def nearest_indices(in_len: int, out_len: int, mode: str, nearest_mode: str) -> np.ndarray:
    """The input index each output index copies."""
    out = []
    for o in range(out_len):
        c = source_coordinate(mode, o, in_len, out_len)
        if nearest_mode == "floor":
            i = int(np.floor(c))
        elif nearest_mode == "ceil":
            i = int(np.ceil(c))
        elif nearest_mode == "round_prefer_ceil":
            i = int(round_half_away(c))
        elif nearest_mode == "round_prefer_floor":
            # onnxruntime tests for a half with a truncation (toward zero) plus 0.5
            i = int(np.floor(c)) if c == F32(F32(int(c)) + F32(0.5)) else int(round_half_away(c))
        else:
            raise ValueError(f"resize2d: nearest_mode {nearest_mode!r} is not supported")
        out.append(min(max(i, 0), in_len - 1))
    return np.array(out, np.int32)


def linear_taps(in_len: int, out_len: int, mode: str):
    """(i1, i2, d1, d2) per output index: the two input taps and their distances."""
    i1s: list[Any] = []
    i2s: list[Any] = []
    d1s: list[Any] = []
    d2s: list[Any] = []
    for o in range(out_len):
        c = source_coordinate(mode, o, in_len, out_len)
        c = F32(max(F32(0.0), min(c, F32(in_len - 1))))
        i1 = min(int(c), in_len - 1)
        i2 = min(i1 + 1, in_len - 1)
        d1, d2 = (F32(0.5), F32(0.5)) if i1 == i2 else (F32(abs(c - F32(i1))),
                                                         F32(abs(c - F32(i2))))
        for column, value in zip((i1s, i2s, d1s, d2s), (i1, i2, d1, d2)):
            column.append(value)
    return (np.array(i1s, np.int32), np.array(i2s, np.int32), np.array(d1s, F32),
            np.array(d2s, F32))


def weights_are_fixed_point_exact(in_len: int, out_len: int, mode: str) -> bool:
    """Whether every bilinear distance is a multiple of 1/256. Then onnxruntime's two integer
    kernels agree: the NCHW one (float weights, products and sums exact, truncated) and the
    NHWC one its layout optimizer picks next to channels-last convs (10-bit fixed point)."""
    _, _, d1, d2 = linear_taps(in_len, out_len, mode)
    d = np.concatenate([d1, d2]).astype(np.float64) * 256
    return bool(np.all(d == np.floor(d)))


# ---------------------------------------------------------------- reference
def bilinear(xf: np.ndarray, a: dict) -> np.ndarray:
    """The float32 interpolation ``t`` of NCHW float32 ``xf`` for op attributes ``a``."""
    (oh, ow), mode = a["size"], a["coordinate_transformation_mode"]
    y1, y2, dy1, dy2 = linear_taps(xf.shape[2], oh, mode)
    x1, x2, dx1, dx2 = linear_taps(xf.shape[3], ow, mode)
    rows1, rows2 = xf[:, :, y1], xf[:, :, y2]
    terms = [((dx2[None, :] * dy2[:, None]).astype(F32), rows1[:, :, :, x1]),
             ((dx1[None, :] * dy2[:, None]).astype(F32), rows1[:, :, :, x2]),
             ((dx2[None, :] * dy1[:, None]).astype(F32), rows2[:, :, :, x1]),
             ((dx1[None, :] * dy1[:, None]).astype(F32), rows2[:, :, :, x2])]
    if a.get("rounding") == "mlas_neon":
        # onnxruntime's AArch64 build: the sum contracted, the first product fused with the
        # rounded second, each later product fused into the sum
        (c1, v1), (c2, v2), *rest = terms
        fused = fma_f32(c1, v1, (c2 * v2).astype(F32))
        for coef, taps in rest:
            fused = fma_f32(coef, taps, fused)
        return fused
    t = (terms[0][0] * terms[0][1]).astype(F32)
    for coef, taps in terms[1:]:
        t = (t + (coef * taps).astype(F32)).astype(F32)
    return t


def _reference(x, **a) -> np.ndarray:
    if a["rounding"] in Q31_ROUNDINGS:
        return _reference_q31(x, a)
    if a["rounding"] == "xnnpack":
        return _reference_xnnpack(x, a)
    (oh, ow), mode = a["size"], a["coordinate_transformation_mode"]
    if a["method"] == "nearest":
        ih = nearest_indices(x.shape[2], oh, mode, a["nearest_mode"])
        iw = nearest_indices(x.shape[3], ow, mode, a["nearest_mode"])
        g = x[:, :, ih][:, :, :, iw]
        if _same_params(a) and (a["act_min"], a["act_max"]) == (-128, 127):
            return g
        return requant_via_real(g, a["x_scale"], a["x_zp"], a["out_scale"], a["out_zp"],
                                a["act_min"], a["act_max"])
    stored = (x.astype(np.int32) - a["x_zp"]).astype(F32)
    if a["kernel"] == "integer":
        t = np.trunc(bilinear(stored, a)).astype(np.int32) + a["out_zp"]
        return np.clip(t, a["act_min"], a["act_max"]).astype(np.int8)
    t = bilinear((stored * F32(a["x_scale"])).astype(F32), a)
    return requant_accumulator((t / F32(a["out_scale"])).astype(F32), F32(1.0), a["out_zp"],
                               a["act_min"], a["act_max"])


def _same_params(a: dict) -> bool:
    return (a["x_scale"], a["x_zp"]) == (a["out_scale"], a["out_zp"])


# ---------------------------------------------------------------- TFLite (q31 roundings)
def tflite_flags(a: dict) -> tuple[bool, bool]:
    """(align_corners, half_pixel_centers) the attributes stand for under the q31 roundings."""
    RESIZE2D.require(method=a["method"], coordinate_transformation_mode=a[
        "coordinate_transformation_mode"], nearest_mode=a["nearest_mode"], rounding=a["rounding"])
    flags = _tflite_flags(a["method"], a["coordinate_transformation_mode"], a["nearest_mode"])
    assert flags is not None  # the attributes require() accepted have TFLite's flags
    return flags


def _tflite_flags(method: str, mode: str, nearest_mode: str) -> tuple[bool, bool] | None:
    return TFLITE_NEAREST.get((mode, nearest_mode)) if method == "nearest" \
        else TFLITE_LINEAR.get(mode)


def _tflite_scale(in_len: int, out_len: int, align_corners: bool) -> np.float32:
    if align_corners and out_len > 1:
        return F32(F32(in_len - 1) / F32(out_len - 1))
    return F32(F32(in_len) / F32(out_len))


def tflite_nearest_indices(in_len: int, out_len: int, align_corners: bool,
                           half_pixel_centers: bool) -> np.ndarray:
    """The input index TFLite's RESIZE_NEAREST_NEIGHBOR copies to each output index."""
    scale, offset = _tflite_scale(in_len, out_len, align_corners), F32(0.5 * half_pixel_centers)
    out = []
    for o in range(out_len):
        v = F32(F32(F32(o) + offset) * scale)
        i = int(round_half_away(v)) if align_corners else int(np.floor(v))
        i = min(i, in_len - 1)
        out.append(max(i, 0) if half_pixel_centers else i)
    return np.array(out, np.int32)


def tflite_fixed_taps(in_len: int, out_len: int, align_corners: bool,
                      half_pixel_centers: bool):
    """TFLite's int8 bilinear taps per output index: (lo, hi, d) with weights 1024 - d, d."""
    if align_corners and out_len > 1:
        s10 = (1024 * (in_len - 1) + (out_len - 1) // 2) // (out_len - 1)
    else:
        s10 = (1024 * in_len + out_len // 2) // out_len
    v = np.arange(out_len, dtype=np.int64) * s10 + (s10 // 2 - 512 if half_pixel_centers else 0)
    lo = np.maximum(trunc_div(v, 1024), 0)
    hi = np.minimum(trunc_div(v + 1023, 1024), in_len - 1)
    return lo.astype(np.int32), hi.astype(np.int32), (v - 1024 * lo).astype(np.int32)


def tflite_float_taps(in_len: int, out_len: int, align_corners: bool,
                      half_pixel_centers: bool):
    """TFLite's uint8 (float) bilinear taps: (lo, hi, f, 1 - f) per output index, float32."""
    scale = _tflite_scale(in_len, out_len, align_corners)
    o = np.arange(out_len).astype(F32)
    if half_pixel_centers:
        v = ((o + F32(0.5)).astype(F32) * scale).astype(F32) - F32(0.5)
    else:
        v = (o * scale).astype(F32)
    v = v.astype(F32)
    lo = np.maximum(np.floor(v), 0).astype(np.int32)
    hi = np.minimum(np.ceil(v), in_len - 1).astype(np.int32)
    f = (v - lo.astype(F32)).astype(F32)
    return lo, hi, f, (F32(1) - f).astype(F32)


# ---------------------------------------------------------------- XNNPACK (rounding xnnpack)
def xnnpack_taps(in_len: int, out_len: int, align_corners: bool, half_pixel_centers: bool):
    """XNNPACK's bilinear taps per output index: (lo, hi, alpha), alpha the weight of ``hi``
    in 11-bit fixed point, ``lrintf(f32(c - lo) * 2^11)``."""
    adjust = int(align_corners and out_len != 1)
    scale = F32(F32(in_len - adjust) / F32(out_len - adjust))
    o = np.arange(out_len).astype(F32)
    if align_corners or not half_pixel_centers:
        c = np.minimum((o * scale).astype(F32), F32(in_len - 1))
    else:
        offset = F32(F32(F32(0.5) * scale) - F32(0.5))
        c = np.clip(((o * scale).astype(F32) + offset).astype(F32), F32(0), F32(in_len - 1))
    lo = c.astype(np.int32)  # c >= 0: truncation is floor
    hi = np.minimum(lo + 1, in_len - 1).astype(np.int32)
    alpha = np.rint(((c - lo.astype(F32)).astype(F32) * F32(2048)).astype(F32))
    return lo, hi, alpha.astype(np.int32)


def _reference_xnnpack(x, a: dict) -> np.ndarray:
    (oh, ow), (h, w) = a["size"], x.shape[2:]
    ac, hpc = tflite_flags(a)
    y1, y2, ay = (v.astype(np.int64) for v in xnnpack_taps(h, oh, ac, hpc))
    x1, x2, ax = (v.astype(np.int64) for v in xnnpack_taps(w, ow, ac, hpc))
    xs = x.astype(np.int64)
    rows_lo, rows_hi = xs[:, :, y1], xs[:, :, y2]
    tl, tr = rows_lo[:, :, :, x1], rows_lo[:, :, :, x2]
    bl, br = rows_hi[:, :, :, x1], rows_hi[:, :, :, x2]
    top = (tl << 11) + (tr - tl) * ax
    bottom = (bl << 11) + (br - bl) * ax
    acc = (top << 11) + (bottom - top) * ay[:, None]
    return np.clip((acc + (1 << 21)) >> 22, a["act_min"], a["act_max"]).astype(np.int8)


def _legalize_xnnpack(bb: Any, call: Any, a: dict) -> Any:
    n, c, h, w = _tvm.shape_of(call.args[0])
    (oh, ow), (ac, hpc) = a["size"], tflite_flags(a)
    taps = [_tvm.const(t) for t in xnnpack_taps(h, oh, ac, hpc) + xnnpack_taps(w, ow, ac, hpc)]

    def interpolate(x, y1, y2, ay, x1, x2, ax):
        def value(b, ch, i, j):
            def at(row, col):
                return x[b, ch, row[i], col[j]].astype("int32")

            # |acc| < 2^29: int32 as XNNPACK computes it
            top = (at(y1, x1) << 11) + (at(y1, x2) - at(y1, x1)) * ax[j]
            bottom = (at(y2, x1) << 11) + (at(y2, x2) - at(y2, x1)) * ax[j]
            acc = (top << 11) + (bottom - top) * ay[i]
            return _te_clamp((acc + (1 << 21)) >> 22, a)
        return te.compute((n, c, oh, ow), value, name="resize_bilinear")

    return bb.call_te(interpolate, call.args[0], *taps,
                      primfunc_name_hint="canonqnn_resize2d_bilinear")


def _reference_q31(x, a: dict) -> np.ndarray:
    (oh, ow), (h, w) = a["size"], x.shape[2:]
    ac, hpc = tflite_flags(a)
    if a["method"] == "nearest":
        y = x[:, :, tflite_nearest_indices(h, oh, ac, hpc)][:, :, :, tflite_nearest_indices(
            w, ow, ac, hpc)]
        return np.clip(y, a["act_min"], a["act_max"]).astype(np.int8)
    if a["source_dtype"] == "uint8":
        y1, y2, fy, gy = tflite_float_taps(h, oh, ac, hpc)
        x1, x2, fx, gx = tflite_float_taps(w, ow, ac, hpc)
        u = (x.astype(np.int32) + 128).astype(F32)
        t = None
        for rows, cols, wy, wx in ((y1, x1, gy, gx), (y2, x1, fy, gx), (y1, x2, gy, fx),
                                   (y2, x2, fy, fx)):
            v = u[:, :, rows][:, :, :, cols]
            term = ((v * wy[:, None]).astype(F32) * wx[None, :]).astype(F32)
            t = term if t is None else (t + term).astype(F32)
        y = round_half_away(t).astype(np.int64) - 128
    else:
        y1, y2, dy = (v.astype(np.int64) for v in tflite_fixed_taps(h, oh, ac, hpc))
        x1, x2, dx = (v.astype(np.int64) for v in tflite_fixed_taps(w, ow, ac, hpc))
        xs = x.astype(np.int64)
        t = 0
        for rows, cols, wy, wx in ((y1, x1, 1024 - dy, 1024 - dx), (y2, x1, dy, 1024 - dx),
                                   (y1, x2, 1024 - dy, dx), (y2, x2, dy, dx)):
            t = t + xs[:, :, rows][:, :, :, cols] * wy[:, None] * wx[None, :]
        y = divide_round_half_away(t, 1 << 20)
    return np.clip(y, a["act_min"], a["act_max"]).astype(np.int8)


def _te_clamp(v, a: dict):
    return te.max(te.min(v, a["act_max"]), a["act_min"]).astype("int8")


def _legalize_q31(bb: Any, call: Any, a: dict) -> Any:
    n, c, h, w = _tvm.shape_of(call.args[0])
    (oh, ow), (ac, hpc) = a["size"], tflite_flags(a)
    shape = (n, c, oh, ow)
    if a["method"] == "nearest":
        ih = _tvm.const(tflite_nearest_indices(h, oh, ac, hpc))
        iw = _tvm.const(tflite_nearest_indices(w, ow, ac, hpc))
        return bb.call_te(lambda x, rows, cols: te.compute(shape, lambda b, ch, i, j: _te_clamp(
            x[b, ch, rows[i], cols[j]].astype("int32"), a), name="resize_nearest"),
            call.args[0], ih, iw, primfunc_name_hint="canonqnn_resize2d_nearest")
    if a["source_dtype"] == "uint8":
        taps = [_tvm.const(t) for t in tflite_float_taps(h, oh, ac, hpc)
                + tflite_float_taps(w, ow, ac, hpc)]

        def interpolate_float(x, y1, y2, fy, gy, x1, x2, fx, gx):
            def value(b, ch, i, j):
                t = None
                for row, col, wy, wx in ((y1, x1, gy, gx), (y2, x1, fy, gx), (y1, x2, gy, fx),
                                         (y2, x2, fy, fx)):
                    u = (x[b, ch, row[i], col[j]].astype("int32") + 128).astype("float32")
                    # both products rounded on their own, as TFLite's (non-FMA) build does
                    term = te_no_contract(te_no_contract(u * wy[i]) * wx[j])
                    t = term if t is None else t + term
                return _te_clamp(te_round_half_away(t).astype("int32") - 128, a)
            return te.compute(shape, value, name="resize_bilinear")

        return bb.call_te(interpolate_float, call.args[0], *taps,
                          primfunc_name_hint="canonqnn_resize2d_bilinear")
    taps = [_tvm.const(t) for t in tflite_fixed_taps(h, oh, ac, hpc)
            + tflite_fixed_taps(w, ow, ac, hpc)]

    def interpolate_fixed(x, y1, y2, dy, x1, x2, dx):
        def value(b, ch, i, j):
            wy1, wy2 = (1024 - dy[i]).astype("int64"), dy[i].astype("int64")
            wx1, wx2 = (1024 - dx[j]).astype("int64"), dx[j].astype("int64")
            t = None
            for row, col, wy, wx in ((y1, x1, wy1, wx1), (y2, x1, wy2, wx1),
                                     (y1, x2, wy1, wx2), (y2, x2, wy2, wx2)):
                term = x[b, ch, row[i], col[j]].astype("int64") * wy * wx
                t = term if t is None else t + term
            r = te_divide_round_half_away(t, tirx.const(1 << 20, "int64"))
            return _te_clamp(r.astype("int32"), a)
        return te.compute(shape, value, name="resize_bilinear")

    return bb.call_te(interpolate_fixed, call.args[0], *taps,
                      primfunc_name_hint="canonqnn_resize2d_bilinear")


# ---------------------------------------------------------------- legalization
def _f(value: float):
    return tirx.const(float(value), "float32")


def _legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if a["rounding"] in Q31_ROUNDINGS:
        return _legalize_q31(bb, call, a)
    if a["rounding"] == "xnnpack":
        return _legalize_xnnpack(bb, call, a)
    n, c, h, w = _tvm.shape_of(call.args[0])
    (oh, ow), mode = a["size"], a["coordinate_transformation_mode"]
    if a["method"] == "nearest":
        ih = _tvm.const(nearest_indices(h, oh, mode, a["nearest_mode"]))
        iw = _tvm.const(nearest_indices(w, ow, mode, a["nearest_mode"]))
        plain = _same_params(a) and (a["act_min"], a["act_max"]) == (-128, 127)

        def nearest(x, rows, cols):
            def value(b, ch, i, j):
                v = x[b, ch, rows[i], cols[j]]
                return v if plain else te_requant_via_real(
                    v, a["x_scale"], a["x_zp"], a["out_scale"], a["out_zp"], a["act_min"],
                    a["act_max"])
            return te.compute((n, c, oh, ow), value, name="resize_nearest")

        return bb.call_te(nearest, call.args[0], ih, iw,
                          primfunc_name_hint="canonqnn_resize2d_nearest")

    taps = [_tvm.const(t) for t in linear_taps(h, oh, mode) + linear_taps(w, ow, mode)]
    integer = a["kernel"] == "integer"
    fused = a["rounding"] == "mlas_neon"

    def interpolate(x, y1, y2, dy1, dy2, x1, x2, dx1, dx2):
        stored = te.compute(x.shape, lambda *i: (x(*i).astype("int32") - a["x_zp"])
                            .astype("float32"), name="stored")
        xf = stored if integer else te.compute(
            x.shape, lambda *i: stored(*i) * _f(a["x_scale"]), name="dequantize")

        def value(b, ch, i, j):
            t = None
            terms = [(coef, xf[b, ch, row[i], col[j]]) for coef, row, col in (
                (dx2[j] * dy2[i], y1, x1), (dx1[j] * dy2[i], y1, x2),
                (dx2[j] * dy1[i], y2, x1), (dx1[j] * dy1[i], y2, x2))]
            if fused:  # as ``bilinear``: onnxruntime's AArch64 build contracts the sum
                (c1, v1), (c2, v2), *rest = terms
                t = te_fma(c1, v1, te_no_contract(c2 * v2))
                for coef, v in rest:
                    t = te_fma(coef, v, t)
            for coef, v in [] if fused else terms:
                # each product rounded on its own, as onnxruntime's x86 build does
                term = te_no_contract(coef * v)
                t = term if t is None else t + term
            if integer:
                v = tirx.trunc(t).astype("int32") + a["out_zp"]
                return te.max(te.min(v, a["act_max"]), a["act_min"]).astype("int8")
            return te_requant_accumulator(t / _f(a["out_scale"]), _f(1.0), a["out_zp"],
                                          a["act_min"], a["act_max"])

        return te.compute((n, c, oh, ow), value, name="resize_bilinear")

    return bb.call_te(interpolate, call.args[0], *taps,
                      primfunc_name_hint="canonqnn_resize2d_bilinear")


def _infer(call: Any) -> Any:
    n, c, _, _ = _tvm.shape_of(call.args[0])
    return _tvm.tensor_type((n, c, *_tvm.attrs_dict(call)["size"]), "int8")


def resize2d_constraint(method: str = "nearest",
                        coordinate_transformation_mode: str = "half_pixel",
                        nearest_mode: str = "round_prefer_floor", kernel: str = "float",
                        rounding: str = "rne_f32", x_qp: QParams | None = None,
                        out_qp: QParams | None = None,
                        source_dtype: str | None = "int8") -> Refusal | None:
    """x int8 NCHW per tensor; output per tensor; method nearest or linear, kernel float or
    integer; coordinate modes half_pixel, asymmetric, pytorch_half_pixel, align_corners,
    tf_half_pixel_for_nn; nearest modes round_prefer_floor, round_prefer_ceil, floor, ceil;
    kernel 'integer' only for linear, with the same parameters in and out; q31 roundings:
    TFLite's resize kernels (the coordinate attributes TFLite's flags map to), kernel 'float',
    equal parameters, bilinear with source_dtype int8 or uint8; mlas_neon: linear, kernel
    'float'"""
    same = x_qp is None or out_qp is None or x_qp.same_as(out_qp)
    mode = coordinate_transformation_mode
    if method not in METHODS or kernel not in KERNELS:
        return Refusal(f"method {method!r} / kernel {kernel!r} not supported")
    if mode not in COORDINATE_MODES:
        return Refusal(f"coordinate_transformation_mode {mode!r} is not supported")
    if nearest_mode not in NEAREST_MODES:
        return Refusal(f"nearest_mode {nearest_mode!r} is not supported")
    if kernel == "integer" and (method != "linear" or not same):
        return Refusal("the integer kernel is bilinear with one set of parameters")
    if rounding == "xnnpack" and method != "linear":
        return Refusal("XNNPACK resizes bilinearly only; xnnpack refused", UnsupportedRounding)
    if rounding == "mlas_neon" and (method, kernel) != ("linear", "float"):
        return Refusal("mlas_neon is onnxruntime's AArch64 float bilinear resize: method "
                       "'linear', kernel 'float'", UnsupportedRounding)
    if rounding not in (*Q31_ROUNDINGS, "xnnpack"):
        return None
    if _tflite_flags(method, mode, nearest_mode) is None:
        return Refusal(f"{method} resize with coordinate_transformation_mode {mode!r}" + (
            f", nearest_mode {nearest_mode!r}" if method == "nearest" else "") +
            f" is no TFLite resize; {rounding} refused", UnsupportedRounding)
    if kernel != "float" or not same:
        return Refusal(f"TFLite's resize kernels move stored values and ignore the parameters; "
                       f"{rounding} needs equal input and output parameters and kernel 'float' "
                       f"(got {x_qp} -> {out_qp}, kernel {kernel!r})", UnsupportedRounding)
    if method == "linear" and rounding != "xnnpack" and source_dtype not in ("int8", "uint8"):
        return Refusal(f"TFLite's int8 and uint8 bilinear kernels differ; {rounding} needs "
                       f"source_dtype 'int8' or 'uint8', got {source_dtype!r}",
                       UnsupportedRounding)
    return None


RESIZE2D = register(CanonicalOp(
    name="resize2d",
    layout="NCHW",
    summary="int8 NCHW resize of H and W, nearest or bilinear (onnxruntime Resize arithmetic)",
    args=("x",),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=_reference,
    constraint=resize2d_constraint,
    family="resize",
    roundings=ROUNDINGS,
    absorbs_clamp=True,
))


def resize2d(x: Any, size, x_qp: QParams, out_qp: QParams, *, method: str,
             coordinate_transformation_mode: str, nearest_mode: str = "round_prefer_floor",
             kernel: str = "float", act=(-128, 127), rounding: str = "rne_f32",
             source_dtype: str | None = None) -> Any:
    """Build ``canonqnn.resize2d`` (output spatial ``size`` = (OH, OW)). ``source_dtype``
    ("int8" | "uint8": the source model's storage type) matters to q31 bilinear only, where
    TFLite's uint8 and int8 kernels differ; it must then be given."""
    RESIZE2D.require(method=method, coordinate_transformation_mode=coordinate_transformation_mode,
                     nearest_mode=nearest_mode, kernel=kernel, rounding=rounding, x_qp=x_qp,
                     out_qp=out_qp, source_dtype=source_dtype)
    return RESIZE2D.call([x], dict(
        size=[int(s) for s in size], method=method,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode, kernel=kernel, x_scale=x_qp.scalar_scale,
        x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp,
        act_min=int(act[0]), act_max=int(act[1]), rounding=rounding,
        source_dtype=source_dtype or "int8"))

