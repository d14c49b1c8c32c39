"""canonqnn.add / sub / mul with the Q31 roundings, and canonqnn.squared_difference, against
the TFLite interpreter's reference kernels (ADD, SUB, MUL, SQUARED_DIFFERENCE), their numpy
references and their TVM builds: all three identical.

TFLite tensors are NHWC; the canonical ops get the same data transposed to NCHW. uint8 models
are compared on their int8 form (q - 128, zero points - 128).
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from _ort import MultiOp, count_ties
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn.ops import elementwise, lookup
from canonqnn.ops._registry import UnsupportedRounding
from canonqnn.qparams import QParams, activation_bounds, quantize_multiplier

F32 = np.float32
KINDS = ("ADD", "SUB", "MUL")
ACTS = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0),
        "RELU_N1_TO_1": (-1.0, 1.0)}
NHWC_TO_NCHW, NCHW_TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def assert_identical(oracle, reference, built, what=""):
    """TFLite, the numpy reference and the TVM build agree element for element."""
    for name, value in (("reference", reference), ("tvm", built)):
        assert value.shape == oracle.shape and value.dtype == oracle.dtype, (what, name)
        bad = np.argwhere(value != oracle)
        assert bad.size == 0, (f"{what}: {name} differs from TFLite on {len(bad)}/{oracle.size}"
                               f", first at {tuple(bad[0])}: tflite {oracle[tuple(bad[0])]}, "
                               f"{name} {value[tuple(bad[0])]}")


# ---------------------------------------------------------------- both sides of one case
def tflite_binary(kind, a, b, p, act="NONE"):
    """TFLite reference kernel on stored data; ``p`` = ((sa, za), (sb, zb), (so, zo))."""
    dt = a.dtype.name
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    model = single_op(kind, [T(a.shape, dt, *p[0]), T(b.shape, dt, *p[1])],
                      [T(out_shape, dt, *p[2])], fusedActivationFunction=act)
    return run_tflite(model, [a, b])[0]


def canonical(kind, x, y, p, act="NONE", rounding="q31_double", shift=0):
    """The canonical op for TFLite parameters ``p`` (zero points minus ``shift`` for uint8)."""
    qa, qb, qo = (QParams.make(s, z - shift) for s, z in p)
    bounds = activation_bounds(*ACTS[act], qo, rounding)
    if kind == "SUB":
        return elementwise.sub(x, y, qa, qb, qo, act=bounds, rounding=rounding)
    op = elementwise.ADD if kind == "ADD" else elementwise.MUL
    return elementwise.binary(op, x, y, qa, qb, qo, act=bounds, rounding=rounding,
                              source_dtype="uint8" if shift else "int8")


def to_int8(u):
    return (u.astype(np.int32) - 128).astype(np.int8)


def run_groups(groups, layout=None):
    """``groups`` = [(a, b, [(kind, p, act), ...])] on TFLite data (int8 or uint8): every case
    of every group in one build."""
    shift = 128 if groups[0][0].dtype == np.uint8 else 0
    feeds, shapes = {}, {}
    for g, (a, b, _) in enumerate(groups):
        for name, v in ((f"a{g}", a), (f"b{g}", b)):
            v = to_int8(v) if shift else v
            feeds[name] = np.transpose(v, NHWC_TO_NCHW) if layout == "nhwc" else v
            shapes[name] = (feeds[name].shape, "int8")

    def make(*params):
        calls = []
        for g, (_, _, cases) in enumerate(groups):
            x, y = params[2 * g], params[2 * g + 1]
            calls += [canonical(k, x, y, p, act, shift=shift) for k, p, act in cases]
        return calls

    mod = MultiOp(make, shapes)
    refs, builds = iter(mod.references(**feeds)), iter(mod.tvm(**feeds))
    for a, b, cases in groups:
        for kind, p, act in cases:
            ref, built = next(refs), next(builds)
            oracle = tflite_binary(kind, a, b, p, act)
            if shift:
                oracle = to_int8(oracle)
            if layout == "nhwc":
                ref, built = (np.transpose(v, NCHW_TO_NHWC) for v in (ref, built))
            assert_identical(oracle, ref, built, f"{kind} {p} {act}")


def run_cases(cases, a, b):
    run_groups([(a, b, cases)])


def all_pairs(dtype=np.int8):
    """Every (a, b) code pair, by broadcasting a [256, 1] against b [1, 256]."""
    info = np.iinfo(dtype)
    codes = np.arange(info.min, info.max + 1).astype(dtype)
    return codes.reshape(256, 1), codes.reshape(1, 256)


def real_value(kind, a, b, p):
    """The exact real result over the output scale, in float64 (no rounding yet)."""
    (sa, za), (sb, zb), (so, _) = ((float(F32(s)), z) for s, z in p)
    ra, rb = sa * (a.astype(np.float64) - za), sb * (b.astype(np.float64) - zb)
    return {"ADD": ra + rb, "SUB": ra - rb, "MUL": ra * rb}[kind] / so


# ---------------------------------------------------------------- every code pair
# ((sa, za), (sb, zb), (so, zo)). "ties": powers of two, so many results are exact halves
# (positive and negative); "mul_multiplier": the double quotient sa * sb / so and the float32
# one TFLite uses give MUL different multipliers and results (found by search).
PAIR_SETS = {
    "ties": ((2.0 ** -4, 3), (2.0 ** -4, -7), (2.0 ** -2, 10)),
    "random": ((0.0731, -12), (0.0213, 40), (0.0519, 5)),
    "saturating": ((0.1, -20), (0.08, 5), (0.03, -3)),
    "mul_multiplier": ((0.030699707567691803, -100), (0.01879783719778061, -26),
                       (0.04274352267384529, -115)),
}


def test_every_code_pair_matches_tflite_reference_add_sub_mul():
    a, b = all_pairs()
    cases = [(kind, p, "NONE") for p in PAIR_SETS.values() for kind in KINDS]
    run_cases(cases, a, b)
    # the tie set is one: exact halves, of both signs, for every kind
    for kind in KINDS:
        v = real_value(kind, a, b, PAIR_SETS["ties"])
        assert count_ties(v[v > 0]) > 100 and count_ties(v[v < 0]) > 100, kind


def reference_only(kind, a, b, p, act="NONE", rounding="q31_double"):
    """The registered numpy reference of the canonical op (no build)."""
    x, y = (relax.Var(n, _tvm.tensor_type(v.shape, "int8")) for n, v in (("a", a), ("b", b)))
    call = canonical(kind, x, y, p, act, rounding)
    return lookup(call).run_reference(call, [a, b])


def test_tflite_rounds_ties_away_from_zero_as_q31_double_not_q31_single():
    a, b = all_pairs()
    p = PAIR_SETS["ties"]
    for kind in KINDS:
        oracle = tflite_binary(kind, a, b, p)
        assert np.array_equal(reference_only(kind, a, b, p), oracle), kind
        assert not np.array_equal(reference_only(kind, a, b, p, rounding="q31_single"),
                                  oracle), kind


def test_mul_multiplier_is_the_float32_quotient():
    (sa, _), (sb, _), (so, _) = PAIR_SETS["mul_multiplier"]
    in_double = quantize_multiplier(float(F32(sa)) * float(F32(sb)) / float(F32(so)))
    in_float = quantize_multiplier(float(F32(F32(F32(sa) * F32(sb)) / F32(so))))
    assert in_double != in_float  # the set discriminates; it matches TFLite above


# ---------------------------------------------------------------- 4-D broadcasting, NHWC
SHAPES_4D = {
    "same": ((2, 3, 4, 5), (2, 3, 4, 5)),
    "per_channel": ((2, 3, 4, 5), (1, 1, 1, 5)),
    "along_channels": ((2, 3, 4, 5), (2, 3, 4, 1)),
    "both_ways": ((1, 3, 1, 5), (2, 1, 4, 1)),
}


def random_params(rng, kind):
    sa, sb, so = (float(F32(v)) for v in np.exp(rng.uniform(-6, 0, 3)))
    za, zb, zo = (int(v) for v in rng.integers(-128, 128, 3))
    if kind == "MUL":  # keep some results in range
        so = float(F32(max(so, sa * sb * 4)))
    return ((sa, za), (sb, zb), (so, zo))


def test_4d_broadcast_with_fused_activations_matches_tflite_reference():
    rng = np.random.default_rng(0)
    acts = ("NONE", "RELU", "RELU6")
    groups = []
    for g, (sa, sb) in enumerate(SHAPES_4D.values()):
        a = rng.integers(-128, 128, sa).astype(np.int8)
        b = rng.integers(-128, 128, sb).astype(np.int8)
        kinds = (KINDS[g % 3], KINDS[(g + 1) % 3])  # two per shape keeps the build short
        groups.append((a, b, [(kind, random_params(rng, kind), acts[(g + i) % 3])
                              for i, kind in enumerate(kinds)]))
    run_groups(groups, layout="nhwc")


# ---------------------------------------------------------------- random parameter sweeps
def sweep(seed, n_sets):
    rng = np.random.default_rng(seed)
    a, b = all_pairs()
    acts = list(ACTS)
    cases = [(kind, random_params(rng, kind), acts[int(rng.integers(len(acts)))])
             for _ in range(n_sets) for kind in KINDS]
    run_cases(cases, a, b)


def test_random_parameter_sweep_matches_tflite_reference():
    sweep(seed=100, n_sets=2)


@pytest.mark.slow
def test_random_parameter_sweep_matches_tflite_reference_large():
    for seed in range(101, 106):
        sweep(seed=seed, n_sets=10)


# ---------------------------------------------------------------- uint8 models
def test_uint8_models_compute_the_int8_results_after_the_shift():
    """TFLite's uint8 ADD/SUB/MUL kernels derive the same multipliers and integers: the int8
    op (source_dtype uint8 or not) reproduces them on q - 128."""
    rng = np.random.default_rng(7)
    a, b = all_pairs(np.uint8)
    cases = []
    for kind, act in zip(KINDS, ("NONE", "RELU6", "RELU_N1_TO_1")):
        (sa, za), (sb, zb), (so, zo) = random_params(rng, kind)
        cases.append((kind, ((sa, za + 128), (sb, zb + 128), (so, zo + 128)), act))
    cases.append(("ADD", ((2.0 ** -4, 131), (2.0 ** -4, 121), (2.0 ** -2, 138)), "NONE"))
    cases.append(("MUL", ((2.0 ** -4, 131), (2.0 ** -4, 121), (2.0 ** -2, 138)), "RELU"))
    run_cases(cases, a, b)


# ---------------------------------------------------------------- q31_single
def test_q31_single_reference_matches_build():
    """No interpreter here is built with TFLITE_SINGLE_ROUNDING: reference vs build only."""
    rng = np.random.default_rng(3)
    a, b = all_pairs()
    cases = [(kind, p, act) for kind in KINDS
             for p, act in ((PAIR_SETS["ties"], "NONE"), (random_params(rng, kind), "RELU"))]
    mod = MultiOp(lambda x, y: [canonical(k, x, y, p, act, rounding="q31_single")
                                for k, p, act in cases],
                  {"a": (a.shape, "int8"), "b": (b.shape, "int8")})
    for (kind, p, act), ref, built in zip(cases, mod.references(a=a, b=b), mod.tvm(a=a, b=b)):
        assert np.array_equal(ref, built), (kind, p, act)


# ---------------------------------------------------------------- what TFLite refuses
@pytest.mark.parametrize("kind", ["ADD", "SUB"])
def test_add_sub_refuse_parameters_tflite_aborts_on(kind):
    """2 * max(a_scale, b_scale) >= 2^20 * out_scale: TFLite's Prepare aborts the process
    (QuantizeMultiplierSmallerThanOneExp), so there is nothing to reproduce."""
    x = relax.Var("x", _tvm.tensor_type((4,), "int8"))
    with pytest.raises(UnsupportedRounding, match="2\\^20"):
        canonical(kind, x, x, ((1.0, 0), (1.0, 0), (1e-7, 0)))
    canonical(kind, x, x, ((1.0, 0), (1.0, 0), (1e-7, 0)), rounding="rne_f32")  # fine there


# ---------------------------------------------------------------- squared_difference (TFLite)
def tflite_squared_difference(a, b, p):
    """TFLite's int8 SQUARED_DIFFERENCE (no fused activation) on ``p`` as above."""
    model = single_op("SQUARED_DIFFERENCE", [T(a.shape, "int8", *p[0]), T(b.shape, "int8", *p[1])],
                      [T(np.broadcast_shapes(a.shape, b.shape), "int8", *p[2])])
    return run_tflite(model, [a, b])[0]


