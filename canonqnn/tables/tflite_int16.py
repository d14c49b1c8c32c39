"""TFLite's int16 elementwise kernels (16x8 models: int16 activations, zero points 0), as the
reference kernels compute them (``OpResolverType.BUILTIN_REF``, ai-edge-litert 2.3 on x86-64),
and TANH / LOGISTIC as the optimized builtin kernels compute them.

A function of one int16 tensor takes 65,536 values, so the table of the whole kernel is exact:

    leaky_relu  LEAKY_RELU   Q31, as the int8 kernel (``tflite.leaky_relu``), int16 saturation
    sigmoid     LOGISTIC     rescale the input to 1/(24 * 512) steps, interpolate TFLite's
                             256-entry ``sigmoid_table_uint16`` (sigmoid(i / 24) in 0.16)
    tanh        TANH         2 * sigmoid(2x) - 1 on the same table

The builtin optimized kernels (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``, and the default
``BUILTIN`` resolver, whose XNNPACK delegate takes no int16 TANH / LOGISTIC) call the same
reference arithmetic except for a power-of-two input scale of 2^-12 (TANH also 2^-11), which
they compute in gemmlowp's int16 fixed point instead (``tflite_int16_fixedpoint``): pass
``optimized=True`` to ``logistic`` / ``tanh`` for that variant.

Sources: ``tensorflow/lite/kernels/activations.cc`` (Prepare),
``internal/reference/integer_ops/logistic.h`` and ``tanh.h``, ``internal/common.h``
(``sigmoid_table_uint16``). SOFTMAX's int16 tables are the op's own
(``canonqnn/ops/_softmax_int16.py``). Measured against the
interpreter on every int16 code (tests/tables/test_tflite_int16_tables.py).

Pure numpy: no TVM, no model format.
"""

from __future__ import annotations

import numpy as np

from ..numerics.arithmetic import round_half_away_floor_f64
from ..numerics.q31 import wrap_int32
from ..qparams import INT16_MAX, INT16_MIN, QParams
from . import tflite_int16_fixedpoint
from .onnxruntime import NotEvaluable

CODES = np.arange(INT16_MIN, INT16_MAX + 1, dtype=np.int64)  # entry i holds code i - 32768

# sigmoid(i / 24) * 2^16, i = 0..255 (common.h ``sigmoid_table_uint16``): TFLite's data, not a
# rounding of any formula this module could reproduce, so it is held as data.
SIGMOID_TABLE_UINT16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794,
    41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443,
    48964, 49475, 49975, 50464, 50942, 51409, 51865, 52311, 52745, 53169, 53581, 53983, 54374,
    54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433, 57724, 58007, 58280, 58544,
    58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110, 61279,
    61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990,
    63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030,
    64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652,
    64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019,
    65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234,
    65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360,
    65367, 65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433,
    65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476,
    65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498, 65500, 65501,
    65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516,
    65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529,
    65529, 65530, 65530, 65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532,
    65532, 65532, 65532, 65533, 65533, 65533, 65533, 65533, 65533, 65533, 65533, 65534, 65534,
    65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
], dtype=np.int64)
Q015 = 2.0 ** -15  # LOGISTIC and TANH write Q0.15
# The power-of-two input scales' ``input_left_shift`` (12 + log2(scale)) each kernel takes
# without a multiplier: the ones its optimized variant computes in gemmlowp fixed point.
_LOGISTIC_POT_SHIFTS = (0,)
_TANH_POT_SHIFTS = (0, 1)


def checked_log2(x: float) -> tuple[bool, int]:
    """TFLite ``CheckedLog2(float)``: ``log2`` in float32, rounded; exact when within 1e-3
    (so scales within about 0.07% of a power of two count as that power of two)."""
    f = np.float32
    value = f(f(np.log(f(x))) * f(f(1.0) / f(np.log(f(2.0)))))
    rounded = f(round_half_away_floor_f64(value))
    return bool(abs(f(value - rounded)) < f(1e-3)), int(rounded)


def _check_zero_points(what: str, *qps: QParams) -> None:
    if any(qp.scalar_zp != 0 for qp in qps):
        raise NotEvaluable(f"TFLite's int16 {what} requires zero points 0")


def pot_input_left_shift(in_scale: float, pot_shifts: tuple[int, ...]) -> int | None:
    """LOGISTIC / TANH int16 Prepare: ``input_left_shift = 12 + log2(s)`` when the input scale
    is a power of two (``CheckedLog2``) and that shift is one of ``pot_shifts`` (the kernel
    then leaves ``input_multiplier`` 0); else None."""
    is_pot, log2 = checked_log2(in_scale)
    return 12 + log2 if is_pot and 12 + log2 in pot_shifts else None


