"""``canonqnn.softmax``: int8 softmax along one axis, onnxruntime QLinearSoftmax arithmetic.

onnxruntime never evaluates exp per element: it builds a 256-entry float32 table of
``exp(x_scale * (k - 255) + shift)`` once (``exp_table``, an argument of the op, made by
``exp_table()`` from ``in_scale`` and the row length), and indexes it by the distance to the
row maximum (softmax is shift-invariant, so ``in_zp`` plays no part). Per row of the axis
(rounding rne_f32; ``o`` = 128 for uint8 sources):

    e[j] = exp_table[255 - (max(x) - x[j])]
    s    = 0; for j in order: s = f32(s + e[j])             (sequential float32 sum)
    Y    = floor(f32(1 / out_scale))                          (a float32 integer)
    r[j] = RNE(f32(f32(e[j] * Y) / s))
    int8:  y = clamp(r + out_zp, -128, 127)   where r converts to int32; otherwise (r >= 2^31,
           inf, NaN: x86 gives INT32_MIN) y = 127 if out_zp < 0 else -128 (the int32 sum wraps)
    uint8: t = (low 32 bits of int64(r) + out_zp + 128) mod 2^32  (int64(r) = INT64_MIN when r
           >= 2^63, inf or NaN); y = min(t, 255) - 128

``f32(e * Y)`` overflows to inf when ``Y`` exceeds about ``148 * row length`` (e.g. rows of 1
with ``out_scale`` 1/256): onnxruntime then returns the overflow values above for the row's
maximum, and so does this op.

Rounding q31_double / q31_single: TFLite's SOFTMAX (int8 and uint8 reference kernels, the
gemmlowp fixed-point algorithm, with ``beta``); see ``q31_exp_table`` and ``_reference_q31``.
``exp_table`` is then int32[256] (``q31_exp_table(in_scale, beta, rounding)``).

int16 (TFLite 16x8 SOFTMAX, Q31 roundings, zero points 0, Q0.15 output): ``_softmax_int16``;
``exp_table`` is then int16[2, 513], the kernel's exp and reciprocal tables.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..numerics.arithmetic import float32_library_function, rounding_divide_by_pot, trunc_div
from ..numerics.q31 import (
    INT32_MAX,
    INT32_MIN,
    Q31_ROUNDINGS,
    multiply_by_quantized_multiplier,
    saturating_rounding_multiply_by_pot,
    srdhm,
    wrap_int32,
)
from ..qparams import QParams, quantize_multiplier
from . import _softmax_int16
from ._arithmetic import te_rounding_divide_by_pot
from ._dtypes import activation_dtype
from ._q31 import te_srdhm
from ._registry import CanonicalOp, Refusal, UnsupportedRounding, register

F32 = np.float32
TABLE_SIZE = 256
ATTRS = ("in_scale", "in_zp", "out_scale", "out_zp", "axis", "rounding", "source_dtype", "beta")
INT32_LIMIT = 2.0 ** 31
INT64_LIMIT = 2.0 ** 63
UINT32_SPAN = 2 ** 32


# ---------------------------------------------------------------- the exp table
# The C library's logf, as onnxruntime calls it: glibc 2.36's differs from the correctly rounded
# float32 log for 53 of the row lengths up to 3e6, the first at 60594, where onnxruntime follows
# glibc.
_c_logf = float32_library_function("logf", math.log)


def _logf(value: np.float32) -> float:
    """``logf`` of one float32 value (the C library's, else the correctly rounded one)."""
    return float(_c_logf(value))


def exp_table(in_scale: float, row_length: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax table: ``table[k] = f32(exp((k - 255 + b) * in_scale))``.

    ``b = max(0, logf(f32(FLT_MAX / f32(row_length))) - 5) / in_scale`` (in double): the row
    maximum maps to ``exp`` of a large shift that keeps the float32 sum of ``row_length``
    entries finite. ``k = 255 - (max - x)``.
    """
    scale = float(F32(in_scale))
    headroom = F32(F32(np.finfo(F32).max) / F32(row_length))
    shift = max(0.0, _logf(headroom) - 5.0) / scale
    # The C library's exp, as onnxruntime's std::exp: numpy's float64 exp takes an AVX-512 path
    # on hosts that have it, whose results differ from libm's in the last bit (measured on
    # 200,000 values between a Zen 4 and an emulated Haswell), so a table could depend on the
    # converting host.
    return np.array([math.exp((k - 255.0 + shift) * scale) for k in range(TABLE_SIZE)],
                    np.float64).astype(F32)


def _inverse_out_scale(out_scale: float) -> np.float32:
    return F32(np.floor(F32(F32(1.0) / F32(out_scale))))


# ---------------------------------------------------------------- numpy reference
def _store_reference(r: np.ndarray, out_zp: int, source_dtype: str) -> np.ndarray:
    """Rounded float32 quotients to int8 as onnxruntime's int8 / uint8 kernels store them."""
    if source_dtype == "uint8":
        fits = r < INT64_LIMIT  # False for NaN
        low = np.where(fits, r, F32(0)).astype(np.int64) % UINT32_SPAN
        t = (low + out_zp + 128) % UINT32_SPAN
        return (np.minimum(t, 255) - 128).astype(np.int8)
    fits = r < INT32_LIMIT
    y = np.clip(np.where(fits, r, F32(0)).astype(np.int64) + out_zp, -128, 127)
    return np.where(fits, y, 127 if out_zp < 0 else -128).astype(np.int8)


def _reference(x, table, *, in_scale, in_zp, out_scale, out_zp, axis, rounding,
               source_dtype, beta=1.0) -> np.ndarray:
    if np.asarray(x).dtype == np.int16:
        return _softmax_int16.reference(x, table, int(axis), in_scale, beta, rounding)
    if rounding in Q31_ROUNDINGS:
        return _reference_q31(x, table, int(axis))
    xr = np.moveaxis(np.asarray(x).astype(np.int32), axis, -1)
    e = np.asarray(table, F32)[255 - (xr.max(axis=-1, keepdims=True) - xr)]
    total = np.cumsum(e, axis=-1, dtype=F32)[..., -1:]  # accumulate = sequential float32 sum
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.rint((e * _inverse_out_scale(out_scale)).astype(F32) / total).astype(F32)
    return np.moveaxis(_store_reference(r, int(out_zp), source_dtype), -1, axis)


# ---------------------------------------------------------------- TE legalization
def _f(value: float | np.float32):
    return tirx.const(float(value), "float32")


def _te_store(r, out_zp: int, source_dtype: str):
    """TE twin of ``_store_reference`` for one rounded float32 quotient ``r``."""
    if source_dtype == "uint8":
        fits = r < _f(INT64_LIMIT)
        low = tirx.Select(fits, r, _f(0.0)).astype("int64") & tirx.const(UINT32_SPAN - 1, "int64")
        t = low + (out_zp + 128)
        t = tirx.Select(t >= tirx.const(UINT32_SPAN, "int64"), t - UINT32_SPAN, t)
        return (te.min(t, tirx.const(255, "int64")) - 128).astype("int8")
    fits = r < _f(INT32_LIMIT)
    y = tirx.Select(fits, r, _f(0.0)).astype("int32") + out_zp
    y = te.max(te.min(y, 127), -128)
    return tirx.Select(fits, y, 127 if out_zp < 0 else -128).astype("int8")


def _row_max(x, axis: int):
    """The shape, the per-row shape ``kept``, ``at(idx, j)`` (``idx`` with its axis coordinate
    replaced by ``j``) and the row-max stage."""
    shape = [int(d) for d in x.shape]
    kept = [1 if i == axis else d for i, d in enumerate(shape)]

    def at(idx, j):
        return [j if i == axis else v for i, v in enumerate(idx)]

    k = te.reduce_axis((0, shape[axis]), "k")
    row_max = te.compute(kept, lambda *i: te.max(x(*at(i, k)), axis=k), name="row_max")
    return shape, kept, at, row_max


def _rows(x, table, axis: int):
    """What the int8 legalizations build first: ``_row_max``'s shape, ``kept`` and ``at``, and
    ``exp_of(idx)``, the table entry of ``x[idx] - max(row)``."""
    shape, kept, at, row_max = _row_max(x, axis)

    def exp_of(idx):
        m = row_max(*at(idx, 0)).astype("int32")
        return table[x(*idx).astype("int32") - m + (TABLE_SIZE - 1)]

    return shape, kept, at, exp_of


def _legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if _tvm.dtype_of(call.args[0]) == "int16":
        return _softmax_int16.legalize(bb, call, a, _row_max, _te_leading_zeros)
    if a["rounding"] in Q31_ROUNDINGS:
        return _legalize_q31(bb, call)
    axis = a["axis"]
    inv = _f(_inverse_out_scale(a["out_scale"]))

    def compute(x, table):
        shape, kept, at, exp_of = _rows(x, table, axis)
        j = te.reduce_axis((0, shape[axis]), "j")
        # A serial reduction: LLVM keeps the order of float adds (no reassociation allowed).
        total = te.compute(kept, lambda *i: te.sum(exp_of(at(i, j)), axis=j), name="row_sum")

        def out(*idx):
            q = (exp_of(idx) * inv) / total(*at(idx, 0))
            return _te_store(tirx.round(q), int(a["out_zp"]), a["source_dtype"])

        return te.compute(shape, out, name="softmax")

    return bb.call_te(compute, call.args[0], call.args[1], primfunc_name_hint="canonqnn_softmax")


# ---------------------------------------------------------------- TFLite SOFTMAX (q31 roundings)
# gemmlowp fixed point as TFLite's 8-bit reference kernel uses it: exp arguments are Q5.26
# (``in_scale * beta`` folded into a Q31 multiplier), exps Q0.31, the row sum Q12.19, outputs
# Q0.31 shifted down to 8 bits.
SCALED_DIFF_INTEGER_BITS = 5
SUM_INTEGER_BITS = 12
SUM_LIMIT = 1 << 28  # a row sum of 512 (Q12.19): TFLite's reference kernel aborts from here
OUTPUT_BITS = 8
# exp(-2^k) in Q0.31 for k = -2..4: the barrel shifter of exp_on_negative_values
EXP_OF_MINUS_POWERS = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                       (2, 39332535), (3, 720401), (4, 242))
EXP_MINUS_ONE_EIGHTH = 1895147668  # exp(-1/8), Q0.31
ONE_THIRD = 715827883  # Q0.31
FORTY_EIGHT_SEVENTEENTHS, MINUS_THIRTY_TWO_SEVENTEENTHS = 1515870810, -1010580540  # Q2.29


def _exp_on_last_quarter(a) -> np.ndarray:
    """gemmlowp ``exp_on_interval_between_negative_one_quarter_and_0_excl`` (Q0.31 in and out):
    exp(-1/8) times a 4th-order Taylor polynomial around -1/8."""
    x = wrap_int32(np.asarray(a, np.int64) + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    poly = wrap_int32(srdhm(wrap_int32(rounding_divide_by_pot(x4, 2) + x3), ONE_THIRD) + x2)
    poly = rounding_divide_by_pot(poly, 1)
    return wrap_int32(EXP_MINUS_ONE_EIGHTH + srdhm(EXP_MINUS_ONE_EIGHTH, wrap_int32(x + poly)))


def exp_on_negative_values(a) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values``: exp of Q5.26 values <= 0, as Q0.31."""
    a = np.asarray(a, np.int64)
    quarter = 1 << (31 - SCALED_DIFF_INTEGER_BITS - 2)
    shifted = wrap_int32((a & (quarter - 1)) - quarter)  # a mod 1/4, minus 1/4: in [-1/4, 0)
    result = _exp_on_last_quarter(saturating_rounding_multiply_by_pot(
        shifted, SCALED_DIFF_INTEGER_BITS))
    remainder = wrap_int32(shifted - a)
    for power, multiplier in EXP_OF_MINUS_POWERS:
        bit = 1 << (31 - SCALED_DIFF_INTEGER_BITS + power)
        result = np.where(remainder & bit, srdhm(result, multiplier), result)
    return np.where(a == 0, INT32_MAX, result)


def _one_over_one_plus_x(a) -> np.ndarray:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (Q0.31 in and out): three Newton-Raphson
    steps from 48/17 - 32/17 * d on the half denominator d = (1 + x) / 2."""
    total = np.asarray(a, np.int64) + INT32_MAX
    half = trunc_div(total + np.where(total >= 0, 1, -1), 2)  # C: (t + sign) / 2
    x = wrap_int32(FORTY_EIGHT_SEVENTEENTHS + srdhm(half, MINUS_THIRTY_TWO_SEVENTEENTHS))
    for _ in range(3):
        one_minus = wrap_int32((1 << 29) - srdhm(half, x))
        x = wrap_int32(x + saturating_rounding_multiply_by_pot(srdhm(x, one_minus), 2))
    return saturating_rounding_multiply_by_pot(x, 1)


def q31_input_multiplier(in_scale: float, beta: float, rounding: str) -> tuple[int, int, int]:
    """TFLite ``PreprocessSoftmaxScaling`` and ``CalculateInputRadius``: ``(m, shift, diff_min)``.

    ``real = min(double(beta) * double(in_scale) * 2^26, cap)`` with cap ``2^31 - 1`` (``2^30 -
    1`` in single-rounding builds), ``(m, shift) = QuantizeMultiplier(real)`` (must be > 1:
    TFLite checks it), ``diff_min = -floor(31 * 2^26 / 2^shift)``.
    """
    single = rounding == "q31_single"
    cap = (1 << 30) - 1.0 if single else (1 << 31) - 1.0
    real = min(float(F32(beta)) * float(F32(in_scale)) * (1 << (31 - SCALED_DIFF_INTEGER_BITS)),
               cap)
    if not real > 1.0:
        raise ValueError(f"canonqnn.softmax: TFLite requires in_scale * beta * 2^26 > 1, got "
                         f"in_scale {in_scale!r}, beta {beta!r}")
    m, shift = quantize_multiplier(real, single_rounding=single)
    radius = math.floor(((1 << SCALED_DIFF_INTEGER_BITS) - 1)
                        * (1 << (31 - SCALED_DIFF_INTEGER_BITS)) / (1 << shift))
    return m, shift, -radius


def q31_exp_table(in_scale: float, beta: float, rounding: str) -> np.ndarray:
    """int32[256]: ``table[255 + d]`` = the kernel's Q0.31 exp of the distance ``d <= 0`` to the
    row maximum: ``exp_on_negative_values(MBQM(d, m, shift))`` (the rounding's
    ``MultiplyByQuantizedMultiplierGreaterThanOne``), 0 where ``d < diff_min`` (the kernel
    skips those entries: they add nothing and give the lowest output)."""
    m, shift, diff_min = q31_input_multiplier(in_scale, beta, rounding)
    d = np.arange(TABLE_SIZE, dtype=np.int64) - (TABLE_SIZE - 1)
    valid = d >= diff_min
    scaled = multiply_by_quantized_multiplier(np.where(valid, d, 0), m, shift, rounding)
    return np.where(valid, exp_on_negative_values(scaled), 0).astype(np.int32)


def _leading_zeros(total: np.ndarray) -> np.ndarray:
    """Leading zero bits of non-negative int32 values: #{k in 0..31 : total < 2^k}."""
    return np.sum([(total < (1 << k)).astype(np.int64) for k in range(32)], axis=0)


def _reference_q31(x, table, axis: int) -> np.ndarray:
    xr = np.moveaxis(np.asarray(x).astype(np.int64), axis, -1)
    e = np.asarray(table, np.int64)[(TABLE_SIZE - 1) - (xr.max(axis=-1, keepdims=True) - xr)]
    total = rounding_divide_by_pot(e, SUM_INTEGER_BITS).sum(axis=-1, keepdims=True)  # no wrap
    fits = total < SUM_LIMIT
    total = np.where(fits, total, 1)
    zeros = _leading_zeros(total)
    scale = _one_over_one_plus_x(((total << zeros) & 0xFFFFFFFF) - (1 << 31))
    exponent = SUM_INTEGER_BITS - zeros + 31 - OUTPUT_BITS
    y = rounding_divide_by_pot(srdhm(scale, e), exponent) - 128
    y = np.where(fits, np.clip(y, -128, 127), -128).astype(np.int8)
    return np.moveaxis(y, -1, axis)


def _i32(value: int):
    return tirx.const(int(value), "int32")


def _te_leading_zeros(t):
    """TE twin of ``_leading_zeros`` for one int64 ``t`` in [0, 2^31): int32."""
    return sum(tirx.Select(t < tirx.const(1 << b, "int64"), _i32(1), _i32(0)) for b in range(32))


def _te_wrap(value_int64):
    """int64 to int32 keeping the low 32 bits (C's wrapping int32 arithmetic)."""
    return value_int64.astype("int32")


def _te_saturating_shift_left(x, exponent: int):
    """TE twin of ``numerics.q31.saturating_rounding_multiply_by_pot`` for ``exponent > 0``
    (int32)."""
    limit = (1 << (31 - exponent)) - 1
    shifted = _te_wrap(x.astype("int64") * tirx.const(1 << exponent, "int64"))
    return tirx.Select(x > _i32(limit), _i32(INT32_MAX),
                       tirx.Select(x < _i32(-limit), _i32(INT32_MIN), shifted))


def _te_add(a, b):
    return _te_wrap(a.astype("int64") + b.astype("int64"))


def _te_half_denominator(a):
    """First step of ``_one_over_one_plus_x``: ``(a + INT32_MAX + sign) / 2`` (C division)."""
    total = a.astype("int64") + tirx.const(INT32_MAX, "int64")
    sign = tirx.Select(total >= tirx.const(0, "int64"), tirx.const(1, "int64"),
                       tirx.const(-1, "int64"))
    return tirx.truncdiv(total + sign, tirx.const(2, "int64")).astype("int32")


def _te_newton_start(half):
    start = te_srdhm(half, _i32(MINUS_THIRTY_TWO_SEVENTEENTHS))
    return _te_add(_i32(FORTY_EIGHT_SEVENTEENTHS), start)


def _te_one_over_one_plus_x(a, stage):
    """TE twin of ``_one_over_one_plus_x``; ``stage(fn, name)`` materializes ``fn(index)``
    per row. Every SRDHM gets its own stage: inlined into one expression, a Newton step takes
    TVM's simplifier seconds (measured 2 s per step)."""
    half = stage(lambda i: _te_half_denominator(a(*i)), "row_half_denominator")
    x = stage(lambda i: _te_newton_start(half(*i)), "row_reciprocal_0")
    for step in range(1, 4):
        error = stage(lambda i, x=x: _te_wrap(
            tirx.const(1 << 29, "int64") - te_srdhm(half(*i), x(*i)).astype("int64")),
            f"row_reciprocal_{step}_error")
        product = stage(lambda i, x=x, error=error: te_srdhm(x(*i), error(*i)),
                        f"row_reciprocal_{step}_product")
        x = stage(lambda i, x=x, product=product: _te_add(
            x(*i), _te_saturating_shift_left(product(*i), 2)), f"row_reciprocal_{step}")
    return stage(lambda i: _te_saturating_shift_left(x(*i), 1), "row_reciprocal")


def _legalize_q31(bb: Any, call: Any) -> Any:
    axis = int(_tvm.attrs_dict(call)["axis"])

    def compute(x, table):
        shape, kept, at, exp_of = _rows(x, table, axis)
        j = te.reduce_axis((0, shape[axis]), "j")
        total = te.compute(kept, lambda *i: te.sum(te_rounding_divide_by_pot(
            exp_of(at(i, j)), _i32(SUM_INTEGER_BITS)).astype("int64"), axis=j), name="row_sum")

        zeros = te.compute(kept, lambda *i: _te_leading_zeros(total(*i)), name="row_sum_clz")

        def normalized(*i):  # the sum shifted to [1, 2) as Q0.31, minus one
            shifted = total(*i) << zeros(*i).astype("int64")
            return _te_wrap(shifted - tirx.const(1 << 31, "int64"))

        def stage(fn, name):
            return te.compute(kept, lambda *i: fn(i), name=name)

        minus_one = te.compute(kept, normalized, name="row_sum_normalized")
        scale = _te_one_over_one_plus_x(minus_one, stage)

        # (a stage of its own: inlined into the rounding shift it takes LLVM's and TVM's
        # simplifiers ~0.5 s per build)
        scaled = te.compute(shape, lambda *idx: te_srdhm(scale(*at(idx, 0)), exp_of(idx)),
                            name="scaled_exp")

        def rounded(*idx):  # exponent <= 35 (zeros >= 0): the int64 shift stays defined
            exponent = _i32(SUM_INTEGER_BITS + 31 - OUTPUT_BITS) - zeros(*at(idx, 0))
            return te_rounding_divide_by_pot(scaled(*idx), exponent)

        # The clamp reads a stage of its own: applied to the shift expression, TVM's bound
        # analysis (0.27) wrongly proves ``r - 128 <= 127`` and drops the clamp (measured:
        # 256 stored as -128).
        unclamped = te.compute(shape, rounded, name="rounded")

        def out(*idx):
            y = tirx.max(tirx.min(unclamped(*idx) - _i32(128), _i32(127)), _i32(-128))
            fits = total(*at(idx, 0)) < tirx.const(SUM_LIMIT, "int64")
            return tirx.Select(fits, y, _i32(-128)).astype("int8")

        return te.compute(shape, out, name="softmax")

    return bb.call_te(compute, call.args[0], call.args[1], primfunc_name_hint="canonqnn_softmax")


def _infer(call: Any) -> Any:
    table = call.args[1]
    if _tvm.dtype_of(call.args[0]) == "int16":
        if _tvm.shape_of(table) != _softmax_int16.TABLES_SHAPE or _tvm.dtype_of(table) != "int16":
            raise ValueError("canonqnn.softmax: an int16 input takes exp_table int16[2, 513]")
        return _tvm.tensor_type(_tvm.shape_of(call.args[0]), "int16")
    dtype = "int32" if _tvm.attrs_dict(call).get("rounding") in Q31_ROUNDINGS else "float32"
    if _tvm.shape_of(table) != (TABLE_SIZE,) or _tvm.dtype_of(table) != dtype:
        raise ValueError(f"canonqnn.softmax: exp_table must be {dtype}[256]")
    return _tvm.tensor_type(_tvm.shape_of(call.args[0]), "int8")


def softmax_constraint(x_dtype: str, rounding: str, zero_points=(), out_qp: QParams | None = None,
                       beta: float = 1.0, in_scale: float | None = None) -> Refusal | None:
    """x int8 per tensor, static shape; axis non-negative; source_dtype int8 or uint8. rne_f32:
    beta 1, exp_table float32[256] = exp_table(in_scale, shape[axis]). q31_*: exp_table
    int32[256] = q31_exp_table(in_scale, beta, rounding), in_scale * beta * 2^26 > 1; outputs
    are (code + 128) / 256 whatever out_scale / out_zp say (TFLite's int8 kernel requires
    (1/256, -128), its uint8 kernel ignores them). x int16 (TFLite 16x8, q31_*, zero points 0,
    out_scale 1/32768): exp_table int16[2, 513], int16 output"""
    if (why := activation_dtype(x_dtype, rounding, zero_points)) is not None:
        return why
    if x_dtype == "int16":
        if out_qp is not None and (abs(float(F32(out_qp.scalar_scale)) -
                                       _softmax_int16.OUTPUT_SCALE) >
                                   _softmax_int16.OUTPUT_SCALE_TOLERANCE or
                                   out_qp.dtype != "int16"):
            return Refusal(f"TFLite's int16 SOFTMAX writes int16 of scale 1/32768, not {out_qp}",
                           UnsupportedRounding)
    elif rounding in Q31_ROUNDINGS:
        if in_scale is not None and not F32(beta) * np.float64(in_scale) * 2.0 ** 26 > 1.0:
            return Refusal(f"TFLite's SOFTMAX requires in_scale * beta * 2^26 > 1 (in_scale "
                           f"{in_scale!r}, beta {beta!r})", UnsupportedRounding)
    elif float(F32(beta)) != 1.0:
        return Refusal(f"rounding {rounding!r} has no beta (onnxruntime's QLinearSoftmax), got "
                       f"{float(F32(beta))!r}")
    return None


SOFTMAX = register(CanonicalOp(
    name="softmax",
    summary="int8 softmax along one axis (onnxruntime QLinearSoftmax: exp table, float32 sum; "
            "TFLite SOFTMAX: gemmlowp fixed point)",
    args=("x", "exp_table"),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=_reference,
    constraint=softmax_constraint,
    family="softmax",
    roundings=("rne_f32", "q31_double", "q31_single"),
))


def softmax(x: Any, x_qp: QParams, out_qp: QParams, axis: int, *, source_dtype: str = "int8",
            rounding: str = "rne_f32", beta: float = 1.0) -> Any:
    """Build ``canonqnn.softmax`` over ``axis`` (any sign): onnxruntime's float table for
    rne_f32 (no ``beta``: QLinearSoftmax has none), TFLite's Q31 exp table for q31_*."""
    shape = _tvm.shape_of(x)
    axis = int(axis) % len(shape)
    beta = float(F32(beta))
    SOFTMAX.require(x_dtype=_tvm.dtype_of(x), rounding=rounding,
                    zero_points=(x_qp.scalar_zp, out_qp.scalar_zp), out_qp=out_qp, beta=beta,
                    in_scale=x_qp.scalar_scale)
    if _tvm.dtype_of(x) == "int16":
        table = _tvm.const(_softmax_int16.tables(), "int16")
    elif rounding in Q31_ROUNDINGS:
        table = _tvm.const(q31_exp_table(x_qp.scalar_scale, beta, rounding), "int32")
    else:
        table = _tvm.const(exp_table(x_qp.scalar_scale, shape[axis]), "float32")
    return SOFTMAX.call([x, table], dict(
        in_scale=x_qp.scalar_scale, in_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, axis=axis, rounding=rounding, source_dtype=source_dtype,
        beta=beta))
