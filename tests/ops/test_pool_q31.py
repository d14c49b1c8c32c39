"""canonqnn.avg_pool2d / global_avg_pool2d / reduce_mean under the TFLite roundings
(q31_double, q31_single) against the TFLite interpreter's reference kernels (BUILTIN_REF):
AVERAGE_POOL_2D and MEAN. TFLite output, the op's numpy reference and its TVM build must be
identical, on NHWC data transposed to NCHW.

Measured on the interpreter (ai-edge-litert 2.3.0): MEAN runs one integer algorithm for every
axes set, keep_dims value and pair of parameters (``QuantizedMeanOrSum``: a Q31 multiplier with
1/count folded in); AVERAGE_POOL_2D averages the stored values with halves away from zero
(int8) or up (uint8) and ignores the parameters. q31_single is the same algorithms built with
single-rounding MBQM: this interpreter cannot run it, so it is checked reference vs build only.
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import NCHW, MultiOp, SingleOp, assert_bit_exact, random_nhwc_cases, stored
from _tflite import T, run_tflite, single_op
from canonqnn.ops import UnsupportedRounding, mean, pool
from canonqnn.qparams import QParams, activation_bounds

F32 = np.float32


def f32(v: float) -> float:
    return float(F32(v))


# ---------------------------------------------------------------- TFLite oracles
def tflite_avg_pool(x, scale, zp, kernel, strides, padding, activation="NONE", reference=True):
    n, h, w, c = x.shape
    if padding == "SAME":
        oh, ow = -(-h // strides[0]), -(-w // strides[1])
    else:
        oh, ow = (h - kernel[0]) // strides[0] + 1, (w - kernel[1]) // strides[1] + 1
    dtype = str(x.dtype)
    model = single_op("AVERAGE_POOL_2D", [T(x.shape, dtype, scale, zp)],
                      [T((n, oh, ow, c), dtype, scale, zp)], padding=padding,
                      strideH=strides[0], strideW=strides[1], filterHeight=kernel[0],
                      filterWidth=kernel[1], fusedActivationFunction=activation)
    return run_tflite(model, [x], reference=reference)[0]


def tflite_mean(x, axes, keep, sx, zx, sy, zy, reference=True):
    shape = x.shape
    out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i not in axes)
    dtype = str(x.dtype)
    model = single_op("MEAN", [T(shape, dtype, sx, zx),
                               T((len(axes),), "int32", data=np.array(axes, np.int32))],
                      [T(out, dtype, sy, zy)], keepDims=keep)
    return run_tflite(model, [x], reference=reference)[0]


def same_pads(size: int, k: int, s: int) -> tuple[int, int]:
    """TFLite SAME padding (begin, end) for one spatial axis."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def pool_geometry(shape, kernel, strides, padding):
    _, h, w, _ = shape
    if padding == "VALID":
        return (0, 0, 0, 0)
    (pt, pb), (pl, pr) = same_pads(h, kernel[0], strides[0]), same_pads(w, kernel[1], strides[1])
    return (pt, pl, pb, pr)


def int8_qp(scale, zp, dtype) -> QParams:
    return QParams.make(scale, zp - 128 if dtype == np.uint8 else zp)


ACTIVATIONS = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0)}


def avg_call(v, case, rounding="q31_double"):
    qp = int8_qp(case["scale"], case["zp"], case["dtype"])
    lo, hi = ACTIVATIONS[case["act"]]
    return pool.avg_pool2d(
        v, qp, qp, pool_size=case["kernel"], strides=case["strides"],
        padding=pool_geometry(case["shape"], case["kernel"], case["strides"], case["padding"]),
        ceil_mode=False, count_include_pad=False, act=activation_bounds(lo, hi, qp, rounding),
        source_dtype="uint8" if case["dtype"] == np.uint8 else "int8", rounding=rounding)


def avg_oracle(case, x):
    y = tflite_avg_pool(x, case["scale"], case["zp"], case["kernel"], case["strides"],
                        case["padding"], case["act"])
    return stored(y).transpose(NCHW)


def run_cases(cases, make, oracle, rng, rounding="q31_double"):
    """Build every case into one module; compare TFLite, references and TVM per case."""
    feeds, refs, built = random_nhwc_cases(cases, lambda v, case: make(v, case, rounding), rng)
    for i, case in enumerate(cases):
        assert_bit_exact(oracle(case, feeds[f"x{i}"]), refs[i], built[i], f"case {i} {case}")


def random_pool_case(rng, dtype=np.int8):
    h, w = (int(v) for v in rng.integers(1, 10, 2))
    kernel = (int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1)))
    info = np.iinfo(dtype)
    return dict(shape=(2, h, w, int(rng.integers(1, 5))), kernel=kernel,
                strides=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
                padding=str(rng.choice(["SAME", "VALID"])), act=str(rng.choice(list(ACTIVATIONS))),
                scale=f32(np.exp(rng.uniform(-6, -1))),
                zp=int(rng.integers(info.min, info.max + 1)), dtype=dtype)


