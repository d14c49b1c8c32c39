"""``canonqnn.softmax`` on int16 (TFLite 16x8 SOFTMAX, ``reference_ops::SoftmaxInt16``).

The kernel reads two 513-entry int16 tables with linear interpolation (``exp`` on [-10, 0] and
``1 / (1 + x)`` on [0, 1], TFLite's ``LUTPopulateInt16``: ``exp_lut``, ``reciprocal_lut``); the
op carries them as its ``exp_table`` argument, int16[2, 513]. Per row of the axis, zero points 0:

    (m, s) = QuantizeMultiplier(f32(in_scale * beta) / (10 / 65535))
    e[j]   = lookup(exp, clamp(MBQM(x[j] - max(x), m, s) + 32767, -32768, 32767))
    total  = sum(e)                          int32; h = leading zeros of total
    t      = ((total << (h - 1)) + 2^13) >> 14
    r      = lookup(reciprocal, clamp(t - 98304, -32768, 32767))
    y[j]   = clamp((e[j] * r + 2^(30 - h)) >> (31 - h), 0, 32767)

``lookup(T, v) = T[256 + (v >> 7)] + ((slope * (v & 127) + 64) >> 7)``, ``slope`` the next
entry minus this one, int16 arithmetic wrapping. Outputs are Q0.15: TFLite requires an output
scale of 1/32768 (within 0.1%) and zero points 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tvm import te, tirx
from ..numerics.arithmetic import round_half_away_floor_f64, shift_right_round_half_up
from ..numerics.q31 import multiply_by_quantized_multiplier, wrap_int16, wrap_int32
from ..qparams import INT16_MAX, INT16_MIN, quantize_multiplier
from ._arithmetic import te_shift_right_round_half_up
from ._q31 import te_multiply_by_quantized_multiplier

EXP_INPUT_ZERO = 32767  # the exp table's input zero point: 0 at the top of its range
RECIPROCAL_OFFSET = (1 << 15) + (1 << 16)  # t - this: 1 + x in [1, 2] onto the table's input
TABLES_SHAPE = (2, 513)
OUTPUT_SCALE = 1.0 / 32768
OUTPUT_SCALE_TOLERANCE = 0.001 / 32768  # TFLite's TF_LITE_ENSURE_NEAR on the output scale


# ---------------------------------------------------------------- the interpolated tables (numpy)
def _populate(transform, in_scale: float, in_zp: int, out_scale: float) -> np.ndarray:
    """``LUTPopulateInt16<double>``: 513 samples of ``transform`` over the int16 input range,
    each lowered by half the error of linear interpolation at the mid-point (all double)."""
    lo, hi = in_scale * (INT16_MIN - in_zp), in_scale * (INT16_MAX - in_zp)
    step = (hi - lo) / 512
    inverse = 65536.0 / (out_scale * (INT16_MAX - INT16_MIN))
    x = lo + np.arange(512, dtype=np.float64) * step
    value, middle, after = transform(x), transform(x + step / 2), transform(lo + (np.arange(
        512, dtype=np.float64) + 1) * step)
    rounded_value = round_half_away_floor_f64(value * inverse)
    rounded_middle = round_half_away_floor_f64(middle * inverse)
    interpolated = round_half_away_floor_f64((after * inverse + rounded_value) / 2)
    bias = round_half_away_floor_f64((interpolated - rounded_middle) / 2)
    table = np.empty(513, np.int64)
    table[:512] = np.clip(rounded_value - bias, INT16_MIN, INT16_MAX)
    last = round_half_away_floor_f64(float(transform(np.float64(hi))) * inverse)
    table[512] = np.clip(last, INT16_MIN, INT16_MAX)
    return table.astype(np.int16)


_SPAN = INT16_MAX - INT16_MIN  # 65535
EXP_INPUT_SCALE = 10.0 / _SPAN  # exp on [-10, 0]


def exp_lut() -> np.ndarray:
    """SOFTMAX int16's ``exp`` table: inputs [-10, 0] (scale 10/65535, zero point 32767),
    output scale 2/65535."""
    return _populate(np.exp, EXP_INPUT_SCALE, INT16_MAX, 2.0 / _SPAN)


def reciprocal_lut() -> np.ndarray:
    """SOFTMAX int16's ``1 / (1 + x)`` table: inputs [0, 1] (scale 1/65535, zero point
    -32768), output scale 2/65535."""
    return _populate(lambda t: 1.0 / (1.0 + t), 1.0 / _SPAN, INT16_MIN, 2.0 / _SPAN)


def lut_lookup(value, table) -> np.ndarray:
    """``LUTLookup(int16)``: entry ``256 + (v >> 7)`` plus the slope to the next entry times the
    low 7 bits, rounded (``(slope * (v & 127) + 64) >> 7``); int16 arithmetic wraps."""
    v = np.asarray(value, np.int64)
    table = np.asarray(table, np.int64)
    base = table[256 + (v >> 7)]
    slope = wrap_int16(table[257 + (v >> 7)] - base)
    return wrap_int16(base + shift_right_round_half_up(slope * (v & 127), 7))


# ---------------------------------------------------------------- the op (numpy and TE)
def tables() -> np.ndarray:
    """The op's ``exp_table`` argument for int16: [exp table, reciprocal table]."""
    return np.stack([exp_lut(), reciprocal_lut()])


