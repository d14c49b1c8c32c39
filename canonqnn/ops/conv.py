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

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _tvm, dot_isa
from .._tvm import te, topi
from ..numerics.q31 import Q31_ROUNDINGS
from ..qparams import QParams, accumulator_multiplier, check_accumulator_multipliers
from . import _dot
from ._dtypes import check_sixteen_bit
from ._registry import CanonicalOp, register
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
    packed = _packed_weights(a, call, accumulator, wzp)
    found = _depthwise_weights(a, call, accumulator, wzp, ow) if packed is None else None
    depthwise = found[0] if found is not None else None
    if packed is not None:  # the weights (and the bias correction of vpdpbusd) at build time
        isa, weights, corrected, form = packed
        bias, w = _tvm.const(corrected, "int32"), _tvm.const(weights.packed, isa.weight_dtype)
    elif found is not None:
        _, weights, corrected = found
        w = _tvm.const(weights.packed, depthwise.weight_dtype)
        if corrected is not None:
            bias = _tvm.const(corrected, "int32")

    def accumulate(x, w, wzp):
        """``acc(nn, oo, i, j)``: the accumulator without bias, in the form chosen above."""
        n, c = (int(d) for d in x.shape[:2])
        if packed is not None and form == "plane":  # the whole plane as one row
            acc = _dot.te_plane_conv(x, w, isa, a["x_zp"], _dot.row_tile(isa, o, oh * ow))
            return lambda nn, oo, i, j: acc[nn, oo, 0, i * ow + j]
        if packed is not None and form == "rows":  # output pixels in lanes: NCHW already
            acc = _dot.te_row_conv(x, w, isa, a["x_zp"], a["strides"], a["dilation"],
                                   a["padding"], (oh, ow), _dot.row_tile(isa, o, ow, oh),
                                   a["groups"])
            return lambda nn, oo, i, j: acc[nn, oo, i, j]
        if packed is not None:  # output channels in lanes
            lanes = isa.lanes
            acc = _dot.te_packed_conv(x, w, isa, a["x_zp"], a["strides"], a["dilation"],
                                      a["padding"], (oh, ow),
                                      {**_dot.conv_tile(isa, int(w.shape[0]), ow),
                                       "macs": n * o * oh * ow * cg * kh * kw}, a["groups"])
            return lambda nn, oo, i, j: acc[nn, oo // lanes, i, j, oo % lanes]
        if depthwise is not None:
            acc = _dot.te_depthwise_conv(x, w, depthwise, a["x_zp"], a["strides"],
                                         a["dilation"], a["padding"], (oh, ow), (kh, kw))
            return lambda nn, oo, i, j: acc[nn, oo, i, j]
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
        return lambda nn, oo, i, j: acc[nn, oo, i, j]

    def compute(x, w, bias, mult, wzp):
        acc = accumulate(x, w, wzp)
        shape = (int(x.shape[0]), o, oh, ow)
        raw = a["out_dtype"] == "int32"
        name = "conv2d_acc" if raw else "requant"
        output = _output_value(a, kind, accumulator)

        def value(nn, oo, i, j):
            return output(acc(nn, oo, i, j), bias, mult, oo)

        if packed is not None and form == "plane":
            # each channel's plane as one row of exactly its pixels, then read as NCHW (the
            # schedule inlines the read: the row is written straight into the output). One
            # stage reading the padded accumulator at i * W + j would not do: TVM's region
            # analysis gives that stage a range of j cut short by the padding.
            row = te.compute((shape[0], o, 1, oh * ow),
                             lambda nn, oo, i, j: value(nn, oo, 0, j), name=f"{name}_rows")
            return te.compute(shape, lambda nn, oo, i, j: row[nn, oo, 0, i * ow + j],
                              name=name)
        padded = dot_isa.padded_width(ow, isa if packed is not None and form == "rows"
                                      else depthwise)
        if raw or padded == ow:
            return te.compute(shape, value, name=name)
        # requantized on whole vectors of the padded row, then the row's outputs copied out:
        # a row's tail read from the vector accumulator in pieces stalls on store forwarding
        whole = te.compute((*shape[:3], padded), value, name="requant_rows")
        return te.compute(shape, lambda nn, oo, i, j: whole[nn, oo, i, j], name="requant")

    return bb.call_te(compute, x, w, bias, mult, wzp_const, primfunc_name_hint="canonqnn_conv2d")


def _output_value(a: dict[str, Any], kind: str, accumulator: str):
    """``value(acc, bias, mult, oo)``: a conv's output from its accumulator for output channel
    ``oo``, the biased accumulator itself (``out_dtype`` int32) or it requantized."""
    raw = a["out_dtype"] == "int32"

    def value(acc, bias, mult, oo):
        total = acc + bias[oo]
        return total if raw else te_requant_channel(total, kind, mult, oo, a, accumulator)

    return value


CHANNELS_LAST_PLANE = 28  # the largest input plane side run channels-last (docs/build.md)


@dataclass(frozen=True)
class ChannelsLast:
    """How a conv runs channels-last (``channels_last_form``): ``form`` ``"pointwise"`` or
    ``"depthwise"``, the ISA, the weights packed for its kernel and the corrected int32 bias."""

    form: str
    isa: dot_isa.DotISA
    weights: np.ndarray
    bias: np.ndarray


def channels_last_form(call: Any) -> ChannelsLast | None:
    """How this conv runs channels-last when the layout pass (``canonqnn.layout``) asks, on
    the current target, or None. Where it was measured faster than the NCHW forms
    (docs/benchmarks.md, AVX512-VNNI): int8 in and out, constant weights and int32 bias, an
    input plane of at most ``CHANNELS_LAST_PLANE`` a side, and either a 1x1 conv at stride 1
    without padding or groups (``_dot.te_nhwc_pointwise``; weights ``pack_conv_weights``) or
    a depthwise conv whose channels fill whole vectors (``_dot.te_nhwc_depthwise``; weights
    ``depthwise_weights`` laid out ``[KH, KW/4, C, 4]``), the packing exact (``w - w_zp``
    inside int8, the corrected bias inside int32)."""
    a = _tvm.attrs_dict(call)
    x, w, bias, _, w_zp = call.args
    has_feature = _tvm.current_target_features()
    isa = dot_isa.isa_for(has_feature) if has_feature is not None else None
    if (isa is None or isa.name not in dot_isa.CHANNELS_LAST_ISAS
            or _tvm.dtype_of(x) != "int8" or a["out_dtype"] != "int8"
            or _tvm.dtype_of(bias) != "int32" or not _tvm.is_const(w)
            or not _tvm.is_const(bias)):
        return None
    _, c, h, wd = _tvm.shape_of(x)
    o, _, kh, kw = _tvm.shape_of(w)
    if max(h, wd) > CHANNELS_LAST_PLANE:
        return None
    weights, wzp, b = _tvm.const_value(w), _tvm.const_value(w_zp), _tvm.const_value(bias)
    if (kh == kw == 1 and a["groups"] == 1 and tuple(a["strides"]) == (1, 1)
            and not any(a["padding"])):
        found = _dot.packed_weights_for(weights, wzp, a["x_zp"], isa, b)
        return None if found is None else ChannelsLast("pointwise", isa, found[0].packed,
                                                       found[1])
    if a["groups"] == c == o > 1 and c % isa.lanes == 0:
        found = _dot.with_corrected_bias(_dot.depthwise_weights(weights, wzp, a["x_zp"], isa),
                                         b)
        return None if found is None else ChannelsLast(
            "depthwise", isa, np.ascontiguousarray(found[0].packed.transpose(1, 2, 0, 3)),
            found[1])
    return None


def legalize_channels_last(bb: Any, call: Any, x: Any, how: ChannelsLast,
                           nchw_input: bool) -> Any:
    """The conv ``call`` run as ``how`` (``channels_last_form``) from ``x``, its input as NHWC
    (or NCHW, ``nchw_input``: a 1x1 conv's only), into an NHWC output: the bound variable of
    the kernel ``bb`` emits."""
    a = _tvm.attrs_dict(call)
    w, w_scale = call.args[1], call.args[3]
    o, _, kh, kw = _tvm.shape_of(w)
    n = _tvm.shape_of(x)[0]
    _, _, h, wd = _tvm.shape_of(call.args[0])
    oh, ow = out_hw(h, wd, kh, kw, a)
    kind, table = requant_multipliers(a, _tvm.const_value(w_scale), o)
    output = _output_value(a, kind, "int32")
    isa = how.isa

    def compute(x, wp, bias, mult):
        if how.form == "depthwise":
            acc = _dot.te_nhwc_depthwise(x, wp, isa, a["x_zp"], a["strides"], a["dilation"],
                                         a["padding"], (oh, ow), (kh, kw))
            return te.compute((n, oh, ow, o), lambda nn, i, j, oo: output(
                acc[nn, i, j, oo], bias, mult, oo), name="requant")
        acc = _dot.te_nhwc_pointwise(x, wp, isa, a["x_zp"], o, nchw_input)
        lanes = isa.lanes
        # the flattened plane's pixels, then read as NHWC (the schedule inlines the read:
        # the pixels are written straight into the output, as the plane form's row)
        pixels = te.compute((n, oh * ow, o), lambda nn, p, oo: output(
            acc[nn, p, oo // lanes, oo % lanes], bias, mult, oo), name="requant_pixels")
        return te.compute((n, oh, ow, o), lambda nn, i, j, oo: pixels[nn, i * ow + j, oo],
                          name="requant")

    return bb.emit(bb.call_te(compute, x, _tvm.const(how.weights, isa.weight_dtype),
                              _tvm.const(np.asarray(how.bias, np.int32), "int32"),
                              _tvm.const(table, str(table.dtype)),
                              primfunc_name_hint="canonqnn_conv2d_nhwc"))


def _depthwise_weights(a: dict[str, Any], call: Any, accumulator: str, wzp: np.ndarray,
                       out_width: int):
    """``(isa, PackedWeights, corrected bias)`` of the depthwise form
    (``ops._dot.te_depthwise_conv``) where it applies: one output channel per input channel,
    int8, constant weights, an int32 accumulator, a target with a dot-product instruction;
    the first of ``dot_isa.depthwise_isas`` the weights are exact on (an int16-pair one
    where the bias is not constant: it takes no correction, and the bias is None). Else None.
    ``out_width``: the output row's length."""
    x, w, bias = call.args[:3]
    has_feature = _tvm.current_target_features()
    if (has_feature is None or not a["groups"] == _tvm.shape_of(x)[1] == _tvm.shape_of(w)[0] > 1
            or accumulator != "int32" or _tvm.dtype_of(x) != "int8" or not _tvm.is_const(w)):
        return None
    for isa in dot_isa.depthwise_isas(has_feature, out_width):
        weights = _dot.depthwise_weights(_tvm.const_value(w), wzp, a["x_zp"], isa)
        if weights is None:
            continue
        if not _tvm.is_const(bias):
            if not weights.bias_correction.any():
                return isa, weights, None
        elif (found := _dot.with_corrected_bias(weights, _tvm.const_value(bias))) is not None:
            return isa, *found
    return None


def _packed_weights(a: dict[str, Any], call: Any, accumulator: str, wzp: np.ndarray):
    """``(isa, PackedWeights, bias, form)`` where the conv runs on the target's dot-product
    instructions (``ops._dot``): an int8 conv with constant weights and bias and an int32
    accumulator, not depthwise (``_depthwise_weights``'); else None (the plain loop nest).
    ``form``: ``"plane"``, output pixels in lanes with the whole plane as one row
    (``te_plane_conv``), for the pointwise convs ``_dot.plane_as_row`` names; ``"rows"``,
    output pixels in lanes (``te_row_conv``), where the output row fills the vectors; else
    ``"channels"``, output channels in lanes (``te_packed_conv``), where each group's output
    channels fill whole vectors."""
    x, w, bias = call.args[:3]
    if (accumulator != "int32" or _tvm.dtype_of(x) != "int8" or not _tvm.is_const(w)
            or not _tvm.is_const(bias)):
        return None
    _, c, h, wd = _tvm.shape_of(x)
    o, _, kh, kw = _tvm.shape_of(w)
    groups = a["groups"]
    has_feature = _tvm.current_target_features()
    isa = dot_isa.isa_for(has_feature) if has_feature is not None else None
    if isa is None or groups == c == o > 1:  # depthwise: its own form
        return None
    pointwise = (kh == kw == 1 and groups == 1 and tuple(a["strides"]) == (1, 1)
                 and not any(a["padding"]))
    if pointwise and _dot.plane_as_row((h, wd), o, isa):
        form = "plane"
    elif _dot.rows_fit(out_hw(h, wd, kh, kw, a)[1], isa):
        form = "rows"
    elif groups > 1 and (o // groups) % isa.lanes:
        return None
    else:
        form = "channels"
    found = _dot.packed_weights_for(_tvm.const_value(w), wzp, a["x_zp"], isa,
                                    _tvm.const_value(bias), rows=form != "channels")
    return None if found is None else (isa, *found, form)


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
    constraints="x int8 NCHW, w int8 OIHW (constant or not), bias int32 [O], "
                "w_scale float32 [O] or [], w_zp int8 [O] or []; per-tensor x and output; "
                "out_dtype int8, or int32 with "
                "multiplier exactly 1 and out_zp 0; source_dtype int8 or uint8 (the TFLite "
                "kernel whose multiplier a Q31 rounding reproduces); Q31 roundings only: x "
                "int16 with out_dtype int16 and zero points 0, bias int32 or int64 (the "
                "accumulator's type)",
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
    if source_dtype not in SOURCE_DTYPES:
        raise ValueError(f"canonqnn.conv2d: unknown source_dtype {source_dtype!r}")
    check_accumulator_multipliers(x_qp.scalar_scale, w_qp.scale, out_qp)
    o = _tvm.shape_of(w)[0]
    attrs = dict(x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
                 out_zp=out_qp.scalar_zp, strides=list(strides), padding=list(padding),
                 dilation=list(dilation), groups=int(groups), act_min=int(act[0]),
                 act_max=int(act[1]), rounding=rounding, out_dtype=out_qp.dtype,
                 source_dtype=source_dtype)
    check_sixteen_bit(
        "conv2d", _tvm.dtype_of(x), out_qp.dtype, accumulator, rounding,
        dict(x_zp=x_qp.scalar_zp, w_zp=w_qp.zero_point, out_zp=out_qp.scalar_zp),
        shifts=requant_multipliers(attrs, w_qp.scale, o)[1][1] if accumulator == "int64" and
        rounding in Q31_ROUNDINGS else None)
    return CONV2D.call(
        [x, w, _tvm.const(np.asarray(bias, accumulator).reshape(o), accumulator),
         _tvm.const(w_qp.scale, "float32"), _tvm.const(w_qp.zero_point.astype(np.int8), "int8")],
        attrs)
