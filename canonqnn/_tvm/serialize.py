"""Modules as text: TVMScript, and TVM's JSON graph, checked before TVM's loader reads it."""

from __future__ import annotations

from typing import Any

import tvm

# What TVMScript appends when it leaves the constants out: advice to a TVM API user, not to
# someone reading canonqnn's output (metadata["..."] in the text says where they are).
_METADATA_ADVICE = "# Metadata omitted. Use show_meta=True in script() method to show it."


def script(mod: Any, show_meta: bool = False) -> str:
    """``mod`` as TVMScript text (its constants as ``metadata[...]`` unless ``show_meta``)."""
    text = mod.script(show_meta=show_meta)
    return text.replace(_METADATA_ADVICE, "").rstrip() + "\n"


def save_json(mod: Any) -> str:
    return tvm.ir.save_json(mod)


def load_json(text: str, root_type: str | None = None) -> Any:
    """``tvm.ir.load_json`` of a graph ``check_json_graph`` accepts."""
    check_json_graph(text, root_type)
    return tvm.ir.load_json(text)


# Node types of TVM's JSON graph whose ``data`` is a literal, not references to other nodes.
JSON_LITERALS = frozenset({"None", "int", "float", "bool", "ffi.String", "ffi.Bytes",
                           "ffi.Tensor", "ffi.Shape", "DataType", "Device"})


# Variables: TVM's printer writes a variable's name where it is used and its type only where
# it is defined, so a reference to one costs one printed node however large its type.
JSON_NAMED = frozenset({"ir.Var", "relax.expr.DataflowVar", "ir.GlobalVar"})


# TVM's loader (and its printer, hashing and passes) recurse once per level of nesting: on an
# 8 MiB stack the loader crashes between 2,000 and 3,000 levels. Modules canonqnn writes nest
# 18 to 20 levels, whatever the model's size (bindings are one flat list): measured on the
# ONNX and TFLite test networks (canonqnn.testing), every model of docs/models.md (detectors,
# LSTM, dynamic and 16-bit quantization) and generated conv and transformer graphs of 1k to
# 50k nodes. 256 is over 12x that and 10x below the crash.
JSON_MAX_DEPTH = 256


# TVM's printer expands shared structure: what hangs off a node referenced twice is printed
# twice, so 80 arrays each holding the previous one twice print 2**80 nodes. The expansion of
# modules canonqnn writes (types and constants are shared on purpose) measured 4.0 to 14.7
# printed nodes per node of the file on the models above, 17.1 on a chain of 48 convs
# sharing one weight, bias and set of scales (the more bindings share, the fewer nodes the
# file has for what is printed). A file may expand to 128 per node (7x the most measured)
# plus a floor for small files: printing it costs at most a few times what printing a real
# module of the same size does, linear in the file.
JSON_EXPANSION_PER_NODE = 128


JSON_EXPANSION_FLOOR = 100_000


def check_json_graph(text: str, root_type: str | None = None) -> None:
    """Raise ValueError unless ``text`` is a graph TVM's ``save_json`` could have written: a
    ``nodes`` list whose references (the integers in a node's ``data``) each name an earlier
    node, and a ``root_index`` naming one (of type ``root_type``, when given). ``load_json``
    follows references without checking them: one back to the root or forward makes a cycle,
    and it crashes the process. The graph must also nest at most ``JSON_MAX_DEPTH`` deep and
    expand to at most ``JSON_EXPANSION_PER_NODE`` printed nodes per node (see there): one pass
    over the nodes, in time and memory linear in the file. (An integer a node stores inline,
    such as a type's ``ndim``, counts as a reference too: a small over-count.)"""
    import json

    try:
        graph = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:  # (the text's own brackets; a graph TVM writes nests two deep)
        raise ValueError("JSON nested too deeply") from None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    root = graph.get("root_index") if isinstance(graph, dict) else None
    if not isinstance(nodes, list) or not nodes or not isinstance(root, int) or \
            isinstance(root, bool) or not 0 <= root < len(nodes):
        raise ValueError("not a TVM JSON graph (a nodes list and a root_index in it)")
    limit = JSON_EXPANSION_PER_NODE * len(nodes) + JSON_EXPANSION_FLOOR
    depth = [0] * len(nodes)
    cost = [0] * len(nodes)  # printed nodes a reference to a node costs: its tree's, saturating
    named = 0  # the trees of the variables, each printed once where it is defined
    root_size = 0
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise ValueError(f"node {index} is not a typed node")
        kind = node["type"]
        deepest, size = 0, 1
        if kind not in JSON_LITERALS:
            for ref in _json_references(node.get("data")):
                if not 0 <= ref < index:
                    raise ValueError(f"node {index} ({kind}) refers to node {ref}: only "
                                     "earlier nodes can be referred to")
                deepest = max(deepest, depth[ref])
                size += cost[ref]
        if deepest >= JSON_MAX_DEPTH:
            raise ValueError(f"node {index} ({kind}) is nested more than {JSON_MAX_DEPTH} "
                             "levels deep (canonqnn writes modules nested about 20 deep)")
        depth[index], size = deepest + 1, min(size, limit + 1)
        cost[index] = 1 if kind in JSON_NAMED else size
        if kind in JSON_NAMED:
            named = min(named + size, limit + 1)
        if index == root:
            root_size = size
    if root_size + named > limit:
        raise ValueError(f"its {len(nodes)} nodes expand to more than {limit} when printed "
                         f"(structure shared over and over; a module canonqnn writes expands "
                         f"to about 20 per node at most)")
    if root_type is not None and nodes[root]["type"] != root_type:
        raise ValueError(f"its root is {nodes[root]['type']}, not {root_type}")


def _json_references(data: Any):
    """The integers anywhere in a node's ``data``, without recursion."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, bool) or item is None or isinstance(item, (str, float)):
            continue
        if isinstance(item, int):
            yield item
        elif isinstance(item, list):
            pending.extend(reversed(item))
        elif isinstance(item, dict):
            pending.extend(reversed(list(item.values())))
