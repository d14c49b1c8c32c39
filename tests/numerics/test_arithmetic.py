"""canonqnn.numerics.arithmetic: each primitive on its edge cases against an independent
formulation (``decimal``, ``fractions``, Python integers), and each TE twin
(``canonqnn.ops._arithmetic``, and TVM's own ``tirx.round`` and ``tirx.truncdiv``) against its
numpy form on a sweep, built as ``canonqnn.build`` builds a module."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import numpy as np
import pytest

import canonqnn
from canonqnn import _tvm
from canonqnn.numerics import arithmetic as ar
from canonqnn.ops import _arithmetic as te_ar
from canonqnn.tables._f32 import multiply_add

F32, F64 = np.float32, np.float64
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
TIE = {F32: 0.49999997, F64: 0.49999999999999994}  # the largest value below 0.5
MANTISSA_BITS = {F32: 24, F64: 53}


def _c_round(x: float) -> float:
    """C's ``round`` of an exactly representable ``x``, by decimal arithmetic (sign of zero
    kept: ``Decimal`` holds it)."""
    if not math.isfinite(x):
        return x
    return float(Decimal(x).to_integral_value(rounding=ROUND_HALF_UP))


def _nearest(value: Fraction, dtype) -> np.floating:
    """The ``dtype`` value nearest to the exact ``value``, ties to the even mantissa (IEEE
    rounding), chosen among the neighbours of a guess by exact comparison."""
    guess = dtype(float(value))
    candidates = [np.nextafter(guess, dtype(-np.inf)), guess, np.nextafter(guess, dtype(np.inf))]
    bits = {F32: np.uint32, F64: np.uint64}[dtype]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - value),
                                          int(np.asarray(c).view(bits)) & 1))


def _float_edges(dtype) -> np.ndarray:
    big = 2.0 ** (MANTISSA_BITS[dtype] - 1)
    values = [0.0, -0.0, 0.3, -0.3, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.4999, -2.5001,
              TIE[dtype], -TIE[dtype], big - 0.5, -(big - 0.5),
              big + 1, -(big + 1), big * 2 + 2, 1e30, -1e30]
    return np.array([*values, *(k + 0.5 for k in range(-20, 20))], dtype)


# ---------------------------------------------------------------- float to integer roundings
@pytest.mark.parametrize("dtype", [F32, F64])
def test_round_half_away_is_c_round_exactly_in_its_own_type(dtype):
    x = _float_edges(dtype)
    got = ar.round_half_away(x)
    assert got.dtype == dtype
    want = np.array([_c_round(float(v)) for v in x], dtype)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))  # -0.0 included
    specials = ar.round_half_away(np.array([np.inf, -np.inf, np.nan], dtype))
    assert specials[0] == np.inf and specials[1] == -np.inf and np.isnan(specials[2])


@pytest.mark.parametrize("dtype,rounding", [(F64, ar.round_half_away_floor_f64)])
def test_round_half_away_floor_rounds_the_sum_to_its_type_first(dtype, rounding):
    x = _float_edges(dtype)
    got = rounding(x)
    assert got.dtype == dtype
    # copysign(floor(|x| + 0.5), x) with the sum rounded to ``dtype``, from exact values
    want = [math.copysign(math.floor(float(_nearest(Fraction(abs(float(v))) + Fraction(1, 2),
                                                             dtype))), float(v)) for v in x]
    assert np.array_equal(got.view(np.uint8), np.array(want, dtype).view(np.uint8))


@pytest.mark.parametrize("dtype,rounding", [(F64, ar.round_half_away_floor_f64)])
def test_round_half_away_floor_differs_from_c_round_only_where_the_sum_rounds(dtype, rounding):
    big = dtype(2.0 ** (MANTISSA_BITS[dtype] - 1) + 1)  # odd: big + 0.5 rounds to even
    for value, floor_form, exact in ((TIE[dtype], 1.0, 0.0), (-TIE[dtype], -1.0, -0.0),
                                     (big, big + 1, big)):
        assert rounding(dtype(value)) == floor_form and ar.round_half_away(dtype(value)) == exact
    ties = np.arange(-1000, 1000, dtype=dtype) + dtype(0.5)
    assert np.array_equal(rounding(ties), ar.round_half_away(ties))


def test_round_half_away_floor_f64_is_exact_on_float32_values():
    # float32 values have room in a double for the added half: the float64 form is C's round
    x = _float_edges(F32)
    assert np.array_equal(ar.round_half_away_floor_f64(x), ar.round_half_away(x.astype(F64)))


# ---------------------------------------------------------------- integer divisions
INT64_EDGES = [0, 1, -1, 2, -2, 3, -3, 7, -7, 2**31 - 1, -(2**31), 2**62 - 1, -(2**62), 2**62,
               12345678901, -12345678901]


def test_trunc_div_rounds_toward_zero_as_c_does():
    divisors = [1, -1, 2, -2, 3, -3, 7, -7, 1024, -1024, 2**31, -(2**31), 2**40 + 3]
    n, d = (np.array(v, np.int64) for v in zip(*[(a, b) for a in INT64_EDGES for b in divisors]))
    want = [int(Fraction(int(a), int(b))) for a, b in zip(n, d)]  # int() truncates
    assert ar.trunc_div(n, d).tolist() == want


def test_divide_round_half_away_takes_ties_away_from_zero():
    divisors = [1, 2, 3, 4, 5, 1024, 2**20, 2**31 - 1]
    pairs = [(a + k, b) for a in INT64_EDGES for b in divisors for k in (0, b // 2, -(b // 2))]
    n, d = (np.array(v, np.int64) for v in zip(*pairs))

    def away(a: int, b: int) -> int:
        q = Fraction(a, b)
        magnitude = math.floor(abs(q) + Fraction(1, 2))
        return magnitude if q >= 0 else -magnitude

    assert ar.divide_round_half_away(n, d).tolist() == [away(int(a), int(b)) for a, b in pairs]
    ties = np.array([3, -3, 5, -5, 1, -1], np.int64)
    assert ar.divide_round_half_away(ties, 2).tolist() == [2, -2, 3, -3, 1, -1]


def test_rounding_divide_by_pot_is_gemmlowps():
    x = np.array([0, 1, -1, 2, -2, 3, -3, 5, -5, 6, -6, INT32_MAX, INT32_MIN, INT32_MIN + 1,
                  1 << 30, -(1 << 30), (1 << 30) + (1 << 29), -((1 << 30) + (1 << 29))], np.int64)

    def gemmlowp(v: int, e: int) -> int:  # mask and threshold, as fixedpoint.h writes them
        mask = (1 << e) - 1
        threshold = (mask >> 1) + (1 if v < 0 else 0)
        return (v >> e) + (1 if (v & mask) > threshold else 0)

    for e in range(32):
        assert ar.rounding_divide_by_pot(x, e).tolist() == [gemmlowp(int(v), e) for v in x], e


def test_shift_right_round_half_up_takes_ties_up():
    x = np.array([*INT64_EDGES, 5, -5, 6, -6, 1536, -1536], np.int64)
    for shift in (1, 2, 7, 14, 16, 31, 40):
        want = [math.floor(Fraction(int(v), 2**shift) + Fraction(1, 2)) for v in x]
        assert ar.shift_right_round_half_up(x, shift).tolist() == want, shift
    assert ar.shift_right_round_half_up(np.array([3, -3, 1, -1]), 1).tolist() == [2, -1, 1, 0]


# ---------------------------------------------------------------- float32 operations
def _fma_cases() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    a = rng.uniform(-4, 4, 2000).astype(F32)
    b = rng.uniform(-4, 4, 2000).astype(F32)
    near = -(a * b).astype(F32)  # cancels the product to its rounding error
    c = np.where(np.arange(2000) % 2 == 0, near, rng.uniform(-4, 4, 2000).astype(F32))
    edges = np.array([[1 + 2**-23, 1 - 2**-23, -1.0], [3.0, 1 / 3, -1.0], [0.1, 10.0, -1.0],
                      [2**-12 + 2**-23, 2**12, -1.0], [1.0, 1.0, 2**-25], [1.0, 1.0, -2**-25]],
                     F32)
    return (np.concatenate([a, edges[:, 0]]), np.concatenate([b, edges[:, 1]]),
            np.concatenate([c, edges[:, 2]]))


def test_fma_f32_rounds_once():
    a, b, c = _fma_cases()
    got = ar.fma_f32(a, b, c)
    assert got.dtype == F32
    want = [_nearest(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), F32)
            for x, y, z in zip(a, b, c)]
    assert np.array_equal(got, np.array(want, F32))
    assert not np.array_equal(got, multiply_add(a, b, c))  # the cases tell one rounding apart
    assert ar.fma_f32(F32(2), F32(3), F32(1)).shape == ()


def test_c_library_function_is_the_c_librarys_float32_function():
    logf = ar.c_library_function("logf")
    if logf is None:
        pytest.skip("no C library logf")
    assert ar.c_library_function("logf") is logf  # loaded once
    x = np.array([[0.5, 1.0], [2.0, 1e30]], F32)
    got = ar.float32_library_function("logf", math.log)(x)
    assert got.dtype == F32 and got.shape == x.shape
    assert got.tolist() == [[F32(logf(float(v))) for v in row] for row in x]
    assert ar.c_library_function("no_such_functionf") is None
    fallback = ar.float32_library_function("no_such_functionf", math.log)(x)
    assert fallback.tolist() == [[F32(math.log(float(v))) for v in row] for row in x]


# ---------------------------------------------------------------- TE twins
def _run_twin(twin, *inputs: np.ndarray) -> np.ndarray:
    """``twin`` applied element by element to ``inputs`` (one shape), in a module built by
    ``canonqnn.build``."""
    relax, te = _tvm.relax, _tvm.te
    bb = _tvm.BlockBuilder()
    params = [relax.Var(f"x{i}", _tvm.tensor_type(v.shape, str(v.dtype)))
              for i, v in enumerate(inputs)]

    def compute(*tensors):
        return te.compute(tensors[0].shape, lambda *i: twin(*(t(*i) for t in tensors)),
                          name="twin")

    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(bb.call_te(compute, *params, primfunc_name_hint="twin"))
        bb.emit_func_output(out)
    return canonqnn.build(bb.get()).run({f"x{i}": v for i, v in enumerate(inputs)})["output_0"]


def _int_sweep(dtype, low: int, high: int, size: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(7)
    edges = np.array([0, 1, -1, 2, -2, 3, -3, low, high, low + 1, high - 1], dtype)
    return np.concatenate([edges, rng.integers(low, high, size - edges.size, dtype=dtype,
                                               endpoint=True)])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_te_round_half_away_is_round_half_away(dtype):
    x = np.concatenate([_float_edges(dtype),
                        np.random.default_rng(3).uniform(-1e4, 1e4, 2000).astype(dtype)])
    x = np.concatenate([x, np.round(x * 2) / 2]).astype(dtype)  # ties
    got = _run_twin(te_ar.te_round_half_away, x)
    assert np.array_equal(got.view(np.uint8), ar.round_half_away(x).view(np.uint8))


@pytest.mark.parametrize("dtype,bits", [(np.int32, 29), (np.int64, 61)])
def test_te_divide_round_half_away_is_divide_round_half_away(dtype, bits):
    n = _int_sweep(dtype, -(2**bits), 2**bits)  # n +- d/2 stays in range
    d = np.resize(np.array([1, 2, 3, 4, 7, 1024, 2**20, 2**(bits - 2) - 1], dtype), n.size)
    n = np.where(np.arange(n.size) % 3 == 0, (n // d) * d + d // 2, n).astype(dtype)  # ties
    got = _run_twin(te_ar.te_divide_round_half_away, n, d)
    assert np.array_equal(got, ar.divide_round_half_away(n, d))


def test_te_rounding_divide_by_pot_is_rounding_divide_by_pot():
    x = _int_sweep(np.int32, INT32_MIN, INT32_MAX)
    exponent = np.resize(np.arange(32, dtype=np.int32), x.size)
    got = _run_twin(te_ar.te_rounding_divide_by_pot, x, exponent)
    assert np.array_equal(got, ar.rounding_divide_by_pot(x, exponent))


@pytest.mark.parametrize("dtype,low,high,shifts", [(np.int32, -(2**30), 2**30, 30),
                                                   (np.int64, -(2**62), 2**62, 62)])
def test_te_shift_right_round_half_up_is_shift_right_round_half_up(dtype, low, high, shifts):
    x = _int_sweep(dtype, low, high)
    shift = np.resize(np.arange(1, shifts + 1, dtype=dtype), x.size)
    got = _run_twin(te_ar.te_shift_right_round_half_up, x, shift)
    assert np.array_equal(got, ar.shift_right_round_half_up(x, shift))
    constant = _run_twin(lambda v: te_ar.te_shift_right_round_half_up(v, 7), x)
    assert np.array_equal(constant, ar.shift_right_round_half_up(x, 7))


def test_te_fma_is_fma_f32():
    a, b, c = _fma_cases()
    got = _run_twin(te_ar.te_fma, a, b, c)
    assert np.array_equal(got, ar.fma_f32(a, b, c))


def test_tirx_truncdiv_is_trunc_div():
    n = _int_sweep(np.int64, -(2**62), 2**62)
    d = np.resize(np.array([1, -1, 2, -2, 3, -7, 1024, -(2**31)], np.int64), n.size)
    got = _run_twin(_tvm.tirx.truncdiv, n, d)
    assert np.array_equal(got, ar.trunc_div(n, d))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_tirx_round_is_round_half_even(dtype):
    # TVM lowers tirx.round to llvm.nearbyint: ties to even, unlike C's round
    x = np.concatenate([_float_edges(dtype), np.arange(-50, 50, dtype=dtype) + dtype(0.5)])
    got = _run_twin(_tvm.tirx.round, x)
    assert np.array_equal(got.view(np.uint8), np.rint(x).view(np.uint8))
    assert not np.array_equal(got, ar.round_half_away(x))
