"""A module file's JSON graph is checked before TVM reads it (``_tvm.check_json_graph``): TVM's
loader and printer recurse once per level of nesting and expand shared structure, so a small
file nested thousands deep or shaped as a doubling DAG would crash or exhaust the process."""

from __future__ import annotations

import json

import pytest

from canonqnn import _tvm


def graph(nodes: list[dict], root: int | None = None) -> str:
    return json.dumps({"root_index": len(nodes) - 1 if root is None else root, "nodes": nodes})


def nested(depth: int) -> list[dict]:
    """An int inside ``depth`` arrays: ``depth + 1`` levels."""
    nodes = [{"type": "int", "data": 1}]
    for k in range(depth):
        nodes.append({"type": "ffi.Array", "data": [k]})
    return nodes


def doubling(levels: int, kind: str = "ffi.Array") -> list[dict]:
    """``levels`` nodes each holding the previous one twice (maps: under keys "a" and "b")."""
    nodes = [{"type": "ffi.String", "data": "a"}, {"type": "ffi.String", "data": "b"},
             {"type": "int", "data": 1}]
    for _ in range(levels):
        prev = len(nodes) - 1
        data = [prev, prev] if kind == "ffi.Array" else [0, prev, 1, prev]
        nodes.append({"type": kind, "data": data})
    return nodes


def refusal(text: str, root_type: str | None = None) -> str:
    with pytest.raises(ValueError) as info:
        _tvm.check_json_graph(text, root_type)
    return str(info.value)


def test_a_graph_nested_thousands_deep_is_refused_naming_the_node():
    reason = refusal(graph(nested(3000)))
    assert reason == (f"node {_tvm.JSON_MAX_DEPTH} (ffi.Array) is nested more than "
                      f"{_tvm.JSON_MAX_DEPTH} levels deep (canonqnn writes modules nested about "
                      "20 deep)")


def test_nesting_up_to_the_bound_is_accepted_and_one_more_level_refused():
    _tvm.check_json_graph(graph(nested(_tvm.JSON_MAX_DEPTH - 1)))
    refusal(graph(nested(_tvm.JSON_MAX_DEPTH)))


@pytest.mark.parametrize("kind, levels", [("ffi.Array", 80), ("ffi.Map", 60),
                                          ("ffi.Array", 20)])
def test_a_small_graph_expanding_far_beyond_its_size_is_refused(kind, levels):
    nodes = doubling(levels, kind)
    limit = _tvm.JSON_EXPANSION_PER_NODE * len(nodes) + _tvm.JSON_EXPANSION_FLOOR
    assert refusal(graph(nodes)).startswith(f"its {len(nodes)} nodes expand to more than "
                                            f"{limit} when printed")


def test_sharing_that_expands_within_the_bound_is_accepted():
    _tvm.check_json_graph(graph(doubling(15)))  # 2**16 leaves: under the floor


def _var_used_many_times(var_type: str, uses: int) -> list[dict]:
    """A variable whose type holds ``uses`` integers, referred to ``uses`` times."""
    nodes = [{"type": "int", "data": k} for k in range(uses)]
    nodes.append({"type": "ffi.Array", "data": list(range(uses))})
    nodes.append({"type": var_type, "data": {"ty": uses}})
    nodes.append({"type": "ffi.Array", "data": [uses + 1] * uses})
    return nodes


def test_a_variable_costs_one_printed_node_where_it_is_used():
    # printed by name where used: its large type counts once, where it is defined
    _tvm.check_json_graph(graph(_var_used_many_times("relax.expr.DataflowVar", 2000)))
    # the same graph with an array in the variable's place expands 2000 x 2000
    refusal(graph(_var_used_many_times("ffi.Array", 2000)))


@pytest.mark.parametrize("root", [{"type": "None"}, {"type": "int", "data": 1},
                                  {"type": "ffi.String", "data": "x"},
                                  {"type": "ffi.Array", "data": []},
                                  {"type": "ffi.Map", "data": []}])
def test_a_graph_whose_root_is_not_the_type_asked_for_is_refused(root):
    assert refusal(graph([root]), "ir.IRModule") == f"its root is {root['type']}, not ir.IRModule"
    _tvm.check_json_graph(graph([root]))  # a graph of its own, when no type is asked for


def test_json_nested_too_deeply_for_the_parser_is_refused():
    assert refusal("[" * 100_000 + "]" * 100_000) == "JSON nested too deeply"


def test_integer_fields_of_a_shape_are_not_references():
    shape = {"type": "ffi.Shape", "data": [1, 4, 224, 224]}  # dimensions, not node indices
    _tvm.check_json_graph(graph([shape]))
