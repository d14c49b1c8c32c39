"""Quantization parameters and all arithmetic on them.

Every scale, zero point, multiplier and clamp bound canonqnn computes comes from here, so the
float32 evaluation order that bit-exactness depends on is written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .errors import InvalidQuantizationError
from .numerics.arithmetic import round_half_away, round_half_away_floor_f64

INT8_MIN, INT8_MAX = -128, 127
INT8_CODES = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int32)  # a table's rows: i holds i - 128
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
UINT8_TO_INT8_SHIFT = 128


_ZP_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-(2**15), 2**15 - 1),
             "uint16": (0, 2**16 - 1), "int32": (-(2**31), 2**31 - 1)}
# Unsigned types are held as the signed type of their width, shifted: q - 2^(bits - 1).
SIGNED = {"uint8": ("int8", UINT8_TO_INT8_SHIFT), "uint16": ("int16", 2**15)}


@dataclass(frozen=True, eq=False)
class QParams:
    """``real = scale * (q - zero_point)`` for a quantized tensor of ``dtype``.

    ``scale`` is float32 and ``zero_point`` int32 (holding a value of ``dtype``), both 0-d (per
    tensor) or 1-d along ``axis`` (per channel; ``axis`` is then a non-negative axis).
    ``dtype`` is int8 (or int16 for 16-bit activations) inside modules; uint8 / uint16 only
    while a frontend reads a model (``as_int8``), int32 for accumulators and biases.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None
    dtype: str = "int8"

    @staticmethod
    def make(scale, zero_point=0, axis: int | None = None, dtype: str = "int8") -> QParams:
        if dtype not in _ZP_RANGE:
            raise InvalidQuantizationError(f"quantized type {dtype} is not supported")
        s = np.asarray(scale, dtype=np.float32)
        z = np.asarray(zero_point, dtype=np.int64)
        if s.ndim > 1 or z.ndim > 1:
            raise InvalidQuantizationError(f"scale/zero point must be 0-d or 1-d, got {s.shape}")
        if axis is None:
            if s.size != 1 or z.size != 1:
                raise InvalidQuantizationError("per-channel parameters need an axis")
            s, z = s.reshape(()), z.reshape(())
        else:
            s, z = s.reshape(-1), z.reshape(-1)
            if z.size == 1 and s.size > 1:
                z = np.full(s.shape, int(z[0]), np.int64)
            if s.size == 1 and z.size > 1:
                s = np.full(z.shape, float(s[0]), np.float32)
            if s.shape != z.shape:
                raise InvalidQuantizationError(
                    f"scale shape {s.shape} and zero point shape {z.shape} differ"
                )
        lo, hi = _ZP_RANGE[dtype]
        outside = z[(z < lo) | (z > hi)]
        if outside.size:
            raise InvalidQuantizationError(f"zero point {int(outside[0])} outside the {dtype} "
                                           f"range [{lo}, {hi}]")
        return QParams(s, z.astype(np.int32), axis, dtype)

    def as_int8(self) -> QParams:
        """uint8 (uint16) parameters re-expressed for the int8 tensor q - 128 (the int16
        tensor q - 32768): the same real values."""
        if self.dtype not in SIGNED:
            return self
        signed, shift = SIGNED[self.dtype]
        return QParams(self.scale, self.zero_point - shift, self.axis, signed)

    @property
    def per_tensor(self) -> bool:
        return self.scale.ndim == 0

    @property
    def scalar_scale(self) -> float:
        """The per-tensor scale as the exact float32 value (in a Python float)."""
        if not self.per_tensor:
            raise InvalidQuantizationError("per-channel scale used where one scale is required")
        return float(self.scale)

    @property
    def scalar_zp(self) -> int:
        if not self.per_tensor:
            raise InvalidQuantizationError("per-channel zero point used where one is required")
        return int(self.zero_point)

    def same_as(self, other: QParams) -> bool:
        """Bitwise-equal parameters (scales compared as float32 bits)."""
        return (
            self.dtype == other.dtype
            and self.scale.shape == other.scale.shape
            and np.array_equal(self.scale.view(np.uint32), other.scale.view(np.uint32))
            and np.array_equal(self.zero_point, other.zero_point)
            and (self.per_tensor or self.axis == other.axis)
        )

    def __repr__(self) -> str:
        if self.per_tensor:
            return f"QParams({self.scalar_scale!r}, {self.scalar_zp}, {self.dtype})"
        return f"QParams(per-axis {self.axis}, n={self.scale.size}, {self.dtype})"


