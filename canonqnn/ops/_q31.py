"""TE twins of ``canonqnn.numerics.q31`` (TFLite's Q31 fixed-point arithmetic): each computes
on one element the integer operations its numpy specification computes on arrays. The roundings
they are built of are ``canonqnn.ops._arithmetic``'s.
"""

from __future__ import annotations

from .._tvm import tirx
from ..numerics.q31 import INT32_MAX, INT32_MIN, REDUCED_MULTIPLIER_LIMIT, REDUCED_MULTIPLIER_MAX
from ._arithmetic import te_rounding_divide_by_pot, te_shift_right_round_half_up


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


def te_multiply_by_quantized_multiplier(x, multiplier, shift, rounding: str):
    """TE twin of ``multiply_by_quantized_multiplier``; ``multiplier``/``shift`` are int32
    expressions (constants or per-channel loads)."""
    zero = _c(0, "int32")
    if rounding == "q31_single":
        total = (_c(31, "int32") - shift).astype("int64")
        v = te_shift_right_round_half_up(x.astype("int64") * multiplier.astype("int64"), total)
        return tirx.max(tirx.min(v, _c(INT32_MAX)), _c(INT32_MIN)).astype("int32")
    left = tirx.max(shift, zero)
    right = tirx.max(zero - shift, zero)
    shifted = (x.astype("int64") << left.astype("int64")).astype("int32")  # wraps, as in C
    return te_rounding_divide_by_pot(te_srdhm(shifted, multiplier), right)


def te_multiply_by_quantized_multiplier_int64(x, multiplier, shift):
    """TE twin of ``multiply_by_quantized_multiplier_int64`` (int64 ``x``; int32 ``multiplier``
    and ``shift`` expressions); the cast to int32 wraps, as in C."""
    m = multiplier.astype("int64")
    reduced = tirx.Select(m < _c(REDUCED_MULTIPLIER_LIMIT), te_shift_right_round_half_up(m, 16),
                          _c(REDUCED_MULTIPLIER_MAX))
    total = _c(15) - shift.astype("int64")
    return te_shift_right_round_half_up(x.astype("int64") * reduced, total).astype("int32")


def te_requant_q31(acc, multiplier, shift, zp: int, act_min: int, act_max: int, rounding: str,
                   out_dtype: str = "int8", accumulator: str = "int32"):
    """TE twin of ``requant_q31`` for one int32 (int64) element."""
    if accumulator == "int64":
        scaled = te_multiply_by_quantized_multiplier_int64(acc, multiplier, shift)
    else:
        scaled = te_multiply_by_quantized_multiplier(acc, multiplier, shift, rounding)
    v = scaled + _c(zp, "int32")
    return tirx.max(tirx.min(v, _c(act_max, "int32")), _c(act_min, "int32")).astype(out_dtype)
