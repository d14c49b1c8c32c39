"""canonqnn.add / canonqnn.mul against onnxruntime QLinearAdd / QLinearMul (com.microsoft), and
canonqnn.sub against onnxruntime's DequantizeLinear -> Sub -> QuantizeLinear; their numpy
references and their TVM legalizations: all three must be bit-identical.

uint8: ORT's uint8 kernels compute on the raw uint8 values; canonqnn gets the int8 data
u - 128 with zero points - 128 and ``source_dtype="uint8"``, and its output + 128 must equal
ORT's.
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
from canonqnn.numerics.arithmetic import fma_f32
from canonqnn.ops import REGISTRY, elementwise
from canonqnn.ops.elementwise import a_is_span_scalar
from canonqnn.qparams import QParams

ORT_OP = {"add": "QLinearAdd", "mul": "QLinearMul"}


def ort_binary(name, a, b, p):
    """``p`` = (sa, za, sb, zb, sc, zc) in the stored dtype of ``a``/``b``."""
    sa, za, sb, zb, sc, zc = p
    dt = a.dtype
    consts = dict(sa=scalar(sa, F32), za=scalar(za, dt), sb=scalar(sb, F32), zb=scalar(zb, dt),
                  sc=scalar(sc, F32), zc=scalar(zc, dt))
    return run_node(ORT_OP[name], ["A", "sa", "za", "B", "sb", "zb", "sc", "zc"], dict(A=a, B=b),
                    consts, dt, domain=MS)


def canon_binary(name, a_shape, b_shape, p, source_dtype="int8", act=(-128, 127)) -> SingleOp:
    """canonqnn op for ORT parameters ``p`` of ``source_dtype`` (uint8 zero points shift)."""
    sa, za, sb, zb, sc, zc = p
    o = 128 if source_dtype == "uint8" else 0
    qps = [QParams.make(s, z - o) for s, z in ((sa, za), (sb, zb), (sc, zc))]
    op = elementwise.ADD if name == "add" else elementwise.MUL
    return SingleOp(lambda x, y: elementwise.binary(op, x, y, *qps, act=act,
                                                    source_dtype=source_dtype),
                    {"a": a_shape, "b": b_shape})


def check(name, a, b, p, op=None, act=(-128, 127), what=""):
    """ORT on the stored data vs canonqnn on its int8 form; returns ORT's output."""
    uint8 = a.dtype == np.uint8
    if op is None:
        op = canon_binary(name, a.shape, b.shape, p, "uint8" if uint8 else "int8", act)
    oracle = np.clip(ort_binary(name, a, b, p), act[0] + 128 * uint8, act[1] + 128 * uint8)
    oracle = oracle.astype(a.dtype)
    feeds = dict(a=to_int8(a), b=to_int8(b)) if uint8 else dict(a=a, b=b)
    assert_bit_exact(to_int8(oracle) if uint8 else oracle, *op.both(**feeds), what)
    return oracle


def all_values(dtype):
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype)


# ---------------------------------------------------------------- exhaustive 256 x 256 sweeps
# (sa, za, sb, zb, sc, zc). "order" sets are ones where computing the two FMAs of QLinearAdd
# in the other order changes some result (checked below), "fma" sets ones where a fused
# multiply-add in QLinearMul would change some result.
ADD_SETS = {
    "int8-order": (0.23300443589687347, 38, 0.19945982098579407, 88, 0.09587361663579941, -31),
    "int8-ties": (2.0 ** -5, 3, 3 * 2.0 ** -6, -7, 2.0 ** -4, 10),
    "int8-saturating": (0.1, -20, 0.08, 5, 0.03, -3),
    "uint8-order": (0.16604727506637573, 163, 0.2811788320541382, 180, 0.09662257879972458, 112),
    "uint8-ties": (2.0 ** -5, 131, 3 * 2.0 ** -6, 121, 2.0 ** -4, 138),
    "uint8-saturating": (0.1, 100, 0.08, 133, 0.03, 125),
}
MUL_SETS = {
    "int8-fma": (0.0692058578133583, -123, 0.06420165300369263, 82, 0.22247926890850067, 118),
    "int8-ties": (2.0 ** -4, 3, 2.0 ** -4, -5, 2.0 ** -2, 7),
    "uint8-fma": (0.0692058578133583, 5, 0.06420165300369263, 210, 0.22247926890850067, 246),
    "uint8-ties": (2.0 ** -4, 130, 2.0 ** -4, 125, 2.0 ** -2, 120),
}


def _add_t(a, b, p, a_first):
    """Pre-rounding value of QLinearAdd for stored values a, b (either FMA order)."""
    sa, za, sb, zb, sc, zc = (F32(v) for v in p)
    ra, rb = F32(sa / sc), F32(sb / sc)
    fixed = F32(zc - fma_f32(ra, za, F32(rb * zb)))
    af, bf = a.astype(F32), b.astype(F32)
    if a_first:
        return fma_f32(af, ra, fma_f32(bf, rb, fixed))
    return fma_f32(bf, rb, fma_f32(af, ra, fixed))


