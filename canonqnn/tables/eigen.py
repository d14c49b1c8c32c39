"""Eigen's vectorized float32 exp, log and log1p as onnxruntime's CPU kernels run them.

onnxruntime builds its Eigen-based kernels (Log, Elu, Softplus, ...) for baseline x86-64: SSE
packets of 4 floats and no FMA, so Eigen's ``pmadd`` is a multiply then an add (two roundings).
The functions here follow the packet algorithms of the Eigen revision onnxruntime 1.31 pins
(``GenericPacketMathFunctions.h``: ``pexp_float``, ``plog_impl_float``, ``generic_plog1p``).

Position dependence: Eigen evaluates the elements that do not fill a last packet of 4 (and a
few around thread-partition boundaries) with the C library's ``expf``/``logf`` instead. A table
cannot reproduce that; these functions give the packet results, which cover every element of a
tensor whose size is a multiple of 4 run on one thread (docs/spec.md, ``## lut``).
"""

from __future__ import annotations

import numpy as np

from ._f32 import F32, f32, multiply_add

# pexp_float: m = floor(x log2(e) + 1/2), r = x - m ln2 in two steps (C1 + C2 = -ln 2),
# exp(r) by a degree-6 minimax polynomial in even/odd halves, then 2^m (exact ldexp).
_EXP_HIGH, _EXP_ZERO_BELOW = F32(88.723), F32(-104.0)
_LOG2E = F32(1.44269504088896341)
_C1, _C2 = F32(-0.693359375), F32(2.12194440e-4)
_P2, _P3, _P4, _P5, _P6 = (F32(v) for v in (0.49999988079071044921875,
                                           0.16666518151760101318359375,
                                           4.166965186595916748046875e-2,
                                           8.36894474923610687255859375e-3,
                                           1.37449637986719608306884765625e-3))


def exp(x) -> np.ndarray:
    x0 = f32(x)
    x = np.minimum(x0, _EXP_HIGH)
    m = np.floor(multiply_add(x, _LOG2E, F32(0.5))).astype(F32)
    r = multiply_add(m, _C1, x)
    r = multiply_add(m, _C2, r)
    r2 = (r * r).astype(F32)
    even = multiply_add(r2, multiply_add(r2, _P6, _P4), _P2)
    odd = multiply_add(r2, _P5, _P3)
    y = multiply_add(r2, multiply_add(r, odd, even), (r + F32(1.0)).astype(F32))
    with np.errstate(over="ignore"):
        scaled = np.ldexp(y.astype(np.float64), m.astype(np.int64)).astype(F32)
    return np.where(x0 < _EXP_ZERO_BELOW, F32(0.0), np.maximum(scaled, x0)).astype(F32)


# plog_impl_float: x = m 2^e with m in [sqrt(1/2), sqrt(2)) shifted by -1, then a rational
# (3, 3) approximation p(m)/q(m) of log(1 + m) and e ln2 added with one multiply-add.
_SQRT_HALF = F32(0.707106781186547524)
_LOG_P = tuple(F32(v) for v in (0.18256296349849254, 1.0000000190281063, 1.0000000190281136))
_LOG_Q = tuple(F32(v) for v in (0.049616247954120038, 0.59923249590823520, 1.4999999999999927))
_LN2 = F32(0.693147180559945309417)


def log(x) -> np.ndarray:
    x0 = f32(x)
    mantissa, exponent = np.frexp(x0)
    m = mantissa.astype(F32)
    e = exponent.astype(F32)
    low = m < _SQRT_HALF
    e = (e - np.where(low, F32(1.0), F32(0.0))).astype(F32)
    m = ((m - F32(1.0)).astype(F32) + np.where(low, m, F32(0.0))).astype(F32)
    p = multiply_add(m, multiply_add(m, _LOG_P[0], _LOG_P[1]), _LOG_P[2])
    p = (m * p).astype(F32)
    q = multiply_add(m, multiply_add(m, multiply_add(m, _LOG_Q[0], _LOG_Q[1]), _LOG_Q[2]),
                     F32(1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = multiply_add(e, _LN2, (p / q).astype(F32))
    y = np.where(x0 == np.inf, F32(np.inf), y)
    y = np.where(x0 == 0, F32(-np.inf), y)
    return np.where((x0 < 0) | np.isnan(x0), F32(np.nan), y).astype(F32)


def log1p(x) -> np.ndarray:
    """Kahan's log1p on top of ``log``: ``x * log(1 + x) / ((1 + x) - 1)``."""
    x = f32(x)
    u = (x + F32(1.0)).astype(F32)
    log_u = log(u)
    with np.errstate(divide="ignore", invalid="ignore"):
        large = (x * (log_u / (u - F32(1.0))).astype(F32)).astype(F32)
    return np.where((u == F32(1.0)) | (u == log_u), x, large).astype(F32)
