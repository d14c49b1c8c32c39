"""canonqnn.matmul against onnxruntime QLinearMatMul / QGemm / MatMulInteger (oracle), its
numpy reference and its TVM legalization: all three must be bit-identical.

int8 x int8 and uint8 x uint8 are exact int32 in ORT on every CPU. uint8 x int8 is exact for a
constant B under ``session.x64quantprecision`` (see _ort.U8S8_EXACT); with B a runtime tensor
(attention) ORT's x86 kernel without VNNI saturates int16 pair sums, which
``accumulate="u8s8_pair_sat16"`` reproduces, and its VNNI kernel sums exactly. Live comparisons
use the accumulation of the profile probed on this host; tests/numerics pins both profiles on
any host with outputs recorded on each host class.
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import (
    F32,
    MS,
    U8S8_EXACT,
    SingleOp,
    assert_bit_exact,
    count_ties,
    discriminating_accumulator,
    rand_q,
    requant_int8,
    run_node,
    scalar,
    to_int8,
)
from canonqnn import _tvm, numerics
from canonqnn.frontends.onnx import runtime as onnx_runtime
from canonqnn.ops import matmul
from canonqnn.qparams import QParams


def ort_qlinear_matmul(a, sa, za, b, sb, zb, sy, zy, *, b_is_input=False, config=None):
    consts = dict(sa=scalar(sa, F32), za=scalar(za, a.dtype), sb=np.asarray(sb, F32),
                  zb=np.asarray(zb, b.dtype), sy=scalar(sy, F32), zy=scalar(zy, a.dtype))
    feeds = dict(A=a)
    (feeds if b_is_input else consts)["B"] = b
    return run_node("QLinearMatMul", ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"], feeds,
                    consts, a.dtype, config=config)


def b_qparams(sb, zb) -> QParams:
    sb, zb = np.asarray(sb, F32), np.asarray(zb)
    return QParams.make(sb, zb, axis=1) if sb.ndim else QParams.make(sb, zb)


def canon_matmul(a_shape, b, a_qp, b_qp, out_qp, *, bias=None, alpha=1.0, act=(-128, 127),
                 b_shape=None) -> SingleOp:
    """``b`` a constant array, or None with ``b_shape`` for a graph input ``b``."""
    if b is None:
        return SingleOp(lambda x, y: matmul.matmul(x, y, bias, a_qp, b_qp, out_qp, alpha=alpha,
                                                   act=act), {"a": a_shape, "b": b_shape})
    return SingleOp(lambda x: matmul.matmul(x, _tvm.const(b, "int8"), bias, a_qp, b_qp, out_qp,
                                            alpha=alpha, act=act), {"a": a_shape})


def out_scale_for(sa, sb, k, spread=3.0):
    """An output scale putting random int8 x int8 products mostly inside int8."""
    return F32(sa * float(np.max(sb)) * np.sqrt(k) * 74 * 74 * spread / 110)


@pytest.mark.parametrize("m,k,n", [(5, 19, 7), (1, 33, 6)], ids=["2d", "2d_single_row"])
def test_matmul_2d_random_per_tensor_matches_onnxruntime(m, k, n):
    rng = np.random.default_rng(10 + m)
    b = rand_q(rng, (k, n))
    sa, sb = F32(0.03), F32(0.011)
    sy = out_scale_for(sa, sb, k)
    op = canon_matmul((m, k), b, QParams.make(sa, -7), QParams.make(sb, 0), QParams.make(sy, 4))
    for seed in (1, 2, 3):
        a = rand_q(np.random.default_rng(seed), (m, k))
        oracle = ort_qlinear_matmul(a, sa, -7, b, sb, 0, sy, 4)
        assert np.mean((oracle > -128) & (oracle < 127)) > 0.8
        assert_bit_exact(oracle, *op.both(a=a), f"seed {seed}")


def test_matmul_per_column_weights_with_zero_points_and_ties_match_onnxruntime():
    # Per-column b_scale = powers of two so M[n] in {1/2, 1/4, 1/8, 1/16}; nonzero b_zp[n].
    rng = np.random.default_rng(20)
    m, k, n = 6, 8, 8
    b = rand_q(rng, (k, n), lo=-10, hi=10)
    sb = (2.0 ** -np.array([1, 2, 3, 4, 4, 3, 2, 1])).astype(F32)
    zb = rng.integers(-5, 5, n).astype(np.int8)
    sa, sy = F32(2.0 ** -6), F32(2.0 ** -6)
    op = canon_matmul((m, k), b, QParams.make(sa, 3), b_qparams(sb, zb), QParams.make(sy, -1))
    ties = 0
    for seed in (1, 2):
        a = rand_q(np.random.default_rng(seed), (m, k), lo=-16, hi=16)
        oracle = ort_qlinear_matmul(a, sa, 3, b, sb, zb, sy, -1)
        assert_bit_exact(oracle, *op.both(a=a), f"seed {seed}")
        acc = (a.astype(np.int64) - 3) @ (b.astype(np.int64) - zb)
        ties += count_ties(acc * sb.astype(np.float64))
    assert ties > 10


def test_matmul_saturates_at_int8_bounds_like_onnxruntime():
    rng = np.random.default_rng(30)
    b = rand_q(rng, (16, 5))
    sa, sb = F32(0.05), rng.uniform(0.01, 0.02, 5).astype(F32)
    sy = F32(0.05)
    op = canon_matmul((4, 16), b, QParams.make(sa, 0), b_qparams(sb, 0), QParams.make(sy, 20))
    for seed in (1, 2):
        a = rand_q(np.random.default_rng(seed), (4, 16))
        oracle = ort_qlinear_matmul(a, sa, 0, b, sb, np.zeros(5, np.int8), sy, 20)
        assert (oracle == -128).mean() > 0.1 and (oracle == 127).mean() > 0.1
        assert_bit_exact(oracle, *op.both(a=a), f"seed {seed}")


def test_matmul_batched_3d_with_nonconstant_b_matches_onnxruntime():
    # B is a graph input; per-column parameters (ORT takes them as [batch, 1, N]).
    rng = np.random.default_rng(40)
    bsz, m, k, n = 3, 4, 10, 5
    sb = rng.uniform(0.005, 0.02, n).astype(F32)
    zb = rng.integers(-8, 8, n).astype(np.int8)
    sa = F32(0.02)
    sy = out_scale_for(sa, sb, k)
    op = canon_matmul((bsz, m, k), None, QParams.make(sa, 11), b_qparams(sb, zb),
                      QParams.make(sy, -3), b_shape=(bsz, k, n))
    sb3 = np.broadcast_to(sb, (bsz, 1, n)).copy()
    zb3 = np.broadcast_to(zb, (bsz, 1, n)).copy()
    for seed in (1, 2):
        r = np.random.default_rng(seed)
        a, b = rand_q(r, (bsz, m, k)), rand_q(r, (bsz, k, n))
        oracle = ort_qlinear_matmul(a, sa, 11, b, sb3, zb3, sy, -3, b_is_input=True)
        assert_bit_exact(oracle, *op.both(a=a, b=b), f"seed {seed}")


@pytest.mark.parametrize("a_shape,b_shape", [((2, 1, 3, 9), (4, 9, 6)), ((2, 3, 9), (9, 6)),
                                             ((3, 9), (2, 9, 6))],
                         ids=["4d_by_3d_batch_broadcast", "3d_by_2d", "2d_by_3d"])
def test_matmul_batch_broadcasting_matches_onnxruntime(a_shape, b_shape):
    rng = np.random.default_rng(50 + len(a_shape))
    b = rand_q(rng, b_shape)
    sa, sb = F32(0.02), F32(0.015)
    sy = out_scale_for(sa, sb, 9)
    op = canon_matmul(a_shape, b, QParams.make(sa, 1), QParams.make(sb, -2), QParams.make(sy, 0))
    a = rand_q(np.random.default_rng(1), a_shape)
    oracle = ort_qlinear_matmul(a, sa, 1, b, sb, -2, sy, 0)
    assert_bit_exact(oracle, *op.both(a=a), f"{a_shape} x {b_shape}")


def test_matmul_uint8_activations_int8_weights_match_exact_onnxruntime():
    # Extreme values overflow int16 pair sums; ORT's exact path is the oracle. canonqnn sees
    # the int8 data u - 128 with zero point - 128 (same real values, same exact accumulator).
    rng = np.random.default_rng(60)
    m, k, n = 3, 24, 4
    b = rng.choice(np.array([-128, 127, 120], np.int8), (k, n))
    sb = rng.uniform(0.005, 0.02, n).astype(F32)
    sa, zau, zyu = F32(0.01), 90, 128
    sy = F32(sa * sb.max() * 255 * 128 * k / 400)
    op = canon_matmul((m, k), b, QParams.make(sa, zau - 128), b_qparams(sb, 0),
                      QParams.make(sy, zyu - 128))
    for seed in (1, 2):
        au = np.random.default_rng(seed).choice(np.array([0, 255, 250], np.uint8), (m, k))
        oracle = ort_qlinear_matmul(au, sa, zau, b, sb, np.zeros(n, np.int8), sy, zyu,
                                    config=U8S8_EXACT)
        assert np.mean((oracle > 0) & (oracle < 255)) > 0.5
        assert_bit_exact(to_int8(oracle), *op.both(a=to_int8(au)), f"seed {seed}")


def test_matmul_bias_alpha_and_clamp_match_qgemm():
    # ONNX Gemm/QGemm: M[n] = f32(f32(f32(alpha * sa) * sb[n]) / sy), int32 bias C[n].
    rng = np.random.default_rng(70)
    m, k, n = 5, 12, 6
    b = rand_q(rng, (k, n))
    bias = rng.integers(-20000, 20000, n).astype(np.int32)
    sb = rng.uniform(0.005, 0.02, n).astype(F32)
    zb = rng.integers(-3, 3, n).astype(np.int8)
    sa, alpha = F32(0.037), 0.3
    sy = out_scale_for(sa * alpha, sb, k)
    act = (-30, 40)
    op = canon_matmul((m, k), b, QParams.make(sa, -5), b_qparams(sb, zb), QParams.make(sy, 7),
                      bias=bias, alpha=alpha, act=act)
    for seed in (1, 2, 3):
        a = rand_q(np.random.default_rng(seed), (m, k))
        consts = dict(sa=scalar(sa, F32), za=scalar(-5, np.int8), B=b, sb=sb, zb=zb, C=bias,
                      sy=scalar(sy, F32), zy=scalar(7, np.int8))
        oracle = run_node("QGemm", ["A", "sa", "za", "B", "sb", "zb", "C", "sy", "zy"],
                          dict(A=a), consts, np.int8, domain=MS, alpha=alpha)
        clipped = np.clip(oracle, *act).astype(np.int8)
        assert (clipped == act[0]).any() and (clipped == act[1]).any()
        assert_bit_exact(clipped, *op.both(a=a), f"seed {seed}")


def test_matmul_int32_output_matches_matmulinteger_plus_bias():
    rng = np.random.default_rng(80)
    b = rand_q(rng, (2, 7, 5))
    bias = rng.integers(-1000, 1000, 5).astype(np.int32)
    op = canon_matmul((2, 3, 7), None, QParams.make(1.0, 4), QParams.make(1.0, -6),
                      QParams.make(1.0, 0, dtype="int32"), bias=bias, b_shape=(2, 7, 5))
    a = rand_q(np.random.default_rng(1), (2, 3, 7))
    oracle = run_node("MatMulInteger", ["A", "B", "za", "zb"], dict(A=a, B=b),
                      dict(za=scalar(4, np.int8), zb=scalar(-6, np.int8)), np.int32)
    assert_bit_exact(oracle + bias, *op.both(a=a, b=b))


def test_matmul_multiplier_order_with_alpha_matches_qgemm_at_rounding_boundaries():
    # ORT QGemm: M[n] = f32(f32(f32(alpha * sa) * sb[n]) / sy). The bias puts row 0 of each
    # column on an accumulator where other evaluation orders of M round differently.
    rng = np.random.default_rng(90)
    m, k, n = 3, 8, 32
    b = rand_q(rng, (k, n))
    a = rand_q(rng, (m, k))
    sb = rng.uniform(0.005, 0.02, n).astype(F32)
    sa, alpha, za, zy = F32(0.037), F32(0.3), -5, 3
    sy = out_scale_for(sa * alpha, sb, k)
    mult = ((F32(alpha * sa) * sb).astype(F32) / sy).astype(F32)
    alternatives = [((F32(sa) * sb).astype(F32) * alpha / sy).astype(F32),   # (sa*sb)*alpha
                    (np.float64(alpha) * np.float64(sa) * sb.astype(np.float64)
                     / np.float64(sy)).astype(F32)]                          # float64, one rounding
    dot = (a.astype(np.int64) - za) @ b.astype(np.int64)
    bias = rng.integers(-2000, 2000, n).astype(np.int64)
    for j in range(n):  # columns alternate which other order they catch
        for alt in (alternatives[j % 2], alternatives[1 - j % 2]):
            target = discriminating_accumulator(mult[j], [alt[j]], zy)
            if target is not None:
                bias[j] = target - dot[0, j]
                break
    bias = bias.astype(np.int32)
    op = canon_matmul((m, k), b, QParams.make(sa, za), b_qparams(sb, np.zeros(n, np.int8)),
                      QParams.make(sy, zy), bias=bias, alpha=float(alpha))
    consts = dict(sa=scalar(sa, F32), za=scalar(za, np.int8), B=b, sb=sb,
                  zb=np.zeros(n, np.int8), C=bias, sy=scalar(sy, F32), zy=scalar(zy, np.int8))
    oracle = run_node("QGemm", ["A", "sa", "za", "B", "sb", "zb", "C", "sy", "zy"], dict(A=a),
                      consts, np.int8, domain=MS, alpha=float(alpha))
    assert_bit_exact(oracle, *op.both(a=a))
    acc = dot + bias
    for alt in alternatives:  # each other order would have failed on some element
        assert np.count_nonzero(requant_int8(acc, alt, zy) != oracle) >= 2


# ---------------------------------------------------------------- two runtime operands
def runtime_matmul(a_shape, b_shape, a_qp, b_qp, out_qp, accumulate="exact") -> SingleOp:
    return SingleOp(lambda x, y: matmul.matmul(x, y, None, a_qp, b_qp, out_qp,
                                               accumulate=accumulate),
                    {"a": a_shape, "b": b_shape})


def exact_accumulator(a, za, b, zb):
    return np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 5, 16), (2, 3, 16, 5)),
                                             ((2, 1, 4, 9), (3, 9, 6))],
                         ids=["attention_4d", "batch_broadcast"])
def test_matmul_two_runtime_int8_operands_match_qlinearmatmul(a_shape, b_shape):
    sa, sb = F32(0.021), F32(0.017)
    sy = out_scale_for(sa, sb, a_shape[-1])
    op = runtime_matmul(a_shape, b_shape, QParams.make(sa, -9), QParams.make(sb, 4),
                        QParams.make(sy, 2))
    for seed in (1, 2):
        r = np.random.default_rng(seed)
        a, b = rand_q(r, a_shape), rand_q(r, b_shape)
        oracle = ort_qlinear_matmul(a, sa, -9, b, sb, 4, sy, 2, b_is_input=True)
        assert_bit_exact(oracle, *op.both(a=a, b=b), f"seed {seed}")


def test_matmul_uint8_by_runtime_uint8_is_exact_like_onnxruntime():
    a_shape, b_shape = (2, 4, 7, 33), (2, 4, 33, 7)
    sa, sb = F32(0.02), F32(0.03)
    sy = F32(sa * sb * 255 * 255 * 33 / 200)
    op = runtime_matmul(a_shape, b_shape, QParams.make(sa, 90 - 128), QParams.make(sb, 0),
                        QParams.make(sy, 0))
    r = np.random.default_rng(3)
    au = r.choice(np.array([0, 255, 250], np.uint8), a_shape)
    bu = r.choice(np.array([0, 255, 5], np.uint8), b_shape)
    oracle = ort_qlinear_matmul(au, sa, 90, bu, sb, np.uint8(128), sy, 128, b_is_input=True,
                                config=U8S8_EXACT)
    assert np.mean((oracle > 0) & (oracle < 255)) > 0.5
    assert_bit_exact(to_int8(oracle), *op.both(a=to_int8(au), b=to_int8(bu)))


U8S8_SHAPES = [((2, 3, 5, 17), (2, 3, 17, 6)), ((1, 33), (33, 4)), ((2, 1, 4, 16), (3, 16, 5)),
               ((3, 4, 1), (3, 1, 6))]


def host_u8s8_accumulation() -> str:
    """How this host's onnxruntime sums uint8 x runtime int8 products (probed)."""
    return onnx_runtime.profile().u8s8_runtime_b