def _mul_t(a, b, p, fused):
    sa, za, sb, zb, sc, zc = p
    ratio = F32(F32(F32(sa) * F32(sb)) / F32(sc))
    prod = ((a.astype(np.int32) - za) * (b.astype(np.int32) - zb)).astype(F32)
    if fused:
        return fma_f32(prod, ratio, F32(zc))
    return F32(prod * ratio) + F32(zc)


def _sweep(name, key, p):
    dtype = np.uint8 if key.startswith("uint8") else np.int8
    vals = all_values(dtype)
    row, col = vals.reshape(1, 256), vals.reshape(256, 1)
    outs = []
    # b is the per-span scalar (ORT's default operand order) ...
    assert not a_is_span_scalar(row.shape, col.shape)
    outs.append(check(name, row, col, p, what=f"{key} a[1,256] b[256,1]"))
    # ... and a is (the "A broadcast" order of QLinearAdd)
    assert a_is_span_scalar(col.shape, row.shape)
    outs.append(check(name, col, row, p, what=f"{key} a[256,1] b[1,256]"))
    # same-shape (no broadcasting): numpy reference against ORT only
    a, b = np.repeat(vals, 256), np.tile(vals, 256)
    oracle = ort_binary(name, a, b, p)
    ref = _reference_only(name, a, b, p)
    assert np.array_equal(ref, oracle), f"{key} flat: {np.count_nonzero(ref != oracle)} differ"
    return dtype, row, col, outs


def _reference_only(name, a, b, p):
    """The registered numpy reference (no build) on stored data, result in the stored dtype."""
    sa, za, sb, zb, sc, zc = p
    uint8 = a.dtype == np.uint8
    o = 128 if uint8 else 0
    ref = REGISTRY[name].reference(
        to_int8(a) if uint8 else a, to_int8(b) if uint8 else b,
        a_scale=float(F32(sa)), a_zp=za - o, b_scale=float(F32(sb)), b_zp=zb - o,
        out_scale=float(F32(sc)), out_zp=zc - o, act_min=-128, act_max=127, rounding="rne_f32",
        source_dtype="uint8" if uint8 else "int8")
    return (ref.astype(np.int32) + o).astype(a.dtype)


@pytest.mark.parametrize("key", list(ADD_SETS))
def test_add_exhaustive_256x256_matches_onnxruntime_in_both_operand_orders(key):
    p = ADD_SETS[key]
    dtype, row, col, (out_b_scalar, out_a_scalar) = _sweep("add", key, p)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    if key.endswith("order"):
        # the FMA order decides some results, so both orders are really pinned
        t_default = _add_t(row, col, p, a_first=True)
        t_swapped = _add_t(row, col, p, a_first=False)
        assert np.any(np.clip(np.rint(t_default), lo, hi) != np.clip(np.rint(t_swapped), lo, hi))
    if key.endswith("ties"):
        assert count_ties(_add_t(row, col, p, a_first=True)) > 1000
    if key.endswith("saturating"):
        assert (out_b_scalar == lo).mean() > 0.1 and (out_b_scalar == hi).mean() > 0.1


@pytest.mark.parametrize("key", list(MUL_SETS))
def test_mul_exhaustive_256x256_matches_onnxruntime_unfused(key):
    p = MUL_SETS[key]
    dtype, row, col, (out, _) = _sweep("mul", key, p)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    if key.endswith("fma"):
        # a contracted multiply-add changes some results: the sweep would catch it
        fused = np.clip(np.rint(_mul_t(row, col, p, fused=True)), lo, hi)
        assert np.any(fused != np.clip(np.rint(_mul_t(row, col, p, fused=False)), lo, hi))
    if key.endswith("ties"):
        assert count_ties(_mul_t(row, col, p, fused=False)) > 1000
    assert (out == lo).any() and (out == hi).any()


# ---------------------------------------------------------------- broadcasting
def _planes(rng, shape, dtype=np.int8):
    """Data whose every [..., H, W] plane holds each stored value (shape[-2:] == 16x16)."""
    vals = all_values(dtype)
    lead = int(np.prod(shape[:-2]))
    return np.stack([rng.permutation(vals) for _ in range(lead)]).reshape(shape)


BCAST_SHAPES = {
    # name: (a shape, b shape); a_is_span_scalar decides the add operand order
    "scalar_b": ((2, 3, 16, 16), ()),
    "scalar_a": ((), (2, 3, 16, 16)),
    "per_channel_b_c11": ((1, 256, 16, 16), (256, 1, 1)),
    "per_channel_a_c11": ((256, 1, 1), (1, 256, 16, 16)),
    "leading_dims_b": ((3, 256, 16, 16), (16, 16)),
    "leading_dims_a": ((16, 16), (3, 256, 16, 16)),
    "a_column_b_row": ((256, 16, 1), (1, 1, 16)),
    "both_broadcast": ((256, 1, 16), (1, 8, 1)),
}


