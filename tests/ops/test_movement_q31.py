"""canonqnn.requantize and canonqnn.concat with the Q31 roundings against the TFLite
interpreter's reference kernels (QUANTIZE on integer input, CONCATENATION), their numpy
references and their TVM builds: all three identical.

uint8 tensors are compared on their int8 form (q - 128, zero points - 128).
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from _ort import MultiOp, count_ties
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn.numerics.arithmetic import fma_f32
from canonqnn.ops import movement
from canonqnn.ops._registry import UnsupportedRounding
from canonqnn.qparams import QParams, quantize_multiplier, tflite_concat_scaling

F32 = np.float32


def assert_identical(oracle, reference, built, what=""):
    """TFLite, the numpy reference and the TVM build agree element for element."""
    for name, value in (("reference", reference), ("tvm", built)):
        assert value.shape == oracle.shape and value.dtype == oracle.dtype, (what, name)
        bad = np.argwhere(value != oracle)
        assert bad.size == 0, (f"{what}: {name} differs from TFLite on {len(bad)}/{oracle.size}"
                               f", first at {tuple(bad[0])}: tflite {oracle[tuple(bad[0])]}, "
                               f"{name} {value[tuple(bad[0])]}")


def as_int8(values, dtype):
    """Stored values (or zero points) of ``dtype`` in their int8 form."""
    shift = 128 if dtype == "uint8" else 0
    return (np.asarray(values).astype(np.int32) - shift).astype(np.int8)


def all_codes(dtype):
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype).reshape(1, 256)


# ---------------------------------------------------------------- requantize (QUANTIZE)
def tflite_quantize(q, in_p, out_p, out_dtype):
    model = single_op("QUANTIZE", [T(q.shape, q.dtype.name, *in_p)],
                      [T(q.shape, out_dtype, *out_p)])
    return run_tflite(model, [q])[0]


def requantize_call(x, in_p, out_p, in_dtype, out_dtype, rounding="q31_double"):
    (si, zi), (so, zo) = in_p, out_p
    return movement.requantize(x, QParams.make(si, int(as_int8(zi, in_dtype))),
                               QParams.make(so, int(as_int8(zo, out_dtype))), rounding=rounding)


def check_requantize(cases, rounding="q31_double"):
    """``cases`` = [(in_dtype, out_dtype, (si, zi), (so, zo))] over every input code."""
    mod = MultiOp(lambda *xs: [requantize_call(x, ip, op, di, do, rounding)
                               for x, (di, do, ip, op) in zip(xs, cases)],
                  {f"x{i}": ((1, 256), "int8") for i in range(len(cases))})
    feeds = {f"x{i}": as_int8(all_codes(c[0]), c[0]) for i, c in enumerate(cases)}
    return mod, feeds, mod.references(**feeds), mod.tvm(**feeds)


# (in dtype, out dtype, (in_scale, in_zp), (out_scale, out_zp)), zero points as stored.
# "ties": in/out = 1/4 makes every code with (q - zp) = 2 mod 4 an exact half;
# "double_quotient": double(in)/double(out) and f32(in/out) give different results (search).
REQUANTIZE_SETS = {
    "int8_ties": ("int8", "int8", (1.0, 3), (4.0, -2)),
    "int8_down": ("int8", "int8", (0.0731, -12), (0.1519, 5)),
    "int8_up": ("int8", "int8", (0.05, 7), (0.0137, -20)),
    "int8_double_quotient": ("int8", "int8", (0.3802025318145752, 109),
                             (0.2749958038330078, 70)),
    "uint8_to_int8": ("uint8", "int8", (0.0731, 140), (0.1519, -3)),
    "uint8_to_int8_ties": ("uint8", "int8", (0.5, 131), (1.0, 0)),
    "uint8_to_int8_same": ("uint8", "int8", (0.02, 128), (0.02, 0)),
    "int8_to_uint8": ("int8", "uint8", (0.0731, -12), (0.04, 100)),
    "int8_to_uint8_ties": ("int8", "uint8", (0.75, 0), (1.5, 128)),
    "uint8_to_uint8": ("uint8", "uint8", (0.3, 77), (0.11, 200)),
}


def test_requantize_every_code_matches_tflite_quantize_reference():
    names = list(REQUANTIZE_SETS)
    cases = [REQUANTIZE_SETS[n] for n in names]
    _, feeds, refs, builds = check_requantize(cases)
    for i, (name, (di, do, ip, op)) in enumerate(zip(names, cases)):
        oracle = as_int8(tflite_quantize(all_codes(di), ip, op, do), do)
        assert_identical(oracle, refs[i], builds[i], name)
    # the tie sets are: exact halves of both signs
    for name in ("int8_ties", "uint8_to_int8_ties", "int8_to_uint8_ties"):
        di, _, (si, zi), (so, _) = REQUANTIZE_SETS[name]
        v = (all_codes(di).astype(np.float64) - zi) * si / so
        assert count_ties(v[v > 0]) > 10 and count_ties(v[v < 0]) > 10, name


def test_requantize_multiplier_is_the_double_quotient():
    _, _, (si, _), (so, _) = REQUANTIZE_SETS["int8_double_quotient"]
    assert (quantize_multiplier(float(F32(si)) / float(F32(so)))
            != quantize_multiplier(float(F32(F32(si) / F32(so)))))


def random_requantize_sets(rng, n):
    dtypes = ("int8", "uint8")
    out = []
    for _ in range(n):
        di, do = (dtypes[int(v)] for v in rng.integers(0, 2, 2))
        si, so = (float(F32(v)) for v in np.exp(rng.uniform(-4, 2, 2)))
        zi, zo = (int(rng.integers(np.iinfo(d).min, np.iinfo(d).max + 1)) for d in (di, do))
        out.append((di, do, (si, zi), (so, zo)))
    return out


def sweep_requantize(seed, n):
    cases = random_requantize_sets(np.random.default_rng(seed), n)
    _, _, refs, builds = check_requantize(cases)
    for case, ref, built in zip(cases, refs, builds):
        di, do, ip, op = case
        assert_identical(as_int8(tflite_quantize(all_codes(di), ip, op, do), do), ref, built,
                         str(case))


def test_requantize_random_parameter_sweep():
    sweep_requantize(seed=200, n=8)


@pytest.mark.slow
def test_requantize_random_parameter_sweep_large():
    for seed in range(201, 205):
        sweep_requantize(seed=seed, n=25)


def test_requantize_q31_single_reference_matches_build():
    """No interpreter here is built with TFLITE_SINGLE_ROUNDING: reference vs build only."""
    cases = list(REQUANTIZE_SETS.values())[:6]
    _, _, refs, builds = check_requantize(cases, rounding="q31_single")
    for case, ref, built in zip(cases, refs, builds):
        assert np.array_equal(ref, built), case


# ---------------------------------------------------------------- concat (CONCATENATION)
def tflite_concat(xs, in_ps, out_p, axis, dtype):
    out_shape = list(xs[0].shape)
    out_shape[axis] = sum(x.shape[axis] for x in xs)
    model = single_op("CONCATENATION", [T(x.shape, dtype, *p) for x, p in zip(xs, in_ps)],
                      [T(tuple(out_shape), dtype, *out_p)], axis=axis)
    return run_tflite(model, xs)[0]


def concat_call(xs, in_ps, out_p, axis, dtype, rounding="q31_double"):
    qps = [QParams.make(s, int(as_int8(z, dtype))) for s, z in in_ps]
    return movement.concat(list(xs), qps, QParams.make(out_p[0], int(as_int8(out_p[1], dtype))),
                           axis, rounding=rounding, source_dtype=dtype)


def check_concat(groups, dtype, rounding="q31_double", oracle=True):
    """``groups`` = [(xs, in_ps, out_p, axis)] (stored data): one build for all."""
    names, shapes, feeds = [], {}, {}
    for g, (xs, _, _, _) in enumerate(groups):
        names.append([f"g{g}x{i}" for i in range(len(xs))])
        for n, x in zip(names[-1], xs):
            shapes[n], feeds[n] = (x.shape, "int8"), as_int8(x, dtype)

    def make(*params):
        by_name = dict(zip(shapes, params))
        return [concat_call([by_name[n] for n in ns], ps, op, axis, dtype, rounding)
                for ns, (_, ps, op, axis) in zip(names, groups)]

    mod = MultiOp(make, shapes)
    refs, builds = mod.references(**feeds), mod.tvm(**feeds)
    for (xs, ps, op, axis), ref, built in zip(groups, refs, builds):
        if oracle:
            assert_identical(as_int8(tflite_concat(xs, ps, op, axis, dtype), dtype), ref, built,
                             f"{ps} -> {op}")
        else:
            assert np.array_equal(ref, built), f"{ps} -> {op}"


def test_concat_int8_with_equal_parameters_copies_like_tflite():
    rng = np.random.default_rng(0)
    p = (0.05, -3)
    groups = [([rng.integers(-128, 128, s).astype(np.int8) for s in shapes], [p] * 3, p, axis)
              for shapes, axis in (([(1, 2, 3, 4), (1, 5, 3, 4), (1, 1, 3, 4)], 1),
                                   ([(2, 3, 4, 1), (2, 3, 4, 6), (2, 3, 4, 2)], 3))]
    check_concat(groups, "int8")


def test_concat_int8_with_differing_parameters_is_refused_as_by_tflite():
    x = np.zeros((1, 4), np.int8)
    with pytest.raises(RuntimeError, match="CONCATENATION"):
        tflite_concat([x, x], [(0.5, 3), (0.25, -2)], (0.3, 1), 1, "int8")
    v = relax.Var("x", _tvm.tensor_type((1, 4), "int8"))
    with pytest.raises(UnsupportedRounding, match="int8 CONCATENATION"):
        concat_call([v, v], [(0.5, 3), (0.25, -2)], (0.3, 1), 1, "int8")


# (in params..., out params), uint8 zero points. "ties": 0.5 * (u - 3) has halves;
# "fma": a fused multiply-add in u * k + c would change some results (search).
UINT8_CONCAT_SETS = {
    "ties": ([(0.5, 3), (0.25, 2), (1.0, 128)], (1.0, 128)),
    "random": ([(0.0731, 140), (0.02, 3), (0.3, 77)], (0.05, 120)),
    "same_scale_other_zp": ([(0.3, 100), (0.3, 128), (0.3, 0)], (0.3, 128)),
    "fma": ([(0.08383364230394363, 58), (0.1165008395910263, 126), (0.3, 128)],
            (0.06959094107151031, 9)),
}


def uint8_concat_group(ps, out_p, axis=1):
    """Three inputs, each holding every uint8 code along ``axis``."""
    codes = all_codes(np.uint8).reshape(1, 256, 1, 1)
    xs = [np.broadcast_to(np.moveaxis(codes, 1, axis), (1, 256, 2, 2) if axis == 1 else
                          (1, 2, 2, 256)).copy() for _ in ps]
    return xs, ps, out_p, axis


def test_concat_uint8_rescales_like_tflite_reference():
    groups = [uint8_concat_group(ps, op, axis) for (ps, op), axis in
              zip(UINT8_CONCAT_SETS.values(), (1, 3, 1, 1))]
    check_concat(groups, "uint8")
    v = 0.5 * (all_codes(np.uint8).astype(np.float64) - 3)  # the "ties" set's first input
    assert count_ties(v[v > 0]) > 10 and count_ties(v[v < 0]) > 0
    # the "fma" set's first input: u * k + c with one rounding (an FMA) would differ
    (si, zi), (so, _) = UINT8_CONCAT_SETS["fma"][0][0], UINT8_CONCAT_SETS["fma"][1]
    k, c = tflite_concat_scaling(si, zi, so)
    u = all_codes(np.uint8).astype(F32)
    def away(v):
        v = np.asarray(v, np.float64)
        return np.sign(v) * np.floor(np.abs(v) + 0.5)

    assert not np.array_equal(away(fma_f32(u, k, c)), away(F32(u * k) + c))


def random_uint8_concat(rng):
    ps = [(float(F32(np.exp(rng.uniform(-5, 0)))), int(rng.integers(0, 256))) for _ in range(2)]
    return uint8_concat_group(ps, (float(F32(np.exp(rng.uniform(-5, 0)))),
                                   int(rng.integers(0, 256))))


def test_concat_uint8_random_parameter_sweep():
    rng = np.random.default_rng(300)
    check_concat([random_uint8_concat(rng) for _ in range(6)], "uint8")


@pytest.mark.slow
def test_concat_uint8_random_parameter_sweep_large():
    rng = np.random.default_rng(301)
    for _ in range(4):
        check_concat([random_uint8_concat(rng) for _ in range(15)], "uint8")


def test_concat_q31_single_reference_matches_build():
    """q31_single changes no concat arithmetic (TFLite's rescaling is float): still checked."""
    groups = [uint8_concat_group(*UINT8_CONCAT_SETS[k]) for k in ("random", "ties")]
    check_concat(groups, "uint8", rounding="q31_single", oracle=False)