def assert_accumulation_is_the_hosts(oracle, exact, k: int = 2):
    """The exact sum differs from ORT's exactly when this host's ORT saturates pair sums."""
    differ = int(np.count_nonzero(exact != oracle))
    if host_u8s8_accumulation() == numerics.PAIR_SAT16:
        assert differ > 0 or k < 2  # the exact sum would have failed here
    else:
        assert differ == 0


@pytest.mark.parametrize("a_shape,b_shape", U8S8_SHAPES,
                         ids=["4d_odd_k", "gemv", "batch_broadcast", "k1"])
def test_matmul_uint8_by_runtime_int8_accumulates_like_this_hosts_onnxruntime(a_shape, b_shape):
    # session.x64quantprecision cannot convert a runtime B, so ORT without VNNI keeps the
    # vpmaddubsw kernel: raw uint8 x int8 products summed in K pairs saturated to int16, zero
    # points after. With VNNI the sum is exact.
    k = a_shape[-1]
    sa, za, sb, zb = F32(0.02), 77, F32(0.03), -5
    sy = F32(sa * sb * np.sqrt(k) * 120 * 70 / 60)
    op = runtime_matmul(a_shape, b_shape, QParams.make(sa, za - 128), QParams.make(sb, zb),
                        QParams.make(sy, 0), accumulate=host_u8s8_accumulation())
    oracles, exacts = [], []
    for seed in (1, 2, 3):
        r = np.random.default_rng(seed)
        if seed == 3:  # extreme values: every pair sum leaves int16
            au = r.choice(np.array([0, 255, 250], np.uint8), a_shape)
            b = r.choice(np.array([-128, 127, 120], np.int8), b_shape)
        else:
            au, b = rand_q(r, a_shape, np.uint8), rand_q(r, b_shape)
        oracle = ort_qlinear_matmul(au, sa, za, b, sb, zb, sy, 128, b_is_input=True,
                                    config=U8S8_EXACT)
        assert_bit_exact(to_int8(oracle), *op.both(a=to_int8(au), b=b), f"seed {seed}")
        oracles.append(to_int8(oracle))
        exacts.append(requant_int8(exact_accumulator(au, za, b, zb), (sa * sb) / sy, 0))
    assert_accumulation_is_the_hosts(np.concatenate([o.ravel() for o in oracles]),
                                     np.concatenate([e.ravel() for e in exacts]), k)


