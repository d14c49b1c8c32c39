"""The probe of ExecuTorch's XNNPACK: whether the float kernels it builds int8 lookup tables with
on this host are the ones canonqnn reproduces (then profile ``xnnpack-x86-avx2``, else
``xnnpack``, whose tables stay float islands)."""

from __future__ import annotations

import platform

import torch

import canonqnn
from _pt2e import qdq_program
from canonqnn.frontends.torch import load, runtime


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return {flag for line in f if line.startswith("flags")
                for flag in line.split(":", 1)[1].split()}


def test_probe_finds_the_avx2_kernels_on_the_hosts_that_run_them():
    profile = runtime.profile()
    assert profile.name in ("xnnpack-x86-avx2", "xnnpack")
    if platform.machine() == "x86_64" and platform.system() == "Linux":
        flags = _cpu_flags()
        if {"avx2", "fma"} <= flags and not any(f.startswith("avx512") for f in flags):
            assert profile.name == "xnnpack-x86-avx2"  # AMD Zen 3, Intel Haswell-Skylake


def test_without_the_reproduced_kernels_a_table_is_a_named_float_island():
    program = qdq_program(torch.sigmoid, [(0.05, 3)], (1 / 256, -128), [(1, 8)])
    _, report = canonqnn.canonicalize(load(program), numerics="xnnpack")
    (island,) = report.float_islands
    assert island.op == "relax.sigmoid"
    assert "numerics profile xnnpack: its lookup-table functions is not implemented " \
        "(tables=unverified)" in island.reason
    _, report = canonqnn.canonicalize(load(program), numerics="xnnpack-x86-avx2")
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
