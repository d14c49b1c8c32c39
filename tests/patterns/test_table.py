"""The pattern table: one pattern per canonical op, fused producer -> lut groups first,
registered with TVM under ``canonqnn.``; check functions see ``OpParams``."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix

from _pattern_modules import (
    QOUT,
    conv2d_call,
    example,
    function_module,
    producer_then_lut,
    table,
    var,
)
from canonqnn import _tvm
from canonqnn.ops import REGISTRY
from canonqnn.patterns import (
    OpParams,
    Quant,
    describe,
    fusion_patterns,
    params_of,
    partition,
    register,
    specs,
)

GROUPS = [s for s in specs() if s.fused]
LUT_OUT = Quant(0.0078125, -2)   # the lut's output in producer_then_lut


def names(patterns) -> list[str]:
    return [str(p.name) for p in patterns]


def test_every_registered_op_has_a_single_op_spec():
    single = [s for s in specs() if not s.fused]
    assert [s.name for s in single] == list(REGISTRY)
    assert all(s.ops == (s.name,) for s in single)


def test_groups_are_a_producer_then_lut_and_come_before_single_ops():
    kinds = [s.fused for s in specs()]
    assert kinds == sorted(kinds, reverse=True)  # every group before every single op
    assert {s.name for s in GROUPS} == {"conv2d_lut", "conv2d_transpose_lut", "matmul_lut",
                                        "add_lut", "mul_lut", "sub_lut"}
    assert [s.ops[0] for s in GROUPS] == [name for name, op in REGISTRY.items()
                                          if op.absorbs_table]
    for s in GROUPS:
        assert s.ops[1] == "lut" and s.ops[0] in REGISTRY and s.name == f"{s.ops[0]}_lut"


def test_tvm_registry_holds_every_spec_as_canonqnn_name_in_priority_order():
    expected = [f"canonqnn.{s.name}" for s in specs()]
    assert names(get_patterns_with_prefix("canonqnn")) == expected
    assert register() == expected


def test_registering_again_adds_no_entries():
    before = names(get_patterns_with_prefix("canonqnn"))
    register()
    register()
    after = names(get_patterns_with_prefix("canonqnn"))
    assert after == before and len(set(after)) == len(after)


def test_fusion_patterns_carry_the_prefix_and_keep_priority_order_for_a_selection():
    assert names(fusion_patterns()) == [f"canonqnn.{s.name}" for s in specs()]
    assert names(fusion_patterns("npu")) == [f"npu.{s.name}" for s in specs()]
    # a selection keeps the table's order (groups first), not the caller's
    assert names(fusion_patterns("npu", ops=["conv2d", "add", "conv2d_lut"])) == \
        ["npu.conv2d_lut", "npu.conv2d", "npu.add"]


def test_an_unknown_pattern_name_is_rejected_by_name():
    with pytest.raises(ValueError, match="'conv3d'"):
        fusion_patterns(ops=["conv2d", "conv3d"])


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_op_is_matched_by_its_own_pattern(name):
    """Whatever its number of arguments (concat's example has three inputs)."""
    call = example(name).call
    params = [a for a in call.args if isinstance(a, _tvm.Var)]
    mod = function_module(params, lambda emit, *_: [emit(call)])
    seen = []
    part = describe(partition(mod, fusion_patterns(check=lambda p: seen.append(p) or True),
                              merge=False))
    assert [(r.backend, r.composites, r.ops) for r in part.regions] == [
        ("canonqnn", (f"canonqnn.{name}",), (f"canonqnn.{name}",))]
    (p,) = seen
    expected = params_of(call)
    assert (p.op, p.inputs, p.output, p.input_shapes) == (name, expected.inputs,
                                                          expected.output, expected.input_shapes)


def _two_convs():
    """conv2d (dense, 4 -> 4 channels) then depthwise conv2d (4 groups)."""
    x = var("x", (1, 4, 6, 6))
    return function_module([x], lambda emit, x: [
        emit(conv2d_call(emit(conv2d_call(x, out_channels=4)), out_channels=4, groups=4))])


def test_check_receives_op_params_and_a_false_answer_leaves_the_op_unpartitioned():
    seen = []

    def dense_only(p):
        seen.append(p)
        return not p.depthwise

    mod = partition(_two_convs(), fusion_patterns("npu", ops=["conv2d"], check=dense_only),
                    merge=False)
    assert all(isinstance(p, OpParams) and p.op == "conv2d" for p in seen)
    assert sorted(p.depthwise for p in seen) == [False, True]
    regions = describe(mod).regions
    assert [(r.backend, r.composites, r.ops) for r in regions] == [
        ("npu", ("npu.conv2d",), ("canonqnn.conv2d",)),
        (None, (), ("canonqnn.conv2d",)),
    ]


@pytest.mark.parametrize("group", [s.name for s in GROUPS])
def test_a_producer_followed_only_by_lut_is_one_composite(group):
    producer = group.removesuffix("_lut")
    for merge in (False, True):
        regions = describe(partition(producer_then_lut(producer, table()), merge=merge)).regions
        assert [(r.backend, r.composites, r.ops) for r in regions] == [
            ("canonqnn", (f"canonqnn.{group}",), (f"canonqnn.{producer}", "canonqnn.lut"))]


def test_conv2d_lut_match_params_carry_the_lut_as_epilogue():
    values = table(3)
    seen = []
    partition(producer_then_lut("conv2d", values),
              fusion_patterns("npu", ops=["conv2d_lut"], check=lambda p: seen.append(p) or True))
    (p,) = seen
    assert p.op == "conv2d" and p.output == Quant(QOUT.scalar_scale, QOUT.scalar_zp)
    assert p.epilogue.op == "lut" and p.epilogue.epilogue is None
    assert p.epilogue.attrs["function"] == "sigmoid"
    np.testing.assert_array_equal(p.epilogue.constants["table"], values)
    assert p.epilogue.inputs == (p.output,)
    assert p.final_output == p.epilogue.output == LUT_OUT


def test_a_producer_whose_result_is_also_read_elsewhere_is_not_fused_with_its_lut():
    mod = producer_then_lut("conv2d", table(), leak=True)   # conv2d -> lut, conv2d -> add
    seen = []
    regions = describe(partition(mod, fusion_patterns(check=lambda p: seen.append(p) or True),
                                 merge=False)).regions
    assert [(r.composites, r.ops) for r in regions] == [
        (("canonqnn.conv2d",), ("canonqnn.conv2d",)),
        (("canonqnn.lut",), ("canonqnn.lut",)),
        (("canonqnn.add",), ("canonqnn.add",)),
    ]
    assert all(p.epilogue is None for p in seen)  # the group's check is never consulted


def test_a_check_declining_groups_leaves_their_ops_to_single_op_patterns():
    mod = partition(producer_then_lut("conv2d", table()),
                    fusion_patterns(check=lambda p: p.epilogue is None), merge=False)
    assert [r.composites for r in describe(mod).regions] == [("canonqnn.conv2d",),
                                                             ("canonqnn.lut",)]


def test_the_pattern_authors_doc_lists_every_op_with_exactly_its_arguments_and_attributes():
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "pattern-authors.md"
    rows = {}
    for line in doc.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"`\w+`", cells[0]) and cells[1] in {
                op.family for op in REGISTRY.values()}:
            rows[cells[0].strip("`")] = (re.findall(r"`([*\w]+)`", cells[2]),
                                         re.findall(r"`(\w+)`", cells[3]))
    assert set(rows) == set(REGISTRY), "update the op table (canonqnn ops prints the registry)"
    for name, op in REGISTRY.items():
        assert rows[name] == (list(op.args), list(op.attrs)), name
