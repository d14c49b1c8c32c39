"""XNNPACK's int8 lookup tables on x86-64 hosts with AVX-512F, as ExecuTorch 1.5.1 builds them
(numerics profile ``xnnpack-x86-avx512``: AMD Zen 4/5, Intel Skylake-SP and later server
parts, Ice Lake, Tiger Lake).

XNNPACK fills its tables as on AVX2 hosts (``canonqnn.tables.xnnpack``: convert, float32
kernel, convert back, with denormals flushed); where AVX-512F is present it picks these float32
kernels instead:

    sigmoid     f32 vsigmoid  avx512f_rr2_lut32_p2_perm2_scalef_div
                exp(-|x|) as 2^(n/32): a 32-entry table of 2^(j/32) indexed by the low bits
                of n, a two-constant ln 2 reduction, a degree-2 polynomial, ``vscalefps``
                for the integer power of two, then e / (e + 1) and 1 - f for x >= 0
    silu        x * sigmoid(x), that sigmoid then a multiply
    leaky_relu  f32 vlrelu avx512f: x * slope where x < 0 (a compare, so a negative denormal,
                read as zero, is passed through unchanged)

tanh (avx512f_rational_9_8_div), gelu (avx512f_rational_12_10_div, also for gelu_tanh) and
hardswish (avx512f) do the same operations in the same order as their FMA3 versions, and the
int8 <-> float32 converts (avx512skx) the same as AVX2's: those are ``xnnpack``'s.

The float kernels depend on AVX-512F alone: AVX-VNNI hosts without it (Intel Alder Lake, AMD
Zen 3 has neither) run the AVX2 ones.

Pure numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._f32 import F32, f32, flush, ftz_add, ftz_div, ftz_fma, ftz_mul, ftz_sub
from .xnnpack import (
    EVALUATORS,
    KERNELS,
    RUNTIME,
    dequantize,
    evaluate,
    gelu,
    hardswish,
    make_table,
    minus_abs,
    quantize,
    tanh,
)

# The kernel's constants, as it writes them (hexadecimal float32 literals).
_MAGIC_BIAS = F32(float.fromhex("0x1.8p18"))   # ulp 2^-5: n rounded to a multiple of 1/32
_LOG2E = F32(float.fromhex("0x1.715476p0"))
_MINUS_LN2_HI = F32(float.fromhex("-0x1.62E430p-1"))
_MINUS_LN2_LO = F32(float.fromhex("0x1.05C61p-29"))
_C2 = F32(float.fromhex("0x1.0p-1"))
_C1 = F32(float.fromhex("0x1.0000F6p0"))
_ONE = F32(1.0)
# Entry j is 2^(j/32) rounded to nearest float32 (the kernel's literals are exactly these).
_EXP2_TABLE = np.array([2.0 ** (j / 32) for j in range(32)], F32)


def scalef(a, b) -> np.ndarray:
    """``vscalefps``: a * 2^floor(b), rounded once, with its special cases as measured on an
    AVX-512 CPU: b NaN gives NaN; b = -inf gives a zero of a's sign (NaN for an infinite a,
    and +0 for a NaN a); b = +inf gives an infinity of a's sign (NaN for a zero a, +inf for a
    NaN a); otherwise a NaN a gives NaN."""
    a, b = flush(a), flush(b)
    finite = np.isfinite(b)
    exponent = np.floor(np.clip(np.where(finite, b, 0), -400, 400)).astype(np.int32)
    with np.errstate(all="ignore"):
        scaled = flush(np.ldexp(a, exponent).astype(F32))
    nan = np.isnan(a)
    signed = np.where(nan, F32(1.0), a)  # a NaN scales like +1
    low = np.where(np.isinf(a), F32(np.nan), np.copysign(F32(0.0), signed))
    high = np.where(a == 0, F32(np.nan), np.copysign(F32(np.inf), signed))
    out = np.where(np.isnan(b), F32(np.nan),
                   np.where(b == -np.inf, low, np.where(b == np.inf, high, scaled)))
    return out.astype(F32)


def sigmoid(x) -> np.ndarray:
    """f32 vsigmoid avx512f_rr2_lut32_p2_perm2_scalef_div (see the module's docstring)."""
    x = f32(x)
    z = minus_abs(x)
    with np.errstate(all="ignore"):  # beyond |x| ~ 2.4e38 n overflows; scalef then gives 0
        n = ftz_fma(z, _LOG2E, _MAGIC_BIAS)
        table = _EXP2_TABLE[n.view(np.uint32) & np.uint32(31)]  # vpermt2ps: low 5 bits
        n = ftz_sub(n, _MAGIC_BIAS)
        t = ftz_fma(n, _MINUS_LN2_HI, z)
        t = ftz_fma(n, _MINUS_LN2_LO, t)
        p = ftz_fma(t, _C2, _C1)
        t = ftz_mul(t, table)
        p = ftz_fma(t, p, table)
        e = scalef(p, n)
        f = ftz_div(e, ftz_add(e, _ONE))
    return np.where(np.signbit(x), f, ftz_sub(_ONE, f)).astype(F32)


def silu(x) -> np.ndarray:
    """ExecuTorch lowers silu as x * sigmoid(x): the sigmoid kernel, then a multiply."""
    return ftz_mul(x, sigmoid(x))


def leaky_relu(x, alpha: float) -> np.ndarray:
    """f32 vlrelu avx512f: x * slope where x < 0 (compared with DAZ), else x itself."""
    x = f32(x)
    return np.where(flush(x) < 0, ftz_mul(x, F32(alpha)), x).astype(F32)


FUNCTIONS: dict[str, Callable] = {"sigmoid": sigmoid, "tanh": tanh, "gelu": gelu,
                                  "gelu_tanh": gelu, "hardswish": hardswish, "silu": silu}
table = make_table(FUNCTIONS, leaky_relu)

__all__ = ["EVALUATORS", "FUNCTIONS", "KERNELS", "RUNTIME", "dequantize", "evaluate",
           "leaky_relu", "quantize", "scalef", "sigmoid", "silu", "table"]
