"""Tables of TFLite's int8 / uint8 elementwise kernels, as its reference kernels compute them
(``OpResolverType.BUILTIN_REF``; ai-edge-litert 2.3 on x86-64, gemmlowp double rounding).

TFLite computes each of these builtins as one kernel of its own, not as a chain of float ops, so
this source builds the table of a whole function (``KERNELS``), never evaluates single ops:

    sigmoid     LOGISTIC        float LUT of 1 / (1 + expf(-x))
    tanh        TANH            float LUT of tanhf(x)
    gelu        GELU            float LUT of 0.5 * x * erfcf(x * -sqrt(1/2))
    gelu_tanh   GELU approx.    float LUT of 0.5 * x * (1 + tanhf(k * (x + 0.044715 * x^3)))
    elu         ELU             float LUT of x < 0 ? expm1f(x) : x (int8 only)
    leaky_relu  LEAKY_RELU      Q31: x >= 0 ? MBQM(x, identity) : MBQM(x, alpha multiplier)
    hardswish   HARD_SWISH      int16 fixed point (reluish multiplier, SQDMULH, ...)
    rsqrt       RSQRT           Q31: Newton-Raphson 1/sqrt of the integer q - zp, two MBQMs

The float LUTs follow TFLite's ``LUTPopulate`` (``lut_float``): the input code is dequantized
as ``f32(in_scale * f32(q - in_zp))``, transformed in float32, multiplied by ``f32(1 /
out_scale)``, rounded half away from zero (``roundf``), offset by the zero point in float32,
and saturated (``quantize``). The float32 library functions (``expf``, ``tanhf``, ``erfcf``)
are the C library's own, called through ctypes as TFLite calls them
(``numerics.arithmetic.float32_library_function``; without one, the float64 function rounded
to float32, which glibc's ``tanhf`` does not always equal: tests/tables/test_tflite_tables.py
pins a table where that matters).

ELU has no reference kernel (``BUILTIN_REF`` refuses an ELU model of any type and operator
version); its table is the built-in kernel's (``OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``),
the one TFLite kernel computing ELU, which refuses uint8 tensors.

uint8 tensors are held as int8 (q - 128, zp - 128). The uint8 kernels give the shifted int8
table except where a value overflows: HARD_SWISH's int16 output arithmetic wraps at a point
that depends on the stored zero point, and the uint8 LUTs convert values beyond int32 to 0
where the int8 ones saturate, hence ``source_dtype``. RSQRT has no uint8 kernel at all.

Pure numpy: no TVM, no model format.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..numerics.arithmetic import float32_library_function, round_half_away
from ..numerics.q31 import (
    INT32_MAX,
    multiply_by_quantized_multiplier,
    reduced_multiplier,
    saturating_rounding_multiply_by_pot,
    srdhm,
    wrap_int16,
    wrap_int32,
)
from ..qparams import (
    INT8_CODES,
    INT8_MAX,
    INT8_MIN,
    INT16_MAX,
    INT16_MIN,
    QParams,
    quantize_multiplier,
)
from . import tflite_int16
from ._f32 import F32, f32
from .onnxruntime import NotEvaluable  # the one error type of canonqnn.tables
from .tflite_int16_fixedpoint import rdbp16, sdhm16, srdhm16

CODES = INT8_CODES
_UINT8_SHIFT = 128


# ---------------------------------------------------------------- float LUTs (LUTPopulate)
def dequantize(codes, scale, zero_point) -> np.ndarray:
    """``f32(scale * f32(q - zp))`` as LUTPopulate dequantizes (int32 difference, exact in
    float32)."""
    diff = (np.asarray(codes, np.int64) - np.asarray(zero_point, np.int64)).astype(F32)
    return (f32(scale) * diff).astype(F32)


def quantize(values, scale: float, zero_point: int, source_dtype: str = "int8") -> np.ndarray:
    """LUTPopulate's output rounding: ``roundf(f32(v * f32(1 / scale)))`` (ties away), plus the
    zero point in float32, then to the integer type (int8 form returned).

    Measured beyond int32: int8 tables saturate (inf included), uint8 tables convert as x86's
    cvttss2si does (INT32_MIN for anything outside int32, hence 0). A NaN, which no table here
    produces from finite inputs, is taken as INT32_MIN."""
    inverse = F32(F32(1.0) / F32(scale))
    shift = _UINT8_SHIFT if source_dtype == "uint8" else 0
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (f32(values) * inverse).astype(F32)
        rounded = round_half_away(scaled)  # roundf: exact, 0.49999997f gives 0
        shifted = (rounded + F32(zero_point + shift)).astype(F32)
        if source_dtype == "uint8":
            fits = (shifted >= -(2.0**31)) & (shifted < 2.0**31)  # False for NaN
            shifted = np.where(fits, shifted, F32(-(2.0**31)))
        shifted = np.where(np.isnan(shifted), F32(-(2.0**31)), shifted)
        q = np.clip(shifted, INT8_MIN + shift, INT8_MAX + shift).astype(np.int64) - shift
    return q.astype(np.int8)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


# TFLite's kernels call the C library's, and glibc's are not correctly rounded (2.36: ``tanhf``
# differs from the correctly rounded result on 19% of float32 inputs in [1e-9, 100], ``erfcf``
# on 3%, ``expf`` on 0.03%), which changes a table now and then.
expf = float32_library_function("expf", _exp)
tanhf = float32_library_function("tanhf", math.tanh)
erfcf = float32_library_function("erfcf", math.erfc)
expm1f = float32_library_function("expm1f", math.expm1)
_NEG_SQRT1_2 = F32(-0.70710678118654752440)            # static_cast<float>(-M_SQRT1_2)
_SQRT_2_OVER_PI = F32(1.12837916709551257390 * 0.70710678118654752440)  # M_2_SQRTPI*M_SQRT1_2
_GELU_CUBIC = F32(0.044715)


def logistic(x) -> np.ndarray:
    """``1.0f / (1.0f + expf(-x))``."""
    with np.errstate(over="ignore"):
        return (F32(1.0) / (F32(1.0) + expf(-f32(x))).astype(F32)).astype(F32)


def gelu(x) -> np.ndarray:
    """``0.5f * x * erfcf(x * f32(-M_SQRT1_2))`` left to right (the erfc form TFLite uses to
    avoid cancellation for large negative x)."""
    x = f32(x)
    return ((F32(0.5) * x).astype(F32) * erfcf((x * _NEG_SQRT1_2).astype(F32))).astype(F32)


def gelu_tanh(x) -> np.ndarray:
    """``0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)))``, k = f32(sqrt(2 / pi)),
    every operation rounded to float32 in source order (no FMA)."""
    x = f32(x)
    cube = (((_GELU_CUBIC * x).astype(F32) * x).astype(F32) * x).astype(F32)
    inner = (_SQRT_2_OVER_PI * (x + cube).astype(F32)).astype(F32)
    return ((F32(0.5) * x).astype(F32) * (F32(1.0) + tanhf(inner)).astype(F32)).astype(F32)


def elu(x) -> np.ndarray:
    """``x < 0 ? expm1f(x) : x`` (measured: not ``expf(x) - 1``, nor expm1 in double)."""
    x = f32(x)
    return np.where(x < 0, expm1f(np.minimum(x, F32(0.0))), x).astype(F32)


def lut_float(transform: Callable, in_qp: QParams, out_qp: QParams,
              source_dtype: str = "int8") -> np.ndarray:
    """TFLite ``LUTPopulate``: the int8[256] table of the float32 ``transform``."""
    values = transform(dequantize(CODES, in_qp.scalar_scale, in_qp.scalar_zp))
    return quantize(values, out_qp.scalar_scale, out_qp.scalar_zp, source_dtype)


# ---------------------------------------------------------------- LEAKY_RELU (Q31)
def mbqm_x86(x, multiplier: int, shift: int) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier`` as compiled for x86-64: the left shift factor
    ``1 << shift`` uses the shift count modulo 32 (``shl``), so the multipliers of 2^31 and
    more (shift >= 32, real ratios past 2^31) scale by ``2^(shift - 32)`` instead (measured:
    ratio in/out scale 2e9 in LEAKY_RELU). Otherwise the Q31 double rounding of
    ``canonqnn.ops._q31``."""
    if shift < 32:
        return multiply_by_quantized_multiplier(x, multiplier, shift, "q31_double")
    factor = wrap_int32(1 << (shift % 32))
    return multiply_by_quantized_multiplier(wrap_int32(np.asarray(x, np.int64) * factor),
                                            multiplier, 0, "q31_double")


