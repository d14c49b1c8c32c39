"""Requantizations shared by the canonical ops, each as a numpy/TE pair.

The numpy function is the specification; the TE function beside it must compute the same
operations in the same order (tests compare both against the source runtimes).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._tvm import te, tirx
from ..numerics.arithmetic import round_half_away
from ..numerics.q31 import Q31_ROUNDINGS, requant_q31
from ..qparams import quantize_multipliers
from ._arithmetic import te_round_half_away
from ._q31 import te_requant_q31


# ---------------------------------------------------------------- float32 evaluation order
def te_no_contract(value, dtype: str = "float32"):
    """``value`` behind an ``llvm.arithmetic.fence``: LLVM may not fuse it into later operations.

    TVM's LLVM backend allows floating-point contraction (``AllowFPOpFusion::Fast``), so on an
    FMA target ``a * b + c`` compiles to one fused multiply-add (a single rounding). Where the
    specification rounds the product to float32 first (the numpy reference does), the product
    goes through this fence; the fence itself emits no instruction.
    """
    return tirx.call_llvm_pure_intrin(dtype, "llvm.arithmetic.fence", value)


# ---------------------------------------------------------------- accumulator -> int8 (rne_f32)
def requant_accumulator(acc, mult, zp: int, act_min: int, act_max: int) -> np.ndarray:
    """int32 accumulator to int8: ``clamp(RNE(f32(acc) * mult), act - zp) + zp``.

    ``mult`` is a float32 multiplier broadcast against ``acc``. The clamp runs in float before
    rounding, as onnxruntime's MlasRequantizeOutput does (equal to clamping after, since the
    bounds are integers and rounding is monotone).
    """
    v = np.asarray(acc).astype(np.float32) * np.asarray(mult, np.float32)
    v = np.clip(v, np.float32(act_min - zp), np.float32(act_max - zp))
    return (np.rint(v).astype(np.int32) + zp).astype(np.int8)


def te_requant_accumulator(acc, mult, zp: int, act_min: int, act_max: int):
    """TE twin of ``requant_accumulator`` for one element (``acc`` int32, ``mult`` float32).

    The rounding is ``llvm.lrint``: ties to even in the default rounding mode, as
    ``tirx.round`` (``llvm.nearbyint``) followed by a conversion, but one instruction on x86
    (``cvtps2dq``, where the other is ``vrndscaleps`` then ``cvttps2dq``); the value is
    clamped first, so it is always within int32."""
    v = acc.astype("float32") * mult
    v = te.max(te.min(v, tirx.const(float(act_max - zp), "float32")),
               tirx.const(float(act_min - zp), "float32"))
    return (tirx.call_llvm_pure_intrin("int32", "llvm.lrint", v) + zp).astype("int8")


# ---------------------------------------------------------------- int8 -> int8 via real value
def requant_via_real(q, in_scale: float, in_zp: int, out_scale: float, out_zp: int,
                     act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """Dequantize then quantize, in float32: ``RNE(f32(f32(q - zp_in) * s_in) / s_out) + zp_out``.

    This is ONNX DequantizeLinear followed by QuantizeLinear (true division, ties to even),
    which is what onnxruntime computes for a Q(DQ(x)) pair and builds its QLinearConcat
    tables with.
    """
    real = (np.asarray(q).astype(np.int32) - in_zp).astype(np.float32) * np.float32(in_scale)
    v = np.rint((real / np.float32(out_scale)).astype(np.float32))
    v = np.clip(v, np.float32(act_min - out_zp), np.float32(act_max - out_zp))
    return (v.astype(np.int32) + out_zp).astype(np.int8)


def te_requant_via_real(q, in_scale: float, in_zp: int, out_scale: float, out_zp: int,
                        act_min: int = -128, act_max: int = 127):
    """TE twin of ``requant_via_real`` for one int8 element."""
    real = (q.astype("int32") - in_zp).astype("float32") * tirx.const(in_scale, "float32")
    v = tirx.round(real / tirx.const(out_scale, "float32"))
    v = te.max(te.min(v, tirx.const(float(act_max - out_zp), "float32")),
               tirx.const(float(act_min - out_zp), "float32"))
    return (v.astype("int32") + out_zp).astype("int8")


# ---------------------------------------------------------------- accumulator -> int8 in double
def requant_f64_away(acc, real, zp: int, act_min: int, act_max: int,
                     out_dtype: str = "int8") -> np.ndarray:
    """``clamp(round_half_away(f64(acc) * real) + zp, act_min, act_max)`` (``real`` float64;
    ``f64(acc)`` is exact for the int64 accumulators of 16x8 layers below 2^53)."""
    v = np.asarray(acc).astype(np.float64) * np.asarray(real, np.float64)
    r = round_half_away(v)
    return (np.clip(r, act_min - zp, act_max - zp).astype(np.int32) + zp).astype(out_dtype)


def te_requant_f64_away(acc, real, zp: int, act_min: int, act_max: int, out_dtype: str = "int8"):
    """TE twin of ``requant_f64_away`` for one int32 (int64) element (``real`` a float64
    load)."""
    r = te_round_half_away(te_no_contract(acc.astype("float64") * real, "float64"))
    r = te.max(te.min(r, tirx.const(float(act_max - zp), "float64")),
               tirx.const(float(act_min - zp), "float64"))
    return (r.astype("int32") + zp).astype(out_dtype)


# ---------------------------------------------------------------- one multiplier per channel
# The requantization of an accumulator with one multiplier per output channel (conv2d, matmul),
# by the kind of its multiplier table: float32 multipliers (requant_accumulator), TFLite's Q31
# multiplier and shift (requant_q31), float64 multipliers rounded in double (requant_f64_away).
RNE_F32, Q31, F64_AWAY = "rne_f32", "q31", "f64_away"


def channel_multipliers(rounding: str, float_multipliers: Callable[[], np.ndarray],
                        q31_reals: Callable[[], np.ndarray],
                        in_double: bool = False) -> tuple[str, np.ndarray]:
    """``(kind, table)`` of an op's per-channel requantization under ``rounding``: float32
    ``[C]`` from ``float_multipliers()`` (every rounding but the Q31 ones), else from the float64
    ``q31_reals()``: those ``[C]`` themselves where the kernel rounds in double
    (``in_double``), or int32 ``[2, C]`` (multiplier, shift) of TFLite's ``QuantizeMultiplier``
    (with the single-rounding build's shift cap under ``q31_single``)."""
    if rounding not in Q31_ROUNDINGS:
        return RNE_F32, np.asarray(float_multipliers(), np.float32)
    reals = q31_reals()
    if in_double:
        return F64_AWAY, np.asarray(reals, np.float64)
    m, shift = quantize_multipliers(reals, single_rounding=rounding == "q31_single")
    return Q31, np.stack([m, shift]).astype(np.int32)


def requant_channels(acc, kind: str, table: np.ndarray, a: dict, accumulator: str,
                     axis: int) -> np.ndarray:
    """The accumulator ``acc`` (int32, or int64 for TFLite's 16x8 layers) with output channels
    along ``axis``, requantized by ``channel_multipliers``' ``(kind, table)`` and the op's
    attributes ``out_zp``, ``act_min``, ``act_max``, ``rounding`` and ``out_dtype``."""
    ones = (1,) * (np.ndim(acc) - 1 - axis)

    def per_channel(row: np.ndarray) -> np.ndarray:
        return row.reshape(-1, *ones)

    zp, lo, hi, out_dtype = a["out_zp"], a["act_min"], a["act_max"], a["out_dtype"]
    if kind == Q31:
        return requant_q31(acc, per_channel(table[0]), per_channel(table[1]), zp, lo, hi,
                           a["rounding"], out_dtype, accumulator)
    if kind == F64_AWAY:
        return requant_f64_away(acc, per_channel(table), zp, lo, hi, out_dtype)
    return requant_accumulator(acc, per_channel(table), zp, lo, hi)


def te_requant_channel(acc, kind: str, table, channel, a: dict, accumulator: str):
    """TE twin of ``requant_channels`` for one element of output channel ``channel`` (``table``
    the multiplier table as a TE tensor)."""
    zp, lo, hi, out_dtype = a["out_zp"], a["act_min"], a["act_max"], a["out_dtype"]
    if kind == Q31:
        return te_requant_q31(acc, table[0, channel], table[1, channel], zp, lo, hi,
                              a["rounding"], out_dtype, accumulator)
    if kind == F64_AWAY:
        return te_requant_f64_away(acc, table[channel], zp, lo, hi, out_dtype)
    return te_requant_accumulator(acc, table[channel], zp, lo, hi)