# ---------------------------------------------------------------- AVERAGE_POOL_2D
POOL_CASES = {
    "k3_s2_same_relu6": dict(shape=(2, 7, 9, 3), kernel=(3, 3), strides=(2, 2), padding="SAME",
                             act="RELU6", scale=f32(0.05), zp=-3, dtype=np.int8),
    "k2_s2_valid_ties": dict(shape=(2, 8, 8, 4), kernel=(2, 2), strides=(2, 2), padding="VALID",
                             act="NONE", scale=f32(0.1), zp=0, dtype=np.int8),
    "k3x2_s1x2_same_relu": dict(shape=(1, 6, 7, 5), kernel=(3, 2), strides=(1, 2),
                                padding="SAME", act="RELU", scale=f32(0.02), zp=10,
                                dtype=np.int8),
    "uint8_k2_s1_same": dict(shape=(2, 5, 6, 3), kernel=(2, 2), strides=(1, 1), padding="SAME",
                             act="RELU6", scale=f32(0.03), zp=120, dtype=np.uint8),
    "uint8_k2_valid_ties": dict(shape=(1, 8, 8, 4), kernel=(2, 2), strides=(2, 2),
                                padding="VALID", act="NONE", scale=f32(0.1), zp=128,
                                dtype=np.uint8),
    "whole_plane_filter_is_hxw": dict(shape=(2, 4, 6, 3), kernel=(4, 6), strides=(1, 1),
                                      padding="VALID", act="NONE", scale=f32(0.04), zp=5,
                                      dtype=np.int8),
}


def test_avg_pool2d_q31_matches_tflite_reference_kernel():
    rng = np.random.default_rng(10)
    run_cases(list(POOL_CASES.values()), avg_call, avg_oracle, rng)


def test_avg_pool2d_q31_ties_round_away_from_zero_int8_and_up_uint8():
    # 2x2 windows: sums = 2 (mod 4) are exact halves; the int8 kernel rounds them away from
    # zero, the uint8 kernel (all sums >= 0) up, so the int8 form of uint8 data needs
    # source_dtype. Checked on sums of both signs.
    x = np.array([1, 1, -1, -1, 3, 3, -3, -3, 0, 0, 0, 0, -1, 1, 1, -1], np.int8)
    x = x.reshape(1, 2, 8, 1)  # the four 2x2 windows sum to 2, -2, 6, -6: all ties
    case = dict(POOL_CASES["k2_s2_valid_ties"], shape=x.shape)
    y = tflite_avg_pool(x, case["scale"], 0, (2, 2), (2, 2), "VALID")
    assert y.reshape(-1).tolist() == [1, -1, 2, -2]
    u = (x.astype(np.int32) + 128).astype(np.uint8)
    yu = tflite_avg_pool(u, case["scale"], 128, (2, 2), (2, 2), "VALID")
    assert (yu.astype(np.int32) - 128).reshape(-1).tolist() == [1, 0, 2, -1]
    for data, dtype, zp in ((x, np.int8, 0), (u, np.uint8, 128)):
        c = dict(case, dtype=dtype, zp=zp)
        op = SingleOp(lambda v, c=c: avg_call(v, c), {"x": stored(data).transpose(NCHW).shape})
        assert_bit_exact(avg_oracle(c, data), *op.both(x=stored(data).transpose(NCHW).copy()))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_avg_pool2d_q31_random_parameter_sweep(dtype):
    rng = np.random.default_rng(11 + (dtype == np.uint8))
    run_cases([random_pool_case(rng, dtype) for _ in range(8)], avg_call, avg_oracle, rng)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_avg_pool2d_q31_large_random_parameter_sweep(dtype):
    rng = np.random.default_rng(21 + (dtype == np.uint8))
    for _ in range(4):
        run_cases([random_pool_case(rng, dtype) for _ in range(25)], avg_call, avg_oracle, rng)


def global_pool_call(v, case, rounding="q31_double"):
    qp = int8_qp(case["scale"], case["zp"], case["dtype"])
    return pool.global_avg_pool2d(v, qp, qp, rounding=rounding, q31_kernel="average_pool",
                                  source_dtype="uint8" if case["dtype"] == np.uint8 else "int8")