def squared_difference_params(rng):
    """Random scales TFLite accepts: (2 * max(a_scale, b_scale))^2 < 2^14 * out_scale."""
    sa, sb = (float(F32(v)) for v in np.exp(rng.uniform(-6, 0, 2)))
    t = 2 * max(sa, sb)
    so = float(F32(t * t / 2**14 * np.exp(rng.uniform(0.01, 8))))
    za, zb, zo = (int(v) for v in rng.integers(-128, 128, 3))
    return ((sa, za), (sb, zb), (so, zo))


def squared_difference(x, y, p, act=(-128, 127)):
    qa, qb, qo = (QParams.make(s, z) for s, z in p)
    return elementwise.squared_difference(x, y, qa, qb, qo, act=act)


# "ties": powers of two, every result is k^2 / 32 for an integer k (a half when k = 4 mod 8);
# "saturating": an output scale at TFLite's limit, most squares clamp at 127; "unequal":
# input scales 10x apart.
SQUARED_DIFFERENCE_SETS = {
    "ties": ((2.0 ** -4, 3), (2.0 ** -4, -7), (2.0 ** -3, -128)),
    "saturating": ((0.1, -20), (0.08, 5), (float(F32(0.04 / 2**14 * 1.001)), -128)),
    "unequal": ((0.0731, -12), (0.00713, 40), (0.0519, -100)),
}