def check_scale(scale: np.ndarray, where: str) -> np.ndarray:
    """Scales must be finite and positive; anything else defines no quantization."""
    s = np.asarray(scale, dtype=np.float32)
    bad = ~np.isfinite(s) | (s <= 0)
    if np.any(bad):
        value = s.reshape(-1)[np.argmax(bad.reshape(-1))]
        raise InvalidQuantizationError(f"{where} {float(value)!r} is not a finite positive number")
    return s


def uint8_to_int8(values: np.ndarray) -> np.ndarray:
    """Re-express uint8 data or zero points as int8 (q - 128): the same real values."""
    return as_signed(values, "uint8")


def as_signed(values: np.ndarray, dtype: str) -> np.ndarray:
    """Unsigned ``dtype`` data or zero points as the signed type of their width (``SIGNED``)."""
    signed, shift = SIGNED[dtype]
    return (np.asarray(values).astype(np.int32) - shift).astype(signed)


# ---------------------------------------------------------------- multipliers (float32, ORT order)
def f32(value) -> np.float32:
    return np.float32(value)


def product_scale(a_scale: npt.ArrayLike, b_scale: npt.ArrayLike) -> np.ndarray:
    """``a_scale * b_scale`` in float32: the scale of an int32 accumulator (and of its bias)."""
    return (np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)).astype(np.float32)


def accumulator_multiplier(
    x_scale: float, w_scale: np.ndarray, out_scale: float, alpha: float = 1.0
) -> np.ndarray:
    """Per-channel float32 requant multiplier ``f32(f32(f32(alpha * x_scale) * w_scale[c]) / y)``.

    Evaluated in float32 in this order, as onnxruntime's QLinearConv/QLinearMatMul/QGemm do
    (``alpha`` is ONNX Gemm's; with alpha 1 the first product is exact).
    """
    xs = (np.float32(alpha) * np.float32(x_scale)).astype(np.float32)
    m = product_scale(xs, w_scale)
    return (m / np.float32(out_scale)).astype(np.float32).reshape(-1)


def activation_range(dtype: str) -> tuple[int, int]:
    """The integer range of an activation of ``dtype``: int16 (TFLite's 16x8 activations) or
    int8 (every other quantized activation inside a module)."""
    return (INT16_MIN, INT16_MAX) if dtype == "int16" else (INT8_MIN, INT8_MAX)


def quantize_value(value: float | np.float32, qp: QParams, rounding: str = "rne_f32") -> int:
    """Quantize one real number: ``round(f32(value / scale)) + zp``, saturated to the range of
    ``qp.dtype`` (int16 for 16-bit activations, else int8).

    Ties go to even under ``rne_f32`` (ONNX QuantizeLinear) and ``xnnpack`` (its clamp bounds:
    ``lrintf``), and away from zero under the Q31 roundings (TFLite's ``TfLiteRound``, which it
    also uses for activation bounds).
    """
    s = np.float32(qp.scalar_scale)
    v = np.float32(np.float32(value) / s)
    # TfLiteRound on a float (round_half_away) is roundf, exact
    q = np.rint(v) if rounding in ("rne_f32", "xnnpack") else round_half_away(v)
    lo, hi = activation_range(qp.dtype)
    if not math.isfinite(float(q)):
        return hi if value > 0 else lo
    return int(np.clip(q + qp.scalar_zp, lo, hi))


