"""The probe of ExecuTorch's XNNPACK: whether the float kernels it builds int8 lookup tables with
on this host are ones canonqnn reproduces (profile ``xnnpack-x86-avx512`` or
``xnnpack-x86-avx2``, else ``xnnpack``, whose tables stay float islands)."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import canonqnn
from _pt2e import executorch_method, qdq_program, real_values, run_executorch, stored
from canonqnn import reference
from canonqnn.frontends.torch import load, runtime
from canonqnn.io import interface
from canonqnn.qparams import INT8_CODES

CLASSES = ("xnnpack-x86-avx512", "xnnpack-x86-avx2")


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return {flag for line in f if line.startswith("flags")
                for flag in line.split(":", 1)[1].split()}


def test_probe_finds_the_kernels_of_the_hosts_class():
    """The probe runs the kernels; the CPU flags only check its answer here: XNNPACK picks its
    AVX-512F float kernels wherever avx512f is present (its unary configs test that flag
    alone), its AVX2+FMA3 ones on AVX2 hosts without it."""
    profile = runtime.profile()
    assert profile.name in (*CLASSES, "xnnpack")
    if platform.machine() == "x86_64" and platform.system() == "Linux":
        flags = _cpu_flags()
        if "avx512f" in flags:
            assert profile.name == "xnnpack-x86-avx512"  # AMD Zen 4/5, Intel Xeon
        elif {"avx2", "fma"} <= flags:
            assert profile.name == "xnnpack-x86-avx2"  # AMD Zen 3, Intel Haswell-Skylake


def test_without_the_reproduced_kernels_a_table_is_a_named_float_island():
    program = qdq_program(torch.sigmoid, [(0.05, 3)], (1 / 256, -128), [(1, 8)])
    _, report = canonqnn.canonicalize(load(program), numerics="xnnpack")
    (island,) = report.float_islands
    assert island.op == "relax.sigmoid"
    assert "numerics profile xnnpack: its lookup-table functions is not implemented " \
        "(tables=unverified)" in island.reason
    for name in CLASSES:
        _, report = canonqnn.canonicalize(load(program), numerics=name)
        assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands


ACTIVATIONS = {"sigmoid": torch.sigmoid, "silu": F.silu, "tanh": torch.tanh,
               "leaky_relu": lambda x: F.leaky_relu(x, 0.2)}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_a_converted_program_computes_what_executorch_computes_here(name):
    """The whole path under this host's profile: the program imported and canonicalized, its
    table evaluated on every input code, against ExecuTorch running the program."""
    profile = runtime.profile()
    if profile.name not in CLASSES:
        pytest.skip(f"this host's XNNPACK kernels are not reproduced ({profile.name})")
    (s_in, z_in), (s_out, z_out) = (0.0470358, 3), (0.0014777244068682194, -128)
    if name != "sigmoid":
        s_out, z_out = 0.012762786820530891, -17
    program = qdq_program(ACTIVATIONS[name], [(s_in, z_in)], (s_out, z_out), [(1, 256)])
    mod, report = canonqnn.canonicalize(load(program), numerics=profile.name)
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    (x_name,), (y_name,) = ([t.name for t in ts] for ts in (interface(mod).inputs,
                                                            interface(mod).outputs))
    x = real_values(INT8_CODES.astype(np.int8).reshape(1, -1), np.float32(s_in), z_in)
    got = reference.evaluate(mod, {x_name: x}).outputs[y_name]
    (want,) = run_executorch(executorch_method(program), x)
    assert np.array_equal(stored(got.reshape(-1), np.float32(s_out), z_out),
                          stored(want.reshape(-1), np.float32(s_out), z_out))
