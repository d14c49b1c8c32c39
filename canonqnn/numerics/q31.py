"""Q31 fixed-point arithmetic (TFLite, gemmlowp): the numpy specification.

int64 arrays hold int32 values. The TE twins, computing the same integer operations on one
element, are ``canonqnn.ops._q31``'s. The roundings these are built of
(``rounding_divide_by_pot``, ``shift_right_round_half_up``, ``trunc_div``) are
``canonqnn.numerics.arithmetic``'s. Rounding modes (docs/spec.md):

- ``q31_double``: ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << l, m), r)``,
  two roundings, each with ties away from zero (TFLite's default build).
- ``q31_single``: ``(x * m + 2^(t-1)) >> t`` with ``t = 31 - shift``: one rounding, ties toward
  +infinity (TFLite built with ``TFLITE_SINGLE_ROUNDING``).

An int64 accumulator (TFLite's 16x8 kernels with an int64 bias) has one requantization in both
builds, TFLite's ``MultiplyByQuantizedMultiplier(int64_t x, ...)``: the multiplier reduced to 16
bits, ``m16 = (m + 2^15) >> 16`` (``0x7FFF`` from ``m >= 0x7FFF0000``), then
``(x * m16 + 2^(t-1)) >> t`` with ``t = 15 - shift``, truncated to int32.
"""

from __future__ import annotations

import numpy as np

from .arithmetic import rounding_divide_by_pot, shift_right_round_half_up, trunc_div

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Q31_ROUNDINGS = ("q31_double", "q31_single")


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 (C's unchecked int32 arithmetic)."""
    return ((np.asarray(x, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


def wrap_int16(x) -> np.ndarray:
    """Two's-complement wrap of int64 values to int16 (C's int16 arithmetic)."""
    return ((np.asarray(x, np.int64) + 2**15) % 2**16 - 2**15).astype(np.int64)


def srdhm(a, b) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: ``round(a * b / 2^31)``, ties away from
    zero; the one overflowing case (INT32_MIN * INT32_MIN) saturates to INT32_MAX."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    out = trunc_div(ab + nudge, 1 << 31)
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, out).astype(np.int64)


def saturating_rounding_multiply_by_pot(x, exponent: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` on int32 (``Rescale`` between
    fixed-point formats): ``x * 2^exponent`` saturated to int32 for exponent >= 0,
    ``RoundingDivideByPOT(x, -exponent)`` below."""
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    return np.clip(np.asarray(x, np.int64) << exponent, INT32_MIN, INT32_MAX)


def multiply_by_quantized_multiplier(x, multiplier, shift, rounding: str) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier(x, m, shift)``: ``x * m * 2^(shift - 31)``,
    rounded as ``rounding`` says (see the module doc). int32 in, int32 out."""
    x = np.asarray(x, np.int64)
    m, s = np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)
    if rounding == "q31_single":
        return np.clip(shift_right_round_half_up(x * m, 31 - s), INT32_MIN, INT32_MAX)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    return rounding_divide_by_pot(srdhm(wrap_int32(x << left), m), right)


# The int64 requantization's multiplier keeps its top 16 bits (rounded); from this value on the
# rounding would carry out of 16 bits, and TFLite takes the largest 16-bit multiplier instead.
REDUCED_MULTIPLIER_LIMIT = 0x7FFF0000
REDUCED_MULTIPLIER_MAX = 0x7FFF
# TFLite's int64 requantization is defined for shifts below 8 (a multiplier below 128).
INT64_SHIFT_LIMIT = 8
ACCUMULATORS = ("int32", "int64")


def reduced_multiplier(multiplier) -> np.ndarray:
    """The 16-bit multiplier of TFLite's int64 ``MultiplyByQuantizedMultiplier``."""
    m = np.asarray(multiplier, np.int64)
    return np.where(m < REDUCED_MULTIPLIER_LIMIT, shift_right_round_half_up(m, 16),
                    REDUCED_MULTIPLIER_MAX)


def multiply_by_quantized_multiplier_int64(x, multiplier, shift) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier(int64_t x, m, shift)`` (the same in both builds):
    ``(x * m16 + 2^(t-1)) >> t`` with ``m16 = reduced_multiplier(m)``, ``t = 15 - shift``: one
    rounding, ties toward +infinity; the result truncated to int32 as C's cast does. ``shift``
    must be below ``INT64_SHIFT_LIMIT``."""
    x = np.asarray(x, np.int64)
    return wrap_int32(shift_right_round_half_up(x * reduced_multiplier(multiplier),
                                                15 - np.asarray(shift, np.int64)))


def requant_q31(acc, multiplier, shift, zp: int, act_min: int, act_max: int,
                rounding: str, out_dtype: str = "int8", accumulator: str = "int32") -> np.ndarray:
    """Accumulator to int8 (int16): ``clamp(MBQM(acc, m, shift) + zp, act_min, act_max)``, with
    the int64 requantization for an int64 ``accumulator`` (module doc)."""
    if accumulator == "int64":
        v = multiply_by_quantized_multiplier_int64(acc, multiplier, shift) + zp
    else:
        v = multiply_by_quantized_multiplier(acc, multiplier, shift, rounding) + zp
    return np.clip(v, act_min, act_max).astype(out_dtype)
