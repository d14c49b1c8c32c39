"""canonqnn.avg_pool2d / canonqnn.global_avg_pool2d against onnxruntime QLinearAveragePool /
QLinearGlobalAveragePool (com.microsoft), canonqnn.reduce_mean against onnxruntime's
DequantizeLinear -> ReduceMean -> QuantizeLinear; their numpy references and their TVM
legalizations: all three must be bit-identical.

uint8: ORT's QLinearAveragePool adds the uint8 zero point in float before rounding, so the
canonical op needs ``source_dtype="uint8"`` (int8 data u - 128, zero points - 128). The global
pool is an exact integer path and shift-invariant: plain int8 re-expression suffices.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _ort import (
    F32,
    MS,
    SingleOp,
    assert_bit_exact,
    count_ties,
    rand_q,
    run_graph,
    run_node,
    scalar,
    to_int8,
)
from canonqnn.ops import mean as mean_op
from canonqnn.ops import pool
from canonqnn.qparams import QParams


def ort_avg_pool(x, sx, zx, sy, zy, *, kernel, strides, pads, ceil_mode, count_include_pad):
    consts = dict(sx=scalar(sx, F32), zx=scalar(zx, x.dtype), sy=scalar(sy, F32),
                  zy=scalar(zy, x.dtype))
    return run_node("QLinearAveragePool", ["X", "sx", "zx", "sy", "zy"], dict(X=x), consts,
                    x.dtype, domain=MS, kernel_shape=list(kernel), strides=list(strides),
                    pads=list(pads), ceil_mode=int(ceil_mode),
                    count_include_pad=int(count_include_pad))


def ort_global_pool(x, sx, zx, sy, zy):
    consts = dict(sx=scalar(sx, F32), zx=scalar(zx, x.dtype), sy=scalar(sy, F32),
                  zy=scalar(zy, x.dtype))
    return run_node("QLinearGlobalAveragePool", ["X", "sx", "zx", "sy", "zy"], dict(X=x), consts,
                    x.dtype, domain=MS, channels_last=0)


def canon_avg_pool(x_shape, sx, zx, sy, zy, *, source_dtype="int8", act=(-128, 127),
                   **geometry) -> SingleOp:
    o = 128 if source_dtype == "uint8" else 0
    g = geometry
    return SingleOp(lambda x: pool.avg_pool2d(
        x, QParams.make(sx, zx - o), QParams.make(sy, zy - o), pool_size=g["kernel"],
        strides=g["strides"], padding=g["pads"], ceil_mode=g["ceil_mode"],
        count_include_pad=g["count_include_pad"], act=act, source_dtype=source_dtype),
        {"x": x_shape})


def check_avg(op, x, sx, zx, sy, zy, act=(-128, 127), what="", **geometry):
    uint8 = x.dtype == np.uint8
    oracle = ort_avg_pool(x, sx, zx, sy, zy, **geometry)
    oracle = np.clip(oracle, act[0] + 128 * uint8, act[1] + 128 * uint8).astype(x.dtype)
    if uint8:
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(x)), what)
    else:
        assert_bit_exact(oracle, *op.both(x=x), what)
    return oracle


def geometry(kernel, strides, pads=(0, 0, 0, 0), ceil_mode=False, count_include_pad=False):
    return dict(kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
                count_include_pad=count_include_pad)


AVG_CONFIGS = {
    "k3_s1_pad1_exclude_pad": geometry((3, 3), (1, 1), (1, 1, 1, 1)),
    "k3_s2_pad1_include_pad": geometry((3, 3), (2, 2), (1, 1, 1, 1), count_include_pad=True),
    "k2_s2_no_pad": geometry((2, 2), (2, 2)),
    "k3_s2_ceil_mode": geometry((3, 3), (2, 2), ceil_mode=True),
    "k3_s2_ceil_pad1_include_pad": geometry((3, 3), (2, 2), (1, 1, 1, 1), True, True),
    "k3x2_s2x1_asym_pads_exclude": geometry((3, 2), (2, 1), (0, 1, 2, 0)),
    "k2x3_s1x2_asym_pads_ceil_include": geometry((2, 3), (1, 2), (1, 0, 0, 2), True, True),
}


@pytest.mark.parametrize("name", list(AVG_CONFIGS))
def test_avg_pool2d_matches_onnxruntime(name):
    g = AVG_CONFIGS[name]
    shape = (2, 3, 7, 8)
    sx, zx, sy, zy = F32(0.037), -11, F32(0.029), 6
    op = canon_avg_pool(shape, sx, zx, sy, zy, **g)
    for seed in (1, 2):
        x = rand_q(np.random.default_rng(seed), shape)
        check_avg(op, x, sx, zx, sy, zy, what=f"{name} seed {seed}", **g)


@pytest.mark.parametrize("name", ["k3_s1_pad1_exclude_pad", "k3_s2_ceil_pad1_include_pad",
                                  "k3x2_s2x1_asym_pads_exclude"])
def test_avg_pool2d_uint8_source_matches_onnxruntime(name):
    g = AVG_CONFIGS[name]
    shape = (1, 4, 7, 8)
    sx, zx, sy, zy = F32(0.037), 140, F32(0.029), 120
    op = canon_avg_pool(shape, sx, zx, sy, zy, source_dtype="uint8", **g)
    for seed in (1, 2):
        xu = rand_q(np.random.default_rng(seed), shape, np.uint8)
        check_avg(op, xu, sx, zx, sy, zy, what=f"{name} seed {seed}", **g)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_avg_pool2d_ties_match_onnxruntime(dtype):
    # Power-of-two scales with sy = sx / 2: t = 2 * mean + zy, so windows of 4 (and of 2 at
    # excluded-pad borders) put many values exactly on .5.
    g = geometry((2, 2), (1, 1), (0, 0, 1, 1))
    shape = (1, 4, 6, 6)
    uint8 = dtype == np.uint8
    sx, zx, sy, zy = F32(2.0 ** -4), 3 + 128 * uint8, F32(2.0 ** -5), -2 + 128 * uint8
    op = canon_avg_pool(shape, sx, zx, sy, zy, source_dtype=dtype.__name__, **g)
    ties = 0
    for seed in (1, 2):
        x = rand_q(np.random.default_rng(seed), shape, dtype, *((60, 200) if uint8 else (-60, 60)))
        check_avg(op, x, sx, zx, sy, zy, what=f"seed {seed}", **g)
        ties += count_ties(_window_means(x.astype(np.int64) - zx) * 2)
    assert ties > 40


def _window_means(v):
    """Means of the 2x2 windows (stride 1, excluded padding at the far edges), float64."""
    pad = np.pad(v.astype(np.float64), ((0, 0), (0, 0), (0, 1), (0, 1)), constant_values=np.nan)
    win = np.stack([pad[:, :, i:i + v.shape[2], j:j + v.shape[3]] for i in (0, 1) for j in (0, 1)])
    return np.nanmean(win, axis=0)


def test_avg_pool2d_saturates_and_clamps_like_onnxruntime():
    g = AVG_CONFIGS["k3_s1_pad1_exclude_pad"]
    shape = (1, 3, 6, 6)
    sx, zx, sy, zy = F32(0.1), 0, F32(0.02), 5
    op = canon_avg_pool(shape, sx, zx, sy, zy, **g)
    clamped = canon_avg_pool(shape, sx, zx, sy, zy, act=(5, 90), **g)
    for seed in (1, 2):
        x = rand_q(np.random.default_rng(seed), shape)
        out = check_avg(op, x, sx, zx, sy, zy, what=f"seed {seed}", **g)
        assert (out == -128).mean() > 0.1 and (out == 127).mean() > 0.1
        check_avg(clamped, x, sx, zx, sy, zy, act=(5, 90), what=f"clamped seed {seed}", **g)


# ---------------------------------------------------------------- global average pool
@pytest.mark.parametrize("shape,params", [
    ((1, 8, 7, 7), (0.037, -11, 0.011, 6)),
    ((2, 5, 3, 4), (0.05, 20, 0.004, -7)),      # saturates
    ((2, 16, 2, 2), (2.0 ** -3, 1, 2.0 ** -3, 0)),  # acc / 4: ties
], ids=["random", "saturating", "ties"])
def test_global_avg_pool2d_matches_onnxruntime(shape, params):
    sx, zx, sy, zy = F32(params[0]), params[1], F32(params[2]), params[3]
    op = SingleOp(lambda x: pool.global_avg_pool2d(x, QParams.make(sx, zx), QParams.make(sy, zy)),
                  {"x": shape})
    outs = []
    for seed in (1, 2, 3):
        x = rand_q(np.random.default_rng(seed), shape)
        oracle = ort_global_pool(x, sx, zx, sy, zy)
        assert_bit_exact(oracle, *op.both(x=x), f"seed {seed}")
        outs.append((x, oracle))
    if params[2] == 0.004:
        assert any((o == -128).any() for _, o in outs) and any((o == 127).any() for _, o in outs)
    if shape[2:] == (2, 2):
        acc = [(x.astype(np.int64) - zx).sum(axis=(2, 3)) for x, _ in outs]
        assert sum(count_ties(a / 4) for a in acc) > 10


def test_global_avg_pool2d_uint8_matches_onnxruntime_with_shifted_zero_points():
    shape = (2, 6, 5, 5)
    sx, zx, sy, zy = F32(0.02), 133, F32(0.0071), 120
    op = SingleOp(lambda x: pool.global_avg_pool2d(x, QParams.make(sx, zx - 128),
                                                   QParams.make(sy, zy - 128)), {"x": shape})
    for seed in (1, 2):
        xu = rand_q(np.random.default_rng(seed), shape, np.uint8)
        oracle = ort_global_pool(xu, sx, zx, sy, zy)
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(xu)), f"seed {seed}")


def test_global_avg_pool2d_equals_averagepool_with_whole_input_window():
    # ORT runs QLinearAveragePool with kernel == input and no pads through the global kernel.
    shape = (1, 5, 4, 6)
    sx, zx, sy, zy = F32(0.037), -11, F32(0.013), 6
    op = SingleOp(lambda x: pool.global_avg_pool2d(x, QParams.make(sx, zx), QParams.make(sy, zy)),
                  {"x": shape})
    for seed in (1, 2):
        x = rand_q(np.random.default_rng(seed), shape)
        oracle = ort_avg_pool(x, sx, zx, sy, zy, **geometry((4, 6), (1, 1)))
        assert_bit_exact(oracle, *op.both(x=x), f"seed {seed}")


def test_global_avg_pool2d_scale_formula_matches_onnxruntime_at_rounding_boundaries():
    # ORT: f32(acc) * f32(sx / f32(sy * f32(N))). For these parameters each alternative below
    # rounds the accumulators +-4006 differently (found by search).
    sx, sy, zx, zy = F32(0.07832445204257965), F32(0.06012604013085365), 0, -4
    n = 49
    targets = [-4006, 4006, -584, 584, 100, -1000]
    x = np.empty((1, len(targets), 7, 7), np.int8)
    for c, total in enumerate(targets):  # 49 int8 values summing to ``total``
        base, extra = divmod(total, n)
        x[0, c] = (np.full(n, base) + (np.arange(n) < extra)).reshape(7, 7)
    assert np.array_equal(x.astype(np.int64).sum(axis=(2, 3)).ravel(), targets)
    op = SingleOp(lambda v: pool.global_avg_pool2d(v, QParams.make(sx, zx), QParams.make(sy, zy)),
                  {"x": x.shape})
    oracle = ort_global_pool(x, sx, zx, sy, zy)
    assert_bit_exact(oracle, *op.both(x=x))
    acc = np.array(targets, F32)
    alternatives = [
        (((acc * sx).astype(F32) / F32(n)).astype(F32) / sy).astype(F32),  # dequantize, mean, /sy
        (acc * F32(F32(sx / sy) / F32(n))).astype(F32),                    # (sx / sy) / N
        (acc * F32(np.float64(sx) / np.float64(sy) / n)).astype(F32),      # float64 scale
    ]
    for alt in alternatives:
        wrong = np.clip(np.rint(alt) + zy, -128, 127)
        assert np.count_nonzero(wrong != oracle.ravel()) >= 2


# ---------------------------------------------------------------- reduce_mean
# onnxruntime runs DQ -> ReduceMean -> Q unfused: float32 dequantize, float ReduceMean (its
# summation order depends on the merged reduced/kept shape), QuantizeLinear. ``summation``
# is the order the case exercises (``mean_op.onnxruntime_summation`` must pick it).
REDUCE_CASES = {
    "last_axis_transformer": ((1, 197, 768), [2], "eigen_sse"),
    "spatial_rows_of_49_every_alignment": ((1, 64, 7, 7), [2, 3], "eigen_sse"),
    "all_axes": ((2, 3, 16, 21), [0, 1, 2, 3], "eigen_sse"),
    "rows_too_short_for_a_packet": ((5, 6), [1], "eigen_sse"),
    "channels_batch_4": ((4, 32, 8, 8), [1], "mlas_sgemm_m1"),
    "channels_batch_2_k_not_multiple_of_4": ((2, 15, 7), [1], "mlas_sgemm_m1"),
    "channels_batch_1": ((1, 16, 10, 10), [1], "sequential"),
    "batch_axis": ((6, 1000), [0], "sequential"),
    "outer_and_inner_axes": ((3, 16, 21), [0, 2], "eigen_sse_blocks"),
    "interleaved_axes": ((1, 64, 7, 7), [1, 3], "sequential"),
}


def _reduce_nodes(out: str, keepdims: int):
    return [helper.make_node("DequantizeLinear", ["X", "sx", "zx"], ["x"]),
            helper.make_node("ReduceMean", ["x", "axes"], [out], keepdims=keepdims)]


def ort_reduce_mean_float(x, sx, zx, axes, threads: int = 2):
    consts = dict(sx=scalar(sx, F32), zx=scalar(zx, x.dtype), axes=np.array(axes, np.int64))
    return run_graph(_reduce_nodes("Y", 1), dict(X=x), consts, np.float32, opset=18,
                     threads=threads)


def ort_reduce_mean(x, sx, zx, sy, zy, axes, keepdims=1):
    consts = dict(sx=scalar(sx, F32), zx=scalar(zx, x.dtype), sy=scalar(sy, F32),
                  zy=scalar(zy, x.dtype), axes=np.array(axes, np.int64))
    nodes = _reduce_nodes("m", keepdims) + [
        helper.make_node("QuantizeLinear", ["m", "sy", "zy"], ["Y"])]
    return run_graph(nodes, dict(X=x), consts, x.dtype, opset=18)


def cancelling(rng, shape, axes, zp, dtype=np.int8):
    """Data whose real values cancel exactly over the reduced axes (pairs +v, -v around the
    zero point, shuffled): the exact mean is 0, so a tiny output scale shows only the rounding
    residue of the float sum, which depends on the order of the additions."""
    kept = [i for i in range(len(shape)) if i not in axes]
    n = int(np.prod([shape[a] for a in axes]))
    info = np.iinfo(dtype)
    reach = min(zp - info.min, info.max - zp)
    rows = []
    for _ in range(int(np.prod([shape[k] for k in kept]))):
        half = rng.integers(1, reach + 1, n // 2) * rng.choice([-1, 1], n // 2)
        rows.append(rng.permutation(np.concatenate([half, -half, np.zeros(n % 2, int)])) + zp)
    data = np.array(rows).reshape([shape[k] for k in kept] + [shape[a] for a in axes])
    return np.moveaxis(data, list(range(len(kept), len(shape))), axes).astype(dtype)


# (shape, axes): KRK / RKR shapes whose kept outer or middle size decides the order by thread
# count, and the onnxruntime thread counts to check (the profiles' 2 is checked above).
THREADED_CASES = [((2, 64, 7, 7), [1]), ((4, 64, 7, 7), [1]), ((8, 64, 7, 7), [1]),
                  ((2, 4, 6, 6), [0, 2, 3]), ((3, 9, 6, 6), [0, 2, 3])]


@pytest.mark.parametrize("threads", [1, 3, 4, 8])
def test_reduce_mean_order_follows_onnxruntimes_thread_count(threads):
    sx, zx = F32(0.0371), -3
    picked = set()
    for shape, axes in THREADED_CASES:
        summation = mean_op.onnxruntime_summation(shape, axes, threads)
        picked.add(summation)
        x = rand_q(np.random.default_rng(8), shape)
        oracle = ort_reduce_mean_float(x, sx, zx, axes, threads=threads)
        xf = ((x.astype(np.int32) - zx).astype(F32) * sx).astype(F32)
        mean = mean_op.float_mean(xf, axes, summation).reshape(oracle.shape)
        assert np.array_equal(mean.view(np.uint32), oracle.view(np.uint32)), \
            f"{shape} {axes} at {threads} threads: {summation}"
    assert ("sequential" in picked) == (threads > 2)


@pytest.mark.parametrize("name", list(REDUCE_CASES))
def test_reduce_mean_float_sum_order_matches_onnxruntime_bit_for_bit(name):
    # the float32 means themselves (DQ -> ReduceMean with a float output), compared bitwise
    shape, axes, summation = REDUCE_CASES[name]
    assert mean_op.onnxruntime_summation(shape, axes) == summation
    sx, zx = F32(0.0371), -3
    x = rand_q(np.random.default_rng(8), shape)
    oracle = ort_reduce_mean_float(x, sx, zx, axes)
    xf = ((x.astype(np.int32) - zx).astype(F32) * sx).astype(F32)
    mean = mean_op.float_mean(xf, axes, summation).reshape(oracle.shape)
    assert np.array_equal(mean.view(np.uint32), oracle.view(np.uint32)), \
        f"{np.count_nonzero(mean != oracle)}/{mean.size} float means differ"
    if summation != "sequential" and name != "rows_too_short_for_a_packet":
        sequential = mean_op.float_mean(xf, axes, "sequential").reshape(oracle.shape)
        assert np.any(sequential != oracle)  # the order is really pinned


@pytest.mark.parametrize("name", [n for n in REDUCE_CASES if n != "batch_axis"])
def test_reduce_mean_matches_onnxruntime_on_rounding_residues(name):
    shape, axes, _ = REDUCE_CASES[name]
    rng = np.random.default_rng(9)
    sx, zx, zy = F32(0.0371), 5, -2
    sy = F32(sx * 2.0 ** -22)  # one output step is a few float32 ulps of the partial sums
    keepdims = int(name.startswith("channels") or name == "all_axes")
    op = SingleOp(lambda v: mean_op.reduce_mean(v, axes, keepdims, QParams.make(sx, zx),
                                             QParams.make(sy, zy)), {"x": shape})
    x = cancelling(rng, shape, axes, zx)
    oracle = ort_reduce_mean(x, sx, zx, sy, zy, axes, keepdims)
    assert_bit_exact(oracle, *op.both(x=x), name)
    if np.prod([shape[a] for a in axes]) > 32:
        # an exact (integer) sum gives the zero point everywhere: onnxruntime does not
        assert np.count_nonzero(oracle != zy) > oracle.size // 2


def test_reduce_mean_uint8_matches_onnxruntime():
    shape, axes, _ = REDUCE_CASES["spatial_rows_of_49_every_alignment"]
    sx, zx, sy, zy = F32(0.02), 140, F32(0.0071), 120
    op = SingleOp(lambda v: mean_op.reduce_mean(v, axes, 0, QParams.make(sx, zx - 128),
                                             QParams.make(sy, zy - 128)), {"x": shape})
    for seed, data in ((1, "random"), (2, "cancelling")):
        rng = np.random.default_rng(seed)
        xu = (rand_q(rng, shape, np.uint8) if data == "random" else
              cancelling(rng, shape, axes, zx, np.uint8))
        oracle = ort_reduce_mean(xu, sx, zx, sy if data == "random" else F32(sx * 2.0 ** -22),
                                 zy, axes, keepdims=0)
        if data == "cancelling":
            op = SingleOp(lambda v: mean_op.reduce_mean(
                v, axes, 0, QParams.make(sx, zx - 128), QParams.make(F32(sx * 2.0 ** -22),
                                                                     zy - 128)), {"x": shape})
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(xu)), data)


def test_reduce_mean_activation_clamp_equals_clipping_onnxruntime_output():
    shape, axes = (2, 8, 40), [2]
    sx, zx, sy, zy = F32(0.05), 0, F32(0.002), -10
    op = SingleOp(lambda v: mean_op.reduce_mean(v, axes, 1, QParams.make(sx, zx),
                                             QParams.make(sy, zy), act=(zy, 100)), {"x": shape})
    x = rand_q(np.random.default_rng(3), shape)
    oracle = np.clip(ort_reduce_mean(x, sx, zx, sy, zy, axes), zy, 100)
    assert (oracle == zy).any() and (oracle == 100).any()
    assert_bit_exact(oracle, *op.both(x=x))


@pytest.mark.parametrize("shape,axes,expected", [
    ((1, 197, 768), [2], "eigen_sse"),          # KR
    ((8, 3, 3), [0, 1, 2], "eigen_sse"),        # R: one row
    ((1, 64, 7, 7), [1], "sequential"),         # KRK with one outer slice: generic loop
    ((2, 64, 7, 7), [1], "mlas_sgemm_m1"),      # KRK: matrix product with a row of ones
    ((6, 1000), [0], "sequential"),             # RK: row by row
    ((2, 16, 6, 6), [0, 2, 3], "eigen_sse_blocks"),  # RKR: Eigen sums of blocks, added
    ((8, 1, 100), [0, 2], "sequential"),        # RKR with a kept size of 1: generic loop
    ((1, 8, 4, 4), [1, 3], "sequential"),       # not a fast pattern: generic loop
])
def test_onnxruntime_summation_follows_the_merged_shape(shape, axes, expected):
    assert mean_op.onnxruntime_summation(shape, axes) == expected


def test_reduce_mean_realistic_shapes_sweep_matches_onnxruntime_where_an_exact_sum_does_not():
    # 40 parameter sets per shape and dtype, output scale x_scale times 1, 1/2, 1/4 (ties),
    # 0.13, 0.77 or 0.3: the numpy reference against onnxruntime, and the integer-exact
    # mean (rounded once) for comparison; the reference's legalization is checked above.
    rng = np.random.default_rng(2024)
    exact_sum_differs = 0
    for shape, axes in [((1, 256, 14, 14), [2, 3]), ((4, 32, 8, 8), [2, 3]),
                        ((1, 197, 768), [2]), ((4, 32, 8, 8), [1])]:
        for dtype in (np.int8, np.uint8):
            o = 128 if dtype == np.uint8 else 0
            for _ in range(40):
                x = rand_q(rng, shape, dtype)
                sx = F32(rng.uniform(0.005, 0.1))
                sy = F32(sx * rng.choice([1.0, 0.5, 0.25, 0.13, 0.77, 0.3]))
                zx, zy = (int(rng.integers(-100, 100)) + o for _ in range(2))
                oracle = ort_reduce_mean(x, sx, zx, sy, zy, axes)
                a = dict(axes=axes, keepdims=True, x_scale=float(sx), x_zp=zx - o,
                         out_scale=float(sy), out_zp=zy - o, act_min=-128, act_max=127,
                         rounding="rne_f32", summation=mean_op.onnxruntime_summation(shape, axes))
                ref = mean_op.REDUCE_MEAN.reference(to_int8(x) if o else x, **a)
                assert np.array_equal(ref.astype(np.int32) + o, oracle.astype(np.int32))
                acc = (x.astype(np.int64) - zx).sum(axis=tuple(axes), keepdims=True)
                exact = np.rint(acc / np.prod([shape[i] for i in axes]) * (np.float64(sx) / sy))
                exact_sum_differs += int(np.count_nonzero(
                    np.clip(exact + zy, o - 128, o + 127) != oracle))
    assert exact_sum_differs > 0
