"""The canonical ops under rounding ``xnnpack`` against ExecuTorch's XNNPACK delegate: add and
mul on every pair of int8 inputs, the global mean, and a model's boundary quantize (by the
reciprocal of the scale). Both the numpy reference and the TVM build must equal ExecuTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import canonqnn
from _ort import SingleOp
from _pt2e import executorch_method, qdq_program, real_values, run_executorch, stored
from canonqnn.ops import UnsupportedRounding, elementwise, pool
from canonqnn.qparams import QParams, xnnpack_add_multipliers

F32 = np.float32
PAIRS = np.stack(np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
# (a_scale, a_zp, b_scale, b_zp, out_scale, out_zp): calibrated-looking sets, a set whose
# ratios are far apart (the smaller multiplier keeps few bits), one that saturates
BINARY_SETS = {
    "typical": (0.0127, -3, 0.0091, 17, 0.0193, -8),
    "far_ratios": (0.2, 0, 0.0009, -100, 0.05, 20),
    "saturating": (0.05, 10, 0.04, -20, 0.01, 0),
}


def _f32(params):
    return tuple(float(F32(v)) if isinstance(v, float) else v for v in params)


# by default the typical set for both ops (the networks' tests add more); all with -m slow
BINARY_CASES = [pytest.param(name, key, id=f"{key}-{name}",
                             marks=[] if key == "typical" else [pytest.mark.slow])
                for key in BINARY_SETS for name in ("add", "mul")]


@pytest.mark.parametrize("name,key", BINARY_CASES)
def test_binary_matches_executorch_on_every_pair(name, key):
    sa, za, sb, zb, so, zo = _f32(BINARY_SETS[key])
    a, b = (p.reshape(1, -1).astype(np.int8) for p in PAIRS)
    fn = torch.add if name == "add" else torch.mul
    program = qdq_program(fn, [(sa, za), (sb, zb)], (so, zo), [a.shape, b.shape])
    (out,) = run_executorch(executorch_method(program), real_values(a, sa, za),
                            real_values(b, sb, zb))
    want = stored(out, so, zo)
    op = elementwise.ADD if name == "add" else elementwise.MUL
    qps = [QParams.make(s, z) for s, z in ((sa, za), (sb, zb), (so, zo))]
    single = SingleOp(lambda x, y: elementwise.binary(op, x, y, *qps, rounding="xnnpack"),
                      {"a": a.shape, "b": b.shape})
    ref, got = single.both(a=a, b=b)
    assert np.array_equal(ref, want), f"reference: {np.sum(ref != want)} of {want.size} differ"
    assert np.array_equal(got, want), f"build: {np.sum(got != want)} of {want.size} differ"
    if key == "saturating":
        assert np.mean(want == -128) > 0.05 and np.mean(want == 127) > 0.05


def test_add_refuses_ratios_xnnpack_refuses():
    x, y, out = QParams.make(1.0, 0), QParams.make(1.0, 0), QParams.make(1e-3, 0)
    with pytest.raises(Exception, match=r"2\^-10, 2\^8"):
        xnnpack_add_multipliers(1.0, 1.0, 1e-3)
    with pytest.raises(UnsupportedRounding, match="XNNPACK's add"):
        elementwise.binary(elementwise.ADD, canonqnn._tvm.const(np.zeros(2, np.int8)),
                           canonqnn._tvm.const(np.zeros(2, np.int8)), x, y, out,
                           rounding="xnnpack")


# slow: the three-format network's global mean runs against ExecuTorch by default
@pytest.mark.parametrize("shape", [pytest.param((1, 64, 7, 7), marks=pytest.mark.slow),
                                   pytest.param((2, 16, 3, 5), marks=pytest.mark.slow)])
def test_global_mean_matches_executorch(shape):
    rng = np.random.default_rng(sum(shape))
    si, zi, so, zo = float(F32(0.031)), -7, float(F32(0.0125)), 11
    x = rng.integers(-128, 128, shape).astype(np.int8)
    program = qdq_program(lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 1),
                          [(si, zi)], (so, zo), [shape])
    (out,) = run_executorch(executorch_method(program), real_values(x, si, zi))
    want = stored(out, so, zo)
    single = SingleOp(lambda t: pool.global_avg_pool2d(t, QParams.make(si, zi),
                                                        QParams.make(so, zo), rounding="xnnpack"),
                      {"x": shape})
    ref, got = single.both(x=x)
    assert np.array_equal(ref, want) and np.array_equal(got, want)


def test_a_float_input_is_quantized_by_the_reciprocal_of_its_scale():
    """Values where RNE(x / s) and RNE(x * f32(1/s)) differ: the build follows XNNPACK."""
    s = float(F32(0.1))
    candidates = (np.arange(-1280, 1280, dtype=np.float32) * F32(0.1) + F32(0.05)).astype(F32)
    by_division = np.rint(candidates / F32(s))
    by_reciprocal = np.rint((candidates * (F32(1) / F32(s))).astype(F32))
    x = candidates[(by_division != by_reciprocal) & (np.abs(by_division) < 127)][:64]
    assert x.size > 0
    program = qdq_program(lambda t: t, [(s, 0)], (s, 0), [(1, x.size)])
    (want,) = run_executorch(executorch_method(program), x.reshape(1, -1))
    from canonqnn.frontends.torch import load

    mod, _ = canonqnn.canonicalize(load(program))
    (name,) = [i.name for i in canonqnn.io.interface(mod).inputs]
    got = list(canonqnn.build(mod).run({name: x.reshape(1, -1)}).values())[0]
    assert np.array_equal(got, want)
    reciprocal = np.rint((x * (F32(1) / F32(s))).astype(F32))
    assert np.array_equal(stored(want.ravel(), s, 0), reciprocal.astype(np.int8))
    assert not np.array_equal(reciprocal, np.rint(x / F32(s)))
