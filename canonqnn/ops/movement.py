"""int8 data movement: ``reshape``, ``transpose``, ``max_pool2d``, ``concat``, ``requantize``.

``reshape``, ``transpose`` and ``requantize`` also move TFLite's 16x8 int16 activations (the
output has the input's dtype; ``requantize`` on int16 under the Q31 roundings only, zero points
0 as TFLite's int16 QUANTIZE requires).

``reshape``, ``transpose`` and ``max_pool2d`` do no arithmetic: input and output share one
scale/zero point (carried as ``scale``/``zp`` for pattern authors). Flatten, squeeze and
unsqueeze are reshapes. Where a model gives the output other parameters, the op is followed by
``requantize``. ``concat`` requantizes each input whose parameters differ from the output's.

Requantization (rounding rne_f32) is ONNX DequantizeLinear then QuantizeLinear in float32:
``clamp(RNE(f32(f32(q - in_zp) * in_scale) / out_scale) + out_zp)``.

Rounding ``xnnpack`` (``requantize`` only; XNNPACK's int8 convert, which TFLite's default
interpreter runs for an int8 -> int8 QUANTIZE):
    m = lrintf(256 * f32(in_scale / out_scale))   (ratio in [2^-8, 2^7])
    y = clamp(((q - in_zp) * m + 128 >> 8) + out_zp, act_min, act_max)   (ties toward +inf)

Roundings ``q31_double`` / ``q31_single`` reproduce the TFLite interpreter's reference kernels:
``requantize`` is QUANTIZE on integer input (int8/uint8 in and out compute the same integers
after the shift by 128), ``concat`` is CONCATENATION:
    requantize: y = clamp(MBQM(q - in_zp, m, s) + out_zp, act_min, act_max),
                (m, s) = QuantizeMultiplier(double(in_scale) / double(out_scale))
    concat:     inputs with the output's parameters are copied. TFLite's int8 kernel accepts
                nothing else; its uint8 kernel rescales in float32 on the stored uint8 values
                (``source_dtype="uint8"``: u = q + 128, zero points + 128):
                k = f32(in_scale * f32(1 / out_scale)),  c = f32(-in_zp * k)
                y = clamp(round_half_away(f32(f32(u * k) + c)) + out_zp, 0, 255) - 128
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx, topi
from ..numerics.arithmetic import round_half_away
from ..numerics.q31 import Q31_ROUNDINGS, requant_q31
from ..qparams import (
    QParams,
    activation_range,
    tflite_concat_scaling,
    tflite_requantize_multiplier,
    xnnpack_convert_multiplier,
)
from ._arithmetic import te_round_half_away
from ._dtypes import activation_dtype, input_type
from ._q31 import te_requant_q31
from ._registry import CanonicalOp, Refusal, UnsupportedRounding, register
from ._requant import requant_via_real, te_no_contract, te_requant_via_real

F32 = np.float32


def _same_type(call: Any, shape) -> Any:
    return _tvm.tensor_type(shape, "int8")


# ---------------------------------------------------------------- reshape
def reshape_constraint(x_dtype: str, rounding: str | None = None,
                       zero_points=()) -> Refusal | None:
    """x int8, or int16 (TFLite's 16x8 int16 activations, under the Q31 roundings, zero points
    0); static shapes; output shares the input's scale and zero point"""
    return activation_dtype(x_dtype, rounding, zero_points)


RESHAPE = register(CanonicalOp(
    name="reshape",
    summary="int8 (or int16) reshape (also flatten, squeeze, unsqueeze); parameters unchanged",
    args=("x",),
    attrs=("newshape", "scale", "zp"),
    infer=lambda call: input_type(call, _tvm.attrs_dict(call)["newshape"]),
    legalize=lambda bb, call: bb.call_te(topi.reshape, call.args[0],
                                         _tvm.attrs_dict(call)["newshape"],
                                         primfunc_name_hint="canonqnn_reshape"),
    reference=lambda x, newshape, scale, zp: x.reshape(newshape),
    constraint=reshape_constraint,
    family="movement",
))


def reshape(x: Any, newshape, qp: QParams) -> Any:
    RESHAPE.require(x_dtype=_tvm.dtype_of(x), zero_points=(qp.scalar_zp,))
    return RESHAPE.call([x], dict(newshape=[int(d) for d in newshape], scale=qp.scalar_scale,
                                  zp=qp.scalar_zp))