def leaky_relu(in_qp: QParams, out_qp: QParams, alpha: float) -> np.ndarray:
    """TFLite's quantized LEAKY_RELU: two Q31 multipliers, both computed in float32 then
    widened (``f32(f32(in_scale * alpha) / out_scale)`` and ``f32(in_scale / out_scale)``).
    int8, or int16 (16x8: the same arithmetic on every int16 code, zero points 0, int16
    saturation; a ratio of 2 and more wraps the left shift in int32, as the kernel does)."""
    s_in, s_out = F32(in_qp.scalar_scale), F32(out_qp.scalar_scale)
    m_alpha = quantize_multiplier(float(F32(F32(s_in * F32(alpha)) / s_out)))
    m_identity = quantize_multiplier(float(F32(s_in / s_out)))
    codes, (lo, hi) = (CODES, (INT8_MIN, INT8_MAX)) if in_qp.dtype == "int8" else \
        (tflite_int16.CODES, (INT16_MIN, INT16_MAX))
    x = codes.astype(np.int64) - in_qp.scalar_zp
    pos, neg = mbqm_x86(x, *m_identity), mbqm_x86(x, *m_alpha)
    y = np.where(x >= 0, pos, neg) + out_qp.scalar_zp
    return np.clip(y, lo, hi).astype(in_qp.dtype)


