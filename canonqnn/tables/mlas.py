"""onnxruntime's MLAS float kernels as dispatched on x86-64 with AVX2 and FMA3.

Each function computes, element by element, what the named MLAS assembly kernel computes with
8-lane FMA3 instructions (``platform.cpp`` selects them when the CPU has AVX2 + FMA3). The
kernels handle a partial last vector with masked loads, so every element of a tensor goes
through the same arithmetic: the result does not depend on the element's position.
Fused multiply-adds are emulated exactly (``_f32.fma``); every other operation rounds once.
Checked bit for bit against onnxruntime 1.31 on 10^6 float inputs per function
(tests/tables/test_onnxruntime_tables.py).
"""

from __future__ import annotations

import numpy as np

from ..numerics.arithmetic import fma_f32
from ._f32 import F32, f32, from_bits

# ---------------------------------------------------------------- logistic (Sigmoid)
# MlasComputeLogisticF32KernelFma3: x clamped to [-18, 18]; p(x)/q(x) + 1/2 with odd p and even
# q evaluated in x^2 by Horner FMAs (constants of mlas/lib/logistic.cpp); only a lower clamp
# at 0 on the result (the portable kernel also clamps at 1, the FMA3 one does not).
_LOGISTIC_P = tuple(F32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07,
                                     6.08574864600143e-05, 8.51377133304701e-03,
                                     2.48287947061529e-01))
_LOGISTIC_Q = tuple(F32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09,
                                     6.29106785017040e-06, 1.70198817374094e-03,
                                     1.16817656904453e-01, 9.93151921023180e-01))


def _horner(x2: np.ndarray, coefficients) -> np.ndarray:
    acc = fma_f32(x2, coefficients[0], coefficients[1])
    for c in coefficients[2:]:
        acc = fma_f32(x2, acc, c)
    return acc


def logistic(x) -> np.ndarray:
    v = np.minimum(np.maximum(f32(x), F32(-18.0)), F32(18.0))
    x2 = (v * v).astype(F32)
    p = (v * _horner(x2, _LOGISTIC_P)).astype(F32)
    q = _horner(x2, _LOGISTIC_Q)
    return np.maximum((p / q).astype(F32) + F32(0.5), F32(0.0)).astype(F32)


# ---------------------------------------------------------------- tanh
# MlasComputeTanhF32KernelFma3: x clamped to [-9, 9]; p(x)/q(x), p odd of degree 13, q even of
# degree 6, both by Horner FMAs in x^2 (constants of mlas/lib/tanh.cpp).
_TANH_P = tuple(F32(v) for v in (-2.76076847742355e-16, 2.00018790482477e-13,
                                 -8.60467152213735e-11, 5.12229709037114e-08,
                                 1.48572235717979e-05, 6.37261928875436e-04,
                                 4.89352455891786e-03))
_TANH_Q = tuple(F32(v) for v in (1.19825839466702e-06, 1.18534705686654e-04,
                                 2.26843463243900e-03, 4.89352518554385e-03))


def tanh(x) -> np.ndarray:
    v = np.minimum(np.maximum(f32(x), F32(-9.0)), F32(9.0))
    x2 = (v * v).astype(F32)
    p = (v * _horner(x2, _TANH_P)).astype(F32)
    return (p / _horner(x2, _TANH_Q)).astype(F32)


# ---------------------------------------------------------------- erf
# MlasErfKernelFma3 (constants of mlas/lib/erf.cpp): on a = min(|x|, upper) both branches are
# computed and merged by masks.
#   a < 0.921875:  a + a * s(a^2)                 (s: degree-5 Horner FMAs in a^2)
#   otherwise:     1 - exp(-(a + a * b(a)))       (b: degree-6 Horner FMAs in a; exp by a
#                  Cody-Waite reduction with round-to-nearest via a 1.5 * 2^23 bias, a degree-6
#                  polynomial and a 2^m scale built in the exponent field)
# then the sign of x is copied onto the result. The clamp bound only matters beyond
# |x| = 3.92, where the result is exactly 1 either way.
_ERF_UPPER = F32(3.925)
_ERF_SPLIT = F32(0.921875)
_ERF_SMALL = tuple(F32(v) for v in (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2,
                                    1.12818025e-1, -3.76124859e-1, 1.28379151e-1))
