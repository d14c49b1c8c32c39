"""Integer dot products on the CPU's int8 instructions: the packed values, weights and tiles of
the build's int8 kernel forms, and the compute forms of conv2d and depthwise conv2d (docs/build.md,
"Int8 kernels").

LLVM never forms the CPU's integer dot-product instructions from the plain widening loop nest
(``int32(x) * int32(w)`` summed): it multiplies with ``vpmulld``, 8 MACs an instruction. A
legalization for a target with one of the ISAs below therefore writes the reduction in a packed
layout whose innermost ``lanes x pair`` block is one instruction, and the CPU schedule tensorizes
that block (``build.dot_kernels``). The forms:

- ``te_row_conv``: output pixels of a row in lanes, ``pair`` input channels per instruction,
  the weights broadcast; input and output NCHW.
- ``te_plane_conv``: a pointwise conv's whole plane as one such row (no lane idle at a
  row's end).
- ``te_flat_conv``: a stride-1 conv's padded plane flattened into one such row (its taps
  offsets into it).
- ``te_packed_conv``: output channels in lanes, the activation broadcast (rows too short to
  fill a vector).
- ``te_depthwise_conv``: output pixels in lanes, pairs of kernel rows per instruction.
- ``forms.matmul.te_packed_matmul``: ``b``'s columns in lanes (a constant ``b`` packed at
  build time, a run-time one inside the kernel).
- ``forms.channels_last``: convs with channels in lanes, NHWC (the layout pass).

Values, for every form:

- ``pair`` 2 (``vpmaddwd``, AVX2 and AVX-512BW): activations ``int16(x) - x_zp``, weights
  ``w - w_zp`` as int16; each int16 product pair is summed exactly into int32, so the
  accumulator is the exact one.
- ``pair`` 4 (``vpdpbusd``, AVX512-VNNI and AVX-VNNI): the instruction multiplies uint8 by int8,
  so activations are ``uint8(x + 128)``, weights ``w - w_zp`` as int8 (only where that fits),
  and ``sum((x + 128) * w) - (128 + x_zp) * sum(w)`` is the exact accumulator: the correction is
  a build-time constant folded into the bias. Padding holds ``x_zp + 128`` (a real zero), and
  channels padded to a multiple of ``pair`` have zero weights. AArch64's ``sdot`` multiplies
  int8 by int8: activations are ``x`` itself, the correction ``-x_zp * sum(w)``, padding
  ``x_zp`` (``DotISA.act_shift`` is the 128 or the 0).
- ``pair`` 2 on NEON (no int16 pair dot product): two widening multiplies and a pairwise add
  (``dot_kernels``), the same exact sums as ``vpmaddwd``.

Never ``vpmaddubsw``: it saturates int16 pair sums (255 * 127 * 2 > 32767).

Each output is the same exact integer sum as in the plain form (only the order of integer
additions differs), so ``conv.reference`` and ``matmul.reference`` specify both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._tvm import te, tirx
from .. import targets
from ..isa import (
    ACC_BIASED,
    ANNOTATION,
    DEPTHWISE,
    ROWS,
    DotISA,
    isa_for,
    padded_width,
    row_intrinsic,
)

MAX_CORRECTED_K = 65_000  # pair 4: (128 + x_zp) * sum(w) and the raw sum stay inside int32


def host_isa() -> DotISA | None:
    """The ISA a build for this host's CPU uses."""
    return isa_for(targets.target_features(targets.host_target()))


@dataclass(frozen=True)
class PackedWeights:
    """Weights packed for one form (``pack_conv_weights``, ``pack_row_weights``) and what to
    add to the bias (the ``vpdpbusd`` correction; zeros for ``vpmaddwd``)."""

    packed: np.ndarray
    bias_correction: np.ndarray  # [O]


def _real_weights(w: np.ndarray, w_zp: np.ndarray, x_zp: int, isa: DotISA):
    """``(w - w_zp, the bias correction)`` (int64 arrays) for ``isa``, or None where its
    form would not be exact (pair 4: ``w - w_zp`` outside int8, or a reduction too long for
    the int32 correction)."""
    o, c, kh, kw = w.shape
    wz = w.astype(np.int64) - np.broadcast_to(np.asarray(w_zp, np.int64).reshape(-1), (o,))[
        :, None, None, None]
    correction = np.zeros(o, np.int64)
    if isa.pair == 4:
        if wz.min(initial=0) < -128 or wz.max(initial=0) > 127 or c * kh * kw > MAX_CORRECTED_K:
            return None
        correction = -(isa.act_shift + x_zp) * wz.sum(axis=(1, 2, 3))
    return wz, correction


