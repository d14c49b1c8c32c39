"""float32 arithmetic in numpy, one rounding per operation as the CPU does it."""

from __future__ import annotations

import numpy as np

F32 = np.float32


def f32(value) -> np.ndarray:
    return np.asarray(value, F32)


def from_bits(pattern) -> np.ndarray:
    """float32 values from their IEEE bit patterns (kernels store some constants that way)."""
    return np.asarray(pattern, np.uint32).view(F32)


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once to float32 (an FMA instruction).

    The product of two float32 values is exact in float64. Their float64 sum with ``c`` is
    made round-to-odd (an inexact sum gets its last mantissa bit set, from the TwoSum error),
    which keeps enough information for the final rounding to float32 to be the correct one.
    """
    a, b, c = np.broadcast_arrays(*(np.asarray(v, F32).astype(np.float64) for v in (a, b, c)))
    product = a * b
    total = product + c
    c_part = total - product
    error = (product - (total - c_part)) + (c - c_part)
    even = (np.ascontiguousarray(total).view(np.uint64) & 1) == 0
    toward = np.where(error > 0, np.inf, -np.inf)
    total = np.where((error != 0) & even, np.nextafter(total, toward), total)
    return total.astype(F32)


def multiply_add(a, b, c) -> np.ndarray:
    """``a * b + c`` with two roundings (a multiply then an add, no FMA)."""
    return (f32(a) * f32(b)).astype(F32) + f32(c)
