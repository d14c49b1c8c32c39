"""Whole PT2E-quantized networks: converted with only the float islands the Report names, built,
and bit-exact with ExecuTorch's XNNPACK delegate; the distance to eager PyTorch is printed and
bounded (docs/parity.md). This host's class is checked here; the AVX2 class too on an AVX-512
host, by parity with ExecuTorch in children whose CPUID is masked to AVX2
(tests/support/cpuid_mask.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import canonqnn
from _pt2e import (
    NETWORKS,
    executorch_method,
    network,
    qdq_program,
    quiet,
    real_values,
    run_executorch,
)
from canonqnn.frontends.torch import load
from canonqnn.frontends.torch import runtime as torch_runtime
from canonqnn.qparams import INT8_CODES, QParams
from canonqnn.tables import kernel_table
from support import cpuid_mask

quiet()
# The float islands each network keeps, by op: what XNNPACK's quantizer leaves in float
# (layer norms, the attention's float matmuls and softmax), and on hosts whose XNNPACK float
# kernels canonqnn does not reproduce (profile xnnpack: tables unverified) the lookup tables.
ISLANDS = {
    "cnn": set(),
    "mobilenet_v2": set(),
    "encoder": {"relax.nn.layer_norm", "relax.squeeze", "relax.permute_dims", "relax.matmul",
                "relax.nn.softmax", "relax.reshape"},
    "gated_upsample": set(),
}
TABLES = {"cnn": set(), "mobilenet_v2": set(), "encoder": {"relax.nn.gelu"},
          "gated_upsample": {"relax.sigmoid"}}
# Eager PyTorch computes in float between quantize and dequantize: at most this many LSB
# from ExecuTorch at these outputs (docs/parity.md; measured: 1).
EAGER_LSB = 1
# Every case with -m slow; by default none: the README's parity of a .pt2 file
# (tests/cli/test_readme_commands.py) runs gated_upsample
# per-channel (its sigmoid table, bit-exact, eager within the bound), the three-format test a
# per-tensor network against ExecuTorch.
DEFAULT: set[tuple[str, bool]] = set()
CASES = [pytest.param(name, pc, id=f"{name}-{'pc' if pc else 'pt'}",
                      marks=[] if (name, pc) in DEFAULT else [pytest.mark.slow])
         for name in NETWORKS for pc in (True, False)]


@pytest.mark.parametrize("name,per_channel", CASES)
def test_network_is_bit_exact_with_executorch_xnnpack(name, per_channel):
    program = network(name, per_channel=per_channel)
    mod, report = canonqnn.canonicalize(load(program))
    profile = torch_runtime.profile()
    assert report.numerics == profile.name
    # the tables of a class canonqnn reproduces are lookup tables, else float islands
    tables = TABLES[name] if profile.tables == "unverified" else set()
    assert {island.op for island in report.float_islands} == ISLANDS[name] | tables
    assert report.canonical_ops.get("lut", 0) == len(TABLES[name] - tables)
    built = canonqnn.build(mod)
    method = executorch_method(program)
    rng = np.random.default_rng(0)
    for run in range(2):
        x = rng.standard_normal(NETWORKS[name][1]).astype(np.float32)
        got = list(built.run({"x": x}).values())
        want = run_executorch(method, x)
        with torch.no_grad():
            eager = program.module()(torch.from_numpy(x))
        eager = [e.numpy() for e in (eager if isinstance(eager, (tuple, list)) else [eager])]
        for info, g, w, e in zip(canonqnn.io.interface(mod).outputs, got, want, eager):
            assert np.array_equal(g, w), f"{info.name}: {np.sum(g != w)} of {w.size} differ"
            steps = np.abs(e.astype(np.float64) - w) / info.lsb
            print(f"{name} {info.name} run {run}: eager differs on {np.mean(steps > 0.5):.3%}, "
                  f"at most {steps.max():.2f} LSB")
            assert steps.max() <= EAGER_LSB + 1e-3


# The AVX2 class from an AVX-512 host, every case with -m slow (as this host's class). At these
# networks' parameters the two classes' tables agree, so by default the test below that they
# tell apart runs instead.
AVX2_CASES = [pytest.param(name, pc, id=f"{name}-{'pc' if pc else 'pt'}", marks=pytest.mark.slow)
              for name in NETWORKS for pc in (True, False)]


def _skip_without_the_mask():
    if (reason := cpuid_mask.unavailable("x86-avx2")) is not None:
        pytest.skip(f"no child of this host runs the AVX2 class: {reason}")


@pytest.mark.parametrize("name,per_channel", AVX2_CASES)
def test_network_is_bit_exact_with_executorch_xnnpack_masked_to_avx2(name, per_channel):
    """Converted for xnnpack-x86-avx2 (its tables all canonical ops), parity with ExecuTorch
    running in children masked to AVX2, which probe as that class."""
    _skip_without_the_mask()
    program = network(name, per_channel=per_channel)
    with cpuid_mask.masked("x86-avx2"):
        assert cpuid_mask.parity_child_profile() == "xnnpack-x86-avx2"
        result = canonqnn.parity(program, numerics="xnnpack-x86-avx2", runs=2)
    assert result.extra["numerics"] == "xnnpack-x86-avx2"
    assert {island["op"] for island in result.float_islands} == ISLANDS[name]
    assert result.canonical_ops.get("lut", 0) == len(TABLES[name])
    print(result.summary())
    assert result.exact, "\n".join(f"{o.name}: {o.exact_fraction:.4%} exact, at most "
                                   f"{o.max_abs_diff} LSB" for o in result.outputs if
                                   o.exact_fraction < 1) + \
        f"\n{result.extra.get('first_divergence_summary')}"
    (eager,) = result.extra["also_compared"]
    assert max(o["max_abs_diff"] for o in eager["outputs"]) <= EAGER_LSB + 1e-3


def test_parity_in_masked_children_tells_the_classes_apart():
    """A sigmoid table between parameters where the two classes' kernels quantize a code
    differently, over every code: converted for AVX2 it is bit-exact with the masked ExecuTorch,
    so that runs the AVX2 kernels, not this host's (the test above checks them)."""
    _skip_without_the_mask()
    in_qp = QParams.make(float(np.float32(0.0470358)), 0)
    out_qp = QParams.make(float(np.float32(0.0014777244068682194)), -128)
    differ = [np.sum(kernel_table("torch", "sigmoid", in_qp, out_qp, "xnnpack_avx2") !=
                     kernel_table("torch", "sigmoid", in_qp, out_qp, family))
              for family in ("xnnpack_avx2", "xnnpack_avx512")]
    assert differ == [0, 1]
    program = qdq_program(torch.sigmoid, [(in_qp.scalar_scale, 0)],
                          (out_qp.scalar_scale, -128), [(1, 256)])
    (name,) = (i.name for i in canonqnn.io.interface(canonqnn.canonicalize(load(program))[0])
               .inputs)
    every_code = real_values(INT8_CODES.astype(np.int8).reshape(1, -1), in_qp.scalar_scale, 0)
    with cpuid_mask.masked("x86-avx2"):
        result = canonqnn.parity(program, {name: every_code}, numerics="xnnpack-x86-avx2")
    assert result.exact and result.canonical_ops == {"lut": 1}