def input_multiplier(in_scale: float, beta: float, rounding: str) -> tuple[int, int]:
    """``QuantizeMultiplier(f32(in_scale * beta) / (10 / 65535))``: the product in float32,
    the quotient in double."""
    real = float(np.float32(np.float32(in_scale) * np.float32(beta))) / EXP_INPUT_SCALE
    return quantize_multiplier(real, single_rounding=rounding == "q31_single")


def reference(x, table, axis: int, in_scale: float, beta: float, rounding: str) -> np.ndarray:
    xr = np.moveaxis(np.asarray(x).astype(np.int64), axis, -1)
    m, s = input_multiplier(in_scale, beta, rounding)
    scaled = multiply_by_quantized_multiplier(xr - xr.max(axis=-1, keepdims=True), m, s, rounding)
    e = lut_lookup(np.clip(scaled + EXP_INPUT_ZERO, -32768, 32767), table[0])
    total = wrap_int32(e.sum(axis=-1, keepdims=True))
    zeros = 32 - np.frexp(total.astype(np.float64))[1].astype(np.int64)  # total > 0
    shifted = shift_right_round_half_up(total << (zeros - 1), 14)
    r = lut_lookup(np.clip(shifted - RECIPROCAL_OFFSET, -32768, 32767), table[1])
    right = 31 - zeros
    y = shift_right_round_half_up(e * r, right)
    return np.moveaxis(np.clip(y, 0, 32767).astype(np.int16), -1, axis)


def _i64(value: int):
    return tirx.const(int(value), "int64")


def _te_wrap16(v):
    """int16 wrap of an int64 value (C's int16 arithmetic)."""
    return ((v + _i64(1 << 15)) & _i64(0xFFFF)) - _i64(1 << 15)


def _te_lookup(table, row: int, v):
    """TE twin of ``lut_lookup`` (``v`` an int64 in the int16 range)."""
    index = (_i64(256) + (v >> _i64(7))).astype("int32")
    base = table[row, index].astype("int64")
    slope = _te_wrap16(table[row, index + 1].astype("int64") - base)
    return _te_wrap16(base + te_shift_right_round_half_up(slope * (v & _i64(127)), 7))


def _te_clamp16(v):
    return tirx.max(tirx.min(v, _i64(32767)), _i64(-32768))


def legalize(bb: Any, call: Any, attrs: dict, rows, leading_zeros) -> Any:
    """``rows``/``leading_zeros``: softmax.py's row helpers (shape, max per row; clz)."""
    axis = int(attrs["axis"])
    m, s = input_multiplier(attrs["in_scale"], attrs["beta"], attrs["rounding"])

    def compute(x, table):
        shape, kept, at, row_max = rows(x, axis)

        def exp_of(*idx):
            d = x(*idx).astype("int32") - row_max(*at(idx, 0)).astype("int32")
            scaled = te_multiply_by_quantized_multiplier(
                d, tirx.const(m, "int32"), tirx.const(s, "int32"), attrs["rounding"])
            return _te_lookup(table, 0, _te_clamp16(scaled.astype("int64") + EXP_INPUT_ZERO))

        e = te.compute(shape, exp_of, name="exp")
        j = te.reduce_axis((0, shape[axis]), "j")
        total = te.compute(kept, lambda *i: te.sum(e(*at(i, j)), axis=j), name="row_sum")
        zeros = te.compute(kept, lambda *i: leading_zeros(
            total(*i).astype("int32").astype("int64")), name="row_sum_clz")

        def reciprocal(*i):
            z = zeros(*i).astype("int64")
            t = te_shift_right_round_half_up(
                total(*i).astype("int32").astype("int64") << (z - _i64(1)), 14)
            return _te_lookup(table, 1, _te_clamp16(t - _i64(RECIPROCAL_OFFSET)))

        r = te.compute(kept, reciprocal, name="reciprocal")

        def out(*idx):
            right = _i64(31) - zeros(*at(idx, 0)).astype("int64")
            y = te_shift_right_round_half_up(e(*idx) * r(*at(idx, 0)), right)
            return tirx.max(tirx.min(y, _i64(32767)), _i64(0)).astype("int16")

        return te.compute(shape, out, name="softmax")

    return bb.call_te(compute, call.args[0], call.args[1], primfunc_name_hint="canonqnn_softmax")