def _input_scaling(in_scale: float, pot_shifts: tuple[int, ...]) -> tuple[int, int]:
    """LOGISTIC / TANH int16 reference: ``(multiplier, shift)`` of ``(x * m + 2^(s-1)) >> s``,
    which maps the input to steps of 1/(24 * 512) (LOGISTIC; TANH reads it as 1/(24 * 256) of
    2x). A power-of-two input scale (``pot_input_left_shift``) multiplies by ``3 << shift``;
    any other doubles ``s * 4096 * 3`` (in double) until it passes 16383.5 (at most 31 times)
    and truncates it."""
    pot_shift = pot_input_left_shift(in_scale, pot_shifts)
    if pot_shift is not None:
        return 3 << pot_shift, 0
    m, shift = float(np.float32(in_scale)) * 4096.0 * 3.0, 0
    while m <= 32767.0 / 2.0 and shift <= 30:
        shift, m = shift + 1, m * 2.0
    return int(m), shift


def _rescaled(multiplier: int, shift: int) -> np.ndarray:
    rounding = (1 << (shift - 1)) if shift > 0 else 0
    return wrap_int32(CODES * multiplier + rounding) >> shift  # the product wraps in int32


def logistic(in_qp: QParams, out_qp: QParams, optimized: bool = False) -> np.ndarray:
    """LOGISTIC int16 (``integer_ops/logistic.h``); the kernel refuses an output scale other
    than exactly 1/32768. ``optimized``: the builtin (non-reference) kernel, which computes an
    input scale of exactly 2^-12 (``CheckedLog2``) in gemmlowp fixed point
    (``tflite_int16_fixedpoint.logistic``) and any other as below:

        u = (x * m + 2^(s-1)) >> s;  a = |u|;  h = a >> 9
        r = h >= 255 ? 0x7FFF << 10 : (T[h] << 9) + (a & 511) * (T[h+1] - T[h])
        y = (u >= 0 ? r + 512 : 2^25 - r + 511) >> 10
    """
    _check_zero_points("LOGISTIC", in_qp, out_qp)
    if float(np.float32(out_qp.scalar_scale)) != Q015:
        raise NotEvaluable(f"TFLite's int16 LOGISTIC requires output scale 1/32768, got "
                           f"{out_qp.scalar_scale:g}")
    if optimized and pot_input_left_shift(in_qp.scalar_scale, _LOGISTIC_POT_SHIFTS) is not None:
        return tflite_int16_fixedpoint.logistic(CODES)
    u = _rescaled(*_input_scaling(in_qp.scalar_scale, _LOGISTIC_POT_SHIFTS))
    a = np.abs(u)
    h = a >> 9
    low = SIGMOID_TABLE_UINT16[np.minimum(h, 254)]
    high = SIGMOID_TABLE_UINT16[np.minimum(h, 254) + 1]
    r = np.where(h >= 255, 0x7FFF << 10, (low << 9) + (a & 511) * (high - low))
    r = np.where(u >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1)
    return (r >> 10).astype(np.int16)


def tanh(in_qp: QParams, out_qp: QParams, optimized: bool = False) -> np.ndarray:
    """TANH int16 (``integer_ops/tanh.h``), ``2 * sigmoid(2x) - 1``; the kernel requires an
    output scale whose ``CheckedLog2`` is -15 and then writes Q0.15 whatever it is.
    ``optimized``: the builtin (non-reference) kernel, which computes an input scale of 2^-12
    or 2^-11 (``CheckedLog2``) in gemmlowp fixed point (``tflite_int16_fixedpoint.tanh``)
    and any other as below:

        u = (x * m + 2^(s-1)) >> s;  a = |u|;  h = a >> 8
        r = h >= 255 ? 0xFFFF << 8 : (T[h] << 8) + (a & 255) * (T[h+1] - T[h])
        y = (u >= 0 ? r - 2^23 + 2^7 : 2^23 + 2^7 - 1 - r) >> 8
    """
    _check_zero_points("TANH", in_qp, out_qp)
    exact, log2 = checked_log2(out_qp.scalar_scale)
    if not exact or log2 != -15:
        raise NotEvaluable(f"TFLite's int16 TANH requires output scale 2^-15, got "
                           f"{out_qp.scalar_scale:g}")
    pot_shift = pot_input_left_shift(in_qp.scalar_scale, _TANH_POT_SHIFTS)
    if optimized and pot_shift is not None:
        return tflite_int16_fixedpoint.tanh(CODES, pot_shift)
    u = _rescaled(*_input_scaling(in_qp.scalar_scale, _TANH_POT_SHIFTS))
    a = np.abs(u)
    h = a >> 8
    low = SIGMOID_TABLE_UINT16[np.minimum(h, 254)]
    high = SIGMOID_TABLE_UINT16[np.minimum(h, 254) + 1]
    r = np.where(h >= 255, 0xFFFF << 8, (low << 8) + (a & 255) * (high - low))
    r = np.where(u >= 0, r - (1 << 23) + (1 << 7), (1 << 23) + (1 << 7) - 1 - r)
    return (r >> 8).astype(np.int16)