def test_squared_difference_every_code_pair_matches_tflite_reference():
    """Every (a, b) code pair, fixed and random parameters, plus an activation clamp (TFLite's
    kernel has none: its output clamped to the bounds is the oracle there)."""
    rng = np.random.default_rng(11)
    cases = [(p, (-128, 127)) for p in SQUARED_DIFFERENCE_SETS.values()]
    cases += [(squared_difference_params(rng), (-128, 127)) for _ in range(4)]
    cases.append((SQUARED_DIFFERENCE_SETS["unequal"], (-90, 60)))
    run_squared_difference_pairs(cases)


@pytest.mark.slow
def test_squared_difference_random_parameter_sweep_matches_tflite_reference():
    rng = np.random.default_rng(13)
    run_squared_difference_pairs([(squared_difference_params(rng), (-128, 127))
                                  for _ in range(40)])


def run_squared_difference_pairs(cases):
    """``cases`` = [(p, (act_min, act_max))] on every code pair, in one build."""
    a, b = all_pairs()
    mod = MultiOp(lambda x, y: [squared_difference(x, y, p, act) for p, act in cases],
                  {"a": (a.shape, "int8"), "b": (b.shape, "int8")})
    for (p, act), ref, built in zip(cases, mod.references(a=a, b=b), mod.tvm(a=a, b=b)):
        oracle = np.clip(tflite_squared_difference(a, b, p), *act).astype(np.int8)
        assert_identical(oracle, ref, built, f"SQUARED_DIFFERENCE {p} {act}")


