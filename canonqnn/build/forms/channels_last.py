"""Convs run channels-last: NHWC kernels with channels in lanes, which the layout pass
(``build.layout``) asks for where they were measured faster than the NCHW forms
(docs/build.md, "Layout"): a 1x1 conv at stride 1 (``te_nhwc_pointwise``, on the pair-4 ISAs
of ``isa.CHANNELS_LAST_ISAS``) and a depthwise conv (``te_nhwc_depthwise``: a 32-bit multiply
per tap and channel, no packed input).

The accumulator is the exact one of ``ops.conv``'s plain loop nest (only the order of the
integer additions differs), and the bias and requantization are the op's own
(``conv.output_value``), so ``conv.reference`` specifies these forms too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _tvm
from ..._tvm import te, tirx
from ...ops import conv
from .. import targets
from ..isa import CHANNELS_LAST, CHANNELS_LAST_DEPTHWISE, CHANNELS_LAST_ISAS, DotISA, isa_for
from . import dot

CHANNELS_LAST_PLANE = 28  # the largest input plane side run channels-last (docs/build.md)


@dataclass(frozen=True)
class ChannelsLast:
    """How a conv runs channels-last (``channels_last_form``): ``form`` ``"pointwise"`` or
    ``"depthwise"``, the ISA, the weights packed for its kernel and the corrected int32 bias."""

    form: str
    isa: DotISA
    weights: np.ndarray
    bias: np.ndarray


def channels_last_form(call: Any) -> ChannelsLast | None:
    """How this conv runs channels-last when the layout pass (``build.layout``) asks, on
    the current target, or None. Where it was measured faster than the NCHW forms
    (docs/benchmarks.md, AVX512-VNNI): int8 in and out, constant weights and int32 bias, an
    input plane of at most ``CHANNELS_LAST_PLANE`` a side, and either a 1x1 conv at stride 1
    without padding or groups (``te_nhwc_pointwise``; weights ``dot.pack_conv_weights``, exact
    where ``w - w_zp`` fits int8) or a depthwise conv whose channels fill whole vectors
    (``te_nhwc_depthwise``; weights ``depthwise_lane_weights``), the corrected bias inside
    int32."""
    a = _tvm.attrs_dict(call)
    x, w, bias, _, w_zp = call.args
    has_feature = targets.current_target_features()
    isa = isa_for(has_feature) if has_feature is not None else None
    if (isa is None or isa.name not in CHANNELS_LAST_ISAS
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
        found = dot.packed_weights_for(weights, wzp, a["x_zp"], isa, b)
        return None if found is None else ChannelsLast("pointwise", isa, found[0].packed,
                                                       found[1])
    if a["groups"] == c == o > 1 and c % isa.lanes == 0:
        found = dot.with_corrected_bias(depthwise_lane_weights(weights, wzp, a["x_zp"]), b)
        return None if found is None else ChannelsLast("depthwise", isa, found[0].packed,
                                                       found[1])
    return None


def depthwise_lane_weights(w: np.ndarray, w_zp: np.ndarray, x_zp: int) -> dot.PackedWeights:
    """``w - w_zp`` of a depthwise conv's ``w`` [C, 1, KH, KW] laid out ``[KH, KW, C]`` for
    ``te_nhwc_depthwise`` (int8 where it fits, else int16), and the bias correction
    ``-x_zp * sum(w - w_zp)``: the kernel multiplies the stored ``x`` (its padding ``x_zp``),
    so ``sum(x * w) - x_zp * sum(w)`` is the exact accumulator."""
    wz = w.astype(np.int64)[:, 0] - np.asarray(w_zp, np.int64).reshape(-1, 1, 1)
    dtype = "int8" if wz.min(initial=0) >= -128 and wz.max(initial=0) <= 127 else "int16"
    return dot.PackedWeights(np.ascontiguousarray(wz.transpose(1, 2, 0)).astype(dtype),
                             -x_zp * wz.sum(axis=(1, 2)))


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
    oh, ow = conv.out_hw(h, wd, kh, kw, a)
    kind, table = conv.requant_multipliers(a, _tvm.const_value(w_scale), o)
    output = conv.output_value(a, kind, "int32")
    isa = how.isa

    def compute(x, wp, bias, mult):
        if how.form == "depthwise":
            acc = te_nhwc_depthwise(x, wp, isa.lanes, a["x_zp"], a["strides"], a["dilation"],
                                    a["padding"], (oh, ow))
            return te.compute((n, oh, ow, o), lambda nn, i, j, oo: output(
                acc[nn, i, j, oo], bias, mult, oo), name="requant")
        acc = te_nhwc_pointwise(x, wp, isa, a["x_zp"], o, nchw_input, bias)
        lanes = isa.lanes
        # the flattened plane's pixels, then read as NHWC (the schedule inlines the read:
        # the pixels are written straight into the output, as the plane form's row)
        pixels = te.compute((n, oh * ow, o), lambda nn, p, oo: output(
            acc[nn, p, oo // lanes, oo % lanes], None, mult, oo), name="requant_pixels")
        return te.compute((n, oh, ow, o), lambda nn, i, j, oo: pixels[nn, i * ow + j, oo],
                          name="requant")

    bias = np.asarray(how.bias, np.int32)
    if how.form == "pointwise":  # (its accumulator starts from the bias: whole vectors of it)
        bias = dot.padded_bias(bias, isa.lanes)
    return bb.emit(bb.call_te(compute, x, _tvm.const(how.weights, str(how.weights.dtype)),
                              _tvm.const(bias, "int32"),
                              _tvm.const(table, str(table.dtype)),
                              primfunc_name_hint="canonqnn_conv2d_nhwc"))


PIXEL_TILE = 6  # pixels of a channels-last tile (x 4 blocks of lanes: 24 accumulators)


def te_nhwc_pointwise(x: Any, wp: Any, isa: DotISA, x_zp: int, out_channels: int,
                      nchw_input: bool = False, bias: Any = None) -> Any:
    """The packed accumulator ``acc[n, p, o // L, o % L]`` (``p`` the pixel of the flattened
    plane, padded to whole tiles of ``PIXEL_TILE``) of a 1x1 conv at stride 1 of an int8 NHWC
    ``x`` (NCHW: ``nchw_input``) and ``dot.pack_conv_weights`` ``wp`` of ``out_channels``
    channels (padded to whole vectors): output channels in lanes, as ``dot.te_packed_conv``.
    The activations are packed as ``dot.activation`` writes them: from NHWC one contiguous copy,
    ``xp[n, p, c // P, c % P]``; from NCHW ``L`` pixels at a time (``dot.plane_pack``).
    The schedule keeps ``PIXEL_TILE`` pixels x ``blocks`` vectors of output channels in
    registers (onnxruntime's tile on AVX512-VNNI: 6 x 4) while the reduction runs
    (``dot_kernels.schedule_channels_last``). With ``bias`` (int32, whole vectors of
    channels): the accumulator plus it (``dot.with_bias``)."""
    if nchw_input:
        n, c, h, w = (int(d) for d in x.shape)
    else:
        n, h, w, c = (int(d) for d in x.shape)
    oo, _, _, cgb, lanes, pair = (int(d) for d in wp.shape)
    plane = h * w
    padded = -(-plane // PIXEL_TILE) * PIXEL_TILE
    if nchw_input:
        xp = dot.plane_pack(x, isa, x_zp, -(-padded // lanes), cgb)

        def read(nn, p, rc, rk):
            return xp[nn, p // lanes, rc, p % lanes, rk]
    else:
        def pack(nn, p, g, k):  # TIR's if_then_else reads x only where the test holds
            ch = g * pair + k
            return tirx.if_then_else(tirx.all(p < plane, ch < c),
                                     dot.activation(x[nn, p // w, p % w, ch], x_zp, isa),
                                     dot.activation_zero(x_zp, isa))

        xp = te.compute((n, padded, cgb, pair), pack, name="x_pack")

        def read(nn, p, rc, rk):
            return xp[nn, p, rc, rk]

    rc = te.reduce_axis((0, cgb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    blocks = max(b for b in (1, 2, 3, 4) if oo % b == 0)
    acc = te.compute(
        (n, padded, oo, lanes),
        lambda nn, p, ob, ol: te.sum(read(nn, p, rc, rk).astype("int32")
                                     * wp[ob, 0, 0, rc, ol, rk].astype("int32"), axis=[rc, rk]),
        name="acc_nhwc", attrs={CHANNELS_LAST: {"intrinsic": isa.intrinsic, "lanes": lanes,
                                                "pixels": PIXEL_TILE, "blocks": blocks,
                                                "plane": plane,
                                                "macs": n * plane * out_channels * c}})
    return acc if bias is None else dot.with_bias(acc, bias, lambda nn, p, ob, ol: ob * lanes + ol)


def te_nhwc_depthwise(x: Any, w: Any, lanes: int, x_zp: int, strides, dilation, padding,
                      out_hw: tuple[int, int]) -> Any:
    """The int32 accumulator ``acc[n, i, j, c]`` (without the bias correction) of a depthwise
    conv of an int8 NHWC ``x`` with ``depthwise_lane_weights`` ``w`` [KH, KW, C]: channels
    in lanes, each tap one widening 32-bit multiply and add per vector of channels
    (``vpmovsxbd``, ``vpmulld``: the arithmetic XNNPACK's x86 depthwise kernels use). The
    input is padded with ``x_zp`` (a real zero) in one pass, and read in place: no packed
    copy (the four-taps-per-lane ``vpdpbusd`` form it replaced wrote four bytes for every
    input byte and was slower on every MobileNet shape, docs/build.md). The schedule holds
    ``pixels`` outputs of a row x one vector of channels in registers while the taps run
    (``dot_kernels.schedule_channels_last_depthwise``)."""
    n, h, wd, c = (int(d) for d in x.shape)
    kh, kw, _ = (int(d) for d in w.shape)
    (sh, sw), (dh, dw), (pt, pl, _, _) = strides, dilation, padding
    oh, ow = out_hw
    rows = (oh - 1) * sh + (kh - 1) * dh + 1
    cols = (ow - 1) * sw + (kw - 1) * dw + 1

    def pad(nn, y, xx, ch):  # TIR's if_then_else reads x only where the test holds
        inside = tirx.all(y >= pt, y < h + pt, xx >= pl, xx < wd + pl)
        return tirx.if_then_else(inside, x[nn, y - pt, xx - pl, ch], tirx.const(x_zp, "int8"))

    xpad = te.compute((n, rows, cols, c), pad, name="x_pad")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    tile = max(t for t in range(1, 9) if ow % t == 0)
    return te.compute(
        (n, oh, ow, c),
        lambda nn, i, j, ch: te.sum(xpad[nn, i * sh + ry * dh, j * sw + rx * dw, ch].astype(
            "int32") * w[ry, rx, ch].astype("int32"), axis=[ry, rx]),
        name="acc_nhwc_depthwise",
        attrs={CHANNELS_LAST_DEPTHWISE: {"intrinsic": "", "lanes": lanes, "pixels": tile,
                                         "borders": [pl, wd],
                                         "macs": n * oh * ow * c * kh * kw}})
