"""Integer dot products on the CPU's int8 instructions: the packed compute form of conv2d.

LLVM never forms the CPU's integer dot-product instructions from the plain widening loop nest
(``int32(x) * int32(w)`` summed): it multiplies with ``vpmulld``, 8 MACs an instruction. A
legalization for a target with one of the ISAs below therefore writes the reduction in a packed
layout whose innermost ``lanes x pair`` block is one instruction, and the CPU schedule tensorizes
that block (``canonqnn._tvm_dot``):

    acc[n, o // L, i, j, o % L] = sum_{ky, kx, c} xp[n, i*sh + ky*dh, j*sw + kx*dw, c // P, c % P]
                                                  * wp[o // L, ky, kx, c // P, o % L, c % P]

- ``pair`` 2 (``vpmaddwd``, AVX2 and AVX-512BW): ``xp = int16(x) - x_zp`` and ``wp`` holds
  ``w - w_zp`` as int16; each int16 product pair is summed exactly into int32, so ``acc`` is
  the exact accumulator.
- ``pair`` 4 (``vpdpbusd``, AVX512-VNNI and AVX-VNNI): the instruction multiplies uint8 by int8,
  so ``xp = uint8(x + 128)`` and ``wp = w - w_zp`` as int8 (only where that fits), and
  ``sum((x + 128) * w) - (128 + x_zp) * sum(w)`` is the exact accumulator: the correction is a
  build-time constant folded into the bias. Padding holds ``x_zp + 128`` (a real zero), and
  channels padded to a multiple of ``pair`` have zero weights.

Never ``vpmaddubsw``: it saturates int16 pair sums (255 * 127 * 2 > 32767).

The arithmetic is the plain form's (each output the same exact integer sum, only the order of
integer additions differs), so ``conv.reference`` specifies both; ``ops.conv`` uses this form
where ``isa_for(target)`` names an ISA and the weights are constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._tvm import te, tirx

UINT8_SHIFT = 128
ANNOTATION = "canonqnn.dot"  # block annotation: the tensor intrinsic and tile the schedule uses
MAX_CORRECTED_K = 65_000  # pair 4: (128 + x_zp) * sum(w) and the raw sum stay inside int32


@dataclass(frozen=True)
class DotISA:
    """One integer dot-product instruction: ``lanes`` int32 outputs, each the sum of ``pair``
    products, with ``registers`` vector registers to hold an output tile in."""

    name: str
    features: tuple[str, ...]  # LLVM target features the instruction needs
    lanes: int
    pair: int
    llvm_intrinsic: str
    registers: int

    @property
    def intrinsic(self) -> str:
        return f"canonqnn_dot_{self.lanes}x{self.pair}_{self.name}"

    @property
    def act_dtype(self) -> str:
        return "uint8" if self.pair == 4 else "int16"

    @property
    def weight_dtype(self) -> str:
        return "int8" if self.pair == 4 else "int16"


# In order of preference; the first whose features the target has is used.
ISAS = (
    DotISA("avx512_vnni", ("avx512vnni", "avx512bw"), 16, 4, "llvm.x86.avx512.vpdpbusd.512", 32),
    DotISA("avx_vnni", ("avxvnni",), 8, 4, "llvm.x86.avx512.vpdpbusd.256", 16),
    DotISA("avx512bw", ("avx512bw",), 16, 2, "llvm.x86.avx512.pmaddw.d.512", 32),
    DotISA("avx2", ("avx2",), 8, 2, "llvm.x86.avx2.pmadd.wd", 16),
)


def isa_for(has_feature) -> DotISA | None:
    """The ISA to use given ``has_feature(name) -> bool`` of the target, or None."""
    return next((isa for isa in ISAS if all(has_feature(f) for f in isa.features)), None)


@dataclass(frozen=True)
class PackedWeights:
    """Weights packed ``[O/L, KH, KW, C/P, L, P]`` and the int32 to add to the bias."""

    packed: np.ndarray
    bias_correction: np.ndarray  # [O]


def pack_conv_weights(w: np.ndarray, w_zp: np.ndarray, x_zp: int,
                      isa: DotISA) -> PackedWeights | None:
    """``w`` [O, C, KH, KW] packed for ``isa``; None where the packed form would not be exact
    (pair 4: ``w - w_zp`` outside int8, or a reduction too long for the int32 correction)."""
    o, c, kh, kw = w.shape
    wz = w.astype(np.int64) - np.broadcast_to(np.asarray(w_zp, np.int64).reshape(-1), (o,))[
        :, None, None, None]
    correction = np.zeros(o, np.int64)
    if isa.pair == 4:
        if wz.min(initial=0) < -128 or wz.max(initial=0) > 127 or c * kh * kw > MAX_CORRECTED_K:
            return None
        correction = -(UINT8_SHIFT + x_zp) * wz.sum(axis=(1, 2, 3))
    lanes, pair = isa.lanes, isa.pair
    oo, cp = -(-o // lanes), -(-c // pair)
    full = np.zeros((oo * lanes, kh, kw, cp * pair), np.int64)
    full[:o, :, :, :c] = wz.transpose(0, 2, 3, 1)
    packed = full.reshape(oo, lanes, kh, kw, cp, pair).transpose(0, 2, 3, 4, 1, 5)
    return PackedWeights(np.ascontiguousarray(packed).astype(isa.weight_dtype), correction)


def te_packed_conv(x: Any, wp: Any, isa: DotISA, x_zp: int, strides, dilation, padding,
                   out_hw: tuple[int, int], tile: dict[str, int]) -> Any:
    """The packed accumulator ``acc[n, o // L, i, j, o % L]`` (int32, TE) of an int8 NCHW ``x``
    and packed weights ``wp``; its reduction block carries the tile the schedule uses."""
    n, c, h, w = (int(d) for d in x.shape)
    oo, kh, kw, cp, lanes, pair = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    oh, ow = out_hw

    def pack(nn, y, xx, co, ci):
        ch = co * pair + ci
        inside = tirx.all(y >= pt, y < h + pt, xx >= pl, xx < w + pl, ch < c)
        v = x[nn, tirx.min(ch, c - 1), tirx.max(tirx.min(y - pt, h - 1), 0),
              tirx.max(tirx.min(xx - pl, w - 1), 0)]
        if pair == 2:
            real = (v.astype("int16") - tirx.const(x_zp, "int16")).astype("int16")
            return tirx.if_then_else(inside, real, tirx.const(0, "int16"))
        shifted = (v.astype("int32") + UINT8_SHIFT).astype("uint8")
        return tirx.if_then_else(inside, shifted, tirx.const(x_zp + UINT8_SHIFT, "uint8"))

    xp = te.compute((n, h + pt + pb, w + pl + pr, cp, pair), pack, name="x_pack")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    rc = te.reduce_axis((0, cp), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (n, oo, oh, ow, lanes),
        lambda nn, o, i, j, ol: te.sum(
            xp[nn, i * sh + ry * dh, j * sw + rx * dw, rc, rk].astype("int32")
            * wp[o, ry, rx, rc, ol, rk].astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_packed", attrs={ANNOTATION: {"intrinsic": isa.intrinsic, **tile}})


def te_packed_matmul(a: Any, bp: Any, isa: DotISA, a_zp: int, tile: dict[str, int]) -> Any:
    """The packed accumulator of ``a`` [..., M, K] (int8) times a constant ``b`` [K, N] packed
    as a 1x1 conv's weights: ``acc[batch, n // L, 0, m, n % L]``, batch the leading dims of
    ``a`` flattened, in the loop structure of ``te_packed_conv`` (rows = batch x column blocks,
    tiles along m) so one schedule serves both."""
    *lead, m, k = (int(d) for d in a.shape)
    batch = int(np.prod(lead)) if lead else 1
    oo, _, _, kb, lanes, pair = (int(d) for d in bp.shape)

    def operand(nb, row, kk):
        index, rest = [], nb
        for dim in reversed(lead):  # unravel the flattened batch index
            index.insert(0, rest % dim)
            rest = rest // dim
        return a[(*index, row, kk)]

    def pack(nb, row, co, ci):
        kk = co * pair + ci
        v = operand(nb, row, tirx.min(kk, k - 1))
        if pair == 2:
            real = (v.astype("int16") - tirx.const(a_zp, "int16")).astype("int16")
            return tirx.if_then_else(kk < k, real, tirx.const(0, "int16"))
        return (v.astype("int32") + UINT8_SHIFT).astype("uint8")

    ap = te.compute((batch, m, kb, pair), pack, name="a_pack")
    ry = te.reduce_axis((0, 1), "ry")
    rx = te.reduce_axis((0, 1), "rx")
    rc = te.reduce_axis((0, kb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (batch, oo, 1, m, lanes),
        lambda nb, o, i, j, ol: te.sum(
            ap[nb, j + i + ry, rc, rk].astype("int32")
            * bp[o, ry, rx, rc, ol, rk].astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_packed", attrs={ANNOTATION: {"intrinsic": isa.intrinsic, **tile}})


def packed_weights_for(w: Any, w_zp: np.ndarray, x_zp: int, has_feature, bias: np.ndarray,
                       ) -> tuple[DotISA, PackedWeights, np.ndarray] | None:
    """``(isa, packed weights, corrected int32 bias)`` for an int8 conv's (or a 1x1 view of a
    matmul's) constant weights ``w`` [O, C, KH, KW] on a target with ``has_feature``; None
    where no ISA applies or the packed form would not be exact."""
    isa = isa_for(has_feature) if has_feature is not None else None
    if isa is None:
        return None
    weights = pack_conv_weights(w, w_zp, x_zp, isa)
    if weights is None:
        return None
    biased = np.asarray(bias).astype(np.int64) + weights.bias_correction
    if np.abs(biased).max(initial=0) >= 2**31:
        return None
    return isa, weights, biased.astype(np.int32)


DEPTHWISE = "canonqnn.depthwise"  # block annotation: the vector width along the row


def te_depthwise_conv(x: Any, w: Any, x_zp: int, strides, dilation, padding,
                      out_hw: tuple[int, int], vector: int) -> Any:
    """The accumulator of a depthwise conv (one output channel per input channel) of an int8
    NCHW ``x`` and int16 weights ``w`` [C, KH, KW] (``w - w_zp``, a build-time constant): the
    input widened to int16 with its zero point subtracted and padded with 0 (a real zero), the
    taps summed in int32 along a row. Its block carries the row's vector width."""
    n, c, h, wd = (int(d) for d in x.shape)
    _, kh, kw = (int(d) for d in w.shape)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    oh, ow = out_hw

    def pad(nn, cc, y, xx):
        inside = tirx.all(y >= pt, y < h + pt, xx >= pl, xx < wd + pl)
        real = (x[nn, cc, y - pt, xx - pl].astype("int16")
                - tirx.const(x_zp, "int16")).astype("int16")
        return tirx.if_then_else(inside, real, tirx.const(0, "int16"))

    xp = te.compute((n, c, h + pt + pb, wd + pl + pr), pad, name="x_pack")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    return te.compute(
        (n, c, oh, ow),
        lambda nn, cc, i, j: te.sum(
            xp[nn, cc, i * sh + ry * dh, j * sw + rx * dw].astype("int32")
            * w[cc, ry, rx].astype("int32"), axis=[ry, rx]),
        name="acc_depthwise", attrs={DEPTHWISE: {"vector": vector, "borders": [pl, pr]}})


def row_vector(out_width: int, lanes: int) -> int:
    """The vector width along an output row: a divisor of the row (a split that leaves a
    remainder cannot be vectorized), up to two registers of ``lanes`` int32, whole registers
    where the row allows."""
    divisors = [d for d in range(1, min(out_width, 2 * lanes) + 1) if out_width % d == 0]
    return max(divisors, key=lambda d: (d % lanes == 0, d))


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
