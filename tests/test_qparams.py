"""Checks on requantization multipliers (``canonqnn.qparams``): the saturation bound and the
accumulator's scale."""

from __future__ import annotations

import re

import numpy as np
import pytest

from canonqnn.errors import InvalidQuantizationError
from canonqnn.qparams import (
    _ZP_RANGE,
    QParams,
    check_accumulator_multipliers,
    check_multiplier,
    saturating_multiplier,
)


def _requantized(acc: np.ndarray, multiplier: np.float32, zp: int, dtype: str) -> np.ndarray:
    """``clamp(round_half_even(f32(acc * M)) + zp)``: onnxruntime's requantization."""
    lo, hi = _ZP_RANGE[dtype]
    scaled = (acc.astype(np.float32) * multiplier).astype(np.float32)
    return np.clip(np.rint(scaled) + zp, lo, hi)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_the_saturation_bound_is_exact(dtype):
    """Above the bound, every nonzero accumulator gives an end of the range, whatever the zero
    point; at it, 1 from a zero point at the bottom lands below the top (and -1 from the top
    above the bottom)."""
    lo, hi = _ZP_RANGE[dtype]
    acc = np.array([v for v in range(-300, 301) if v], np.int64)
    bound = np.float32(saturating_multiplier(dtype))
    above = np.nextafter(bound, np.float32(np.inf))
    for zp in (lo, (lo + hi) // 2, hi):
        out = _requantized(acc, above, zp, dtype)
        assert np.all(np.where(acc > 0, out == hi, out == lo)), zp
    assert _requantized(np.array([1]), bound, lo, dtype)[0] == hi - 1
    assert _requantized(np.array([-1]), bound, hi, dtype)[0] == lo + 1


@pytest.mark.parametrize("dtype, real", [("int8", 254.6), ("int8", 5e34), ("int16", 65534.6)])
def test_a_multiplier_that_saturates_the_output_is_refused(dtype, real):
    with pytest.raises(InvalidQuantizationError,
                       match="^" + re.escape(f"requantization multiplier {real:.6g} (from the "
                                             f"scales) is above "
                                             f"{saturating_multiplier(dtype):g}: every nonzero "
                                             f"accumulator saturates the {dtype} output")):
        check_multiplier(real, dtype)
    check_multiplier(real)  # without the output's dtype: only float32's range
    check_multiplier(saturating_multiplier(dtype), dtype)


def test_accumulator_multipliers_are_refused_where_they_saturate():
    out = QParams.make(1e-38, 0)
    with pytest.raises(InvalidQuantizationError, match="requantization multiplier 5e"):
        check_accumulator_multipliers(0.05, np.full(4, 0.01, np.float32), out)
    # one channel is enough: its outputs only say their accumulator's sign
    scales = np.array([0.01, 0.01, 0.01, 1e6], np.float32)
    with pytest.raises(InvalidQuantizationError, match="above 254.5"):
        check_accumulator_multipliers(0.05, scales, QParams.make(0.1, 0))


def test_tiny_multipliers_and_raw_accumulators_are_left_alone():
    """Every output the zero point (an output scale of 1e38) is what the runtimes compute too;
    an int32 output is the raw accumulator, not requantized."""
    check_accumulator_multipliers(0.05, np.full(4, 0.01, np.float32), QParams.make(1e38, 0))
    check_accumulator_multipliers(1e-38, np.full(4, 0.01, np.float32), QParams.make(0.1, 0))
    check_accumulator_multipliers(1.0, np.full(4, 1e6, np.float32),
                                  QParams.make(1.0, 0, dtype="int32"))
    check_accumulator_multipliers(0.05, np.full(4, 0.01, np.float32),
                                  QParams.make(0.05 * 0.01 / 254, 0))


def test_an_accumulator_scale_that_overflows_float32_is_refused():
    """10 x 1e38 overflows float32 though the ratio to an output scale of 1e38 is 10."""
    with pytest.raises(InvalidQuantizationError,
                       match=r"^the accumulator's scale \(input scale 10 x weight scale 1e\+38\) "
                             "overflows float32"):
        check_accumulator_multipliers(10.0, np.full(4, 1e38, np.float32), QParams.make(1e38, 0))
