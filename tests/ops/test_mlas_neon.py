"""canonqnn.add, canonqnn.mul and canonqnn.resize2d under rounding ``mlas_neon``
(onnxruntime's AArch64 build, ``canonqnn/ops/_mlas_neon.py``, ``canonqnn.ops.resize``): the TVM
build equals the numpy reference on every pair of inputs, through fused activation bounds and
both broadcast layouts, and the parameters take the fixed-point form exactly where the kernel
does. onnxruntime's own outputs pin the reference in
tests/numerics/test_recorded_profiles.py (recorded on the emulated Neoverse N1)."""

from __future__ import annotations

import numpy as np
import pytest

from _ort import SingleOp
from canonqnn.ops import elementwise, resize
from canonqnn.qparams import MLAS_NEON_ADD_BITS, QParams, mlas_neon_add_multipliers

CODES = np.arange(-128, 128, dtype=np.int8)
BELOW_TWO = float(np.nextafter(np.float32(2.0), np.float32(0)))
# (a_scale, a_zp, b_scale, b_zp, out_scale, out_zp): fixed point with ties, and the three ways
# out of it (a ratio of 2^8 or more, both ratios below 2^-10, a multiplier rounding to 2^22)
SETS = {"ties": (0.05, 3, 0.05, -7, 0.1, 1), "ratio_300": (6.0, 0, 0.05, 0, 0.02, 0),
        "tiny_ratios": (5e-5, 3, 6e-5, -5, 0.1, 2),
        "ratio_2^-10": (1e-4, 3, 1.2e-4, -5, 0.1, 2),
        "below_two": (BELOW_TWO, 0, 0.5, 0, 1.0, 0)}


def test_fixed_point_parameters_hold_21_bits_and_leave_the_kernels_window_to_float():
    ma, mb, shift = mlas_neon_add_multipliers(0.05, 0.05, 0.1)
    assert (ma, mb, shift) == (1 << 21, 1 << 21, 22)
    assert mlas_neon_add_multipliers(1e-4, 1.2e-4, 0.1)[2] == 31  # the largest shift
    assert mlas_neon_add_multipliers(0.0123, 0.0119, 0.0121)[0] < 1 << (MLAS_NEON_ADD_BITS + 1)
    for name in ("ratio_300", "tiny_ratios", "below_two"):
        sa, _, sb, _, sc, _ = SETS[name]
        assert mlas_neon_add_multipliers(sa, sb, sc) is None, name


@pytest.mark.parametrize("source_dtype", ["int8", "uint8"])
@pytest.mark.parametrize("layout", ["a_per_span", "b_per_span"])
@pytest.mark.parametrize("key", sorted(SETS))
def test_add_build_equals_its_reference_on_every_pair(key, layout, source_dtype):
    sa, za, sb, zb, sc, zc = SETS[key]
    a, b = CODES.reshape(256, 1), CODES.reshape(1, 256)
    if layout == "b_per_span":
        a, b = b, a
    qps = [QParams.make(s, z) for s, z in ((sa, za), (sb, zb), (sc, zc))]
    single = SingleOp(lambda x, y: elementwise.binary(
        elementwise.ADD, x, y, *qps, act=(-100, 90), source_dtype=source_dtype,
        rounding="mlas_neon"), {"a": a.shape, "b": b.shape})
    ref, got = single.both(a=a, b=b)
    np.testing.assert_array_equal(got, ref)
    if key == "ties":
        assert ref.min() == -100 and ref.max() == 90  # the bounds were reached


@pytest.mark.parametrize("source_dtype", ["int8", "uint8"])
def test_mul_build_equals_its_reference_on_every_pair(source_dtype):
    qps = [QParams.make(s, z) for s, z in ((0.02, 10), (0.013, -20), (0.045, -7))]
    a, b = CODES.reshape(256, 1), CODES.reshape(1, 256)
    single = SingleOp(lambda x, y: elementwise.binary(
        elementwise.MUL, x, y, *qps, act=(-128, 60), source_dtype=source_dtype,
        rounding="mlas_neon"), {"a": a.shape, "b": b.shape})
    ref, got = single.both(a=a, b=b)
    np.testing.assert_array_equal(got, ref)
    assert ref.max() == 60


@pytest.mark.parametrize("size", [(16, 16), (12, 20)])
def test_float_bilinear_resize_build_equals_its_reference_and_differs_from_x86(size):
    x = np.random.default_rng(1).integers(-128, 128, (1, 16, 8, 8)).astype(np.int8)
    results = {}
    for rounding in ("mlas_neon", "rne_f32"):
        single = SingleOp(lambda v, rounding=rounding: resize.resize2d(
            v, size, QParams.make(0.0186, -105), QParams.make(0.0186, -105), method="linear",
            coordinate_transformation_mode="half_pixel", rounding=rounding), {"x": x.shape})
        ref, got = single.both(x=x)
        np.testing.assert_array_equal(got, ref)
        results[rounding] = ref
    assert np.count_nonzero(results["mlas_neon"] != results["rne_f32"]) > 0