_ERF_BIG = tuple(F32(v) for v in (1.72948930e-5, -3.83208680e-4, 3.88393435e-3,
                                  -2.42545605e-2, 1.06777847e-1, 6.34846687e-1,
                                  1.28717512e-1))
_ERF_EXP = tuple(F32(v) for v in (1.38319808e-3, 8.37550033e-3, 4.16689515e-2,
                                  1.66664466e-1, 4.99999851e-1, 1.0, 1.0))
_ERF_EXP_LOWER = F32(-88.3762626647949)
_LOG2E = F32(1.44269504088896341)
_LN2_HIGH, _LN2_LOW = F32(-6.93145752e-1), F32(-1.42860677e-6)
_ROUNDING_BIAS = F32(12582912.0)  # 1.5 * 2^23: adding it rounds to an integer


def _horner_in(t: np.ndarray, coefficients) -> np.ndarray:
    acc = np.broadcast_to(coefficients[0], t.shape).astype(F32)
    for c in coefficients[1:]:
        acc = fma_f32(t, acc, c)
    return acc


def erf(x) -> np.ndarray:
    x = f32(x)
    a = np.minimum(np.abs(x), _ERF_UPPER)
    big = a >= _ERF_SPLIT
    small_part = fma_f32(a, _horner_in((a * a).astype(F32), _ERF_SMALL), a)
    b = np.where(big, a, F32(0.0))
    r = fma_f32(b, _horner_in(b, _ERF_BIG), b)
    e = np.maximum(-r, _ERF_EXP_LOWER)
    m = (fma_f32(e, _LOG2E, _ROUNDING_BIAS) - _ROUNDING_BIAS).astype(F32)
    t = fma_f32(m, _LN2_HIGH, e)
    t = fma_f32(m, _LN2_LOW, t)
    scale = ((m.astype(np.int32) + 127) << 23).view(F32)
    big_part = (F32(1.0) - (_horner_in(t, _ERF_EXP) * scale).astype(F32)).astype(F32)
    y = np.where(big, big_part, small_part)
    return np.where(np.signbit(x), -y, y).astype(F32)


# ---------------------------------------------------------------- exp
# MlasComputeExpF32KernelFma3 (constants of mlas/lib/compute.cpp): x clamped to
# [-103.97, 88.78]; m = round(x / ln 2) through the 1.5 * 2^23 bias; r = x - m ln2 in two FMA
# steps; p = degree-6 Horner FMAs in r; the scale 2^m is split into a normal part (exponent
# clamped to [-126, 127]) and an overflow part so that results near the range ends round once.
_EXP_LOWER, _EXP_UPPER = F32(-103.9720840454), F32(88.7762626647950)
_EXP_POLY = tuple(F32(float.fromhex(h)) for h in (
    "0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3", "0x1.fffff6p-2",
    "0x1.000000p+0"))
_ONE_BITS = 0x3F800000
_MIN_NORMAL_EXPONENT = -126 << 23


def exp(x) -> np.ndarray:
    x = np.minimum(np.maximum(f32(x), _EXP_LOWER), _EXP_UPPER)
    biased = fma_f32(_LOG2E, x, _ROUNDING_BIAS)
    m = (biased - _ROUNDING_BIAS).astype(F32)
    r = fma_f32(m, _LN2_HIGH, x)
    r = fma_f32(m, _LN2_LOW, r)
    p = _horner_in(r, _EXP_POLY)
    # (the biased value's bit pattern holds m in its low bits; shifted, m lands in the
    # exponent field, wrapping as the 32-bit vector shift does)
    exponent = ((biased.view(np.int32).astype(np.int64) << 23) & 0xFFFFFFFF).astype(
        np.uint32).view(np.int32).astype(np.int64)
    normal = np.clip(exponent, _MIN_NORMAL_EXPONENT, _ONE_BITS)
    overflow = from_bits((exponent - normal + _ONE_BITS).astype(np.uint32))
    normal = from_bits((normal + _ONE_BITS).astype(np.uint32))
    p = fma_f32(p, (r * overflow).astype(F32), overflow)
    with np.errstate(over="ignore"):  # inf beyond the float32 range, as the kernel gives
        return (p * normal).astype(F32)
