"""The float islands of PT2E programs against ExecuTorch, float in, float out (docs/parity.md,
"Float islands"), as ``canonqnn.build.executorch_float`` builds them: a layer norm is bit-exact
(ExecuTorch's own kernel, both of its algorithms); a softmax, and the matmul reading it, are
bit-exact under ``xnnpack-x86-avx512`` (XNNPACK's AVX-512F kernel; other hosts check the build
against a recording) and within the bound the docs argue under the profiles that leave the
softmax to TVM."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

import canonqnn
from _pt2e import executorch_method, quiet, run_executorch
from canonqnn.frontends.torch import load
from canonqnn.frontends.torch import runtime as torch_runtime

quiet()
U = 2.0 ** -24  # float32's unit roundoff
# An absolute floor: below e^-70 XNNPACK's exp loses relative accuracy towards its cutoff near
# ln(FLT_MIN), and its kernels flush denormals, where TVM keeps them (measured: under 4.3e-38).
TINY = 2.0 ** -120


class LayerNorm(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(n)
        with torch.no_grad():
            self.norm.weight.normal_()
            self.norm.bias.normal_()

    def forward(self, x):
        return self.norm(x)


class Attention(torch.nn.Module):
    """softmax(a) and softmax(a) @ v: the encoder's float islands after its scores."""

    def forward(self, a, v):
        p = torch.softmax(a, dim=-1)
        return p, p @ v


def _both(module: torch.nn.Module, shapes: list[tuple[int, ...]], numerics: str | None = None):
    program = torch.export.export(module.eval(), tuple(torch.zeros(s) for s in shapes))
    mod, report = canonqnn.canonicalize(load(program), numerics=numerics)
    assert report.float_islands, "expected a float island"
    built = canonqnn.build(mod)
    names = [i.name for i in canonqnn.io.interface(mod).inputs]
    return executorch_method(program), lambda *xs: list(built.run(dict(zip(names, xs))).values())


# Below 256 normalized elements ExecuTorch sums in order, from 256 it takes Welford moments:
# 255/256 the switch, 1100 nine chunks (a merge order not a power of two) and a 4-element
# tail; with -m slow 300 (two chunks, a tail) and 4100 (five merge levels).
@pytest.mark.parametrize("shape", [(2, 8, 32), (3, 255), (3, 256), (2, 3, 1100),
                                   pytest.param((2, 300), marks=pytest.mark.slow),
                                   pytest.param((2, 4100), marks=pytest.mark.slow)],
                         ids=lambda s: f"n{s[-1]}")
def test_layer_norm_is_bit_exact_with_executorch(shape):
    torch.manual_seed(shape[-1])
    method, run = _both(LayerNorm(shape[-1]), [shape])
    rng = np.random.default_rng(shape[-1])
    for scale, shift in ((1.0, 0.0), (20.0, -7.0), (1e-3, 3.0)):
        x = (rng.standard_normal(shape) * scale + shift).astype(np.float32)
        want, = run_executorch(method, x)
        got, = run(x)
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), \
            f"{np.sum(got != want)} of {want.size} differ, up to {np.max(np.abs(got - want))}"


def softmax_bound(k: int) -> float:
    """The relative distance between the two float32 softmaxes of a row of ``k``
    (docs/parity.md): each p = e / S carries its exp's error a twice (in e and in S), the k - 1
    roundings of S, and the last step (XNNPACK: 1 / S and a product, 2 u; TVM: a division, 1 u);
    a = 2.7 u for XNNPACK's exp, 1.05 u for TVM's (measured where exp(x - max) >= e^-70)."""
    return (2 * 2.7 + 2 * 1.05 + 2 * (k - 1) + 3) * U


# sha256 of ExecuTorch 1.5.1's (softmax, softmax @ v) on _attention_inputs(k), recorded on
# Zen 4 (XNNPACK's AVX-512F kernel): hosts of another class check the build against it.
AVX512_DIGESTS = {
    8: "1a33c2a0dabdb9dc053b8f91e4b755a87c2f0b10eac629266c7931df7ad7309e",
    100: "44e1d6fc16b22b88c8e464cec94fd66457dd903d72c6f3406da30601b4a546bd",
}