def test_global_avg_pool2d_average_pool_kernel_matches_whole_plane_average_pool():
    # AVERAGE_POOL_2D with filter = H x W (the rules turn it into global_avg_pool2d)
    rng = np.random.default_rng(12)
    cases = [dict(shape=(2, 4, 6, 3), kernel=(4, 6), strides=(1, 1), padding="VALID",
                  act="NONE", scale=f32(0.04), zp=5, dtype=np.int8),
             dict(shape=(1, 2, 2, 8), kernel=(2, 2), strides=(2, 2), padding="VALID",
                  act="NONE", scale=f32(0.1), zp=-7, dtype=np.int8),
             dict(shape=(2, 2, 2, 8), kernel=(2, 2), strides=(2, 2), padding="SAME",
                  act="NONE", scale=f32(0.1), zp=131, dtype=np.uint8),
             dict(shape=(1, 3, 5, 2), kernel=(3, 5), strides=(1, 1), padding="VALID",
                  act="NONE", scale=f32(0.3), zp=0, dtype=np.uint8)]
    run_cases(cases, global_pool_call, avg_oracle, rng)


# ---------------------------------------------------------------- MEAN
def mean_nchw_axes(axes):
    return sorted(NCHW.index(a) for a in axes)


def mean_call(v, case, rounding="q31_double"):
    xq = int8_qp(case["sx"], case["zx"], case["dtype"])
    yq = int8_qp(case["sy"], case["zy"], case["dtype"])
    if sorted(case["axes"]) == [1, 2]:  # over H, W: the rules build global_avg_pool2d
        return pool.global_avg_pool2d(v, xq, yq, rounding=rounding, q31_kernel="mean")
    return mean.reduce_mean(v, mean_nchw_axes(case["axes"]), True, xq, yq, rounding=rounding)


def mean_oracle(case, x):
    y = tflite_mean(x, case["axes"], True, case["sx"], case["zx"], case["sy"], case["zy"])
    return stored(y).transpose(NCHW)


def random_mean_case(rng, axes=None, same=None, dtype=np.int8):
    info = np.iinfo(dtype)
    sx, zx = f32(np.exp(rng.uniform(-6, 0))), int(rng.integers(info.min, info.max + 1))
    same = bool(rng.integers(2)) if same is None else same
    sy, zy = (sx, zx) if same else (f32(sx * np.exp(rng.uniform(-2, 2))),
                                    int(rng.integers(info.min, info.max + 1)))
    if axes is None:
        axes = [[1, 2], [1], [2], [3], [0, 3], [1, 2, 3], [0, 1, 2, 3]][int(rng.integers(7))]
    shape = tuple(int(v) for v in rng.integers(1, 9, 4))
    return dict(shape=shape, axes=list(axes), sx=sx, zx=zx, sy=sy, zy=zy, dtype=dtype)


MEAN_CASES = [
    # equal parameters, 2x2 plane: 1/4 folded exactly, MBQM's two roundings tie often
    dict(shape=(2, 2, 2, 16), axes=[1, 2], sx=f32(0.1), zx=3, sy=f32(0.1), zy=3, dtype=np.int8),
    dict(shape=(1, 7, 5, 4), axes=[1, 2], sx=f32(0.0213), zx=-7, sy=f32(0.0117), zy=9,
         dtype=np.int8),
    dict(shape=(2, 3, 4, 5), axes=[3], sx=f32(0.05), zx=0, sy=f32(0.05), zy=0, dtype=np.int8),
    dict(shape=(2, 3, 4, 5), axes=[0, 1], sx=f32(0.05), zx=4, sy=f32(0.2), zy=-100,
         dtype=np.int8),
    dict(shape=(1, 6, 6, 3), axes=[1, 2], sx=f32(0.02), zx=130, sy=f32(0.01), zy=100,
         dtype=np.uint8),
    dict(shape=(2, 3, 4, 5), axes=[1, 2, 3], sx=f32(0.5), zx=7, sy=f32(0.002), zy=1,
         dtype=np.uint8),
]


def test_mean_q31_matches_tflite_reference_kernel():
    run_cases(MEAN_CASES, mean_call, mean_oracle, np.random.default_rng(13))


def test_mean_over_hw_without_keep_dims_is_the_same_arithmetic():
    # keep_dims=False over H, W: the rules build global_avg_pool2d then a reshape; TFLite runs
    # the same integer kernel (measured), so the pooled values equal the squeezed output.
    rng = np.random.default_rng(14)
    case = MEAN_CASES[1]
    x = rng.integers(-128, 128, case["shape"]).astype(np.int8)
    dropped = tflite_mean(x, [1, 2], False, case["sx"], case["zx"], case["sy"], case["zy"])
    kept = tflite_mean(x, [1, 2], True, case["sx"], case["zx"], case["sy"], case["zy"])
    assert np.array_equal(dropped, kept.reshape(dropped.shape))
    op = SingleOp(lambda v: mean_call(v, case), {"x": x.transpose(NCHW).shape})
    assert_bit_exact(kept.transpose(NCHW), *op.both(x=x.transpose(NCHW).copy()))


