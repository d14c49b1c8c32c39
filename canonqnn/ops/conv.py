"""``canonqnn.conv2d``: int8 (or int16) NCHW convolution with per-channel weights, bias and
requantization.

    acc[n,o,i,j] = sum_{c,ky,kx} (xpad[n, g(o)*C/G + c, i*sh + ky*dh, j*sw + kx*dw] - x_zp)
                                 * (w[o,c,ky,kx] - w_zp[o])  + bias[o]
    y = requant_accumulator(acc, M[o], out_zp, act_min, act_max)
    M[o] = f32(f32(x_scale * w_scale[o]) / out_scale)          (rounding rne_f32)

With a Q31 rounding (``q31_double``, ``q31_single``) the op is TFLite's reference CONV_2D /
DEPTHWISE_CONV_2D kernel: ``y = clamp(MBQM(acc, m[o], shift[o]) + out_zp, act_min, act_max)``
with ``(m, shift) = QuantizeMultiplier(real[o])`` and, as measured on the interpreter,

    real[o] = f64(x_scale) * f64(w_scale[o]) / f64(out_scale)      (source_dtype int8)
    real[o] = f64(f32(x_scale * w_scale[o])) / f64(out_scale)      (source_dtype uint8)

(int8 kernels derive per-channel multipliers in double; the uint8 kernels take the product of the
two float32 scales first). ``source_dtype`` has no effect under ``rne_f32``.

``xpad`` pads with ``x_zp`` (real zero). With ``out_dtype="int32"`` the op returns ``acc``
itself (ONNX ConvInteger); the multiplier must then be exactly 1 and ``out_zp`` 0.

TFLite's 16x8 kernels (Q31 roundings only): ``x`` int16, ``out_dtype="int16"``, every zero point
0. The accumulator has the bias's type: an int64 bias (what the converter writes) makes an
int64 accumulator, requantized by TFLite's int64 ``MultiplyByQuantizedMultiplier`` (``_q31``:
16-bit multiplier, one rounding); an int32 bias keeps the int32 accumulator and ``MBQM``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, topi
from ..numerics.q31 import Q31_ROUNDINGS
from ..qparams import QParams, accumulator_multiplier, check_accumulator_multipliers
from ._dtypes import bias_per_channel, sixteen_by_eight
from ._registry import CanonicalOp, Refusal, register
from ._requant import channel_multipliers, requant_channels, te_requant_channel

ATTRS = ("x_scale", "x_zp", "out_scale", "out_zp", "strides", "padding", "dilation", "groups",
         "act_min", "act_max", "rounding", "out_dtype", "source_dtype")
SOURCE_DTYPES = ("int8", "uint8")


def out_hw(h: int, w: int, kh: int, kw: int, a: dict[str, Any]) -> tuple[int, int]:
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilation"], a["padding"]
    return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1


def _infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    n, _, h, w = _tvm.shape_of(call.args[0])
    o, _, kh, kw = _tvm.shape_of(call.args[1])
    return _tvm.tensor_type((n, o, *out_hw(h, w, kh, kw, a)), a["out_dtype"])


def multiplier(a: dict[str, Any], w_scale: np.ndarray, channels: int) -> np.ndarray:
    m = accumulator_multiplier(a["x_scale"], w_scale, a["out_scale"])
    return np.broadcast_to(m, (channels,)).astype(np.float32)


def q31_real_multiplier(a: dict[str, Any], w_scale: np.ndarray, channels: int) -> np.ndarray:
    """TFLite's per-channel real multiplier, in double (see the module doc)."""
    ws = np.broadcast_to(np.asarray(w_scale, np.float32).reshape(-1), (channels,))
    xs, ys = np.float32(a["x_scale"]), np.float64(np.float32(a["out_scale"]))
    if a.get("source_dtype", "int8") == "uint8":
        return (xs * ws).astype(np.float32).astype(np.float64) / ys
    return np.float64(xs) * ws.astype(np.float64) / ys