def test_squared_difference_4d_broadcast_nhwc_matches_tflite_reference():
    rng = np.random.default_rng(12)
    shapes = list(SHAPES_4D.values())
    data = [(rng.integers(-128, 128, sa).astype(np.int8), rng.integers(-128, 128, sb)
             .astype(np.int8), squared_difference_params(rng)) for sa, sb in shapes]
    feeds, inputs = {}, {}
    for g, (a, b, _) in enumerate(data):
        for name, v in ((f"a{g}", a), (f"b{g}", b)):
            feeds[name] = np.ascontiguousarray(np.transpose(v, NHWC_TO_NCHW))
            inputs[name] = (feeds[name].shape, "int8")
    mod = MultiOp(lambda *vs: [squared_difference(vs[2 * g], vs[2 * g + 1], p)
                               for g, (_, _, p) in enumerate(data)], inputs)
    for (a, b, p), ref, built in zip(data, mod.references(**feeds), mod.tvm(**feeds)):
        ref, built = (np.transpose(v, NCHW_TO_NHWC) for v in (ref, built))
        assert_identical(tflite_squared_difference(a, b, p), ref, built,
                         f"SQUARED_DIFFERENCE {a.shape} {b.shape}")


def test_squared_difference_is_q31_double_only_and_refuses_what_tflite_aborts_on():
    x = relax.Var("x", _tvm.tensor_type((4,), "int8"))
    p = SQUARED_DIFFERENCE_SETS["ties"]
    for rounding in ("rne_f32", "q31_single"):
        qa, qb, qo = (QParams.make(s, z) for s, z in p)
        with pytest.raises(UnsupportedRounding, match="implements q31_double"):
            elementwise.squared_difference(x, x, qa, qb, qo, rounding=rounding)
    # (2 * 0.1)^2 >= 2^14 * out_scale: TFLite's Prepare aborts the process
    # (QuantizeMultiplierSmallerThanOneExp), so there is nothing to reproduce
    with pytest.raises(UnsupportedRounding, match="2\\^14"):
        squared_difference(x, x, ((0.1, 0), (0.08, 0), (0.04 / 2**14, 0)))
