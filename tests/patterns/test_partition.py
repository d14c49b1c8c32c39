"""``partition`` (FuseOpsByPattern + MergeCompositeFunctions) and ``describe`` on a canonical
MobileNet-v1: what a backend claims, what stays on the host, in ``main``'s order."""

from __future__ import annotations

import pytest

from _pattern_modules import mobilenet_v1_canonical
from canonqnn import _tvm
from canonqnn.ops import lookup
from canonqnn.patterns import (
    composite_calls,
    composite_params,
    describe,
    fusion_patterns,
    partition,
)

N_CONV, N_DEPTHWISE = 9, 4


@pytest.fixture(scope="module")
def canonical():
    return mobilenet_v1_canonical()


def main_ops(mod) -> list[str]:
    """The labels ``describe`` gives, for every op of an unpartitioned ``main``, in order."""
    out = []
    for _, value in _tvm.function_bindings(mod["main"]):
        op = lookup(value)
        name = _tvm.op_name(value)
        if op is not None:
            out.append(f"canonqnn.{op.name}")
        elif name is not None:
            out.append(name.removeprefix("relax."))
    return out


def test_the_network_is_canonical_between_one_quantize_and_one_dequantize(canonical):
    ops = main_ops(canonical)
    assert ops[0] == "quantize" and ops[-1] == "dequantize"
    assert all(op.startswith("canonqnn.") for op in ops[1:-1])
    assert ops.count("canonqnn.conv2d") == N_CONV


def test_default_patterns_offload_every_canonical_op_and_leave_only_qdq_on_the_host(canonical):
    ops = main_ops(canonical)
    part = describe(partition(canonical))
    host = [r for r in part.regions if not r.offloaded]
    assert [r.ops for r in host] == [("quantize",), ("dequantize",)]
    assert {r.backend for r in part.regions if r.offloaded} == {"canonqnn"}
    assert part.ops(True) == ops[1:-1]
    assert part.counts() == {"offloaded": len(ops) - 2, "host_canonical": 0, "host_other": 2,
                             "backend_functions": 1}


def test_without_merge_each_composite_is_its_own_region(canonical):
    ops = main_ops(canonical)
    part = describe(partition(canonical, merge=False))
    offloaded = [r for r in part.regions if r.offloaded]
    assert [(r.backend, r.composites, r.ops) for r in offloaded] == [
        ("canonqnn", (op,), (op,)) for op in ops[1:-1]]
    assert part.counts()["backend_functions"] == len(ops) - 2


def test_a_backend_selecting_conv2d_offloads_only_the_convolutions(canonical):
    ops = main_ops(canonical)
    part = describe(partition(canonical, fusion_patterns("npu", ops=["conv2d"])))
    assert part.counts() == {"offloaded": N_CONV, "host_canonical": len(ops) - 2 - N_CONV,
                             "host_other": 2, "backend_functions": 1}
    assert {r.backend for r in part.regions if r.offloaded} == {"npu"}
    assert all(c == "npu.conv2d" for r in part.regions for c in r.composites)


def test_a_backend_check_declining_depthwise_convolutions_splits_the_regions(canonical):
    seen = []

    def dense_only(p):
        seen.append(p.depthwise)
        return not p.depthwise

    part = describe(partition(canonical, fusion_patterns("npu", ops=["conv2d"],
                                                         check=dense_only)))
    assert sorted(seen) == [False] * (N_CONV - N_DEPTHWISE) + [True] * N_DEPTHWISE
    c = part.counts()
    assert c["offloaded"] == N_CONV - N_DEPTHWISE
    assert c["host_canonical"] == len(main_ops(canonical)) - 2 - (N_CONV - N_DEPTHWISE)
    # dense and depthwise convolutions alternate: each dense one is its own backend function
    assert c["backend_functions"] == N_CONV - N_DEPTHWISE


def test_patterns_that_match_nothing_leave_every_op_on_the_host(canonical):
    ops = main_ops(canonical)
    part = describe(partition(canonical, fusion_patterns("npu", ops=["conv2d_transpose"])))
    assert [r.ops for r in part.regions] == [(op,) for op in ops]
    assert part.counts() == {"offloaded": 0, "host_canonical": len(ops) - 2, "host_other": 2,
                             "backend_functions": 0}


def test_describe_keeps_the_order_of_main(canonical):
    ops = main_ops(canonical)
    for patterns in (None, fusion_patterns("npu", ops=["conv2d"])):
        for merge in (True, False):
            part = describe(partition(canonical, patterns, merge=merge))
            assert [op for r in part.regions for op in r.ops] == ops


def test_summary_counts_and_names_every_region(canonical):
    part = describe(partition(canonical, fusion_patterns("npu", ops=["conv2d"])))
    first, *lines = part.summary().splitlines()
    c = part.counts()
    assert first == (f"offloaded: {c['offloaded']} canonical ops in {c['backend_functions']} "
                     f"backend function(s); host: {c['host_canonical']} canonical ops, "
                     f"{c['host_other']} other ops")
    assert len(lines) == len(part.regions)
    for line, region in zip(lines, part.regions):
        where, what = line.split(maxsplit=1)
        if region.offloaded:
            assert (where, what) == ("npu", ", ".join(region.composites))
        else:
            assert (where, what) == ("host", region.ops[0])
    assert lines[0].split() == ["host", "quantize"]
    assert lines[1].split() == ["npu"] + ["npu.conv2d,"] * (N_CONV - 1) + ["npu.conv2d"]


def test_composite_calls_list_each_composite_of_a_backend_function_with_its_arguments(canonical):
    part = partition(canonical, fusion_patterns("npu", ops=["conv2d"]))
    (backend_function,) = [f for _, f in part.functions_items()
                           if f.attrs is not None and "Codegen" in f.attrs]
    calls = composite_calls(backend_function)
    assert [name for _, name, _, _ in calls] == ["npu.conv2d"] * 9
    # the first reads the function's parameter, each later one the result before it
    assert calls[0][3] == [backend_function.params[0]]
    for (prev_var, *_), (_, _, _, args) in zip(calls, calls[1:]):
        assert args == [prev_var]
    assert [composite_params(f).op for _, _, f, _ in calls] == ["conv2d"] * 9