def requant_multipliers(a: dict[str, Any], w_scale: np.ndarray,
                        channels: int) -> tuple[str, np.ndarray]:
    """``(kind, table)`` of the requantization (``_requant.channel_multipliers``): under a Q31
    rounding, TFLite's ``QuantizeMultiplier`` of the real multipliers, ``[m[o], shift[o]]``."""
    return channel_multipliers(a["rounding"], lambda: multiplier(a, w_scale, channels),
                               lambda: q31_real_multiplier(a, w_scale, channels))


def reference(x, w, bias, w_scale, w_zp, **a) -> np.ndarray:
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = a["groups"]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilation"], a["padding"]
    oh, ow = out_hw(h, wd, kh, kw, a)
    xp = np.pad(x.astype(np.int64) - a["x_zp"], ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wz = w.astype(np.int64) - np.broadcast_to(w_zp.astype(np.int64), (o,))[:, None, None, None]
    acc = np.zeros((n, o, oh, ow), np.int64)
    opg = o // g
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh,
                       kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
            for gi in range(g):
                xs = patch[:, gi * cg:(gi + 1) * cg]
                ws = wz[gi * opg:(gi + 1) * opg, :, ky, kx]
                acc[:, gi * opg:(gi + 1) * opg] += np.einsum("nchw,oc->nohw", xs, ws)
    accumulator = str(np.asarray(bias).dtype)  # int32, or int64 (TFLite 16x8)
    acc = (acc + bias.astype(np.int64)[None, :, None, None]).astype(accumulator)
    if a["out_dtype"] == "int32":
        return acc
    return requant_channels(acc, *requant_multipliers(a, w_scale, o), a, accumulator, axis=1)


def _legalize(bb: Any, call: Any) -> Any:
    """The op's own compute, what any target gets: the definition's loop nest (on CPUs with
    int8 dot products the build runs faster forms of it, ``canonqnn.build.forms``)."""
    a = _tvm.attrs_dict(call)
    x, w, bias, w_scale, w_zp = call.args
    o = _tvm.shape_of(w)[0]
    accumulator = _tvm.dtype_of(bias)  # int32, or int64 (TFLite 16x8)
    wzp = _tvm.const_value(w_zp)
    symmetric = not np.any(wzp)
    kind, table = requant_multipliers(a, _tvm.const_value(w_scale), o)
    mult = _tvm.const(table, str(table.dtype))
    wzp_const = _tvm.const(np.broadcast_to(wzp, (o,)).astype(np.int32), "int32")

    _, _, h, wd = _tvm.shape_of(x)
    _, cg, kh, kw = _tvm.shape_of(w)
    oh, ow = out_hw(h, wd, kh, kw, a)

    def compute(x, w, bias, mult, wzp):
        n = int(x.shape[0])
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilation"], a["padding"]
        opg = o // a["groups"]
        x_zp = a["x_zp"]
        xp = topi.nn.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], pad_value=x_zp, name="x_pad")
        rc = te.reduce_axis((0, cg), "rc")
        ry = te.reduce_axis((0, kh), "ry")
        rx = te.reduce_axis((0, kw), "rx")

        def tap(nn, oo, i, j):
            cin = rc if a["groups"] == 1 else (oo // opg) * cg + rc
            xv = xp[nn, cin, i * sh + ry * dh, j * sw + rx * dw].astype(accumulator) - x_zp
            wv = w[oo, rc, ry, rx].astype(accumulator)
            return xv * (wv if symmetric else wv - wzp[oo])

        acc = te.compute((n, o, oh, ow), lambda nn, oo, i, j: te.sum(tap(nn, oo, i, j),
                         axis=[rc, ry, rx]), name="acc")
        output = output_value(a, kind, accumulator)
        return te.compute((n, o, oh, ow), lambda nn, oo, i, j: output(
            acc[nn, oo, i, j], bias, mult, oo),
            name="conv2d_acc" if a["out_dtype"] == "int32" else "requant")

    return bb.call_te(compute, x, w, bias, mult, wzp_const, primfunc_name_hint="canonqnn_conv2d")


def output_value(a: dict[str, Any], kind: str, accumulator: str):
    """``value(acc, bias, mult, oo)``: a conv's output from its accumulator for output channel
    ``oo``, the biased accumulator itself (``out_dtype`` int32) or it requantized (every kernel
    form's output stage, ``canonqnn.build.forms``); ``bias`` None where the accumulator
    already holds it."""
    raw = a["out_dtype"] == "int32"

    def value(acc, bias, mult, oo):
        total = acc if bias is None else acc + bias[oo]
        return total if raw else te_requant_channel(total, kind, mult, oo, a, accumulator)

    return value


def conv2d_constraint(x_dtype: str = "int8", out_dtype: str = "int8",
                      accumulator: str = "int32", rounding: str | None = None,
                      zero_points: dict[str, object] | None = None, shifts=None,
                      source_dtype: str = "int8", bias_shape=None,
                      channels: int | None = None) -> Refusal | None:
    """x int8 NCHW, w int8 OIHW (constant or not), bias int32 [O], w_scale float32 [O] or [],
    w_zp int8 [O] or []; per-tensor x and output; out_dtype int8, or int32 with multiplier
    exactly 1 and out_zp 0; source_dtype int8 or uint8 (the TFLite kernel whose multiplier a
    Q31 rounding reproduces); Q31 roundings only: x int16 with out_dtype int16 and zero points
    0, bias int32 or int64 (the accumulator's type)"""
    if source_dtype not in SOURCE_DTYPES:
        return Refusal(f"unknown source_dtype {source_dtype!r}")
    if bias_shape is not None and (why := bias_per_channel(bias_shape, channels)) is not None:
        return why
    return sixteen_by_eight(x_dtype, out_dtype, accumulator, rounding, zero_points, shifts)


CONV2D = register(CanonicalOp(
    name="conv2d",
    layout="NCHW",
    weight_layout="OIHW",
    summary="int8 NCHW/OIHW convolution (groups, dilation, asymmetric pads, per-channel "
            "weights), int32 bias, requantized to int8 with an integer activation clamp; "
            "TFLite 16x8: int16 in and out, int64 bias",
    args=("x", "w", "bias", "w_scale", "w_zp"),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=reference,
    constraint=conv2d_constraint,
    roundings=("rne_f32", "xnnpack", *Q31_ROUNDINGS),
    absorbs_clamp=True,
    absorbs_table=True,
))


def conv2d(x: Any, w: Any, bias: np.ndarray, x_qp: QParams, w_qp: QParams, out_qp: QParams, *,
           strides, padding, dilation, groups: int, act: tuple[int, int] = (-128, 127),
           rounding: str = "rne_f32", source_dtype: str = "int8",
           accumulator: str = "int32") -> Any:
    """Build ``canonqnn.conv2d``; ``out_qp.dtype`` int32 means the raw accumulator.

    ``source_dtype="uint8"``: the model's tensors were uint8 (TFLite derives the Q31 multiplier
    of its uint8 kernels differently). ``accumulator="int64"``: the bias is int64 (TFLite 16x8,
    module doc)."""
    params = dict(x_dtype=_tvm.dtype_of(x), out_dtype=out_qp.dtype, accumulator=accumulator,
                  rounding=rounding, source_dtype=source_dtype,
                  bias_shape=(np.size(bias),), channels=_tvm.shape_of(w)[0],
                  zero_points=dict(x_zp=x_qp.scalar_zp, w_zp=w_qp.zero_point,
                                   out_zp=out_qp.scalar_zp))
    CONV2D.require(**params)
    check_accumulator_multipliers(x_qp.scalar_scale, w_qp.scale, out_qp)
    o = _tvm.shape_of(w)[0]
    attrs = dict(x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
                 out_zp=out_qp.scalar_zp, strides=list(strides), padding=list(padding),
                 dilation=list(dilation), groups=int(groups), act_min=int(act[0]),
                 act_max=int(act[1]), rounding=rounding, out_dtype=out_qp.dtype,
                 source_dtype=source_dtype)
    if accumulator == "int64" and rounding in Q31_ROUNDINGS:  # the int64 requantization's
        CONV2D.require(**params, shifts=requant_multipliers(attrs, w_qp.scale, o)[1][1])
    return CONV2D.call(
        [x, w, _tvm.const(np.asarray(bias, accumulator).reshape(o), accumulator),
         _tvm.const(w_qp.scale, "float32"), _tvm.const(w_qp.zero_point.astype(np.int8), "int8")],
        attrs)