# ---------------------------------------------------------------- transpose
def _transpose_infer(call: Any) -> Any:
    shape = _tvm.shape_of(call.args[0])
    return input_type(call, [shape[i] for i in _tvm.attrs_dict(call)["axes"]])


def transpose_constraint(x_dtype: str, rounding: str | None = None,
                         zero_points=()) -> Refusal | None:
    """x int8, or int16 (TFLite's 16x8 int16 activations, under the Q31 roundings, zero points
    0); output shares the input's scale and zero point"""
    return activation_dtype(x_dtype, rounding, zero_points)


TRANSPOSE = register(CanonicalOp(
    name="transpose",
    summary="int8 (or int16) axis permutation; parameters unchanged",
    args=("x",),
    attrs=("axes", "scale", "zp"),
    infer=_transpose_infer,
    legalize=lambda bb, call: bb.call_te(topi.transpose, call.args[0],
                                         _tvm.attrs_dict(call)["axes"],
                                         primfunc_name_hint="canonqnn_transpose"),
    reference=lambda x, axes, scale, zp: np.transpose(x, axes),
    constraint=transpose_constraint,
    family="movement",
))


def transpose(x: Any, axes, qp: QParams) -> Any:
    TRANSPOSE.require(x_dtype=_tvm.dtype_of(x), zero_points=(qp.scalar_zp,))
    return TRANSPOSE.call([x], dict(axes=[int(a) for a in axes], scale=qp.scalar_scale,
                                    zp=qp.scalar_zp))


# ---------------------------------------------------------------- max_pool2d
def pool_out_size(size: int, k: int, s: int, d: int, p0: int, p1: int, ceil_mode: bool) -> int:
    span = size + p0 + p1 - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p0:  # last window may not start in the end padding
        out -= 1
    return out


def _pool_shape(shape, a: dict[str, Any]) -> tuple[int, ...]:
    n, c, h, w = shape
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = (a["pool_size"], a["strides"],
                                                      a["dilation"], a["padding"])
    return (n, c, pool_out_size(h, kh, sh, dh, pt, pb, a["ceil_mode"]),
            pool_out_size(w, kw, sw, dw, pl, pr, a["ceil_mode"]))


def _max_pool_reference(x, pool_size, strides, padding, dilation, ceil_mode, scale, zp):
    a = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation,
             ceil_mode=ceil_mode)
    n, c, oh, ow = _pool_shape(x.shape, a)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _) = pool_size, strides, dilation, padding
    big = np.full((n, c, x.shape[2] + pt + kh * dh + oh * sh, x.shape[3] + pl + kw * dw + ow * sw),
                  -128, np.int8)
    big[:, :, pt:pt + x.shape[2], pl:pl + x.shape[3]] = x
    out = np.full((n, c, oh, ow), -128, np.int8)
    for ky in range(kh):
        for kx in range(kw):
            win = big[:, :, ky * dh: ky * dh + sh * oh: sh, kx * dw: kx * dw + sw * ow: sw]
            out = np.maximum(out, win[:, :, :oh, :ow])
    return out


def _max_pool_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    n, c, oh, ow = _pool_shape(_tvm.shape_of(call.args[0]), a)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _) = (a["pool_size"], a["strides"], a["dilation"],
                                                    a["padding"])

    def compute(x):
        h, w = int(x.shape[2]), int(x.shape[3])
        ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
        # Pad on the far side as well so that ceil-mode windows never read out of bounds.
        far_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - pt - h)
        far_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - pl - w)
        xp = topi.nn.pad(x, [0, 0, pt, pl], [0, 0, far_h, far_w], pad_value=-128, name="x_pad")
        return te.compute((n, c, oh, ow), lambda nn, cc, i, j: te.max(
            xp[nn, cc, i * sh + ry * dh, j * sw + rx * dw], axis=[ry, rx]), name="max_pool")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_max_pool2d")


def max_pool2d_constraint(x_dtype: str = "int8", x_rank: int = 4,
                          scale: float = 1.0) -> Refusal | None:
    """x int8 NCHW; positive scale (max commutes with dequantize); output shares the input's
    scale and zero point"""
    if x_dtype != "int8":
        return Refusal(f"{x_dtype} input (int8)")
    if x_rank != 4:
        return Refusal(f"rank-{x_rank} input (NCHW)")
    if not scale > 0:
        return Refusal(f"scale {scale!r} is not positive (max commutes with dequantize only "
                       "under a positive scale)")
    return None