def _bcast_data(rng, name, dtype):
    a_shape, b_shape = BCAST_SHAPES[name]
    if name in ("per_channel_b_c11", "leading_dims_b", "scalar_b"):
        small = (all_values(dtype).reshape(b_shape) if name == "per_channel_b_c11" else
                 rand_q(rng, b_shape, dtype))
        return _planes(rng, a_shape, dtype), small
    if name in ("per_channel_a_c11", "leading_dims_a", "scalar_a"):
        small = (all_values(dtype).reshape(a_shape) if name == "per_channel_a_c11" else
                 rand_q(rng, a_shape, dtype))
        return small, _planes(rng, b_shape, dtype)
    return rand_q(rng, a_shape, dtype), rand_q(rng, b_shape, dtype)


@pytest.mark.parametrize("name", list(BCAST_SHAPES))
def test_add_broadcasting_matches_onnxruntime_operand_order(name):
    p = ADD_SETS["int8-order"]
    a_shape, b_shape = BCAST_SHAPES[name]
    op = canon_binary("add", a_shape, b_shape, p)
    for seed in (1, 2):
        a, b = _bcast_data(np.random.default_rng(seed), name, np.int8)
        check("add", a, b, p, op=op, what=f"{name} seed {seed}")


@pytest.mark.parametrize("name", ["scalar_a", "per_channel_a_c11", "leading_dims_b",
                                  "both_broadcast"])
def test_add_uint8_broadcasting_matches_onnxruntime(name):
    p = ADD_SETS["uint8-order"]
    a_shape, b_shape = BCAST_SHAPES[name]
    op = canon_binary("add", a_shape, b_shape, p, "uint8")
    a, b = _bcast_data(np.random.default_rng(3), name, np.uint8)
    check("add", a, b, p, op=op, what=name)


@pytest.mark.parametrize("name", ["scalar_a", "per_channel_b_c11", "leading_dims_a",
                                  "both_broadcast"])
def test_mul_broadcasting_matches_onnxruntime(name):
    for key in ("int8-fma", "uint8-fma"):
        p = MUL_SETS[key]
        dtype = np.uint8 if key.startswith("uint8") else np.int8
        a, b = _bcast_data(np.random.default_rng(4), name, dtype)
        check("mul", a, b, p, what=f"{key} {name}")


def test_a_is_span_scalar_follows_innermost_moving_axis():
    assert a_is_span_scalar((), (2, 3))
    assert not a_is_span_scalar((2, 3), ())
    assert a_is_span_scalar((3, 1, 1), (1, 3, 4, 4))
    assert not a_is_span_scalar((1, 3, 4, 4), (3, 1, 1))
    assert not a_is_span_scalar((4, 4), (2, 3, 4, 4))  # inner span moves in both
    assert a_is_span_scalar((2, 3, 1), (1, 1, 5))
    assert not a_is_span_scalar((2, 1, 5), (1, 3, 1))
    assert not a_is_span_scalar((2, 3, 1), (2, 1, 1))  # trailing 1s are skipped
    assert not a_is_span_scalar((1,), (1,))


# ---------------------------------------------------------------- activation clamp
@pytest.mark.parametrize("name", ["add", "mul"])
def test_binary_activation_clamp_equals_clipping_onnxruntime_output(name):
    # ReLU-like windows [out_zp, 100] as integer clamps (uint8: [zp, 228] in stored values)
    p = ADD_SETS["int8-order"] if name == "add" else MUL_SETS["int8-ties"]
    rng = np.random.default_rng(5)
    a, b = rand_q(rng, (4, 64)), rand_q(rng, (4, 64))
    out = check(name, a, b, p, act=(p[5], 100), what=f"{name} relu-like clamp")
    assert (out == p[5]).any() and (out == 100).any()
    u_p = ADD_SETS["uint8-order"] if name == "add" else MUL_SETS["uint8-ties"]
    au, bu = rand_q(rng, (4, 64), np.uint8), rand_q(rng, (4, 64), np.uint8)
    out = check(name, au, bu, u_p, act=(u_p[5] - 128, 100), what=f"{name} uint8 clamp")
    assert (out == u_p[5]).any() and (out == 228).any()


