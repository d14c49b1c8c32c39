"""TFLite's *optimized* int16 TANH and LOGISTIC (``optimized_ops::Tanh`` / ``Logistic`` on
int16, the scalar loop that runs on x86-64), which compute with gemmlowp's int16 fixed point.

The optimized kernels take this path only when Prepare left ``input_multiplier == 0``: a
power-of-two input scale (``CheckedLog2``) with ``input_left_shift = 12 + log2(scale)`` of 0
or 1 (TANH) or 0 (LOGISTIC); ``tflite_int16`` decides that and otherwise calls the reference
arithmetic. The input code is read as Q3.12 (TANH with a left shift of 1 doubles it first,
saturating) and the result is Q0.15:

    tanh(x)     = sign(x) * (1 - e) / (1 + e),  e = exp(-2|x|)      (0 at x = 0)
    logistic(x) = x > 0 ? 1 / (1 + e) : 1 - 1 / (1 + e),  e = exp(-|x|)   (0.5 at x = 0)

``exp`` of a non-positive value is gemmlowp's ``exp_on_negative_values``: a Taylor polynomial
around -1/8 on the input modulo 1/4, then one multiplication per set bit of the remainder by
``exp(-2^k)`` (the barrel shifter); ``(1 - e) / (1 + e)`` and ``1 / (1 + e)`` are three
Newton-Raphson steps from 48/17 - 32/17 * d. Every step is int16: products are
``SaturatingRoundingDoublingHighMul``, ``+``/``-`` wrap (C's int16 conversion), rescales are
``SaturatingRoundingMultiplyByPOT``, and gemmlowp's int32 constants are rounded to int16 by
``RoundingDivideByPOT(c, 16)``. Measured against the interpreter on every int16 code
(tests/tables/test_tflite_int16_tables.py).

Pure numpy: no TVM, no model format.
"""

from __future__ import annotations

import numpy as np

from ..numerics.arithmetic import rounding_divide_by_pot, trunc_div
from ..numerics.q31 import wrap_int16
from ..qparams import INT16_MAX, INT16_MIN

_ONE_Q015 = INT16_MAX  # FixedPoint<int16, 0>::One(): 1 is not representable, the raw max is


# gemmlowp's int16 primitives (also HARD_SWISH's, ``tflite.hard_swish``)
def srdhm16(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int16: round(a * b / 2^15), ties away."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    out = wrap_int16(trunc_div(ab + nudge, 1 << 15))
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, out)


def sdhm16(a, b) -> np.ndarray:
    """TFLite SaturatingDoublingHighMul (int16, truncating: SQDMULH)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    out = wrap_int16(trunc_div(a * b, 1 << 15))
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, out)


def rdbp16(x, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT on int16 lanes: the mask ``2^e - 1`` is itself an int16,
    so exponents of 16 and more give a mask of -1 (measured behaviour kept)."""
    x = np.asarray(x, np.int64)
    mask = int(wrap_int16((1 << exponent) - 1))
    remainder = wrap_int16(x & mask)
    threshold = wrap_int16((mask >> 1) + (x < 0))
    return wrap_int16((x >> exponent) + (remainder > threshold))


def _constant(raw_int32: int) -> int:
    """gemmlowp's Q-format int32 constant as an int16 raw value: rounded, not truncated."""
    return int(rounding_divide_by_pot(raw_int32, 16))