MAX_POOL2D = register(CanonicalOp(
    name="max_pool2d",
    layout="NCHW",
    summary="int8 NCHW max pooling (pads never win: they count as -128); parameters unchanged",
    args=("x",),
    attrs=("pool_size", "strides", "padding", "dilation", "ceil_mode", "scale", "zp"),
    infer=lambda call: _same_type(call, _pool_shape(_tvm.shape_of(call.args[0]),
                                                    _tvm.attrs_dict(call))),
    legalize=_max_pool_legalize,
    reference=_max_pool_reference,
    constraint=max_pool2d_constraint,
    family="movement",
))


def max_pool2d(x: Any, qp: QParams, *, pool_size, strides, padding, dilation,
               ceil_mode: bool) -> Any:
    MAX_POOL2D.require(x_dtype=_tvm.dtype_of(x), x_rank=len(_tvm.shape_of(x)),
                       scale=qp.scalar_scale)
    return MAX_POOL2D.call([x], dict(
        pool_size=list(pool_size), strides=list(strides), padding=list(padding),
        dilation=list(dilation), ceil_mode=bool(ceil_mode), scale=qp.scalar_scale,
        zp=qp.scalar_zp))


# ---------------------------------------------------------------- requantize
REQ_ATTRS = ("in_scale", "in_zp", "out_scale", "out_zp", "act_min", "act_max", "rounding")


def _requantize_q31_multiplier(a: dict) -> tuple[int, int]:
    return tflite_requantize_multiplier(a["in_scale"], a["out_scale"],
                                        single_rounding=a["rounding"] == "q31_single")


def _convert_multiplier(in_scale: float, out_scale: float) -> int:
    m = xnnpack_convert_multiplier(in_scale, out_scale)
    if m is None:
        raise UnsupportedRounding(f"canonqnn.requantize: rounding xnnpack needs in_scale / "
                                  f"out_scale in [2^-8, 2^7] (XNNPACK's convert); got "
                                  f"{in_scale!r} / {out_scale!r}")
    return m


def _requantize_reference(x, in_scale, in_zp, out_scale, out_zp, act_min, act_max, rounding):
    if rounding == "xnnpack":
        m = _convert_multiplier(in_scale, out_scale)
        y = ((x.astype(np.int64) - in_zp) * m + 128 >> 8) + out_zp
        return np.clip(y, act_min, act_max).astype(x.dtype)
    if rounding in Q31_ROUNDINGS:
        m, shift = _requantize_q31_multiplier(dict(in_scale=in_scale, out_scale=out_scale,
                                                   rounding=rounding))
        return requant_q31(x.astype(np.int64) - in_zp, m, shift, out_zp, act_min, act_max,
                           rounding, str(x.dtype))
    return requant_via_real(x, in_scale, in_zp, out_scale, out_zp, act_min, act_max)


def _requantize_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if a["rounding"] in Q31_ROUNDINGS:
        m, shift = _requantize_q31_multiplier(a)

        def compute_q31(x):
            return te.compute(x.shape, lambda *i: te_requant_q31(
                x(*i).astype("int32") - _i32(a["in_zp"]), _i32(m), _i32(shift), a["out_zp"],
                a["act_min"], a["act_max"], a["rounding"], x.dtype), name="requantize")

        return bb.call_te(compute_q31, call.args[0], primfunc_name_hint="canonqnn_requantize")
    if a["rounding"] == "xnnpack":
        m = _convert_multiplier(a["in_scale"], a["out_scale"])
        bias = 128 - m * a["in_zp"]  # |x * m + bias| < 2^24

        def compute_convert(x):
            return te.compute(x.shape, lambda *i: te.max(te.min(
                ((x(*i).astype("int32") * _i32(m) + _i32(bias)) >> _i32(8)) + _i32(a["out_zp"]),
                _i32(a["act_max"])), _i32(a["act_min"])).astype(x.dtype), name="requantize")

        return bb.call_te(compute_convert, call.args[0],
                          primfunc_name_hint="canonqnn_requantize")

    def compute(x):
        return te.compute(x.shape, lambda *i: te_requant_via_real(
            x(*i), a["in_scale"], a["in_zp"], a["out_scale"], a["out_zp"], a["act_min"],
            a["act_max"]), name="requantize")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_requantize")


