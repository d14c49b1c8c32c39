"""canonqnn.resize2d under the TFLite roundings against the TFLite interpreter's reference
kernels: RESIZE_BILINEAR (int8: 10-bit fixed point on stored values; uint8: float32 with
rounding) and RESIZE_NEAREST_NEIGHBOR, every (align_corners, half_pixel_centers) combination
TFLite accepts and that has a Relax coordinate mode. TFLite output, the op's numpy reference
and its TVM build must be identical (NHWC data transposed to NCHW).
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import NCHW, assert_bit_exact, random_nhwc_cases, stored
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn._tvm import relax
from canonqnn.ops import UnsupportedRounding, resize
from canonqnn.qparams import QParams

# (align_corners, half_pixel_centers) -> the resize2d attributes standing for them
BILINEAR = {(False, False): ("asymmetric", "round_prefer_floor"),
            (True, False): ("align_corners", "round_prefer_floor"),
            (False, True): ("half_pixel", "round_prefer_floor")}
NEAREST = {(False, False): ("asymmetric", "floor"),
           (True, False): ("align_corners", "round_prefer_ceil"),
           (False, True): ("tf_half_pixel_for_nn", "floor")}


def tflite_resize(kind, x, size, flags, scale=0.05, zp=3, reference=True):
    dtype = str(x.dtype)
    model = single_op(kind, [T(x.shape, dtype, scale, zp),
                             T((2,), "int32", data=np.array(size, np.int32))],
                      [T((x.shape[0], *size, x.shape[3]), dtype, scale, zp)],
                      alignCorners=flags[0], halfPixelCenters=flags[1])
    return run_tflite(model, [x], reference=reference)[0]


def resize_call(v, case, rounding="q31_double"):
    method = "linear" if case["kind"] == "RESIZE_BILINEAR" else "nearest"
    mode, nearest = (BILINEAR if method == "linear" else NEAREST)[case["flags"]]
    uint8 = case["dtype"] == np.uint8
    qp = QParams.make(0.05, 3 - 128 * uint8)
    return resize.resize2d(v, case["size"], qp, qp, method=method,
                           coordinate_transformation_mode=mode, nearest_mode=nearest,
                           rounding=rounding, source_dtype="uint8" if uint8 else "int8")


def run_cases(cases, rng, rounding="q31_double"):
    feeds, refs, built = random_nhwc_cases(cases, lambda v, c: resize_call(v, c, rounding), rng)
    if rounding != "q31_double":
        return refs, built
    for i, c in enumerate(cases):
        x = feeds[f"x{i}"]
        want = stored(tflite_resize(c["kind"], x, c["size"], c["flags"],
                                    zp=3 + 128 * (x.dtype == np.uint8))).transpose(NCHW)
        assert_bit_exact(want, refs[i], built[i], f"case {i} {c}")
    return refs, built


def case(kind, flags, shape, size, dtype=np.int8):
    return dict(kind=kind, flags=flags, shape=shape, size=size, dtype=dtype)


FIXED = [
    # 2x upsampling: many bilinear weights are 512/512, so half the outputs are exact ties
    *(case("RESIZE_BILINEAR", f, (2, 4, 5, 3), (8, 10)) for f in BILINEAR),
    *(case("RESIZE_BILINEAR", f, (1, 7, 6, 2), (3, 4)) for f in BILINEAR),  # downsampling
    *(case("RESIZE_BILINEAR", f, (1, 4, 4, 3), (1, 9)) for f in BILINEAR),  # out length 1
    *(case("RESIZE_BILINEAR", f, (2, 4, 5, 3), (8, 7), np.uint8) for f in BILINEAR),
    # align_corners 3 -> 5: the source coordinate 0.5 is an exact half, rounded up
    *(case("RESIZE_NEAREST_NEIGHBOR", f, (2, 3, 3, 2), (5, 5)) for f in NEAREST),
    *(case("RESIZE_NEAREST_NEIGHBOR", f, (1, 7, 5, 3), (3, 11)) for f in NEAREST),
    *(case("RESIZE_NEAREST_NEIGHBOR", f, (1, 4, 6, 2), (9, 4), np.uint8) for f in NEAREST),
]


def test_resize_q31_matches_tflite_reference_kernels():
    run_cases(FIXED, np.random.default_rng(30))


def test_bilinear_int8_ties_round_away_from_zero():
    # 1 x 2 -> 1 x 4 asymmetric: output 1 sits half-way between the two inputs
    x = np.array([[-3, 0], [4, 1], [-1, 0], [1, 0]], np.int8).reshape(4, 1, 2, 1)
    y = tflite_resize("RESIZE_BILINEAR", x, (1, 4), (False, False))
    assert y[:, 0, 1, 0].tolist() == [-2, 3, -1, 1]  # -1.5, 2.5, -0.5, 0.5 away from zero


def random_case(rng, kind, dtype=np.int8):
    flags = list(BILINEAR if kind == "RESIZE_BILINEAR" else NEAREST)[int(rng.integers(3))]
    shape = (int(rng.integers(1, 3)), *(int(v) for v in rng.integers(1, 9, 2)),
             int(rng.integers(1, 4)))
    return case(kind, flags, shape, tuple(int(v) for v in rng.integers(1, 17, 2)), dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_resize_q31_random_sweep(dtype):
    rng = np.random.default_rng(31 + (dtype == np.uint8))
    run_cases([random_case(rng, k, dtype) for k in ("RESIZE_BILINEAR",
                                                    "RESIZE_NEAREST_NEIGHBOR") * 5], rng)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_resize_q31_large_random_sweep(dtype):
    rng = np.random.default_rng(41 + (dtype == np.uint8))
    for _ in range(4):
        run_cases([random_case(rng, k, dtype) for k in ("RESIZE_BILINEAR",
                                                        "RESIZE_NEAREST_NEIGHBOR") * 12], rng)


def test_q31_single_reference_matches_build():
    # no multiplier in these kernels: single rounding computes what double rounding does
    rng = np.random.default_rng(33)
    refs, built = run_cases(FIXED[:6], rng, rounding="q31_single")
    for i, (r, b) in enumerate(zip(refs, built)):
        assert np.array_equal(r, b), f"call {i}"


def test_q31_refusals_name_the_reason():
    x = relax.Var("x", _tvm.tensor_type((1, 3, 4, 4), "int8"))
    a, b = QParams.make(0.1, 0), QParams.make(0.2, 0)

    def build(**kw):
        args = dict(method="linear", coordinate_transformation_mode="asymmetric",
                    rounding="q31_double", source_dtype="int8")
        args.update(kw)
        return resize.resize2d(x, (8, 8), a, kw.pop("out", a), **args)

    with pytest.raises(UnsupportedRounding, match="no TFLite resize"):
        build(coordinate_transformation_mode="pytorch_half_pixel")
    with pytest.raises(UnsupportedRounding, match="no TFLite resize"):
        build(method="nearest", coordinate_transformation_mode="half_pixel",
              nearest_mode="round_prefer_ceil")
    with pytest.raises(UnsupportedRounding, match="source_dtype"):
        build(source_dtype=None)
    with pytest.raises(UnsupportedRounding, match="equal input and output parameters"):
        resize.resize2d(x, (8, 8), a, b, method="nearest", coordinate_transformation_mode=
                        "asymmetric", nearest_mode="floor", rounding="q31_double")
