"""float32 arithmetic in numpy, one rounding per operation as the CPU does it (the fused
multiply-add, one rounding for two operations: ``canonqnn.numerics.arithmetic.fma_f32``)."""

from __future__ import annotations

import numpy as np

from ..numerics.arithmetic import fma_f32

F32 = np.float32


def f32(value) -> np.ndarray:
    return np.asarray(value, F32)


def from_bits(pattern) -> np.ndarray:
    """float32 values from their IEEE bit patterns (kernels store some constants that way)."""
    return np.asarray(pattern, np.uint32).view(F32)


def multiply_add(a, b, c) -> np.ndarray:
    """``a * b + c`` with two roundings (a multiply then an add, no FMA)."""
    return (f32(a) * f32(b)).astype(F32) + f32(c)


# ---------------------------------------------------------------- flush-to-zero arithmetic
# XNNPACK runs its kernels with denormals disabled (the thread pool sets the x86 DAZ and FTZ
# bits): every float instruction reads a denormal operand as a zero of its sign and writes a
# denormal result as one. Bitwise operations (sign masks, exponent tricks) see the raw bits.
_SMALLEST_NORMAL = F32(2.0 ** -126)


def flush(value) -> np.ndarray:
    """Denormals replaced by zeros of their sign (DAZ on an operand, FTZ on a result)."""
    v = f32(value)
    return np.where(np.abs(v) < _SMALLEST_NORMAL, np.copysign(F32(0.0), v), v).astype(F32)


def ftz_mul(a, b) -> np.ndarray:
    return flush(flush(a) * flush(b))


def ftz_add(a, b) -> np.ndarray:
    return flush(flush(a) + flush(b))


def ftz_sub(a, b) -> np.ndarray:
    return flush(flush(a) - flush(b))


def ftz_div(a, b) -> np.ndarray:
    return flush(flush(a) / flush(b))


def ftz_fma(a, b, c) -> np.ndarray:
    return flush(fma_f32(flush(a), flush(b), flush(c)))
