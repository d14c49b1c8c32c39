"""TE twins of ``canonqnn.numerics.arithmetic``: the same operations in the same order, on one
element of a TVM tensor expression.

They live apart from their numpy forms because that module imports no TVM (the lookup tables
build on it); each docstring names its twin, and tests/numerics/test_arithmetic.py checks every
pair agrees. Two twins are TVM's own: ``tirx.round`` (``np.rint``: TVM lowers it to
``llvm.nearbyint``, ties to even) and ``tirx.truncdiv`` (``trunc_div``).
"""

from __future__ import annotations

from .. import _tvm
from .._tvm import tirx


def _const(value, like):
    """``value`` as a constant of the dtype of ``like`` (an expression, or a tensor element)."""
    dtype = like.dtype if hasattr(like, "dtype") else _tvm.ty(like)
    return tirx.const(value, str(dtype))


def te_round_half_away(v):
    """TE twin of ``round_half_away`` (a float32 or float64 ``v``; the result has its type)."""
    whole = tirx.trunc(v)
    step = tirx.Select(v < _const(0.0, v), _const(-1.0, v), _const(1.0, v))
    return tirx.Select(tirx.abs(v - whole) >= _const(0.5, v), whole + step, whole)


def te_divide_round_half_away(n, d):
    """TE twin of ``divide_round_half_away`` (integer ``n`` and ``d > 0`` of one dtype)."""
    half = tirx.floordiv(d, _const(2, d))
    return tirx.truncdiv(tirx.Select(n > _const(0, n), n + half, n - half), d)


def te_rounding_divide_by_pot(x, exponent):
    """TE twin of ``rounding_divide_by_pot`` (int32 ``x``, int32 ``exponent`` in [0, 63)): ties
    away from zero as ``(x + half - [x < 0 and half > 0]) >> exponent``, in int64: shifts,
    where ``te_divide_round_half_away`` would divide by a run-time power of two."""
    x64, e64 = x.astype("int64"), exponent.astype("int64")
    one, zero = tirx.const(1, "int64"), tirx.const(0, "int64")
    half = (one << e64) >> one
    negative_tie_fix = tirx.Select(tirx.all(x64 < zero, half > zero), one, zero)
    return ((x64 + half - negative_tie_fix) >> e64).astype("int32")


def te_shift_right_round_half_up(x, shift):
    """TE twin of ``shift_right_round_half_up`` (integer ``x``; ``shift >= 1`` an expression
    of ``x``'s dtype or an int)."""
    shift = _const(shift, x) if isinstance(shift, int) else shift
    one = _const(1, x)
    return (x + (one << (shift - one))) >> shift


def te_fma(a, b, c):
    """TE twin of ``fma_f32``: LLVM's ``fma`` intrinsic, one rounding (float32 operands)."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.fma.f32", a, b, c)