def activation_bounds(lo: float | None, hi: float | None, qp: QParams,
                      rounding: str = "rne_f32") -> tuple[int, int]:
    """Integer clamp ``[act_min, act_max]`` equal to clamping the real value to ``[lo, hi]``.

    Exact because quantization (division then RNE) is monotone: clamping before quantizing
    equals clamping the quantized value at the quantized bounds.
    """
    q_min, q_max = activation_range(qp.dtype)
    act_min = q_min if lo is None else max(q_min, quantize_value(lo, qp, rounding))
    act_max = q_max if hi is None else min(q_max, quantize_value(hi, qp, rounding))
    return act_min, act_max


# ---------------------------------------------------------------- Q31 multipliers (TFLite)
def quantize_multiplier(real: float, *, single_rounding: bool = False) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: ``real = m * 2^(shift - 31)`` with ``m`` in [2^30, 2^31).

    ``frexp`` then ``round(q * 2^31)`` with ties away from zero; a mantissa that rounds up to
    2^31 is halved. Multipliers below 2^-32 become (0, 0). Single-rounding builds also cap the
    shift at 30 (multiplier 2^31 - 1).
    """
    real = float(real)
    if real == 0.0:
        return 0, 0
    check_multiplier(real)
    q, shift = math.frexp(real)
    q_fixed = int(round_half_away_floor_f64(q * 2.0**31))
    if q_fixed == 2**31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if single_rounding and shift > 30:
        return 2**31 - 1, 30
    return q_fixed, shift


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)  # 2^-126
# A multiplier of 2^31 or more has a shift of 32 or more: TFLite's double-rounding kernels
# shift the int32 value left by that many bits, undefined in C (x86 takes the count modulo 32,
# which only the LEAKY_RELU table follows).
MAX_LEFT_SHIFT = 31


def saturating_multiplier(out_dtype: str) -> float:
    """The bound above which a requantization multiplier saturates every nonzero accumulator
    of an ``out_dtype`` output, whatever its zero point: ``2^bits - 3/2``.

    The output is ``clamp(round(acc * M) + zp, lo, hi)`` with ``hi - lo = 2^bits - 1`` and
    ``lo <= zp <= hi``. A nonzero accumulator has ``|acc| >= 1``, so ``|acc * M| >= M``
    (float32 rounding is monotone, and ``1 * M`` is exact). If ``round(M) >= 2^bits - 1``
    (``M > 2^bits - 3/2`` under any round-to-nearest), ``acc > 0`` gives at least ``zp + hi -
    lo >= hi`` and ``acc < 0`` at most ``zp - (hi - lo) <= lo``: every output is ``hi``, ``lo``
    or (``acc == 0``) the zero point, and says only the accumulator's sign. At or below the
    bound, ``round(M) <= 2^bits - 2`` with ties to even (onnxruntime's rounding), and ``acc =
    1`` from ``zp = lo`` gives ``hi - 1``: the bound is exact (with ties away from zero,
    TFLite's, the bound itself saturates too, and is accepted).
    """
    lo, hi = _ZP_RANGE[out_dtype]
    return float(hi - lo) - 0.5


def check_multiplier(real: float, out_dtype: str | None = None) -> None:
    """A requantization multiplier that means something: finite, and 0 or of magnitude at
    least 2^-126. Scales whose ratio leaves float32's range are refused: it overflows, or
    underflows so far that every output would be the zero point. With ``out_dtype`` (the
    requantized output's), also below ``saturating_multiplier``: above it the output says only
    the accumulator's sign."""
    if not math.isfinite(real):
        reason = "not finite: a product or ratio of the scales overflows float32"
    elif real != 0.0 and abs(real) < FLOAT32_MIN_NORMAL:
        reason = "below float32's normal range (2^-126): the scales' ratio underflows"
    elif out_dtype is not None and abs(real) > saturating_multiplier(out_dtype):
        reason = (f"above {saturating_multiplier(out_dtype):g}: every nonzero accumulator "
                  f"saturates the {out_dtype} output whatever its zero point (the output "
                  "only says its sign)")
    else:
        return
    raise InvalidQuantizationError(f"requantization multiplier {real:.6g} (from the scales) is "
                                   f"{reason}")


def check_accumulator_multipliers(x_scale: float, w_scale: np.ndarray, out_qp: QParams,
                                  alpha: float = 1.0) -> None:
    """The requantization of an integer accumulator (conv, matmul) to ``out_qp``: the
    accumulator's scale ``alpha * x_scale * w_scale`` finite in float32 (the bias is
    quantized with it), and every multiplier (``accumulator_multiplier``) finite and below
    ``saturating_multiplier``. Tiny multipliers are left alone: every output is then the zero
    point, which the source runtimes compute too. A raw int32 accumulator has none."""
    if out_qp.dtype == "int32":
        return
    xs = np.float32(np.float32(alpha) * np.float32(x_scale))
    with np.errstate(over="ignore"):
        product = product_scale(xs, w_scale)
        reals = accumulator_multiplier(x_scale, w_scale, out_qp.scalar_scale, alpha)
    if not np.all(np.isfinite(product)):
        raise InvalidQuantizationError(
            f"the accumulator's scale (input scale {float(xs):.6g} x weight scale "
            f"{float(np.max(w_scale)):.6g}) overflows float32: the bias and the requantization "
            "multiplier are computed from it")
    largest = float(np.max(np.abs(reals)))
    if not math.isfinite(largest) or largest > saturating_multiplier(out_qp.dtype):
        check_multiplier(largest, out_qp.dtype)


def quantize_multipliers(reals, *, single_rounding: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``quantize_multiplier`` over an array: (int32 multipliers, int32 shifts)."""
    pairs = [quantize_multiplier(r, single_rounding=single_rounding)
             for r in np.asarray(reals, np.float64).reshape(-1)]
    return (np.array([m for m, _ in pairs], np.int32), np.array([s for _, s in pairs], np.int32))


def f64(value) -> np.ndarray:
    """A float32 scale widened to double, as TFLite widens ``params.scale`` before dividing."""
    return np.asarray(value, np.float32).astype(np.float64)


# ---------------------------------------------------------------- pool (TFLite MEAN)
def mean_multiplier(in_scale, out_scale, count: int, *,
                    single_rounding: bool = False) -> tuple[int, int]:
    """TFLite MEAN's multiplier with the division by ``count`` folded in.

    ``QuantizeMultiplier(double(in_scale) / double(out_scale))`` gives (m, shift); then
    ``k = min(floor(log2(count)), 32, 31 + shift)``, ``m' = (m * 2^k) // count`` (truncated) and
    ``shift' = shift - k``. The truncation of ``m'`` is part of the arithmetic (it is not
    ``QuantizeMultiplier(in_scale / (out_scale * count))``).
    """
    m, shift = quantize_multiplier(float(f64(in_scale) / f64(out_scale)),
                                   single_rounding=single_rounding)
    k = min(int(count).bit_length() - 1, 32, 31 + shift)
    return (m << k) // int(count), shift - k


# ---------------------------------------------------------------- TFLite elementwise multipliers
# (ADD/SUB, SQUARED_DIFFERENCE, MUL, QUANTIZE as a requantization, uint8 CONCATENATION; each
# derivation below is the one the TFLite interpreter's reference kernels were measured to use.)
TFLITE_ADD_LEFT_SHIFT = 20  # int8/uint8 ADD and SUB scale inputs up by 2^20 first
# int16 ADD (16x8, general scales) by 2^15: 65535 * 2^15 still fits int32
TFLITE_ADD_LEFT_SHIFT_INT16 = 15


def tflite_add_multipliers(a_scale: float, b_scale: float, out_scale: float, *,
                           single_rounding: bool = False,
                           left_shift: int = TFLITE_ADD_LEFT_SHIFT) -> list[tuple[int, int]]:
    """(multiplier, shift) of input a, input b and the output for TFLite's 8-bit ADD/SUB (and
    int16 ADD with ``left_shift`` 15).

    In double: ``t = 2 * max(a, b)``, inputs ``a / t`` and ``b / t``, output
    ``t / (2^left_shift * out)``. TFLite requires every shift <= 0 (``...SmallerThanOneExp``);
    the caller checks the output's (the inputs' always hold).
    """
    t, real_a, real_b = _tflite_input_ratios(a_scale, b_scale)
    if t > FLOAT32_MAX or 2.0 ** left_shift * float(f64(out_scale)) > FLOAT32_MAX:
        # TFLite computes both products in float32: inf, a multiplier of 0, and an abort
        raise InvalidQuantizationError(
            f"TFLite's ADD/SUB computes 2 * max(a_scale, b_scale) and 2^{left_shift} * out_scale "
            f"in float32, and they overflow it (a_scale {a_scale!r}, b_scale {b_scale!r}, "
            f"out_scale {out_scale!r}): the interpreter refuses such a model")
    reals = (real_a, real_b, t / (2.0 ** left_shift * float(f64(out_scale))))
    return [quantize_multiplier(r, single_rounding=single_rounding) for r in reals]


def _tflite_input_ratios(a_scale: float, b_scale: float) -> tuple[float, float, float]:
    """``(t, a / t, b / t)`` in double with ``t = 2 * max(a, b)``: how TFLite's 8-bit ADD,
    SUB and SQUARED_DIFFERENCE bring both inputs to one scale (each ratio at most 1/2)."""
    t = 2.0 * max(float(f64(a_scale)), float(f64(b_scale)))
    return t, float(f64(a_scale)) / t, float(f64(b_scale)) / t


# XNNPACK's qs8/qu8 add keeps 20 bits below the larger ratio's leading bit, and creates the
# operator only for ratios in [2^-10, 2^8) (its shift then lies in [13, 30]).
XNNPACK_ADD_BITS = 20
XNNPACK_ADD_RATIO_RANGE = (2.0 ** -10, 2.0 ** 8)


def xnnpack_add_multipliers(a_scale: float, b_scale: float, out_scale: float) \
        -> tuple[int, int, int]:
    """``(a_multiplier, b_multiplier, shift)`` of XNNPACK's quantized add: the float32 ratios
    ``f32(a_scale / out_scale)`` and ``f32(b_scale / out_scale)`` times ``2^shift`` rounded to
    nearest even (``lrintf``), ``shift = 20 - floor(log2(max ratio))``. Ratios outside
    ``XNNPACK_ADD_RATIO_RANGE`` raise (XNNPACK refuses to create the operator)."""
    ra = np.float32(np.float32(a_scale) / np.float32(out_scale))
    rb = np.float32(np.float32(b_scale) / np.float32(out_scale))
    largest = float(max(ra, rb))
    lo, hi = XNNPACK_ADD_RATIO_RANGE
    if not lo <= largest < hi:
        raise InvalidQuantizationError(
            f"XNNPACK's add needs max(a_scale, b_scale) / out_scale in [2^-10, 2^8); got "
            f"{largest!r} (a_scale {a_scale!r}, b_scale {b_scale!r}, out_scale {out_scale!r})")
    shift = XNNPACK_ADD_BITS - (math.frexp(largest)[1] - 1)
    # ratio * 2^shift is exact in float; lrintf rounds it half to even
    return int(np.rint(float(ra) * 2.0 ** shift)), int(np.rint(float(rb) * 2.0 ** shift)), shift


# onnxruntime's AArch64 (NEON) QLinearAdd: fixed point for ratios in this range, float outside
MLAS_NEON_ADD_RATIO_RANGE = (2.0 ** -14, 2.0 ** 8)
MLAS_NEON_ADD_BITS = 21


def mlas_neon_add_multipliers(a_scale: float, b_scale: float, out_scale: float) \
        -> tuple[int, int, int] | None:
    """``(a_multiplier, b_multiplier, shift)`` of onnxruntime's NEON QLinearAdd (MLAS's
    ``MlasCalcQLinearAddParameters``), or None where it computes in float32 instead: the ratios
    ``f32(a_scale / out_scale)``, ``f32(b_scale / out_scale)`` each in
    ``MLAS_NEON_ADD_RATIO_RANGE``, ``shift = 21 - floor(log2(max ratio))`` at most 31 (the
    larger ratio at least 2^-10), the ratios times ``2^shift`` rounded half to even below 2^22
    (the larger one just below a power of two rounds up to 2^22: float)."""
    ra = np.float32(np.float32(a_scale) / np.float32(out_scale))
    rb = np.float32(np.float32(b_scale) / np.float32(out_scale))
    lo, hi = MLAS_NEON_ADD_RATIO_RANGE
    if not (lo <= float(ra) < hi and lo <= float(rb) < hi):
        return None
    shift = MLAS_NEON_ADD_BITS - (math.frexp(float(max(ra, rb)))[1] - 1)
    if shift > 31:
        return None
    # ratio * 2^shift is exact in float; lrintf rounds it half to even
    ma, mb = int(np.rint(float(ra) * 2.0 ** shift)), int(np.rint(float(rb) * 2.0 ** shift))
    if max(ma, mb) >= 1 << (MLAS_NEON_ADD_BITS + 1):
        return None
    return ma, mb, shift


XNNPACK_CONVERT_RATIO_RANGE = (2.0 ** -8, 2.0 ** 7)  # in_scale / out_scale, both ends in


def xnnpack_convert_multiplier(in_scale: float, out_scale: float) -> int | None:
    """The 8.8 fixed-point multiplier of XNNPACK's int8 -> int8 convert (a requantization):
    ``lrintf(256 * f32(in_scale / out_scale))`` (``256 *`` is exact, ``lrintf`` rounds half to
    even), or None when the ratio is outside ``XNNPACK_CONVERT_RATIO_RANGE`` (XNNPACK makes no
    operator; TFLite's delegate leaves such a QUANTIZE to the built-in kernels)."""
    ratio = np.float32(np.float32(in_scale) / np.float32(out_scale))
    lo, hi = XNNPACK_CONVERT_RATIO_RANGE
    if not lo <= float(ratio) <= hi:
        return None
    return int(np.rint(float(ratio) * 256.0))


# The scale ratios for which TFLite's XNNPACK delegate takes an 8-bit ADD / SUB (each input's
# scale over the output's: ``XNNPACK_ADD_RATIO_RANGE``) and MUL (the inputs' product over the
# output's), float32 ratios, the upper ends excluded; outside them the built-in kernels
# compute the operator.
XNNPACK_MUL_RATIO_RANGE = (2.0 ** -16, 2.0 ** 8)


def xnnpack_takes_binary(kind: str, a_scale: float, b_scale: float, out_scale: float) -> bool:
    """Whether TFLite's XNNPACK delegate computes the 8-bit ``kind`` ("add", "sub", "mul") of
    these per-tensor scales (its node checks)."""
    f = np.float32
    if kind == "mul":
        ratios, (lo, hi) = [f(f(f(a_scale) * f(b_scale)) / f(out_scale))], XNNPACK_MUL_RATIO_RANGE
    else:
        ratios, (lo, hi) = [f(f(s) / f(out_scale)) for s in (a_scale, b_scale)], \
            XNNPACK_ADD_RATIO_RANGE
    return all(lo <= float(r) < hi for r in ratios)


TFLITE_SQUARED_DIFFERENCE_LEFT_SHIFT = 7  # int8 SQUARED_DIFFERENCE scales inputs up by 2^7


def tflite_squared_difference_multipliers(a_scale: float, b_scale: float,
                                          out_scale: float) -> list[tuple[int, int]]:
    """(multiplier, shift) of input a, input b and the output for TFLite's int8
    SQUARED_DIFFERENCE: the inputs as ADD's, the output ``t^2 / (2^14 * out)`` in double
    (``2^14 * out`` is exact in float32). TFLite requires every shift <= 0; the caller checks
    the output's."""
    t, real_a, real_b = _tflite_input_ratios(a_scale, b_scale)
    real_out = t * t / (2.0 ** (2 * TFLITE_SQUARED_DIFFERENCE_LEFT_SHIFT) * float(f64(out_scale)))
    return [quantize_multiplier(r) for r in (real_a, real_b, real_out)]


def tflite_mul_multiplier(a_scale: float, b_scale: float, out_scale: float, *,
                          single_rounding: bool = False) -> tuple[int, int]:
    """TFLite 8-bit MUL: ``f32(f32(a * b) / out)`` (float32 arithmetic, then widened)."""
    real = np.float32(np.float32(np.float32(a_scale) * np.float32(b_scale))
                      / np.float32(out_scale))
    return quantize_multiplier(float(real), single_rounding=single_rounding)


def tflite_requantize_multiplier(in_scale: float, out_scale: float, *,
                                 single_rounding: bool = False) -> tuple[int, int]:
    """TFLite QUANTIZE on integer input: ``double(in) / double(out)``."""
    return quantize_multiplier(float(f64(in_scale) / f64(out_scale)),
                               single_rounding=single_rounding)


def tflite_concat_scaling(in_scale: float, in_zp: int, out_scale: float) \
        -> tuple[np.float32, np.float32]:
    """TFLite uint8 CONCATENATION rescaling constants (float32): ``scale = in * f32(1 / out)``
    and ``bias = f32(-in_zp) * scale``; ``in_zp`` is the stored (uint8) zero point."""
    scale = np.float32(np.float32(in_scale) * np.float32(np.float32(1.0) / np.float32(out_scale)))
    return scale, np.float32(np.float32(-in_zp) * scale)


# ---------------------------------------------------------------- dynamic quantization (ORT)
DYNAMIC_LEVELS = np.float32(255.0)  # DynamicQuantizeLinear quantizes to uint8 [0, 255]


def dynamic_qparams(x: np.ndarray) -> tuple[np.float32, int]:
    """onnxruntime's DynamicQuantizeLinear parameters of float32 ``x``: ``(scale, zero point)``
    (uint8), as its ``GetQuantizationParameter`` computes them in float32::

        lo, hi = min(min(x), 0), max(max(x), 0)
        scale  = 1 if hi == lo else (hi - lo) / 255
        zp     = round_half_even(clamp(0 - lo / scale, 0, 255))
    """
    x = np.asarray(x, np.float32)
    lo = np.minimum(np.float32(x.min()), np.float32(0))
    hi = np.maximum(np.float32(x.max()), np.float32(0))
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / DYNAMIC_LEVELS)
    zp = np.rint(np.clip(np.float32(0) - np.float32(lo / scale), 0, DYNAMIC_LEVELS))
    return scale, int(zp)


def dynamic_quantize(x: np.ndarray, scale: np.float32, zp: int) -> np.ndarray:
    """``MlasQuantizeLinear`` to uint8: ``round_half_even(clamp(x / scale, -zp, 255 - zp)) + zp``
    in float32; a NaN quotient takes the lower bound (MAXPS keeps its second operand)."""
    v = (np.asarray(x, np.float32) / np.float32(scale)).astype(np.float32)
    v = np.where(np.isnan(v), np.float32(-zp), v)
    v = np.clip(v, np.float32(-zp), np.float32(DYNAMIC_LEVELS - zp))
    return (np.rint(v) + zp).astype(np.uint8)