# ---------------------------------------------------------------- HARD_SWISH (int16 fixed point)
def _saturating_left_shift16(x, amount: int) -> np.ndarray:
    return np.clip(np.asarray(x, np.int64) * (1 << amount), INT16_MIN, INT16_MAX)


def downscale_int32_to_int16_multiplier(m: int) -> int:
    """TFLite DownScaleInt32ToInt16Multiplier: ``(m + 2^15) >> 16``, saturating at 32767 from
    ``m >= 2^31 - 1 - 2^15``: the int64 requantization's ``reduced_multiplier``, whose cut-off
    at 0x7FFF0000 gives the same value for every int32 ``m``."""
    return int(reduced_multiplier(m))


def hard_swish_params(in_qp: QParams, out_qp: QParams) -> dict[str, int]:
    """HardSwishPrepare: the int16 multipliers (float32 ratios, QuantizeMultiplier, then
    rounded to 16 bits)."""
    hires = F32(F32(1.0 / 128.0) * F32(in_qp.scalar_scale))
    out_m, out_e = quantize_multiplier(float(F32(hires / F32(out_qp.scalar_scale))))
    if out_e > 0:
        raise NotEvaluable("TFLite HARD_SWISH requires in_scale / (128 * out_scale) < 1 "
                           f"(in {in_qp.scalar_scale!r}, out {out_qp.scalar_scale!r})")
    relu_m, relu_e = quantize_multiplier(float(F32(hires / F32(F32(3.0) / F32(32768.0)))))
    return dict(output_multiplier=downscale_int32_to_int16_multiplier(out_m),
                output_exponent=out_e,
                reluish_multiplier=downscale_int32_to_int16_multiplier(relu_m),
                reluish_exponent=relu_e)


def hard_swish(in_qp: QParams, out_qp: QParams, source_dtype: str = "int8") -> np.ndarray:
    """TFLite's reference quantized HARD_SWISH, element by element in int16 as it computes."""
    p = hard_swish_params(in_qp, out_qp)
    shift = _UINT8_SHIFT if source_dtype == "uint8" else 0
    x = (CODES.astype(np.int64) + shift) - (in_qp.scalar_zp + shift)
    hires = wrap_int16(x * 128)
    preshift = srdhm16(hires, p["output_multiplier"])
    reluish, e = hires, p["reluish_exponent"]
    if e > 0:
        reluish = _saturating_left_shift16(reluish, e - 1)
    reluish = srdhm16(reluish, p["reluish_multiplier"])
    if e > 0:
        reluish = _saturating_left_shift16(reluish, 1)
    if e < 0:
        reluish = rdbp16(reluish, -e)
    reluish = wrap_int16((reluish + (1 << 15)) >> 1)
    out = rdbp16(sdhm16(reluish, preshift), -p["output_exponent"])
    out = wrap_int16(out + out_qp.scalar_zp + shift)  # int16 += zero point (wraps)
    lo, hi = (0, 255) if source_dtype == "uint8" else (INT8_MIN, INT8_MAX)
    return (np.clip(out, lo, hi) - shift).astype(np.int8)


# ---------------------------------------------------------------- RSQRT (Q31, int8 only)
RSQRT_SHIFT = 20  # kShift: the kernel holds 1 / sqrt(q - zp) as an integer times 2^20
_F3_ONE = 1 << 28                   # 1.0 in gemmlowp FixedPoint<int32, 3>
_F3_THREE_HALVES = (1 << 28) + (1 << 27)
_F0_HALF_SQRT2 = 1518500250         # sqrt(2) / 2 in FixedPoint<int32, 0>


