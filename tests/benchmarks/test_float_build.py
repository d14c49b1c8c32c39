"""benchmarks/float_build.py runs end to end (no timing asserted), and what makes float chains
build in about TVM's own time: fused kernels of a long float chain hold at most 8 ops each
(``pipeline.MAX_FUSE_DEPTH``; TVM's FuseOps alone fuses up to 256)."""

from __future__ import annotations

import canonqnn
from _benchmark_script import load
from canonqnn.build import inspect_kernels, pipeline


def _load():
    return load("float_build")


def test_float_build_benchmark_prints_seconds_and_the_ratio(capsys):
    assert _load().main(["--sizes", "12", "--mix"]) == 0
    header, row = capsys.readouterr().out.strip().splitlines()[-2:]
    assert header.split()[-1] == "a/b"
    n, islands, ours, tvm, ratio = row.split()
    assert (n, islands) == ("12", "13") and float(ours) > 0 and float(tvm) > 0


def test_a_long_float_chain_is_fused_into_kernels_of_a_bounded_number_of_ops():
    mod, report = canonqnn.canonicalize(canonqnn.load(_load().float_chain(60)))
    assert len(report.float_islands) == 61
    kernels = inspect_kernels(mod).kernels
    relus = [k.name.split("_").count("relu") for k in kernels]
    assert sum(relus) == 60 and max(relus) == pipeline.MAX_FUSE_DEPTH == 8