# ---------------------------------------------------------------- sub
# onnxruntime has no quantized Sub: DQ -> Sub -> Q runs as DequantizeLinear, float Sub,
# QuantizeLinear at every optimization level (no QDQ fusion takes it).
SUB_SETS = {
    # a contracted multiply-subtract (FMA) changes one of the 65536 results: the sweep pins it
    "int8-fma": (0.24939146637916565, -88, 0.057707108557224274, 51, 0.11879263073205948, -37),
    "int8-ties": (2.0 ** -5, 3, 3 * 2.0 ** -6, -7, 2.0 ** -5, 10),
    "int8-saturating": (0.1, -20, 0.08, 5, 0.03, -3),
    "uint8-fma": (0.24939146637916565, 40, 0.057707108557224274, 179, 0.11879263073205948, 91),
    "uint8-ties": (2.0 ** -5, 131, 3 * 2.0 ** -6, 121, 2.0 ** -5, 138),
}


def ort_sub(a, b, p):
    """DQ(a), DQ(b) -> Sub -> Q in onnxruntime, ``p`` in the stored dtype of a/b."""
    sa, za, sb, zb, sc, zc = p
    dt = a.dtype
    consts = dict(sa=scalar(sa, F32), za=scalar(za, dt), sb=scalar(sb, F32), zb=scalar(zb, dt),
                  sc=scalar(sc, F32), zc=scalar(zc, dt))
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["a"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["b"]),
             helper.make_node("Sub", ["a", "b"], ["d"]),
             helper.make_node("QuantizeLinear", ["d", "sc", "zc"], ["Y"])]
    return run_graph(nodes, dict(A=a, B=b), consts, dt)


def canon_sub(a_shape, b_shape, p, uint8=False, act=(-128, 127)) -> SingleOp:
    sa, za, sb, zb, sc, zc = p
    o = 128 if uint8 else 0
    qps = [QParams.make(s, z - o) for s, z in ((sa, za), (sb, zb), (sc, zc))]
    return SingleOp(lambda x, y: elementwise.sub(x, y, *qps, act=act),
                    {"a": a_shape, "b": b_shape})


def check_sub(a, b, p, op=None, act=(-128, 127), what=""):
    uint8 = a.dtype == np.uint8
    op = op or canon_sub(a.shape, b.shape, p, uint8, act)
    oracle = np.clip(ort_sub(a, b, p), act[0] + 128 * uint8, act[1] + 128 * uint8)
    oracle = oracle.astype(a.dtype)
    feeds = dict(a=to_int8(a), b=to_int8(b)) if uint8 else dict(a=a, b=b)
    assert_bit_exact(to_int8(oracle) if uint8 else oracle, *op.both(**feeds), what)
    return oracle


def _sub_pre_rounding(a, b, p, fused):
    sa, za, sb, zb, sc, zc = (F32(v) for v in p)
    ra, rb = (a.astype(np.int32) - int(za)).astype(F32), (b.astype(np.int32) - int(zb)).astype(F32)
    rb_real = (rb * sb).astype(F32)
    d = fma_f32(ra, sa, -rb_real) if fused else ((ra * sa).astype(F32) - rb_real).astype(F32)
    return (d / sc).astype(F32)


@pytest.mark.parametrize("key", list(SUB_SETS))
def test_sub_exhaustive_256x256_matches_onnxruntime_dequantize_sub_quantize(key):
    p = SUB_SETS[key]
    dtype = np.uint8 if key.startswith("uint8") else np.int8
    vals = all_values(dtype)
    row, col = vals.reshape(1, 256), vals.reshape(256, 1)
    out = check_sub(row, col, p, what=f"{key} a[1,256] b[256,1]")
    check_sub(col, row, p, what=f"{key} a[256,1] b[1,256]")
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    if key.endswith("fma"):
        fused = np.clip(np.rint(_sub_pre_rounding(row, col, p, True)) + p[5], lo, hi)
        assert np.any(fused != out)
    if key.endswith("ties"):
        assert count_ties(_sub_pre_rounding(row, col, p, False)) > 1000
    if key.endswith("saturating"):
        assert (out == lo).mean() > 0.1 and (out == hi).mean() > 0.1


@pytest.mark.parametrize("name,key", [("scalar_b", "int8-fma"), ("per_channel_a_c11", "uint8-ties"),
                                      ("leading_dims_b", "uint8-fma"),
                                      ("both_broadcast", "int8-ties")])
def test_sub_broadcasting_matches_onnxruntime(name, key):
    dtype = np.uint8 if key.startswith("uint8") else np.int8
    a, b = _bcast_data(np.random.default_rng(6), name, dtype)
    check_sub(a, b, SUB_SETS[key], what=f"{key} {name}")


def test_sub_activation_clamp_equals_clipping_onnxruntime_output():
    p = SUB_SETS["int8-fma"]
    rng = np.random.default_rng(7)
    a, b = rand_q(rng, (4, 64)), rand_q(rng, (4, 64))
    out = check_sub(a, b, p, act=(p[5], 100), what="relu-like clamp")
    assert (out == p[5]).any() and (out == 100).any()
