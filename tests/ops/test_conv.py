"""canonqnn.conv2d against onnxruntime QLinearConv / ConvInteger (oracle), its numpy reference
and its TVM legalization: all three must be bit-identical.

int8 activations x int8 weights is exact int32 on this CPU; uint8 activations x int8 weights
are run with ``session.x64quantprecision=1`` so that ORT's AVX2 kernel does not saturate int16
pair sums (NOTES.md section 7).
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import (
    F32,
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
from canonqnn import _tvm
from canonqnn.ops import conv
from canonqnn.qparams import QParams


def ort_qlinear_conv(x, sx, zx, w, sw, zw, sy, zy, bias, *, strides, pads, dilations, group,
                     config=None):
    consts = dict(sx=scalar(sx, F32), zx=scalar(zx, x.dtype), W=w, sw=np.asarray(sw, F32),
                  zw=np.asarray(zw, w.dtype), sy=scalar(sy, F32), zy=scalar(zy, x.dtype),
                  B=np.asarray(bias, np.int32))
    return run_node("QLinearConv", ["X", "sx", "zx", "W", "sw", "zw", "sy", "zy", "B"],
                    dict(X=x), consts, x.dtype, strides=list(strides), pads=list(pads),
                    dilations=list(dilations), group=group, config=config)


def canon_conv(x_shape, w, bias, x_qp, w_qp, out_qp, *, strides, pads, dilations, group,
               act=(-128, 127)) -> SingleOp:
    return SingleOp(lambda x: conv.conv2d(
        x, _tvm.const(w, "int8"), bias, x_qp, w_qp, out_qp, strides=strides, padding=pads,
        dilation=dilations, groups=group, act=act), {"x": x_shape})


def w_qparams(sw, zw) -> QParams:
    sw, zw = np.asarray(sw, F32), np.asarray(zw)
    return QParams.make(sw, zw, axis=0) if sw.ndim else QParams.make(sw, zw)


def check_int8(rng_seeds, x_shape, w, bias, sx, zx, sw, zw, sy, zy, *, data=None,
               act=(-128, 127), **geometry):
    """Build once, then compare ORT / reference / TVM on one input per seed."""
    op = canon_conv(x_shape, w, bias, QParams.make(sx, zx), w_qparams(sw, zw),
                    QParams.make(sy, zy), act=act, **geometry)
    outputs = []
    for seed in rng_seeds:
        rng = np.random.default_rng(seed)
        x = rand_q(rng, x_shape) if data is None else data(rng)
        oracle = ort_qlinear_conv(x, sx, zx, w, sw, zw, sy, zy, bias, **geometry)
        oracle = np.clip(oracle, *act).astype(np.int8)
        assert_bit_exact(oracle, *op.both(x=x), f"seed {seed}")
        outputs.append(oracle)
    return op, outputs


def accumulator(x, w, bias, zx, zw, *, strides, pads, dilations, group):
    """The exact int32 accumulator (the reference with out_dtype int32)."""
    return conv.reference(x, w, np.asarray(bias, np.int32), np.float32(1), np.asarray(zw, np.int8),
                          x_zp=zx, out_scale=1.0, out_zp=0, strides=strides, padding=pads,
                          dilation=dilations, groups=group, act_min=-128, act_max=127,
                          rounding="rne_f32", out_dtype="int32")


PLAIN = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)


def test_conv2d_random_per_tensor_matches_onnxruntime():
    rng = np.random.default_rng(100)
    w = rand_q(rng, (6, 5, 3, 3))
    bias = rng.integers(-5000, 5000, 6).astype(np.int32)
    sx, sw = F32(0.02), F32(0.013)
    sy = F32(sx * sw * np.sqrt(45) * 74 * 74 * 3 / 110)
    _, outs = check_int8([1, 2, 3], (2, 5, 7, 7), w, bias, sx, 7, sw, 0, sy, -9, **PLAIN)
    # random data must exercise the non-saturated range
    assert all(np.mean((o > -128) & (o < 127)) > 0.8 for o in outs)


def test_conv2d_per_channel_ties_match_onnxruntime():
    # M[o] = sx * sw[o] / sy is an exact power of two (1/2 ... 1/16): ties at every
    # accumulator that is an odd multiple of 1/(2M).
    rng = np.random.default_rng(200)
    o = 8
    w = rand_q(rng, (o, 4, 3, 3), lo=-6, hi=6)
    bias = rng.integers(-20, 20, o).astype(np.int32)
    sw = (2.0 ** -np.array([1, 2, 3, 4, 1, 2, 3, 4])).astype(F32)
    sx, sy = F32(2.0 ** -5), F32(2.0 ** -5)
    geometry = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)
    data = lambda r: rand_q(r, (1, 4, 6, 6), lo=-20, hi=20)  # noqa: E731
    check_int8([5, 6], (1, 4, 6, 6), w, bias, sx, 3, sw, np.zeros(o, np.int8), sy, 2,
               data=data, **geometry)
    acc = accumulator(data(np.random.default_rng(5)), w, bias, 3, np.zeros(o), **geometry)
    scaled = acc.astype(np.float64) * sw.astype(np.float64)[None, :, None, None]
    assert count_ties(scaled) > 50  # the data really contains round-half cases


def test_conv2d_per_tensor_half_multiplier_ties_both_signs():
    # M = 0.5 exactly: every odd accumulator is a tie, positive and negative.
    rng = np.random.default_rng(201)
    w = rand_q(rng, (3, 2, 2, 2), lo=-3, hi=3)
    bias = np.array([0, 1, -1], np.int32)
    sx, sw, sy = F32(0.25), F32(0.5), F32(0.25)
    geometry = dict(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1)
    data = lambda r: rand_q(r, (1, 2, 5, 5), lo=-10, hi=10)  # noqa: E731
    check_int8([7, 8], (1, 2, 5, 5), w, bias, sx, -1, sw, 0, sy, 0, data=data, **geometry)
    acc = accumulator(data(np.random.default_rng(7)), w, bias, -1, 0, **geometry)
    assert np.count_nonzero(acc % 2 == 1) > 10 and acc.min() < 0 < acc.max()


def test_conv2d_saturates_at_int8_bounds_like_onnxruntime():
    rng = np.random.default_rng(300)
    w = rand_q(rng, (4, 3, 3, 3))
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    sx, sw, sy = F32(0.05), F32(0.02), F32(0.1)
    _, outs = check_int8([11, 12], (1, 3, 6, 6), w, bias, sx, 0, sw, 0, sy, 10, **PLAIN)
    assert all((o == -128).mean() > 0.1 and (o == 127).mean() > 0.1 for o in outs)


@pytest.mark.parametrize("c,o,group", [(6, 4, 2), (4, 4, 4), (3, 6, 3)],
                         ids=["groups2", "depthwise", "depthwise_multiplier2"])
def test_conv2d_grouped_and_depthwise_match_onnxruntime(c, o, group):
    rng = np.random.default_rng(400 + c * 10 + o)
    w = rand_q(rng, (o, c // group, 3, 3))
    bias = rng.integers(-3000, 3000, o).astype(np.int32)
    sw = rng.uniform(0.005, 0.03, o).astype(F32)
    sx = F32(0.03)
    sy = F32(sx * sw.max() * np.sqrt(9 * c // group) * 74 * 74 * 3 / 110)
    geometry = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=group)
    check_int8([1, 2], (1, c, 5, 5), w, bias, sx, -4, sw, np.zeros(o, np.int8), sy, 5, **geometry)


@pytest.mark.parametrize("kernel,geometry", [
    ((3, 2), dict(strides=(2, 1), pads=(0, 1, 2, 0), dilations=(2, 1), group=1)),
    ((2, 3), dict(strides=(1, 3), pads=(2, 0, 1, 3), dilations=(1, 2), group=2)),
], ids=["dilation_h_asym_pads_stride_h", "dilation_w_asym_pads_stride_w_groups"])
def test_conv2d_dilation_asymmetric_pads_strides_match_onnxruntime(kernel, geometry):
    rng = np.random.default_rng(500 + kernel[0])
    c, o = 4, 4
    w = rand_q(rng, (o, c // geometry["group"], *kernel))
    bias = rng.integers(-3000, 3000, o).astype(np.int32)
    sx, sw = F32(0.04), F32(0.01)
    sy = F32(sx * sw * np.sqrt(w[0].size) * 74 * 74 * 3 / 110)
    check_int8([1, 2], (2, c, 7, 8), w, bias, sx, 12, sw, 0, sy, -3, **geometry)


def test_conv2d_nonzero_weight_zero_points_match_onnxruntime():
    # Per-tensor and per-channel nonzero weight zero points (exact s8s8 in ORT).
    rng = np.random.default_rng(600)
    w = rand_q(rng, (5, 3, 3, 3))
    bias = rng.integers(-3000, 3000, 5).astype(np.int32)
    sw = rng.uniform(0.005, 0.03, 5).astype(F32)
    zw = rng.integers(-20, 20, 5).astype(np.int8)
    sx = F32(0.02)
    sy = F32(sx * sw.max() * np.sqrt(27) * 74 * 90 * 3 / 110)
    check_int8([1, 2], (1, 3, 6, 6), w, bias, sx, 5, sw, zw, sy, 0, **PLAIN)
    check_int8([3], (1, 3, 6, 6), w, bias, sx, 5, sw[0], zw[0], sy, 0, **PLAIN)


def test_conv2d_uint8_weights_with_channel_zero_points_match_onnxruntime_u8u8():
    # ORT u8 x u8 (exact); canonqnn sees int8 data u - 128 and zero points - 128.
    rng = np.random.default_rng(650)
    wu = rand_q(rng, (4, 3, 3, 3), np.uint8)
    zwu = rng.integers(100, 160, 4).astype(np.uint8)
    sw = rng.uniform(0.005, 0.03, 4).astype(F32)
    bias = rng.integers(-3000, 3000, 4).astype(np.int32)
    sx, zxu, zyu = F32(0.02), 131, 120
    sy = F32(sx * sw.max() * np.sqrt(27) * 74 * 74 * 3 / 110)
    w_qp = QParams.make(sw, zwu.astype(np.int32) - 128, axis=0)
    op = canon_conv((1, 3, 6, 6), to_int8(wu), bias, QParams.make(sx, zxu - 128), w_qp,
                    QParams.make(sy, zyu - 128), **PLAIN)
    for seed in (1, 2):
        xu = rand_q(np.random.default_rng(seed), (1, 3, 6, 6), np.uint8)
        oracle = ort_qlinear_conv(xu, sx, zxu, wu, sw, zwu, sy, zyu, bias, **PLAIN)
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(xu)), f"seed {seed}")


def test_conv2d_uint8_activations_int8_weights_match_exact_onnxruntime():
    # Extreme values: raw u8*s8 pair sums (up to 2*255*128) exceed int16, which ORT's default
    # AVX2 kernel saturates; the oracle runs ORT's exact (x64quantprecision) path.
    rng = np.random.default_rng(700)
    w = rng.choice(np.array([-128, 127, -100, 90], np.int8), (4, 4, 3, 3))
    sw = rng.uniform(0.005, 0.03, 4).astype(F32)
    bias = rng.integers(-3000, 3000, 4).astype(np.int32)
    sx, zxu, zyu = F32(0.02), 100, 128
    sy = F32(sx * sw.max() * 255 * 128 * 36 / 300)
    op = canon_conv((1, 4, 5, 5), w, bias, QParams.make(sx, zxu - 128),
                    QParams.make(sw, 0, axis=0), QParams.make(sy, zyu - 128), **PLAIN)
    for seed in (1, 2):
        xu = np.random.default_rng(seed).choice(np.array([0, 255, 250], np.uint8), (1, 4, 5, 5))
        oracle = ort_qlinear_conv(xu, sx, zxu, w, sw, np.zeros(4, np.int8), sy, zyu, bias,
                                  config=U8S8_EXACT, **PLAIN)
        assert np.mean((oracle > 0) & (oracle < 255)) > 0.2
        assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(xu)), f"seed {seed}")


def test_conv2d_activation_clamp_equals_clipping_onnxruntime_output():
    rng = np.random.default_rng(800)
    w = rand_q(rng, (4, 3, 3, 3))
    bias = rng.integers(-3000, 3000, 4).astype(np.int32)
    sx, sw = F32(0.02), F32(0.01)
    sy = F32(sx * sw * np.sqrt(27) * 74 * 74 * 3 / 110)
    # A ReLU-with-cap window [zp, zp + 50] expressed as an integer clamp
    _, outs = check_int8([1, 2], (1, 3, 6, 6), w, bias, sx, 0, sw, 0, sy, -20, act=(-20, 30),
                         **PLAIN)
    assert all((o == -20).sum() > 5 and (o == 30).sum() > 5 for o in outs)


def test_conv2d_int32_output_matches_convinteger_plus_bias():
    rng = np.random.default_rng(900)
    w = rand_q(rng, (4, 2, 3, 2))
    bias = rng.integers(-3000, 3000, 4).astype(np.int32)
    geometry = dict(strides=(2, 1), pads=(1, 0, 1, 1), dilations=(1, 2), group=1)
    op = canon_conv((1, 2, 7, 7), w, bias, QParams.make(1.0, 9), QParams.make(1.0, -3),
                    QParams.make(1.0, 0, dtype="int32"), **geometry)
    for seed in (1, 2):
        x = rand_q(np.random.default_rng(seed), (1, 2, 7, 7))
        oracle = run_node("ConvInteger", ["X", "W", "zx", "zw"], dict(X=x),
                          dict(W=w, zx=scalar(9, np.int8), zw=scalar(-3, np.int8)), np.int32,
                          strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2], group=1)
        oracle = oracle + bias[None, :, None, None]
        assert_bit_exact(oracle, *op.both(x=x), f"seed {seed}")


def test_conv2d_multiplier_order_matches_onnxruntime_at_rounding_boundaries():
    # ORT: M[o] = f32(f32(sx * sw[o]) / sy). The bias puts output (0, o, 2, 2) of each channel on
    # an accumulator where other evaluation orders of M round differently.
    rng = np.random.default_rng(950)
    o = 32
    w = rand_q(rng, (o, 3, 3, 3))
    x = rand_q(rng, (1, 3, 5, 5))
    sw = rng.uniform(0.005, 0.02, o).astype(F32)
    sx, zx, zy = F32(0.021), 4, -6
    sy = F32(sx * sw.max() * np.sqrt(27) * 74 * 74 * 3 / 110)
    mult = ((sx * sw).astype(F32) / sy).astype(F32)
    alternatives = [(sx * (sw / sy).astype(F32)).astype(F32),                 # sx * (sw / sy)
                    (np.float64(sx) * sw.astype(np.float64) / np.float64(sy)).astype(F32)]
    dot = accumulator(x, w, np.zeros(o, np.int32), zx, 0, **PLAIN).astype(np.int64)
    bias = rng.integers(-2000, 2000, o).astype(np.int64)
    for c in range(o):  # channels alternate which other order they catch
        for alt in (alternatives[c % 2], alternatives[1 - c % 2]):
            target = discriminating_accumulator(mult[c], [alt[c]], zy)
            if target is not None:
                bias[c] = target - dot[0, c, 2, 2]
                break
    bias = bias.astype(np.int32)
    op = canon_conv(x.shape, w, bias, QParams.make(sx, zx), QParams.make(sw, 0, axis=0),
                    QParams.make(sy, zy), **PLAIN)
    oracle = ort_qlinear_conv(x, sx, zx, w, sw, np.zeros(o, np.int8), sy, zy, bias, **PLAIN)
    assert_bit_exact(oracle, *op.both(x=x))
    acc = dot + bias[None, :, None, None]
    for alt in alternatives:  # each other order would have failed on some element
        assert np.count_nonzero(requant_int8(acc, alt[None, :, None, None], zy) != oracle) >= 2