def requantize_constraint(x_dtype: str, rounding: str | None = None,
                          zero_points=(), scales=None) -> Refusal | None:
    """x int8 per tensor, output int8 per tensor; or x and output int16 (TFLite's 16x8 int16
    activations, under the Q31 roundings, zero points 0); xnnpack: in_scale / out_scale in
    [2^-8, 2^7] (scales = (in_scale, out_scale), as XNNPACK's convert)"""
    if rounding == "xnnpack" and scales is not None and \
            xnnpack_convert_multiplier(*scales) is None:
        return Refusal(f"in_scale / out_scale outside [2^-8, 2^7] (XNNPACK's convert); got "
                       f"{scales[0]!r} / {scales[1]!r}", UnsupportedRounding)
    return activation_dtype(x_dtype, rounding, zero_points)


REQUANTIZE = register(CanonicalOp(
    name="requantize",
    summary="int8 -> int8 change of scale/zero point (rne_f32: dequantize then quantize in "
            "float32; q31: TFLite QUANTIZE, also int16 -> int16; xnnpack: XNNPACK's convert)",
    args=("x",),
    attrs=REQ_ATTRS,
    infer=lambda call: input_type(call, _tvm.shape_of(call.args[0])),
    legalize=_requantize_legalize,
    reference=_requantize_reference,
    constraint=requantize_constraint,
    family="movement",
    roundings=("rne_f32", "xnnpack") + Q31_ROUNDINGS,
))


def requantize(x: Any, in_qp: QParams, out_qp: QParams, act: tuple[int, int] | None = None,
               rounding: str = "rne_f32") -> Any:
    """``act`` defaults to the full range of ``x``'s dtype (the output's)."""
    REQUANTIZE.require(x_dtype=_tvm.dtype_of(x), rounding=rounding,
                       zero_points=(in_qp.scalar_zp, out_qp.scalar_zp),
                       scales=(in_qp.scalar_scale, out_qp.scalar_scale))
    if act is None:
        act = activation_range(_tvm.dtype_of(x))
    return REQUANTIZE.call([x], dict(
        in_scale=in_qp.scalar_scale, in_zp=in_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, act_min=int(act[0]), act_max=int(act[1]), rounding=rounding))


# ---------------------------------------------------------------- concat
def _concat_infer(call: Any) -> Any:
    axis = _tvm.attrs_dict(call)["axis"]
    shapes = [_tvm.shape_of(x) for x in call.args]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return _same_type(call, out)


def _concat_reference(*xs, axis, in_scales, in_zps, out_scale, out_zp, rounding,
                      source_dtype):
    parts = []
    for x, s, z in zip(xs, in_scales, in_zps):
        if (s, z) == (out_scale, out_zp):
            parts.append(x)
        elif rounding in Q31_ROUNDINGS:
            parts.append(_tflite_rescale(x, s, z, out_scale, out_zp, source_dtype))
        else:
            parts.append(requant_via_real(x, s, z, out_scale, out_zp))
    return np.concatenate(parts, axis=axis)


def _concat_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)

    def requantized(x, s, z):
        # (a closure, not lambda defaults: TE rejects keyword arguments in fcompute)
        return te.compute(x.shape, lambda *i: te_requant_via_real(
            x(*i), s, z, a["out_scale"], a["out_zp"]), name="requantize")

    def rescaled(x, s, z):
        return te.compute(x.shape, lambda *i: _te_tflite_rescale(
            x(*i), s, z, a["out_scale"], a["out_zp"], a["source_dtype"]), name="rescale")

    q31 = a["rounding"] in Q31_ROUNDINGS

    def compute(*xs):
        parts = []
        for x, s, z in zip(xs, a["in_scales"], a["in_zps"]):
            if (s, z) == (a["out_scale"], a["out_zp"]):
                parts.append(x)
            else:
                parts.append(rescaled(x, s, z) if q31 else requantized(x, s, z))
        return topi.concatenate(parts, a["axis"])

    return bb.call_te(compute, *call.args, primfunc_name_hint="canonqnn_concat")