def test_matmulinteger_uint8_by_runtime_int8_accumulates_like_this_hosts_onnxruntime():
    r = np.random.default_rng(4)
    au = r.choice(np.array([0, 255, 250], np.uint8), (2, 5, 20))
    b = r.choice(np.array([-128, 127, 120], np.int8), (2, 20, 6))
    op = runtime_matmul(au.shape, b.shape, QParams.make(1.0, 7 - 128), QParams.make(1.0, -3),
                        QParams.make(1.0, 0, dtype="int32"), accumulate=host_u8s8_accumulation())
    oracle = run_node("MatMulInteger", ["A", "B", "za", "zb"], dict(A=au, B=b),
                      dict(za=scalar(7, np.uint8), zb=scalar(-3, np.int8)), np.int32,
                      config=U8S8_EXACT)
    assert_accumulation_is_the_hosts(oracle, exact_accumulator(au, 7, b, -3))
    assert_bit_exact(oracle, *op.both(a=to_int8(au), b=b))


def test_matmul_pair_saturation_equals_exact_sum_when_no_pair_leaves_int16():
    # Weights within [-64, 64] never overflow a pair (2 * 255 * 64 < 2^15): both modes agree.
    r = np.random.default_rng(5)
    a, b = rand_q(r, (3, 4, 31)), rand_q(r, (3, 31, 5), lo=-64, hi=64)
    attrs = dict(a_scale=0.01, a_zp=-20, alpha=1.0, out_scale=0.5, out_zp=3, act_min=-128,
                 act_max=127, rounding="rne_f32", out_dtype="int32")
    args = (a, b, np.zeros(5, np.int32), F32(1), np.int8(9))
    np.testing.assert_array_equal(matmul.reference(*args, **attrs, accumulate="exact"),
                                  matmul.reference(*args, **attrs, accumulate="u8s8_pair_sat16"))


