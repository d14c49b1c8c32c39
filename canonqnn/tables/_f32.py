"""float32 arithmetic in numpy, one rounding per operation as the CPU does it (the fused
multiply-add, one rounding for two operations: ``canonqnn.numerics.arithmetic.fma_f32``)."""

from __future__ import annotations

import numpy as np

F32 = np.float32


def f32(value) -> np.ndarray:
    return np.asarray(value, F32)


def from_bits(pattern) -> np.ndarray:
    """float32 values from their IEEE bit patterns (kernels store some constants that way)."""
    return np.asarray(pattern, np.uint32).view(F32)


def multiply_add(a, b, c) -> np.ndarray:
    """``a * b + c`` with two roundings (a multiply then an add, no FMA)."""
    return (f32(a) * f32(b)).astype(F32) + f32(c)