def inv_sqrt_quantized_multiplier_exp(values) -> tuple[np.ndarray, np.ndarray]:
    """TFLite ``GetInvSqrtQuantizedMultiplierExp(v, kReverseShift)`` for int32 ``v >= 0``:
    ``(m, shift)`` with ``1 / sqrt(v) ~ m * 2^(shift - 31)``; ``v <= 1`` gives
    ``(2^31 - 1, 0)`` (zero is taken as one).

    ``v`` is normalized by pairs of bits into [2^27, 2^29) (so the root's exponent stays
    whole), read as FixedPoint<int32, 3>, and 1 / sqrt is refined from 1.0 by five Newton
    steps ``x = 3/2 x - (v/2) x^3`` in gemmlowp fixed point (SRDHM products, saturating
    rescales), then multiplied by sqrt(2)/2; a negative exponent is moved into ``m``."""
    values = np.asarray(values, np.int64)
    v = np.maximum(values, 2)  # the v <= 1 lanes are replaced below
    shift = np.full(v.shape, 11, np.int64)
    while np.any(big := v >= 1 << 29):
        v, shift = np.where(big, v // 4, v), shift + big
    leading_zeros = 32 - np.frexp(v.astype(np.float64))[1]  # exact: v < 2^29
    pairs = (leading_zeros - 1) // 2 - 1
    shift -= pairs
    v = v << (2 * pairs)
    half_input = saturating_rounding_multiply_by_pot(v >> 1, -1)
    x = np.full(v.shape, _F3_ONE, np.int64)
    for _ in range(5):
        cube = saturating_rounding_multiply_by_pot(srdhm(srdhm(x, x), x), 6)  # F9 -> F3
        x = saturating_rounding_multiply_by_pot(  # F6 -> F3
            wrap_int32(srdhm(_F3_THREE_HALVES, x) - srdhm(half_input, cube)), 3)
    x = srdhm(x, _F0_HALF_SQRT2)
    x = np.where(shift < 0, wrap_int32(x << np.maximum(-shift, 0)), x)
    shift = -np.maximum(shift, 0)  # the right shift as a left one (kReverseShift)
    small = values <= 1
    return np.where(small, INT32_MAX, x), np.where(small, 0, shift)


def rsqrt_multiplier(in_qp: QParams, out_qp: QParams) -> tuple[int, int]:
    """SetRsqrtOutputMultiplier: ``QuantizeMultiplier(1. / (sqrtf(in) * out))``, the product
    in float32 (std::sqrt of a float is the float overload), the quotient in double."""
    root = np.sqrt(F32(in_qp.scalar_scale))
    return quantize_multiplier(1.0 / float(F32(root * F32(out_qp.scalar_scale))))


def rsqrt(in_qp: QParams, out_qp: QParams, source_dtype: str = "int8") -> np.ndarray:
    """TFLite's int8 RSQRT (RsqrtEvalQuantizedInt8), per code with ``d = q - in_zp``:
    ``d == 0`` gives 127; ``d > 0`` gives ``clamp(MBQM(MBQM(1, m_d, s_d + 20), m, s - 20)
    + out_zp)`` with ``(m_d, s_d)`` the inverse square root of ``d`` and ``(m, s)`` the
    output multiplier. The interpreter refuses to run on ``d < 0`` ("Rsqrt is only defined
    for positive values"): no value exists to reproduce, and the table holds 127 there, the
    kernel's value for zero."""
    if source_dtype != "int8":
        raise NotEvaluable("TFLite's RSQRT has no uint8 kernel (float32, int8 and int16 only)")
    m, s = rsqrt_multiplier(in_qp, out_qp)
    if s - RSQRT_SHIFT < -31:
        raise NotEvaluable(
            f"TFLite's RSQRT would shift right by {RSQRT_SHIFT - s} > 31 bits (sqrt(in_scale) * "
            f"out_scale > 2^12; in {in_qp!r}, out {out_qp!r}), where gemmlowp's "
            "RoundingDivideByPOT is undefined")
    d = CODES.astype(np.int64) - in_qp.scalar_zp
    inv_m, inv_s = inv_sqrt_quantized_multiplier_exp(np.maximum(d, 0))
    scaled = multiply_by_quantized_multiplier(1, inv_m, inv_s + RSQRT_SHIFT, "q31_double")
    y = np.clip(mbqm_x86(scaled, m, s - RSQRT_SHIFT) + out_qp.scalar_zp, INT8_MIN, INT8_MAX)
    return np.where(d <= 0, INT8_MAX, y).astype(np.int8)


# ---------------------------------------------------------------- whole-function tables
RUNTIME = "TFLite"  # in messages
KERNELS: dict[str, str] = {
    "sigmoid": "LOGISTIC", "tanh": "TANH", "gelu": "GELU", "gelu_tanh": "GELU (approximate)",
    "leaky_relu": "LEAKY_RELU", "hardswish": "HARD_SWISH", "rsqrt": "RSQRT", "elu": "ELU",
}
_FLOAT_TRANSFORMS = {"sigmoid": logistic, "tanh": tanhf, "gelu": gelu, "gelu_tanh": gelu_tanh,
                     "elu": elu}


def table(function: str, in_qp: QParams, out_qp: QParams, *, alpha: float | None = None,
          source_dtype: str = "int8", optimized: bool = False) -> np.ndarray:
    """The int8[256] table TFLite's kernel for ``function`` (a key of ``KERNELS``) computes
    between per-tensor ``in_qp`` and ``out_qp`` (int8 form; ``source_dtype`` "uint8" when the
    model's tensors are uint8). Entry i is the output for input code i - 128. int16 ``in_qp``
    and ``out_qp`` (16x8 models): the int16[65536] table, entry i for code i - 32768.

    Raises ``NotEvaluable`` for functions TFLite has no kernel for and for parameters its
    kernel refuses (LOGISTIC needs output scale 1/256, HARD_SWISH a ratio below 128, RSQRT and
    ELU an int8 model). ``optimized``: the built-in optimized kernels' (``OpResolverType.BUILTIN``),
    which differ from the reference kernels' in int16 LOGISTIC and TANH of power-of-two input
    scales (``tflite_int16``) only."""
    if in_qp.dtype == "int16" or out_qp.dtype == "int16":
        return _int16_table(function, in_qp, out_qp, alpha, optimized)
    if function == "sigmoid" and out_qp.scalar_scale != 1.0 / 256:
        raise NotEvaluable(f"TFLite LOGISTIC requires output scale 1/256, got {out_qp!r}")
    if function == "elu" and source_dtype != "int8":
        raise NotEvaluable("TFLite's ELU kernel takes float32 and int8 only, not "
                           f"{source_dtype}")
    if function in _FLOAT_TRANSFORMS:
        return lut_float(_FLOAT_TRANSFORMS[function], in_qp, out_qp, source_dtype)
    if function == "leaky_relu":
        if alpha is None:
            raise NotEvaluable("leaky_relu needs alpha")
        return leaky_relu(in_qp, out_qp, alpha)
    if function == "hardswish":
        return hard_swish(in_qp, out_qp, source_dtype)
    if function == "rsqrt":
        return rsqrt(in_qp, out_qp, source_dtype)
    raise NotEvaluable(f"TFLite has no int8 kernel computing {function!r} "
                       f"(its table kernels: {', '.join(sorted(KERNELS))})")


def _int16_table(function: str, in_qp: QParams, out_qp: QParams,
                 alpha: float | None, optimized: bool) -> np.ndarray:
    """The int16[65536] table of TFLite's 16x8 kernel for ``function`` (entry i: code
    i - 32768); ``canonqnn.tables.tflite_int16``."""
    if (in_qp.dtype, out_qp.dtype) != ("int16", "int16"):
        raise NotEvaluable(f"TFLite's elementwise kernels read and write one type, not "
                           f"{in_qp.dtype} -> {out_qp.dtype}")
    if in_qp.scalar_zp or out_qp.scalar_zp:
        raise NotEvaluable("TFLite's int16 kernels require zero points 0")
    if function == "leaky_relu" and alpha is not None:
        return leaky_relu(in_qp, out_qp, alpha)
    if function == "sigmoid":
        return tflite_int16.logistic(in_qp, out_qp, optimized)
    if function == "tanh":
        return tflite_int16.tanh(in_qp, out_qp, optimized)
    raise NotEvaluable(f"canonqnn has no table of TFLite's int16 kernel for {function!r} "
                       "(int16 tables: leaky_relu, sigmoid, tanh)")


# ---------------------------------------------------------------- the canonqnn.tables interface
EVALUATORS: dict[str, Callable] = {}  # no per-op evaluation: TFLite kernels are whole functions


def evaluate(op: str, args: list, attrs: dict) -> np.ndarray:
    raise NotEvaluable(f"TFLite has no kernel for {op} inside a float chain; only whole "
                       f"kernels ({', '.join(sorted(KERNELS))}) have tables")
