"""Tables of TFLite's int8 / uint8 elementwise builtins as the default interpreter computes them
(ai-edge-litert 2.3, ``Interpreter(model_content=...)``, OpResolverType.BUILTIN: the XNNPACK
delegate applied), on x86-64 (numerics profile ``tflite-xnnpack-x86``, tables
``tflite_xnnpack``).

Measured (every code, random and chosen parameters, tests/tables/test_litert_xnnpack_tables.py):
the delegate takes int8 and uint8 LOGISTIC, TANH and LEAKY_RELU (not their 16x8 forms) and int8
ELU (TFLite refuses uint8 ELU before any delegate sees it); HARD_SWISH,
GELU and the RELUs stay with the built-in optimized kernels, which give exactly the reference
kernels' results (``canonqnn.tables.tflite``), as do the 16x8 kernels except LOGISTIC and TANH
of power-of-two input scales (``tflite_builtin``).

XNNPACK has no int8 sigmoid or tanh kernel: it fills a 256-entry table with its scalar reference
code, entry by entry (x = (q - zp) * scale in float32, then):

    sigmoid     f32(e / (1 + e)), e = exp(double(x)) (the C library's exp); 0 below -100,
                1 above 100
    tanh        tanhf(x) (the C library's)
    elu         x < 0 ? expm1f(x) : x (the C library's; alpha 1), as the built-in kernel's LUT

and quantizes each value as nearbyint(f32(f32(y * f32(1 / scale)) + zp)), saturated (ties to
even, where TFLite's reference kernels round half away from zero after a float LUT of expf /
tanhf: the tables differ on an entry now and then). TFLite requires the output scales 1/256
and 1/128 here, so y * 1/scale is exact and a fused multiply-add would give the same. ELU's
output scale is free; the multiply and the add, two roundings, matched on every code of the
parameter sets measured.

LEAKY_RELU runs XNNPACK's integer kernel (qs8/qu8 vlrelu, AVX2): multipliers
lrintf(256 * f32(in_scale / out_scale)) and lrintf(256 * f32(that ratio * alpha)) (the
negative one for q <= zp), ((zp - q) << 7) times minus the multiplier with ``vpmulhrsw``
(a rounding right shift by 15), the output zero point added with int16 saturation. The delegate
takes it only when the ratio is in [2^-8, 2^7] and the negative ratio in [-0x1.FFFCp6, 2^7]
with magnitude at least 2^-8 (XNNPACK's own limits); otherwise the built-in kernel computes it
as the reference kernel does.

Pure numpy (the C library through ctypes, as ``canonqnn.numerics.arithmetic``).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable

import numpy as np

from ..numerics.arithmetic import c_library_function, float32_library_function
from ..numerics.q31 import wrap_int16
from ..qparams import INT8_CODES, INT8_MAX, INT8_MIN, XNNPACK_CONVERT_RATIO_RANGE, QParams
from . import tflite
from ._f32 import F32, f32
from .onnxruntime import NotEvaluable

RUNTIME = "TFLite (XNNPACK delegate)"  # in messages
KERNELS: dict[str, str] = dict(tflite.KERNELS)  # the same builtins; some computed otherwise
EVALUATORS: dict[str, Callable] = {}
# the int8/uint8 functions XNNPACK computes (ELU: int8 only, at every scale measured)
DELEGATED = ("sigmoid", "tanh", "leaky_relu", "elu")

# XNNPACK's limits on its integer leaky ReLU (input/output scale ratio, and times alpha): the
# range of its 8.8 fixed-point multipliers, as for its convert.
_RATIO_MIN, _RATIO_MAX = XNNPACK_CONVERT_RATIO_RANGE
_NEGATIVE_MIN = -float.fromhex("0x1.FFFCp6")

# XNNPACK's reference dequantize, f32(f32(q - zp) * scale), is TFLite's LUTPopulate one
dequantize = tflite.dequantize


def quantize(values, scale: float, zero_point: int, source_dtype: str = "int8") -> np.ndarray:
    """nearbyint(f32(f32(y * f32(1 / scale)) + zp)) saturated to the stored type, a NaN sum
    giving 0 (XNNPACK's ``round_float_to_int``), returned in int8 form. uint8 models add their
    own zero point (zp + 128) in float, which can round a sum otherwise."""
    shift = 128 if source_dtype == "uint8" else 0
    with np.errstate(over="ignore", invalid="ignore"):
        v = ((f32(values) * (F32(1.0) / F32(scale))).astype(F32)
             + F32(zero_point + shift)).astype(F32)
    v = np.where(np.isnan(v), F32(0.0), v)
    q = np.clip(np.rint(v), INT8_MIN + shift, INT8_MAX + shift) - shift
    return q.astype(np.int8)


def sigmoid(x) -> np.ndarray:
    """XNNPACK's reference sigmoid: e / (1 + e) in double, e = exp(x), rounded to float32."""
    exp = c_library_function("exp", ctypes.c_double) or math.exp  # std::exp(double)
    out = [1.0 if v > 100 else 0.0 if v < -100 else exp(v) / (1.0 + exp(v))
           for v in (float(a) for a in f32(x).reshape(-1))]
    return np.array(out, np.float64).astype(F32).reshape(np.shape(x))


tanh = float32_library_function("tanhf", math.tanh)


def leaky_relu_delegated(in_qp: QParams, out_qp: QParams, alpha: float) -> bool:
    """Whether the delegate takes a LEAKY_RELU with these parameters (XNNPACK's limits)."""
    ratio = F32(in_qp.scalar_scale) / F32(out_qp.scalar_scale)
    negative = F32(ratio * F32(alpha))
    return bool(_RATIO_MIN <= ratio <= _RATIO_MAX and _NEGATIVE_MIN <= negative <= _RATIO_MAX
                and abs(negative) >= _RATIO_MIN)


def leaky_relu(in_qp: QParams, out_qp: QParams, alpha: float) -> np.ndarray:
    """XNNPACK's integer leaky ReLU (see the module's docstring), int8 form (uint8 tensors
    give the shifted table: only q - zp and the saturation bounds enter)."""
    ratio = F32(in_qp.scalar_scale) / F32(out_qp.scalar_scale)
    positive = int(np.rint(F32(256.0) * ratio))
    negative = int(np.rint(F32(256.0) * F32(ratio * F32(alpha))))
    q = INT8_CODES.astype(np.int64)
    zp = int(in_qp.scalar_zp)
    multiplier = wrap_int16(np.where(q > zp, -positive, -negative))
    product = ((zp - q) << 7) * multiplier
    y = wrap_int16(((product >> 14) + 1) >> 1)  # vpmulhrsw
    y = np.clip(y + int(out_qp.scalar_zp), -32768, 32767)
    return np.clip(y, INT8_MIN, INT8_MAX).astype(np.int8)


_FLOAT_FUNCTIONS = {"sigmoid": sigmoid, "tanh": tanh, "elu": tflite.elu}


def table(function: str, in_qp: QParams, out_qp: QParams, *, alpha: float | None = None,
          source_dtype: str = "int8") -> np.ndarray:
    """The table the default interpreter computes for ``function`` (a key of ``KERNELS``)
    between per-tensor ``in_qp`` and ``out_qp`` (int8 form; entry i: input code i - 128):
    XNNPACK's for the int8/uint8 functions it takes, the built-in optimized kernels'
    otherwise (and for 16x8 models). Raises ``NotEvaluable`` as ``tflite.table`` does."""
    delegated = in_qp.dtype == out_qp.dtype == "int8" and function in DELEGATED
    if function == "elu" and source_dtype != "int8":
        delegated = False  # refused by tflite.table: TFLite has no uint8 ELU
    if delegated and function == "leaky_relu":
        if alpha is None:
            raise NotEvaluable("leaky_relu needs alpha")
        delegated = leaky_relu_delegated(in_qp, out_qp, alpha)
    if not delegated:
        return tflite.table(function, in_qp, out_qp, alpha=alpha, source_dtype=source_dtype,
                            optimized=True)
    if function == "sigmoid" and out_qp.scalar_scale != 1.0 / 256:
        raise NotEvaluable(f"TFLite LOGISTIC requires output scale 1/256, got {out_qp!r}")
    if function == "leaky_relu":
        assert alpha is not None
        return leaky_relu(in_qp, out_qp, alpha)
    x = dequantize(INT8_CODES, in_qp.scalar_scale, in_qp.scalar_zp)
    return quantize(_FLOAT_FUNCTIONS[function](x), out_qp.scalar_scale, out_qp.scalar_zp,
                    source_dtype)


def evaluate(op: str, args: list, attrs: dict) -> np.ndarray:
    return tflite.evaluate(op, args, attrs)