def test_reduce_mean_q31_without_keepdims_has_the_reduced_shape():
    rng = np.random.default_rng(15)
    x = rng.integers(-128, 128, (2, 3, 4, 5)).astype(np.int8)
    xq, yq = QParams.make(f32(0.05), 4), QParams.make(f32(0.03), -9)
    want = tflite_mean(x, [1, 3], False, f32(0.05), 4, f32(0.03), -9)
    op = SingleOp(lambda v: mean.reduce_mean(v, [1, 3], False, xq, yq, rounding="q31_double"),
                  {"x": x.shape})  # NHWC data: the op's axes are the TFLite axes
    assert_bit_exact(want, *op.both(x=x))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_mean_q31_random_parameter_sweep(dtype):
    rng = np.random.default_rng(16 + (dtype == np.uint8))
    run_cases([random_mean_case(rng, dtype=dtype) for _ in range(6)], mean_call, mean_oracle,
              rng)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_mean_q31_large_random_parameter_sweep(dtype):
    rng = np.random.default_rng(26 + (dtype == np.uint8))
    for _ in range(4):
        run_cases([random_mean_case(rng, dtype=dtype) for _ in range(25)], mean_call,
                  mean_oracle, rng)


def test_mean_multiplier_folding_is_not_a_plain_quantize_multiplier():
    # The discriminating check: TFLite truncates (m << k) // count instead of quantizing
    # x_scale / (out_scale * count); a 7x7 plane with these scales tells them apart.
    from canonqnn.qparams import mean_multiplier, quantize_multiplier
    m, shift = mean_multiplier(f32(0.1), f32(0.1), 49)
    assert (m, shift) != quantize_multiplier(float(np.float64(F32(0.1)) / F32(0.1) / 49))
    assert (m, shift) == ((2**30 << 5) // 49, 1 - 5)


# ---------------------------------------------------------------- q31_single, refusals
def test_q31_single_reference_matches_build():
    # The interpreter is a double-rounding build: single rounding is checked reference vs TVM.
    rng = np.random.default_rng(17)
    cases = [random_mean_case(rng) for _ in range(6)] + MEAN_CASES[:2]
    feeds = {f"x{i}": stored(rng.integers(-128, 128, c["shape"]).astype(np.int8))
             .transpose(NCHW).copy() for i, c in enumerate(cases)}
    pools = [random_pool_case(rng) for _ in range(3)]
    feeds.update({f"p{i}": rng.integers(-128, 128, c["shape"]).astype(np.int8)
                  .transpose(NCHW).copy() for i, c in enumerate(pools)})
    op = MultiOp(lambda *vs: [mean_call(v, c, "q31_single") for v, c in zip(vs, cases)]
                 + [avg_call(v, c, "q31_single") for v, c in zip(vs[len(cases):], pools)],
                 {k: (v.shape, "int8") for k, v in feeds.items()})
    refs, built = op.references(**feeds), op.tvm(**feeds)
    for i, (r, b) in enumerate(zip(refs, built)):
        assert np.array_equal(r, b), f"call {i}"
    # and single rounding is a different function: it differs from double somewhere
    doubles = MultiOp(lambda *vs: [mean_call(v, c) for v, c in zip(vs, cases)],
                      {k: (v.shape, "int8") for k, v in feeds.items() if k.startswith("x")})
    diff = sum(int((a != b).sum()) for a, b in zip(
        doubles.references(**{k: v for k, v in feeds.items() if k.startswith("x")}),
        refs[:len(cases)]))
    assert diff > 0


def test_q31_refusals_name_the_reason():
    from canonqnn import _tvm
    from canonqnn._tvm import relax
    x = relax.Var("x", _tvm.tensor_type((1, 3, 4, 4), "int8"))
    a, b = QParams.make(f32(0.1), 0), QParams.make(f32(0.2), 0)
    geometry = dict(pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False)
    with pytest.raises(UnsupportedRounding, match="equal input and output parameters"):
        pool.avg_pool2d(x, a, b, count_include_pad=False, rounding="q31_double", **geometry)
    with pytest.raises(UnsupportedRounding, match="count_include_pad"):
        pool.avg_pool2d(x, a, a, count_include_pad=True, rounding="q31_double", **geometry)
    with pytest.raises(UnsupportedRounding, match="q31_kernel"):
        pool.global_avg_pool2d(x, a, b, rounding="q31_double")
    with pytest.raises(UnsupportedRounding, match="equal input and output parameters"):
        pool.global_avg_pool2d(x, a, b, rounding="q31_double", q31_kernel="average_pool")
    pool.global_avg_pool2d(x, a, b, rounding="q31_double", q31_kernel="mean")  # any params
