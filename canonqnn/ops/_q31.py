"""Q31 fixed-point arithmetic (TFLite, gemmlowp), each as a numpy/TE pair.

The numpy functions are the specification (int64 arrays hold int32 values); the TE twins
compute the same integer operations on one element. Rounding modes (docs/spec.md):

- ``q31_double``: ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << l, m), r)``,
  two roundings, each with ties away from zero (TFLite's default build).
- ``q31_single``: ``(x * m + 2^(t-1)) >> t`` with ``t = 31 - shift``: one rounding, ties toward
  +infinity (TFLite built with ``TFLITE_SINGLE_ROUNDING``).
"""

from __future__ import annotations

import numpy as np

from .._tvm import tirx

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Q31_ROUNDINGS = ("q31_double", "q31_single")


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 (C's unchecked int32 arithmetic)."""
    return ((np.asarray(x, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


def _trunc_div_pow2(v: np.ndarray, bits: int) -> np.ndarray:
    """C integer division of int64 ``v`` by ``2^bits`` (rounds toward zero)."""
    q = v >> bits
    return np.where((v < 0) & ((v & ((1 << bits) - 1)) != 0), q + 1, q)


# ---------------------------------------------------------------- numpy (specification)
def srdhm(a, b) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: ``round(a * b / 2^31)``, ties away from
    zero; the one overflowing case (INT32_MIN * INT32_MIN) saturates to INT32_MAX."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    out = _trunc_div_pow2(ab + nudge, 31)
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, out).astype(np.int64)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``round(x / 2^exponent)``, ties away from zero."""
    x, e = np.asarray(x, np.int64), np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift, rounding: str) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier(x, m, shift)``: ``x * m * 2^(shift - 31)``,
    rounded as ``rounding`` says (see the module doc). int32 in, int32 out."""
    x = np.asarray(x, np.int64)
    m, s = np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)
    if rounding == "q31_single":
        total = 31 - s
        return np.clip((x * m + (np.int64(1) << (total - 1))) >> total, INT32_MIN, INT32_MAX)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    return rounding_divide_by_pot(srdhm(wrap_int32(x << left), m), right)


def requant_q31(acc, multiplier, shift, zp: int, act_min: int, act_max: int,
                rounding: str) -> np.ndarray:
    """int32 accumulator to int8: ``clamp(MBQM(acc, m, shift) + zp, act_min, act_max)``."""
    v = multiply_by_quantized_multiplier(acc, multiplier, shift, rounding) + zp
    return np.clip(v, act_min, act_max).astype(np.int8)


# ---------------------------------------------------------------- TE twins (one element)
def _c(value: int, dtype: str = "int64"):
    return tirx.const(value, dtype)


def te_srdhm(a, b):
    """TE twin of ``srdhm`` (int32 operands, int32 result).

    ``(a*b + 2^30) >> 31`` equals the nudged C division for both signs (for a negative
    product, ``trunc((p + 1 - 2^30) / 2^31) = floor((p + 2^30) / 2^31)``); reading the product
    once keeps TVM's simplifier from expanding it. The INT32_MIN * INT32_MIN case gives
    2^31, which the min saturates.
    """
    ab = a.astype("int64") * b.astype("int64")
    return tirx.min((ab + _c(1 << 30)) >> _c(31), _c(INT32_MAX)).astype("int32")


def te_rounding_divide_by_pot(x, exponent):
    """TE twin of ``rounding_divide_by_pot`` (int32 ``x``, int32 ``exponent`` in [0, 63)): ties
    away from zero as ``(x + half - [x < 0 and half > 0]) >> exponent``, in int64."""
    x64, e64 = x.astype("int64"), exponent.astype("int64")
    half = (_c(1) << e64) >> _c(1)
    negative_tie_fix = tirx.Select(tirx.all(x64 < _c(0), half > _c(0)), _c(1), _c(0))
    return ((x64 + half - negative_tie_fix) >> e64).astype("int32")


def te_multiply_by_quantized_multiplier(x, multiplier, shift, rounding: str):
    """TE twin of ``multiply_by_quantized_multiplier``; ``multiplier``/``shift`` are int32
    expressions (constants or per-channel loads)."""
    zero = _c(0, "int32")
    if rounding == "q31_single":
        total = (_c(31, "int32") - shift).astype("int64")
        v = (x.astype("int64") * multiplier.astype("int64") + (_c(1) << (total - _c(1)))) >> total
        return tirx.max(tirx.min(v, _c(INT32_MAX)), _c(INT32_MIN)).astype("int32")
    left = tirx.max(shift, zero)
    right = tirx.max(zero - shift, zero)
    shifted = (x.astype("int64") << left.astype("int64")).astype("int32")  # wraps, as in C
    return te_rounding_divide_by_pot(te_srdhm(shifted, multiplier), right)


def te_requant_q31(acc, multiplier, shift, zp: int, act_min: int, act_max: int, rounding: str):
    """TE twin of ``requant_q31`` for one int32 element."""
    v = te_multiply_by_quantized_multiplier(acc, multiplier, shift, rounding) + _c(zp, "int32")
    return tirx.max(tirx.min(v, _c(act_max, "int32")), _c(act_min, "int32")).astype("int8")