def concat_constraint(x_dtypes=("int8",), axis: int = 0, rounding: str = "rne_f32",
                      source_dtype: str = "int8", same_params: bool = True) -> Refusal | None:
    """inputs int8, non-negative axis; q31 with differing parameters (``same_params`` false:
    some input's scale / zero point differ from the output's): source_dtype uint8 only (TFLite's
    int8 kernel requires equal parameters); xnnpack: equal parameters (a copy)"""
    if any(d != "int8" for d in x_dtypes):
        return Refusal(f"inputs of {', '.join(sorted(set(x_dtypes)))} (int8)")
    if axis < 0:
        return Refusal(f"axis {axis} (non-negative)")
    if rounding in Q31_ROUNDINGS and source_dtype != "uint8" and not same_params:
        return Refusal(_INT8_RESCALE, UnsupportedRounding)
    if rounding == "xnnpack" and not same_params:
        # the XNNPACK quantizer gives a cat's inputs its output's parameters
        return Refusal("rounding xnnpack needs every input to have the output's parameters "
                       "(XNNPACK's requantization is not implemented)", UnsupportedRounding)
    return None


CONCAT = register(CanonicalOp(
    name="concat",
    summary="int8 concatenation; inputs whose parameters differ from the output's are "
            "requantized (rne_f32: dequantize then quantize in float32; q31: TFLite "
            "CONCATENATION's uint8 float rescaling)",
    args=("*xs",),
    attrs=("axis", "in_scales", "in_zps", "out_scale", "out_zp", "rounding", "source_dtype"),
    infer=_concat_infer,
    legalize=_concat_legalize,
    reference=_concat_reference,
    constraint=concat_constraint,
    family="movement",
    roundings=("rne_f32", "xnnpack") + Q31_ROUNDINGS,
))


def concat(xs: list[Any], in_qps: list[QParams], out_qp: QParams, axis: int,
           rounding: str = "rne_f32", source_dtype: str = "int8") -> Any:
    """Build ``canonqnn.concat``; ``source_dtype`` matters only to the q31 roundings."""
    CONCAT.require(x_dtypes=[_tvm.dtype_of(x) for x in xs], axis=int(axis), rounding=rounding,
                   source_dtype=source_dtype,
                   same_params=all(q.same_as(out_qp) for q in in_qps))
    return CONCAT.call(list(xs), dict(
        axis=int(axis), in_scales=[q.scalar_scale for q in in_qps],
        in_zps=[q.scalar_zp for q in in_qps], out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, rounding=rounding, source_dtype=source_dtype))


# ---------------------------------------------------------------- TFLite concat rescaling
_INT8_RESCALE = ("TFLite's int8 CONCATENATION requires every input to have the output's scale "
                 "and zero point (only its uint8 kernel rescales)")
# Any rounded value beyond this is clamped to 0 or 255 whatever the zero point; clamping the
# float first keeps the conversion to int32 in range.
_RESCALE_LIMIT = 1024.0


def _tflite_rescale(x, in_scale, in_zp, out_scale, out_zp, source_dtype) -> np.ndarray:
    if source_dtype != "uint8":
        raise UnsupportedRounding(_INT8_RESCALE)
    k, c = tflite_concat_scaling(in_scale, in_zp + 128, out_scale)
    u = (x.astype(np.int32) + 128).astype(F32)
    t = np.clip(((u * k).astype(F32) + c).astype(F32), -_RESCALE_LIMIT, _RESCALE_LIMIT)
    v = round_half_away(t).astype(np.int32) + out_zp + 128
    return (np.clip(v, 0, 255) - 128).astype(np.int8)


def _te_tflite_rescale(q, in_scale, in_zp, out_scale, out_zp, source_dtype):
    """TE twin of ``_tflite_rescale`` for one element."""
    if source_dtype != "uint8":
        raise UnsupportedRounding(_INT8_RESCALE)
    k, c = tflite_concat_scaling(in_scale, in_zp + 128, out_scale)
    u = (q.astype("int32") + 128).astype("float32")
    # the product is rounded to float32 before the add (TFLite's build has no FMA there)
    t = te_no_contract(u * tirx.const(float(k), "float32")) + tirx.const(float(c), "float32")
    t = te.max(te.min(t, tirx.const(_RESCALE_LIMIT, "float32")),
               tirx.const(-_RESCALE_LIMIT, "float32"))
    v = te_round_half_away(t).astype("int32") + _i32(out_zp + 128)
    return (te.max(te.min(v, _i32(255)), _i32(0)) - _i32(128)).astype("int8")


def _i32(value: int):
    return tirx.const(int(value), "int32")