def test_opset21_qlinearmatmul_with_constant_int8_b_accumulates_like_a_runtime_b():
    # onnxruntime's uint8 weight conversion (x64quantprecision) matches QLinearMatMul only in
    # its opset-10 version, so an opset-21 node with a constant B keeps the kernel of a runtime
    # B: saturating without VNNI. canonqnn cannot tell the opset from the fake-quant form and
    # stays exact (docs/spec.md); on a VNNI host both opsets are exact.
    r = np.random.default_rng(6)
    b = r.choice(np.array([-128, 127, 120], np.int8), (24, 5))
    au = r.choice(np.array([0, 255, 250], np.uint8), (4, 24))
    sa, sb = F32(0.02), F32(0.03)
    sy = F32(sa * sb * 255 * 128 * 24 / 300)
    consts = dict(sa=scalar(sa, F32), za=scalar(100, np.uint8), B=b, sb=scalar(sb, F32),
                  zb=scalar(0, np.int8), sy=scalar(sy, F32), zy=scalar(128, np.uint8))
    names = ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"]
    at13, at21 = (to_int8(run_node("QLinearMatMul", names, dict(A=au), consts, np.uint8,
                                   opset=opset, config=U8S8_EXACT)) for opset in (13, 21))
    op = canon_matmul((4, 24), b, QParams.make(sa, -28), QParams.make(sb, 0), QParams.make(sy, 0))
    assert_bit_exact(at13, *op.both(a=to_int8(au)), "opset 13")
    like_runtime_b = runtime_matmul((4, 24), (24, 5), QParams.make(sa, -28), QParams.make(sb, 0),
                                    QParams.make(sy, 0), accumulate=host_u8s8_accumulation())
    assert_bit_exact(at21, *like_runtime_b.both(a=to_int8(au), b=b), "opset 21")
    assert_accumulation_is_the_hosts(at21, at13)