# exp(-1/8) and 1/3 (the Taylor polynomial), 48/17 and -32/17 in Q2.13 (Newton-Raphson).
_EXP_MINUS_ONE_EIGHTH = _constant(1895147668)
_ONE_THIRD = _constant(715827883)
_48_OVER_17 = _constant(1515870810)
_NEG_32_OVER_17 = _constant(-1010580540)
# exp(-2^k) in Q0.15 for the remainder bit of weight 2^k, k = -2..4.
_BARREL = tuple((k, _constant(c)) for k, c in (
    (-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
    (3, 720401), (4, 242)))


def _mul(a, b) -> np.ndarray:
    return srdhm16(a, b)


def _add(a, b) -> np.ndarray:
    return wrap_int16(np.asarray(a, np.int64) + b)


def _sub(a, b) -> np.ndarray:
    return wrap_int16(np.asarray(a, np.int64) - b)


def _multiply_by_pot(x, exponent: int) -> np.ndarray:
    """``SaturatingRoundingMultiplyByPOT<exponent>`` on int16 (also ``Rescale``)."""
    x = np.asarray(x, np.int64)
    if exponent < 0:
        return rdbp16(x, -exponent)
    threshold = (1 << (15 - exponent)) - 1
    return np.where(x > threshold, INT16_MAX,
                    np.where(x < -threshold, INT16_MIN, wrap_int16(x << exponent)))


def _rounding_half_sum(a, b) -> np.ndarray:
    """gemmlowp's int16 ``RoundingHalfSum``: ``(a + b + sign) / 2`` in int32, truncated."""
    s = np.asarray(a, np.int64) + b
    return wrap_int16(trunc_div(s + np.where(s >= 0, 1, -1), 2))


def _exp_on_quarter_interval(a) -> np.ndarray:
    """``exp_on_interval_between_negative_one_quarter_and_0_excl``, Q0.15 in and out: Taylor
    around -1/8 in x = a + 1/8, e^(-1/8) * (1 + x + x^2/2 + x^3/6 + x^4/24); the final
    addition saturates (int16 raw type; unreached here: a <= -2^-12 keeps the sum below 1)."""
    x = _add(a, 1 << 12)
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = _multiply_by_pot(x4, -2)
    poly = _multiply_by_pot(_add(_mul(_add(x4_over_4, x3), _ONE_THIRD), x2), -1)
    product = _mul(_EXP_MINUS_ONE_EIGHTH, _add(x, poly))
    return np.clip(product + _EXP_MINUS_ONE_EIGHTH, INT16_MIN, INT16_MAX)


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values`` of int16 raw values with ``integer_bits`` integer
    bits (a <= 0), in Q0.15."""
    a = np.asarray(a, np.int64)
    fractional_bits = 15 - integer_bits
    quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_quarter = _sub(a & (quarter - 1), quarter)
    result = _exp_on_quarter_interval(_multiply_by_pot(a_mod_quarter_minus_quarter,
                                                       integer_bits))
    remainder = _sub(a_mod_quarter_minus_quarter, a)
    for k, multiplier in _BARREL:
        if integer_bits > k:
            bit = (remainder >> (fractional_bits + k)) & 1
            result = np.where(bit == 1, _mul(result, multiplier), result)
    # (no clamp: gemmlowp clamps below -32 only with more than 5 integer bits)
    return np.where(a == 0, _ONE_Q015, result)


def _newton_raphson_reciprocal(half_denominator) -> np.ndarray:
    """Three Newton-Raphson steps towards 1 / half_denominator, in Q2.13."""
    one_q2 = 1 << 13
    x = _add(_48_OVER_17, _mul(half_denominator, _NEG_32_OVER_17))
    for _ in range(3):
        one_minus_dx = _sub(one_q2, _mul(half_denominator, x))
        x = _add(x, _multiply_by_pot(_mul(x, one_minus_dx), 2))
    return x


def one_minus_x_over_one_plus_x(a) -> np.ndarray:
    """gemmlowp ``one_minus_x_over_one_plus_x_for_x_in_0_1``, Q0.15 in and out."""
    x = _newton_raphson_reciprocal(_rounding_half_sum(a, _ONE_Q015))
    return _multiply_by_pot(_sub(x, 1 << 13), 2)


def one_over_one_plus_x(a) -> np.ndarray:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1``, Q0.15 in and out."""
    x = _newton_raphson_reciprocal(_rounding_half_sum(a, _ONE_Q015))
    return _multiply_by_pot(x, 1)  # Q2.13 read as Q1.14 (halved), rescaled to Q0.15


def tanh(x, input_left_shift: int) -> np.ndarray:
    """``optimized_ops::Tanh`` on int16 codes ``x`` (Q3.12 after the left shift of 0 or 1)."""
    if input_left_shift not in (0, 1):
        raise ValueError(f"the optimized int16 TANH shifts its input by 0 or 1, not "
                         f"{input_left_shift}")
    a = _multiply_by_pot(x, input_left_shift) if input_left_shift else \
        np.asarray(x, np.int64)
    negative = a < 0
    minus_abs = np.where(negative, a, wrap_int16(-a))
    # -|a| in Q3.12 read as Q4.11 is -2|a|
    t = one_minus_x_over_one_plus_x(exp_on_negative_values(minus_abs, 4))
    return np.where(a == 0, 0, np.where(negative, wrap_int16(-t), t)).astype(np.int16)


def logistic(x) -> np.ndarray:
    """``optimized_ops::Logistic`` on int16 codes ``x`` read as Q3.12."""
    a = np.asarray(x, np.int64)
    positive = a > 0
    abs_a = np.where(positive, a, wrap_int16(-a))  # -(-32768) wraps to -32768, as in C
    if_positive = one_over_one_plus_x(exp_on_negative_values(wrap_int16(-abs_a), 3))
    if_negative = _sub(_ONE_Q015, if_positive)
    one_half = _constant(1 << 30)
    return np.where(a == 0, one_half,
                    np.where(positive, if_positive, if_negative)).astype(np.int16)
