"""The arithmetic primitives of the runtimes canonqnn reproduces, in numpy, each written once.

Results must match other runtimes' kernels bit for bit, so a primitive two kernels share is
defined here once and named by what it computes. Where two forms of one rounding differ in float
type or evaluation order they are two functions, and the name says which:
``round_half_away`` is C's ``round`` (``roundf`` too: TFLite's ``TfLiteRound``), exact in any
float type; ``round_half_away_floor_f64`` rounds ``|x| + 0.5`` first, which moves the largest
double below 0.5 and odd integers from ``2^52`` on one further from zero (values TFLite's
double-precision preparation code never meets).

Round half to even has no function of its own: it is ``np.rint`` (exact in any float type), and
in TE ``tirx.round``, which TVM lowers to ``llvm.nearbyint`` (ties to even, not C's ``round``).

The TE twins, the same operations in the same order on one element of a TVM tensor expression,
are in ``canonqnn.ops._arithmetic`` (each docstring names its twin). This module imports no TVM:
the lookup tables (``canonqnn.tables``) and the quantization parameters build on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = np.float32


# ---------------------------------------------------------------- float to integer roundings
def round_half_away(x) -> np.ndarray:
    """C's ``round`` (``roundf`` on float32): the nearest integer, ties away from zero, in the
    float type of ``x``. Exact: ``x - trunc(x)`` is representable, so no step rounds; the sign
    of a zero result is kept, as C keeps it. TE twin: ``te_round_half_away``."""
    x = np.asarray(x)
    whole = np.trunc(x)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, no half
        return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole)


def round_half_away_floor_f64(x) -> np.ndarray:
    """``copysign(floor(|x| + 0.5), x)`` in float64, the form TFLite's double-precision
    preparation code (QuantizeMultiplier, LUTPopulateInt16, CheckedLog2) is reproduced with.
    ``|x| + 0.5`` rounds: the largest double below 0.5 gives 1, where ``round_half_away`` gives
    0."""
    x = np.asarray(x, np.float64)
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


# ---------------------------------------------------------------- integer divisions (int64)
def trunc_div(n, d) -> np.ndarray:
    """C's integer ``n / d``: the quotient rounded toward zero (numpy's ``//`` floors).
    TE twin: ``tirx.truncdiv``."""
    n, d = np.asarray(n, np.int64), np.asarray(d, np.int64)
    return n // d + ((n % d != 0) & ((n < 0) != (d < 0)))


def divide_round_half_away(n, d) -> np.ndarray:
    """``n / d`` for ``d > 0``, to the nearest integer with ties away from zero, as C computes
    it: ``(n > 0 ? n + d/2 : n - d/2) / d``. TE twin: ``te_divide_round_half_away``."""
    n, d = np.asarray(n, np.int64), np.asarray(d, np.int64)
    half = d // 2
    return trunc_div(np.where(n > 0, n + half, n - half), d)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2^exponent``, ties away from zero (its mask and
    threshold compute ``divide_round_half_away``). TE twin: ``te_rounding_divide_by_pot``."""
    return divide_round_half_away(x, np.int64(1) << np.asarray(exponent, np.int64))


def shift_right_round_half_up(x, shift) -> np.ndarray:
    """``(x + 2^(shift-1)) >> shift`` for ``shift >= 1``: ``x / 2^shift`` to the nearest integer,
    ties toward +infinity (TFLite's single-rounding and int64 requantizations, XNNPACK's add).
    TE twin: ``te_shift_right_round_half_up``."""
    x, shift = np.asarray(x, np.int64), np.asarray(shift, np.int64)
    return (x + (np.int64(1) << (shift - 1))) >> shift


# ---------------------------------------------------------------- float32 operations
def fma_f32(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once to float32 (an FMA instruction).

    The product of two float32 values is exact in float64. Their float64 sum with ``c`` is
    made round-to-odd (an inexact sum gets its last mantissa bit set, from the TwoSum error),
    which keeps enough information for the final rounding to float32 to be the correct one.
    TE twin: ``te_fma``.
    """
    a, b, c = (np.asarray(v, F32).astype(np.float64) for v in (a, b, c))
    product = a * b
    total = product + c
    c_part = total - product
    error = (product - (total - c_part)) + (c - c_part)
    total, error = (np.array(v) for v in np.broadcast_arrays(total, error))
    even = (total.view(np.uint64) & 1) == 0
    toward = np.where(error > 0, np.inf, -np.inf)
    return np.where((error != 0) & even, np.nextafter(total, toward), total).astype(F32)


@functools.cache
def c_library_function(name: str, ctype: Any = ctypes.c_float):
    """The C library's function ``name`` of one ``ctype`` argument (float32: ``logf``,
    ``expf``, ``tanhf``, ``erfcf``; ``ctypes.c_double``: ``exp``) through ctypes, or None. The
    runtimes call it, and glibc's are not correctly rounded, so a correctly rounded value
    would change a result now and then."""
    for lib in ("libm.so.6", "libm.dylib", None):
        lib = lib or ctypes.util.find_library("m")  # (runs ldconfig: last resort)
        try:
            fn = getattr(ctypes.CDLL(lib), name)
        except (OSError, AttributeError, TypeError):
            continue
        fn.restype, fn.argtypes = ctype, [ctype]
        return fn
    return None


def float32_library_function(name: str, fallback: Callable[[float], float]) \
        -> Callable[[npt.ArrayLike], np.ndarray]:
    """Elementwise float32 ``name`` from the C library (``c_library_function``), else the
    float64 ``fallback`` rounded to float32 (correctly rounded but for rare double roundings)."""
    def f(x) -> np.ndarray:
        x = np.asarray(x, F32)
        fn = c_library_function(name)
        if fn is not None:
            out = np.array([fn(float(v)) for v in x.reshape(-1)], F32)
        else:
            with np.errstate(over="ignore"):
                out = np.array([fallback(float(v)) for v in x.reshape(-1)], np.float64) \
                    .astype(F32)
        return out.reshape(x.shape)
    return f


__all__ = ["c_library_function", "divide_round_half_away", "float32_library_function",
           "fma_f32", "round_half_away", "round_half_away_floor_f64",
           "rounding_divide_by_pot", "shift_right_round_half_up", "trunc_div"]