def activation(v: Any, x_zp: int, isa: DotISA) -> Any:
    """An int8 activation as the instruction reads it: ``int16(v) - x_zp`` (pair 2),
    ``uint8(v + 128)`` (``vpdpbusd``) or ``v`` (``sdot``)."""
    if isa.pair == 2:
        return (v.astype("int16") - tirx.const(x_zp, "int16")).astype("int16")
    if isa.act_shift == 0:
        return v
    return (v.astype("int32") + isa.act_shift).astype(isa.act_dtype)


def activation_zero(x_zp: int, isa: DotISA) -> Any:
    """The real zero as ``activation`` writes it (padding, and channels past the last)."""
    if isa.pair == 2:
        return tirx.const(0, "int16")
    return tirx.const(x_zp + isa.act_shift, isa.act_dtype)


def pack_conv_weights(w: np.ndarray, w_zp: np.ndarray, x_zp: int,
                      isa: DotISA) -> PackedWeights | None:
    """``w`` [O, C, KH, KW] packed for ``isa``, output channels in lanes:
    ``[O/L, KH, KW, C/P, L, P]``; None where the packed form would not be exact."""
    real = _real_weights(w, w_zp, x_zp, isa)
    if real is None:
        return None
    wz, correction = real
    o, c, kh, kw = w.shape
    lanes, pair = isa.lanes, isa.pair
    oo, cp = -(-o // lanes), -(-c // pair)
    full = np.zeros((oo * lanes, kh, kw, cp * pair), np.int64)
    full[:o, :, :, :c] = wz.transpose(0, 2, 3, 1)
    packed = full.reshape(oo, lanes, kh, kw, cp, pair).transpose(0, 2, 3, 4, 1, 5)
    return PackedWeights(np.ascontiguousarray(packed).astype(isa.weight_dtype), correction)


def pack_row_weights(w: np.ndarray, w_zp: np.ndarray, x_zp: int,
                     isa: DotISA) -> PackedWeights | None:
    """``w`` [O, C, KH, KW] for the row form (``te_row_conv``): ``[O, KH, KW, C/P, P]``;
    None where the form would not be exact."""
    real = _real_weights(w, w_zp, x_zp, isa)
    if real is None:
        return None
    wz, correction = real
    o, c, kh, kw = w.shape
    cp = -(-c // isa.pair)
    full = np.zeros((o, kh, kw, cp * isa.pair), np.int64)
    full[..., :c] = wz.transpose(0, 2, 3, 1)
    packed = full.reshape(o, kh, kw, cp, isa.pair)
    return PackedWeights(np.ascontiguousarray(packed).astype(isa.weight_dtype), correction)


def rows_fit(out_width: int, isa: DotISA, taps: int = 1) -> bool:
    """Whether a row of ``out_width`` outputs fills whole vectors of ``isa.lanes`` well
    enough for the row form (at most 1/8 of the lanes computed past the row's end), for a
    conv of ``taps`` kernel taps: one with more than one fills no single vector short of
    whole (ResNet-18's 14-wide 3x3 convs, 14 outputs in 16 lanes, ran 5 to 11 % faster with
    output channels in lanes, Zen 4, docs/build.md)."""
    padded = padded_width(out_width, isa)
    if taps > 1 and padded == isa.lanes and out_width < padded:
        return False
    return (padded - out_width) * 8 <= padded


def _few_registers(isa: DotISA) -> bool:
    """16 vector registers (AVX2, AVX-VNNI): a tile with output pixels in lanes holds 8
    accumulators at most, where the rules measured on 32 registers do not hold."""
    return isa.registers <= 16


# the input channels (a group's) from which channels_in_lanes_first applies: an image's first
# layer (3 channels, or 9 and 21 unfolded) ran faster with output pixels in lanes on AVX2
CHANNELS_IN_LANES_MIN_INPUT = 32


def channels_in_lanes_first(isa: DotISA, out_width: int, taps: int, in_channels: int) -> bool:
    """Whether a conv whose output channels fill whole vectors runs with them in lanes
    (``te_packed_conv``) before the forms with output pixels in lanes, except a pointwise
    conv's plane as one row (``plane_as_row``): on an ISA of 16 vector registers (AVX2,
    AVX-VNNI) where the conv has more than one tap or its rows are not whole vectors, and
    ``in_channels`` (a group's) are not an image's few. A row tile there holds 8
    accumulators at most, so each instruction loads more. Measured on AVX2 (Zen 3, each conv
    alone, one thread; docs/build.md): ResNet-18's 3x3 convs 8 to 32 % faster that way than
    in rows or flattened, MobileNet's 7x7 pointwise ones 5 to 11 %; the stems slower (the
    3x3 one 480 against 313 us in rows, ResNet-18's 7x7 one 2.5 against 2.0 ms unfolded)."""
    return (_few_registers(isa) and in_channels >= CHANNELS_IN_LANES_MIN_INPUT
            and (taps > 1 or out_width % isa.lanes != 0))


def with_bias(acc: Any, bias: Any, channel: Any) -> Any:
    """``acc`` plus the int32 ``bias`` of each value's output channel (``channel(*index)``): a
    stage the kernel's schedule folds into the accumulator's start (``fuse_reduction_epilogue``,
    ``dot_kernels``), so a tile starts from its channels' biases instead of zeros. A zero
    start of a tile of contiguous accumulators became a ``memset`` call per tile (LLVM's
    store merging; MobileNet-V2's channels-last convs: 3,600 calls an inference), and the
    requantization then adds no bias. (TE's reduction ``init`` says this directly, but TVM
    0.27's ``create_prim_func`` drops it and starts from zero.)"""
    return te.compute(acc.shape, lambda *i: acc(*i) + bias[channel(*i)], name=ACC_BIASED)


def padded_bias(bias: np.ndarray, lanes: int) -> np.ndarray:
    """An int32 bias padded with zeros to whole vectors of ``lanes`` channels (``with_bias``
    on an accumulator with channels in lanes)."""
    return np.pad(np.asarray(bias, np.int32), (0, -len(bias) % lanes))


def te_row_conv(x: Any, wr: Any, isa: DotISA, x_zp: int, strides, dilation, padding,
                out_hw: tuple[int, int], tile: dict[str, int], groups: int = 1) -> Any:
    """The int32 accumulator ``acc[n, o, i, j]`` (j padded to whole vectors) of an int8 NCHW
    ``x`` and ``pack_row_weights`` ``wr``, output pixels in lanes: the output stays NCHW.

    The input is packed with ``pair`` channels side by side and its columns split by phase
    modulo the stride, ``xp[n, y, c // P, x % sw, x // sw, c % P] = xpad[n, c, y, x]`` (a
    row of every channel together, in cache while a tile reads it), so
    ``lanes`` outputs of a row read ``lanes x pair`` contiguous values for each channel group
    and tap: one instruction with the ``pair`` weights broadcast. Values and padding as
    ``activation`` and ``activation_zero`` write them. With ``groups``, each group's channels
    are padded to whole pairs (``_grouped``)."""
    n, c, h, wd = (int(d) for d in x.shape)
    o, kh, kw, cgb, pair = (int(d) for d in wr.shape)
    (sh, sw), (dh, dw), (pt, pl, _, _) = strides, dilation, padding
    oh, ow = out_hw
    owp = padded_width(ow, isa)
    rows = (oh - 1) * sh + (kh - 1) * dh + 1
    cols = owp + ((kw - 1) * dw) // sw
    channel, block = _grouped(c, groups, cgb, pair, o)

    def pad(nn, ch, y, xx):  # TIR's if_then_else reads x only where the test holds
        real, exists = channel(ch)
        inside = tirx.all(exists, y >= pt, y < h + pt, xx >= pl, xx < wd + pl)
        return tirx.if_then_else(inside, activation(x[nn, real, y - pt, xx - pl], x_zp, isa),
                                 activation_zero(x_zp, isa))

    xpad = te.compute((n, groups * cgb * pair, rows, cols * sw), pad, name="x_pad")
    xp = te.compute((n, rows, groups * cgb, sw, cols, pair), lambda nn, y, g, phase, xo, k: xpad[
        nn, g * pair + k, y, xo * sw + phase], name="x_pack")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    rc = te.reduce_axis((0, cgb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (n, o, oh, owp),
        lambda nn, oc, i, j: te.sum(
            xp[nn, i * sh + ry * dh, block(oc, rc), (rx * dw) % sw, j + (rx * dw) // sw, rk]
            .astype("int32") * wr[oc, ry, rx, rc, rk].astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_rows", attrs={ROWS: {"intrinsic": row_intrinsic(isa), "lanes": isa.lanes,
                                       "borders": [pl, wd], **tile,
                                       # one pass over the input (pad computed in the
                                       # pack) where it measured faster: stride 1, rows of
                                       # at least two vectors
                                       "pad_in_pack": int(sh == sw == 1 and owp >= 2 * isa.lanes),
                                       "macs": n * o * oh * ow * (c // groups) * kh * kw,
                                       "rows_outer": rows_outer(tile, o, oh, kh * kw,
                                                                 rows * sw * cols)}})


def plane_as_row(in_hw: tuple[int, int], out_channels: int, isa: DotISA) -> bool:
    """Whether a pointwise conv (1x1, stride 1, no padding, one group) of an ``in_hw`` plane
    runs as one row of the whole plane (``te_plane_conv``): where its rows would leave lanes
    idle (56 outputs in four 16-lane vectors), at most a quarter of the padded plane idles,
    and the plane's tile reuses each broadcast weight across several vectors (with one
    vector a tile loads once an instruction: 14x14 planes, 13 vectors, ran 1.2 times slower
    that way on AVX512-VNNI). Measured there against the rows or, for rows too short, output
    channels in lanes, one thread: 56x56 planes 11 to 18 % faster, 7x7 ones (49 outputs in
    64 lanes) 2 to 27 %, 9x9 and 11x11 ones 1.8 and 2.3 times. On 16 registers (AVX2) a
    tile of one vector is taken too, where at most 1/16 of the plane idles: there the plane
    beat the rows and output channels in lanes on 14x14 planes (25 vectors for 196 outputs)
    by 7 to 33 %, and output channels in lanes beat it on 7x7 ones (Zen 3, one thread)."""
    h, w = in_hw
    padded = padded_width(h * w, isa)
    if w % isa.lanes == 0 or (padded - h * w) * 4 > padded:
        return False
    if _few_registers(isa):
        return (padded - h * w) * 16 <= padded
    return row_tile(isa, out_channels, h * w)["vectors"] > 1


def plane_pack(x: Any, isa: DotISA, x_zp: int, vectors: int, groups: int) -> Any:
    """An int8 NCHW ``x``'s plane packed ``vectors`` vectors of ``L`` pixels at a time,
    ``xp[n, p // L, c // P, p % L, c % P] = x[n, c, p // W, p % W]`` for ``groups`` groups of
    ``P`` channels, as ``activation`` writes it (the real zero past the plane's end and past
    the last channel): an interleave of ``P`` channels' vectors, so the values of a group
    for ``L`` pixels are contiguous (``te_plane_conv``,
    ``channels_last.te_nhwc_pointwise``)."""
    n, c, h, w = (int(d) for d in x.shape)
    lanes, pair, plane = isa.lanes, isa.pair, h * w

    def pack(nn, jo, g, jl, k):  # TIR's if_then_else reads x only where the test holds
        p, ch = jo * lanes + jl, g * pair + k
        return tirx.if_then_else(tirx.all(p < plane, ch < c),
                                 activation(x[nn, ch, p // w, p % w], x_zp, isa),
                                 activation_zero(x_zp, isa))

    return te.compute((n, vectors, groups, lanes, pair), pack, name="x_pack")


def te_plane_conv(x: Any, wr: Any, isa: DotISA, x_zp: int, tile: dict[str, int]) -> Any:
    """The int32 accumulator ``acc[n, o, 0, p]`` (``p`` the plane's pixel, padded to whole
    vectors) of a pointwise conv (``plane_as_row``) of an int8 NCHW ``x`` and
    ``pack_row_weights`` ``wr``: ``te_row_conv`` with the whole plane as one row, so no lane
    idles at a row's end. The input is packed vector by vector, ``xp[n, p // L, c // P,
    p % L, c % P] = x[n, c, p // W, p % W]`` as ``activation`` writes it (the real zero past
    the plane's end and past the last channel), so the ``L x P`` values of an instruction are
    contiguous and a tile reads them in order. ``tiles_outer`` (a plane of whole tiles): the
    schedule runs the tiles outermost (``dot_kernels.schedule_rows``)."""
    n, c, h, w = (int(d) for d in x.shape)
    o, _, _, cgb, pair = (int(d) for d in wr.shape)
    lanes, plane = isa.lanes, h * w
    padded = padded_width(plane, isa)
    xp = plane_pack(x, isa, x_zp, padded // lanes, cgb)
    ry = te.reduce_axis((0, 1), "ry")
    rx = te.reduce_axis((0, 1), "rx")
    rc = te.reduce_axis((0, cgb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (n, o, 1, padded),
        lambda nn, oc, i, j: te.sum(
            xp[nn, j // lanes, rc, j % lanes, rk].astype("int32")
            * wr[oc, ry, rx, rc, rk].astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_rows", attrs={ROWS: {"intrinsic": row_intrinsic(isa), "lanes": lanes,
                                       "borders": [0, plane], "plane": 1, **tile,
                                       "tiles_outer": int(plane % (tile["vectors"] * lanes)
                                                          == 0),
                                       "macs": n * o * plane * c,
                                       "rows_outer": rows_outer(tile, o, 1, 1, padded)}})


def flat_tile(in_hw: tuple[int, int], kernel: tuple[int, int], padding, out_channels: int,
              isa: DotISA) -> dict[str, int] | None:
    """The tile of ``te_flat_conv`` for a conv at stride 1 (no dilation, one group) of an
    ``in_hw`` plane with a ``kernel`` of more than one tap, where that form leaves fewer lanes
    idle than the rows (``te_row_conv``) by at least 2 % of them, else None. Its outputs are
    the padded plane's pixels flattened (a row's ``kw - 1`` last ones computed and dropped), in
    whole tiles: a 56x56 3x3 conv uses 96 % of the lanes (rows of 56 in four 16-lane vectors,
    87.5 %). Of ``row_tile``'s tiles of up to 4 and of 2 vectors, the one with the fewest idle
    lanes (the wider on a tie)."""
    (h, w), (kh, kw) = in_hw, kernel
    pt, pl, pb, pr = padding
    if kh * kw == 1:
        return None
    wp, oh = w + pl + pr, h + pt + pb - kh + 1
    ow = wp - kw + 1
    best, best_used = None, 0.0
    for vectors in (4, 2):
        tile = row_tile(isa, out_channels, vectors * isa.lanes)
        used = oh * ow / flat_length(oh, wp, tile, isa)
        if used > best_used:
            best, best_used = tile, used
    return best if rows_fit(ow, isa, kh * kw) and best_used >= ow / padded_width(ow, isa) \
        + 0.02 else None


def flat_length(out_height: int, padded_width: int, tile: dict[str, int], isa: DotISA) -> int:
    """The outputs ``te_flat_conv`` computes: the padded plane's ``out_height`` rows flattened,
    in whole tiles."""
    step = tile["vectors"] * isa.lanes
    return -(-(out_height * padded_width) // step) * step


def te_flat_conv(x: Any, wr: Any, isa: DotISA, x_zp: int, padding, out_hw: tuple[int, int],
                 tile: dict[str, int]) -> Any:
    """The int32 accumulator ``acc[n, o, 0, p]`` of a conv at stride 1 (``flat_tile``) of an
    int8 NCHW ``x`` and ``pack_row_weights`` ``wr``, output pixels in lanes over the padded
    plane flattened: output ``(i, j)`` is ``p = i * Wp + j`` (``Wp`` the padded width), and
    tap ``(ry, rx)`` of every output reads the input at ``p + ry * Wp + rx``. So the whole plane
    is one row (``te_plane_conv`` with taps) and no lane idles at a row's end; the
    ``kw - 1`` outputs past a row's end (``j >= OW``) are computed and never read. The input
    is packed with its padding, channel groups outermost, ``xp[n, c // P, y * Wp + x,
    c % P] = xpad[n, c, y, x]`` (as ``activation`` and ``activation_zero`` write it, and the
    real zero past the plane's end), so the ``L x P`` values of an instruction are contiguous
    at any offset. The schedule runs it as the plane form, its tiles outermost
    (``dot_kernels.schedule_rows``)."""
    n, c, h, wd = (int(d) for d in x.shape)
    o, kh, kw, cgb, pair = (int(d) for d in wr.shape)
    pt, pl, _, pr = padding
    oh, ow = out_hw
    wp = wd + pl + pr
    length = flat_length(oh, wp, tile, isa)
    rows = -(-(length + (kh - 1) * wp + kw - 1) // wp)  # whole padded rows every tap reads

    def pack(nn, g, q, k):  # TIR's if_then_else reads x only where the test holds
        y, col, ch = q // wp - pt, q % wp - pl, g * pair + k
        inside = tirx.all(ch < c, y >= 0, y < h, col >= 0, col < wd)
        return tirx.if_then_else(inside, activation(x[nn, ch, y, col], x_zp, isa),
                                 activation_zero(x_zp, isa))

    xp = te.compute((n, cgb, rows * wp, pair), pack, name="x_pack")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    rc = te.reduce_axis((0, cgb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (n, o, 1, length),
        lambda nn, oc, i, p: te.sum(
            xp[nn, rc, p + ry * wp + rx, rk].astype("int32")
            * wr[oc, ry, rx, rc, rk].astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_rows", attrs={ROWS: {"intrinsic": row_intrinsic(isa), "lanes": isa.lanes,
                                       "borders": [pl, wd], "rows_inside": [pt, h],
                                       "plane": 1, "flat": wp, **tile,
                                       "tiles_outer": 1, "rows_outer": 0,
                                       "macs": n * o * oh * ow * c * kh * kw}})


def rows_outer(tile: dict[str, int], out_channels: int, out_height: int, taps: int,
                input_plane: int) -> int:
    """Whether the row form's outer loop runs over row tiles (each reads every channel
    block's weights again) rather than channel blocks (each reads the whole input again):
    the order that reads less again, per input channel ``out_height / rows`` times the
    weights (``out_channels x taps``) against ``out_channels / blocks`` times the input
    plane. Neither fits the L1 cache on the layers where it matters (a 1x1 conv of 512
    channels at 14x14: 1.8 MB from L2 in rows-outer order, 7.3 MB in the other; 5 to 6 %
    faster measured on AVX512-VNNI)."""
    weights = out_height // tile.get("rows", 1) * out_channels * taps
    return int(weights <= out_channels // tile["blocks"] * input_plane)


def _grouped(c: int, groups: int, cgb: int, pair: int, o: int):
    """How a packed input of ``groups`` groups reads ``x``: each group's ``c / groups``
    channels padded to ``cgb`` whole pairs. Returns ``channel(ch) -> (x's channel, whether
    it exists)`` for a packed channel and ``block(oc, rc)``, the packed pair block output
    channel ``oc`` reads at reduction step ``rc`` (one group: ``rc`` itself)."""
    if groups == 1:
        return (lambda ch: (ch, ch < c)), (lambda oc, rc: rc)
    cg, opg, width = c // groups, o // groups, cgb * pair
    return ((lambda ch: ((ch // width) * cg + ch % width, ch % width < cg)),
            (lambda oc, rc: (oc // opg) * cgb + rc))


def row_tile(isa: DotISA, out_channels: int, out_width: int,
             out_height: int = 1) -> dict[str, int]:
    """Output channels (``blocks``, a divisor of O) x output rows (``rows``, a divisor of the
    output height) x vectors along each row (``vectors``, a divisor of the padded row's
    vectors) one tile keeps in registers: at most half the registers as accumulators, the
    rest holding the activations and a broadcast weight. Of the tiles with the most
    accumulators, the one that loads the fewest vectors per instruction (each weight is
    broadcast once for every row and vector of the tile, each activation vector read once
    for every channel): short rows (14 outputs in 16 lanes) take several rows at once."""
    vectors_in_row = padded_width(out_width, isa) // isa.lanes
    best, best_key = {"blocks": 1, "vectors": 1, "rows": 1}, None
    for blocks in (1, 2, 3, 4, 6, 8):
        for vectors in (1, 2, 3, 4):
            for rows in (1, 2, 3, 4):
                if out_channels % blocks or vectors_in_row % vectors or out_height % rows:
                    continue
                held = vectors * rows
                if blocks * held > isa.registers // 2 or blocks * held + held + 2 > \
                        isa.registers:
                    continue
                key = (blocks * held, -(blocks + held), -rows, vectors)
                if best_key is None or key > best_key:
                    best, best_key = {"blocks": blocks, "vectors": vectors, "rows": rows}, key
    return best


def te_packed_conv(x: Any, wp: Any, isa: DotISA, x_zp: int, strides, dilation, padding,
                   out_hw: tuple[int, int], tile: dict[str, int], groups: int = 1) -> Any:
    """The packed accumulator ``acc[n, o // L, i, j, o % L]`` (int32, TE) of an int8 NCHW ``x``
    and packed weights ``wp``; its reduction block carries ``tile`` (the schedule's tile and
    the conv's multiply-accumulates, ``macs``). With ``groups``, a group's output channels
    are whole vectors (``L`` divides them) and its input channels whole pairs (``_grouped``)."""
    n, c, h, w = (int(d) for d in x.shape)
    oo, kh, kw, cgb, lanes, pair = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    oh, ow = out_hw
    channel, block = _grouped(c, groups, cgb, pair, oo * lanes)

    def pack(nn, y, xx, co, ci):  # TIR's if_then_else reads x only where the test holds
        real, exists = channel(co * pair + ci)
        inside = tirx.all(y >= pt, y < h + pt, xx >= pl, xx < w + pl, exists)
        return tirx.if_then_else(inside, activation(x[nn, real, y - pt, xx - pl], x_zp, isa),
                                 activation_zero(x_zp, isa))

    xp = te.compute((n, h + pt + pb, w + pl + pr, groups * cgb, pair), pack, name="x_pack")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    rc = te.reduce_axis((0, cgb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (n, oo, oh, ow, lanes),
        lambda nn, o, i, j, ol: te.sum(
            xp[nn, i * sh + ry * dh, j * sw + rx * dw, block(o * lanes, rc), rk].astype("int32")
            * wp[o, ry, rx, rc, ol, rk].astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_packed", attrs={ANNOTATION: {"intrinsic": isa.intrinsic, **tile}})


def packed_weights_for(w: Any, w_zp: np.ndarray, x_zp: int, isa: DotISA, bias: np.ndarray,
                       rows: bool = False) -> tuple[PackedWeights, np.ndarray] | None:
    """``(packed weights, corrected int32 bias)`` for an int8 conv's (or a 1x1 view of a
    matmul's) constant weights ``w`` [O, C, KH, KW] on ``isa``, packed for the row form
    (``rows``) or with output channels in lanes; None where the form would not be exact."""
    return with_corrected_bias((pack_row_weights if rows else pack_conv_weights)(
        w, w_zp, x_zp, isa), bias)


def with_corrected_bias(weights: PackedWeights | None,
                        bias: np.ndarray) -> tuple[PackedWeights, np.ndarray] | None:
    """``(weights, bias + their correction as int32)``, None where either is None or the sum
    leaves int32."""
    if weights is None:
        return None
    biased = np.asarray(bias).astype(np.int64) + weights.bias_correction
    if np.abs(biased).max(initial=0) >= 2**31:
        return None
    return weights, biased.astype(np.int32)


def depthwise_weights(w: np.ndarray, w_zp: np.ndarray, x_zp: int,
                      isa: DotISA) -> PackedWeights | None:
    """``w - w_zp`` [C, 1, KH, KW] for ``te_depthwise_conv`` on ``isa``, as the row intrinsic
    multiplies them, the missing taps zero: on a pair-2 ISA, kernel rows in pairs,
    ``[C, ceil(KH/2), KW, 2]``; on a pair-4 one, each row's taps in fours,
    ``[C, KH, ceil(KW/4), 4]``, with the bias correction (``_real_weights``). None where the
    form would not be exact."""
    real = _real_weights(w, w_zp, x_zp, isa)
    if real is None:
        return None
    wz, correction = real
    c, _, kh, kw = w.shape
    if isa.pair == 4:
        taps = np.zeros((c, kh, 4 * (-(-kw // 4))), np.int64)
        taps[:, :, :kw] = wz[:, 0]
        packed = taps.reshape(c, kh, -1, 4)
    else:
        rows = np.zeros((c, 2 * (-(-kh // 2)), kw), np.int64)
        rows[:, :kh] = wz[:, 0]
        packed = rows.reshape(c, -1, 2, kw).transpose(0, 1, 3, 2)
    return PackedWeights(np.ascontiguousarray(packed).astype(isa.weight_dtype), correction)


def te_depthwise_conv(x: Any, w: Any, isa: DotISA, x_zp: int, strides, dilation, padding,
                      out_hw: tuple[int, int], kernel: tuple[int, int]) -> Any:
    """The int32 accumulator ``acc[n, c, i, j]`` (j padded to whole vectors) of a depthwise
    conv of an int8 NCHW ``x`` with ``depthwise_weights`` ``w``, without the bias correction.

    Each channel's input is padded as ``activation`` and ``activation_zero`` write it (the
    padding a real zero) and packed so that ``lanes`` outputs of a row read ``lanes x pair``
    contiguous values for each group of ``pair`` taps, one instruction with the group's
    weights broadcast:

    - pair 2 (``vpmaddwd``, int16): two input rows ``dh`` apart side by side, the columns
      split by phase modulo the stride, ``xp[n, c, y, x % sw, x // sw, k] = xpad[n, c,
      y + k*dh, x]``; a strided conv packs only the rows its taps read;
    - pair 4 (``vpdpbusd``, bytes): each input row once, with the four columns output ``j``
      reads for a group of four taps side by side, ``xp[n, c, y, g, j, k] = xpad[n, c, y,
      j*sw + (4g + k)*dw]``: a 3x3 kernel's row is one instruction. (Grouping the rows in
      fours instead, as pair 2 does in twos, packs each input row four times: measured 1.2
      to 1.7 times slower on MobileNet-V1's depthwise shapes but the 7x7 one,
      docs/build.md.)"""
    n, c, h, wd = (int(d) for d in x.shape)
    (sh, sw), (dh, dw), (pt, pl, _, _) = strides, dilation, padding
    oh, ow = out_hw
    owp = padded_width(ow, isa)
    plan = {DEPTHWISE: {"intrinsic": row_intrinsic(isa), "lanes": isa.lanes,
                        "macs": n * c * oh * ow * kernel[0] * kernel[1], "borders": [pl, wd]}}

    def pad(nn, cc, yy, xx):  # TIR's if_then_else reads x only where the test holds
        inside = tirx.all(yy >= pt, yy < h + pt, xx >= pl, xx < wd + pl)
        return tirx.if_then_else(inside, activation(x[nn, cc, yy - pt, xx - pl], x_zp, isa),
                                 activation_zero(x_zp, isa))

    if isa.pair == 4:
        _, kh, groups, _ = (int(d) for d in w.shape)
        rows = (oh - 1) * sh + (kh - 1) * dh + 1
        xpad = te.compute((n, c, rows, (owp - 1) * sw + (4 * groups - 1) * dw + 1), pad,
                          name="x_pad")
        xp = te.compute((n, c, rows, groups, owp, 4), lambda nn, cc, y, g, j, k: xpad[
            nn, cc, y, j * sw + (4 * g + k) * dw], name="x_pack")
        ry = te.reduce_axis((0, kh), "ry")
        rx = te.reduce_axis((0, groups), "rx")
        rk = te.reduce_axis((0, 4), "rk")
        return te.compute((n, c, oh, owp), lambda nn, cc, i, j: te.sum(
            xp[nn, cc, i * sh + ry * dh, rx, j, rk].astype("int32")
            * w[cc, ry, rx, rk].astype("int32"), axis=[ry, rx, rk]),
            name="acc_depthwise", attrs=plan)
    _, pairs, kw, _ = (int(d) for d in w.shape)
    plan[DEPTHWISE]["phases"] = sw  # the pack's column phases (schedule_depthwise: innermost)
    rows = (oh - 1) * sh + 2 * (pairs - 1) * dh + 1
    cols = owp + ((kw - 1) * dw) // sw
    # padded wide and tall enough for every read of the pack below, which then tests nothing
    xpad = te.compute((n, c, rows + dh, cols * sw), pad, name="x_pad")
    # the reduction reads pack rows i*sh + 2*ry*dh: where the stride divides 2*dh, only every
    # sh-th row, so only those are packed (half the pack of a stride-2 conv)
    step = sh if (2 * dh) % sh == 0 else 1
    xp = te.compute((n, c, (rows - 1) // step + 1, sw, cols, 2),
                    lambda nn, cc, y, phase, xo, k: xpad[nn, cc, y * step + k * dh,
                                                         xo * sw + phase], name="x_pack")
    ry = te.reduce_axis((0, pairs), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    rk = te.reduce_axis((0, 2), "rk")
    return te.compute((n, c, oh, owp), lambda nn, cc, i, j: te.sum(
        xp[nn, cc, (i * sh + 2 * ry * dh) // step, (rx * dw) % sw, j + (rx * dw) // sw, rk]
        .astype("int32") * w[cc, ry, rx, rk].astype("int32"), axis=[ry, rx, rk]),
        name="acc_depthwise", attrs=plan)


def conv_tile(isa: DotISA, out_channel_blocks: int, out_width: int) -> dict[str, int]:
    """Output pixels along a row (``width``, a divisor of the row) and channel blocks
    (``blocks``, a divisor of O/L) that one tile keeps in registers: at most about
    ``registers - blocks - 2`` accumulators (the rest hold weights and the broadcast input)."""
    budget = isa.registers // 2
    best = (1, 1)
    for blocks in (1, 2, 3, 4):
        if out_channel_blocks % blocks:
            continue
        for width in range(1, 9):
            if out_width % width or width * blocks > budget or width * blocks + blocks + 2 > \
                    isa.registers:
                continue
            if (width * blocks, width) > (best[0] * best[1], best[0]):
                best = (width, blocks)
    return {"width": best[0], "blocks": best[1]}
