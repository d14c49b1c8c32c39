"""canonqnn.reshape / transpose / max_pool2d / requantize / concat against onnxruntime
(Reshape, Transpose, MaxPool, DequantizeLinear->QuantizeLinear, QLinearConcat), their numpy
references and their TVM legalizations: all three must be bit-identical.
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
from canonqnn.ops import movement
from canonqnn.qparams import QParams

QP = QParams.make(0.05, 3)


def all_codes(dtype, shape=(256,)):
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype).reshape(shape)


# ---------------------------------------------------------------- reshape / transpose
@pytest.mark.parametrize("shape,newshape", [((2, 3, 4, 5), (6, 20)), ((1, 12, 1, 1), (1, 12)),
                                            ((6, 20), (2, 1, 60))],
                         ids=["merge", "flatten_squeeze", "unsqueeze"])
def test_reshape_matches_onnxruntime(shape, newshape):
    op = SingleOp(lambda x: movement.reshape(x, newshape, QP), {"x": shape})
    x = rand_q(np.random.default_rng(1), shape)
    oracle = run_node("Reshape", ["X", "shape"], dict(X=x),
                      dict(shape=np.array(newshape, np.int64)), np.int8)
    assert_bit_exact(oracle, *op.both(x=x))


@pytest.mark.parametrize("axes", [(0, 2, 3, 1), (3, 1, 0, 2)], ids=["nchw_to_nhwc", "shuffle"])
def test_transpose_matches_onnxruntime(axes):
    shape = (2, 3, 4, 5)
    op = SingleOp(lambda x: movement.transpose(x, axes, QP), {"x": shape})
    x = rand_q(np.random.default_rng(2), shape)
    oracle = run_node("Transpose", ["X"], dict(X=x), {}, np.int8, perm=list(axes))
    assert_bit_exact(oracle, *op.both(x=x))


# ---------------------------------------------------------------- max_pool2d
def maxpool_geometry(kernel, strides, pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=False):
    return dict(kernel=kernel, strides=strides, pads=pads, dilations=dilations,
                ceil_mode=ceil_mode)


MAXPOOL_CONFIGS = {
    "k3_s2_pad1": maxpool_geometry((3, 3), (2, 2), (1, 1, 1, 1)),
    "k2_s2": maxpool_geometry((2, 2), (2, 2)),
    "k3_s2_ceil_mode": maxpool_geometry((3, 3), (2, 2), ceil_mode=True),
    "k2_dilation2_pad1": maxpool_geometry((2, 2), (1, 1), (1, 1, 1, 1), (2, 2)),
    "k3x2_asym_pads_dilation_ceil": maxpool_geometry((3, 2), (2, 3), (0, 1, 2, 0), (2, 1), True),
}


@pytest.mark.parametrize("name", list(MAXPOOL_CONFIGS))
def test_max_pool2d_matches_onnxruntime(name):
    g = MAXPOOL_CONFIGS[name]
    shape = (2, 3, 9, 8)
    op = SingleOp(lambda x: movement.max_pool2d(
        x, QP, pool_size=g["kernel"], strides=g["strides"], padding=g["pads"],
        dilation=g["dilations"], ceil_mode=g["ceil_mode"]), {"x": shape})
    for seed, (lo, hi) in ((1, (-128, 127)), (2, (-128, -120))):  # seed 2: mostly -128 values
        x = rand_q(np.random.default_rng(seed), shape, lo=lo, hi=hi)
        oracle = run_node("MaxPool", ["X"], dict(X=x), {}, np.int8, kernel_shape=list(g["kernel"]),
                          strides=list(g["strides"]), pads=list(g["pads"]),
                          dilations=list(g["dilations"]), ceil_mode=int(g["ceil_mode"]))
        assert_bit_exact(oracle, *op.both(x=x), f"{name} seed {seed}")


def test_max_pool2d_on_uint8_data_shifted_to_int8_matches_onnxruntime():
    g = MAXPOOL_CONFIGS["k3_s2_pad1"]
    shape = (1, 4, 7, 7)
    op = SingleOp(lambda x: movement.max_pool2d(
        x, QParams.make(0.05, 0), pool_size=g["kernel"], strides=g["strides"], padding=g["pads"],
        dilation=g["dilations"], ceil_mode=False), {"x": shape})
    xu = rand_q(np.random.default_rng(3), shape, np.uint8)
    oracle = run_node("MaxPool", ["X"], dict(X=xu), {}, np.uint8, kernel_shape=[3, 3],
                      strides=[2, 2], pads=[1, 1, 1, 1])
    assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(xu)))


# ---------------------------------------------------------------- requantize
def ort_dq_q(q, si, zi, so, zo):
    dt = q.dtype
    nodes = [helper.make_node("DequantizeLinear", ["X", "si", "zi"], ["D"]),
             helper.make_node("QuantizeLinear", ["D", "so", "zo"], ["Y"])]
    consts = dict(si=scalar(si, F32), zi=scalar(zi, dt), so=scalar(so, F32), zo=scalar(zo, dt))
    return run_graph(nodes, dict(X=q), consts, dt)


REQUANT_SETS = {
    # (in_scale, in_zp, out_scale, out_zp)
    "random": (0.0371, -17, 0.0213, 9),
    "ties": (3 * 2.0 ** -5, 4, 2.0 ** -4, -3),  # real / out_scale = 1.5 * (q - 4): .5 ties
    "saturating": (0.1, 0, 0.013, 20),
    "shrinking": (0.01, 100, 0.09, -100),
    # sets where multiplying by f32(1 / out_scale) instead of dividing changes a code
    "division_a": (0.041813600808382034, -89, 0.07620466500520706, -22),
    "division_b": (0.014701876789331436, -13, 0.006376717239618301, 16),
}


def reciprocal_requant(q, si, zi, so, zo):
    """The tempting alternative: real * f32(1 / so) instead of real / so."""
    real = ((q.astype(np.int32) - zi).astype(F32) * F32(si)).astype(F32)
    return np.clip(np.rint((real * F32(F32(1) / F32(so))).astype(F32)) + zo, -128, 127)


@pytest.mark.parametrize("key", list(REQUANT_SETS))
def test_requantize_all_codes_match_dequantize_quantize(key):
    si, zi, so, zo = REQUANT_SETS[key]
    si, so = F32(si), F32(so)
    op = SingleOp(lambda x: movement.requantize(x, QParams.make(si, zi), QParams.make(so, zo)),
                  {"x": (256,)})
    q = all_codes(np.int8)
    oracle = ort_dq_q(q, si, zi, so, zo)
    assert_bit_exact(oracle, *op.both(x=q), key)
    if key == "ties":
        assert count_ties((q.astype(np.float64) - zi) * 1.5) == 128
    if key == "saturating":
        assert (oracle == -128).sum() > 50 and (oracle == 127).sum() > 50
    if key.startswith("division"):
        assert np.any(reciprocal_requant(q, si, zi, so, zo) != oracle)


def test_requantize_uint8_codes_with_shifted_zero_points_and_clamp():
    si, zi, so, zo = F32(3 * 2.0 ** -6), 140, F32(2.0 ** -5), 120
    q = all_codes(np.uint8)
    oracle = ort_dq_q(q, si, zi, so, zo)
    op = SingleOp(lambda x: movement.requantize(x, QParams.make(si, zi - 128),
                                                QParams.make(so, zo - 128)), {"x": (256,)})
    assert_bit_exact(to_int8(oracle), *op.both(x=to_int8(q)), "uint8")
    # activation clamp [zo, 200] in stored values == clipping ORT's output
    act = (zo - 128, 200 - 128)
    clamped = SingleOp(lambda x: movement.requantize(x, QParams.make(si, zi - 128),
                                                     QParams.make(so, zo - 128), act=act),
                       {"x": (256,)})
    expected = to_int8(np.clip(oracle, zo, 200).astype(np.uint8))
    assert (expected == act[0]).sum() > 10 and (expected == act[1]).sum() > 10
    assert_bit_exact(expected, *clamped.both(x=to_int8(q)), "uint8 clamped")


# ---------------------------------------------------------------- concat
def ort_concat(inputs, sy, zy, axis):
    """inputs: [(x, sx, zx), ...] in one stored dtype."""
    dt = inputs[0][0].dtype
    names, feeds = ["sy", "zy"], {}
    consts = dict(sy=scalar(sy, F32), zy=scalar(zy, dt))
    for i, (x, sx, zx) in enumerate(inputs):
        names += [f"x{i}", f"s{i}", f"z{i}"]
        feeds[f"x{i}"] = x
        consts[f"s{i}"], consts[f"z{i}"] = scalar(sx, F32), scalar(zx, dt)
    return run_node("QLinearConcat", names, feeds, consts, dt, domain=MS, axis=axis)


def canon_concat(shapes, params, sy, zy, axis, shift=0) -> SingleOp:
    qps = [QParams.make(s, z - shift) for s, z in params]
    names = {f"x{i}": shape for i, shape in enumerate(shapes)}
    return SingleOp(lambda *xs: movement.concat(list(xs), qps, QParams.make(sy, zy - shift), axis),
                    names)


def codes_along(rng, shape, axis, dtype=np.int8):
    """Data of ``shape`` whose every line along ``axis`` (of length 256) is a permutation of
    all codes."""
    other = tuple(d for i, d in enumerate(shape) if i != axis)
    lines = [rng.permutation(all_codes(dtype)) for _ in range(int(np.prod(other)))]
    return np.ascontiguousarray(np.moveaxis(np.stack(lines).reshape(other + (256,)), -1, axis))


CONCAT_CASES = {
    # axis, shapes, input params, output params
    "axis1_copy_and_requantized": (1, [(1, 256, 2), (1, 256, 2), (1, 256, 2), (1, 256, 2)],
                                   [(0.05, 3), (0.031, -20), (0.05, 10), (3 * 2.0 ** -5, 3)],
                                   (0.05, 3)),
    "axis0_ties": (0, [(256, 1), (256, 1)], [(2.0 ** -4, 0), (3 * 2.0 ** -6, -5)],
                   (2.0 ** -5, 1)),
    "last_axis_saturating": (2, [(1, 256, 1), (1, 256, 3)], [(0.2, 7), (0.02, -7)], (0.03, 0)),
    "division_sensitive": (1, [(1, 256, 1), (1, 256, 1)],
                           [REQUANT_SETS["division_a"][:2], REQUANT_SETS["division_a"][2:]],
                           REQUANT_SETS["division_a"][2:]),
}


@pytest.mark.parametrize("key", list(CONCAT_CASES))
def test_concat_with_differing_input_qparams_matches_qlinearconcat(key):
    axis, shapes, params, (sy, zy) = CONCAT_CASES[key]
    params = [(F32(s), z) for s, z in params]
    sy = F32(sy)
    op = canon_concat(shapes, params, sy, zy, axis)
    rng = np.random.default_rng(7)
    # every input holds every int8 code (along its 256-long axis): all codes are requantized
    xs = [codes_along(rng, shape, shape.index(256)) for shape in shapes]
    oracle = ort_concat([(x, s, z) for x, (s, z) in zip(xs, params)], sy, zy, axis)
    assert_bit_exact(oracle, *op.both(**{f"x{i}": x for i, x in enumerate(xs)}), key)
    if key == "last_axis_saturating":
        assert (oracle == -128).sum() > 20 and (oracle == 127).sum() > 20


def test_concat_uint8_with_shifted_zero_points_matches_qlinearconcat():
    params = [(F32(0.05), 128), (F32(0.031), 100), (F32(3 * 2.0 ** -6), 131)]
    sy, zy = F32(0.05), 128
    shapes = [(2, 256), (1, 256), (3, 256)]
    op = canon_concat(shapes, params, sy, zy, 0, shift=128)
    rng = np.random.default_rng(8)
    xs = [codes_along(rng, shape, 1, np.uint8) for shape in shapes]
    oracle = ort_concat([(x, s, z) for x, (s, z) in zip(xs, params)], sy, zy, 0)
    assert_bit_exact(to_int8(oracle), *op.both(**{f"x{i}": to_int8(x) for i, x in enumerate(xs)}))