def _attention_inputs(k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(k)
    shapes = [(2, 4, 8, k), (2, 4, k, 8)]
    return [tuple((rng.standard_normal(s) * scale).astype(np.float32) for s in shapes)
            for scale in (1.0, 4.0, 30.0, 100.0)]


def _digest(outputs: list[np.ndarray]) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes() for o in outputs)) \
        .hexdigest()


# 8: one masked register; 100: an interleaved block of 64, two of 16, a masked rest.
@pytest.mark.parametrize("k", [8, pytest.param(100, marks=pytest.mark.slow)])
def test_softmax_is_bit_exact_with_xnnpack_avx512(k):
    inputs = _attention_inputs(k)
    method, run = _both(Attention(), [a.shape for a in inputs[0]], numerics="xnnpack-x86-avx512")
    got = [o for a, v in inputs for o in run(a, v)]
    if torch_runtime.profile().name == "xnnpack-x86-avx512":
        want = [o for a, v in inputs for o in run_executorch(method, a, v)]
        for g, w in zip(got, want):
            assert np.array_equal(g.view(np.int32), w.view(np.int32)), \
                f"{np.sum(g != w)} of {w.size} differ, up to {np.max(np.abs(g - w))}"
        assert _digest(want) == AVX512_DIGESTS[k], "ExecuTorch's result changed"
    else:  # XNNPACK runs another kernel here: the build against the recording
        assert _digest(got) == AVX512_DIGESTS[k]


@pytest.mark.parametrize("k", [8, pytest.param(64, marks=pytest.mark.slow)])
def test_softmax_island_is_within_the_argued_bound(k):
    """Under the profiles whose softmax TVM computes (``xnnpack``, and ``xnnpack-x86-avx2``
    on its class), against the kernel of this host."""
    inputs = _attention_inputs(k)
    method, run = _both(Attention(), [a.shape for a in inputs[0]], numerics="xnnpack")
    worst_p = worst_o = 0.0
    for a, v in inputs:
        want_p, want_o = run_executorch(method, a, v)
        got_p, got_o = run(a, v)
        # relative, above the floor
        excess = np.abs(got_p.astype(np.float64) - want_p) - TINY
        worst_p = max(worst_p, float(np.max(excess / want_p, where=want_p > 0, initial=0.0)))
        assert np.all(excess <= 0, where=want_p == 0)
        # the matmul: the softmax's distance times sum |v|, and each side's k roundings
        reach = (np.abs(want_p.astype(np.float64)) @ np.abs(v.astype(np.float64)))
        limit = (softmax_bound(k) + 2 * k * U) * reach + TINY * np.abs(v).sum(-2, keepdims=True)
        worst_o = max(worst_o, float(np.max(np.abs(got_o.astype(np.float64) - want_o) / limit)))
    print(f"softmax k={k}: at most {worst_p / U:.1f} u (bound {softmax_bound(k) / U:.0f} u); "
          f"softmax @ v at most {worst_o:.2f} of its bound")
    assert worst_p <= softmax_bound(k)
    assert worst_o <= 1.0


@pytest.mark.parametrize("profile,ops", [
    ("xnnpack-x86-avx512", {"relax.nn.layer_norm", "relax.nn.softmax"}),
    ("xnnpack-x86-avx2", {"relax.nn.layer_norm"}), ("xnnpack", {"relax.nn.layer_norm"}),
    ("exact", set()), ("tflite-xnnpack-x86", set()), (None, set())])
def test_only_executorch_profiles_take_its_float_kernels(profile, ops):
    import tvm

    from canonqnn import numerics
    from canonqnn.build import executorch_float

    mod = tvm.IRModule({})
    if profile is not None:
        mod = numerics.record(mod, numerics.get(profile))
    assert set(executorch_float.legalizations(mod)) == ops
