"""A canonical (or fake-quant) module as Model Explorer's graph JSON (docs/view.md).

Model Explorer reads a graph from one of its adapters or from a JSON file of its graph format:
a ``GraphCollection`` (a label and graphs; a graph is nodes with an id, a label, a namespace
that nests them into layers, attributes, incoming edges and a style; the dataclasses of
``model_explorer.graph_builder``). canonqnn writes that JSON with plain dicts rather than
through an adapter: an export is then made on the base install and loads later in any Model
Explorer without canonqnn, and ``canonqnn view`` serves the very file it would export.

Two graphs of the same nodes (same ids, so node data applies to both):

- ``LAYERS``: nested by the source model's names (the layer path of the tensor each op
  computes), float islands grouped apart and coloured, each with its reason and near misses;
- ``KERNELS``: nested by the kernel of the build that computes each op (after TVM's fusion).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _tvm, qdq
from ..io import module_io
from ..ops import lookup

LAYERS = "canonical (by layer)"
KERNELS = "canonical (by kernel)"
ISLAND_LAYER = "float island"  # namespace of the k-th island: "float island k"

CANONICAL_COLOR = "#d0ebff"
ISLAND_COLOR = "#ffd8a8"
BOUNDARY_COLOR = "#e9ecef"  # quantize, dequantize and the module's inputs and outputs
DIVERGING_BORDER = "#e03131"


@dataclass
class Node:
    id: str
    label: str
    layer: str
    kernel: str = ""
    attrs: list[tuple[str, str]] = field(default_factory=list)
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (source, output, input)
    outputs: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    color: str = BOUNDARY_COLOR
    border: str = ""

    def to_json(self, namespace: str) -> dict[str, Any]:
        node: dict[str, Any] = {
            "id": self.id, "label": self.label, "namespace": namespace,
            "attrs": [{"key": k, "value": v} for k, v in self.attrs],
            "incomingEdges": [{"sourceNodeId": s, "sourceNodeOutputId": o,
                               "targetNodeInputId": i} for s, o, i in self.edges],
            "outputsMetadata": [{"id": str(k), "attrs": [
                {"key": "tensor_name", "value": self.id if k == 0 else f"{self.id}:{k}"},
                {"key": "dtype", "value": dtype}, {"key": "shape", "value": _shape(shape)}]}
                for k, (dtype, shape) in enumerate(self.outputs)],
            "style": {"backgroundColor": self.color},
        }
        if self.border:
            node["style"]["borderColor"] = self.border
        return node


def graph_collection(label: str, mod: Any, report: Any, kernels: dict[str, str] | None = None,
                     layers: dict[str, dict[str, Any]] | None = None,
                     diverging: tuple[str, str] | None = None) -> dict[str, Any]:
    """Model Explorer's ``GraphCollection`` of ``mod`` (module doc). ``report``: its
    conversion report (``rewrites.Report``); ``kernels``: the kernel computing each variable
    (``build.builder.kernel_of_vars``), for the second graph; ``layers``: per variable, its
    comparison with the source runtime (``oracle.divergence.LayerDifference`` as JSON);
    ``diverging``: the first diverging layer's variable and how it differs
    (``Divergence.var``, ``Divergence.summary``)."""
    nodes = module_nodes(mod, report, kernels or {}, layers or {}, diverging)
    graphs = [_graph(LAYERS, nodes, lambda n: n.layer)]
    if kernels:
        graphs.append(_graph(KERNELS, nodes, lambda n: n.kernel))
    return {"label": label, "graphs": graphs}


def _graph(graph_id: str, nodes: list[Node], namespace: Any) -> dict[str, Any]:
    return {
        "id": graph_id,
        "nodes": [n.to_json(namespace(n)) for n in nodes],
        "groupNodeConfigs": [{"namespaceRegex": f"^{ISLAND_LAYER} \\d+$",
                              "backgroundColor": "#fff4e6", "borderColor": "#fd7e14"}],
    }


def module_nodes(mod: Any, report: Any, kernels: dict[str, str],
                 layers: dict[str, dict[str, Any]], diverging: tuple[str, str] | None
                 ) -> list[Node]:
    """One node per input, per call in ``main`` and per output, in graph order."""
    func = mod["main"]
    profile = report.numerics or "none recorded"
    islands = {i.var: i for i in report.float_islands}
    island_layer = _island_layers(func, set(islands))
    nodes: list[Node] = []
    source: dict[Any, list[tuple[str, str]]] = {}  # var -> the (node, output) it holds
    taken: set[str] = set()
    for param in _tvm.function_params(func):
        name = _tvm.var_name(param)
        node = Node(f"input:{name}", "input", "", attrs=[("name", name)],
                    outputs=_tvm.tensor_types(param))
        nodes.append(node)
        source[param] = [(node.id, "0")]
    for var, value in _tvm.function_bindings(func):
        if _tvm.is_var(value):
            source[var] = source.get(value, [])
            continue
        if (item := _tvm.tuple_item(value)) is not None:  # (a call's outputs, or a tuple's)
            held = source.get(item[0], [])
            source[var] = held[item[1]:item[1] + 1]
            continue
        fields = _tvm.tuple_fields(value)
        if fields:
            source[var] = [s for f in fields for s in source.get(f, [])]
            continue
        if _tvm.op_name(value) is None:
            continue
        node = _call_node(var, value, source, profile)
        if node.id in taken:  # (two variables of one name: ids must be unique in a graph)
            node.id = f"{node.id}#{len(nodes)}"
        taken.add(node.id)
        nodes.append(node)
        source[var] = [(node.id, str(k)) for k in range(len(node.outputs))]
        name = _tvm.var_name(var)
        node.kernel = kernels.get(name, "")
        if node.kernel:
            node.attrs.append(("kernel", node.kernel))
        if name in islands:
            node.layer, node.color = island_layer[name], ISLAND_COLOR
            node.attrs.append(("float island", islands[name].reason))
            misses = report.near_misses.get(name, [])
            node.attrs += [(f"near miss {k + 1}", f"rule {m.rule} ({m.phase}) declined at "
                            f"{m.step}: {m.reason}") for k, m in enumerate(misses)]
        if name in layers:
            layer = layers[name]
            node.attrs += [("parity: differing values",
                            f"{layer['differing']} of {layer['elements']}"),
                           ("parity: max |diff|", f"{layer['max_lsb']} LSB"),
                           ("parity: runtime tensor", layer["tensor"])]
        if diverging is not None and diverging[0] == name:
            node.border = DIVERGING_BORDER
            node.attrs.append(("parity: first diverging layer", diverging[1]))
    nodes += _output_nodes(mod, func, source)
    return nodes


def _call_node(var: Any, call: Any, source: dict[Any, list[tuple[str, str]]],
               profile: str) -> Node:
    name = _tvm.var_name(var)
    op_name = _tvm.op_name(call) or "call"
    op = lookup(call)
    canonical = op is not None
    arg_names = list(op.args) if op is not None else []
    tensor = qdq.source_tensor(call)
    node = Node(name, op_name.removeprefix("relax."), layer_of(tensor),
                outputs=_tvm.tensor_types(var),
                color=CANONICAL_COLOR if canonical else BOUNDARY_COLOR)
    node.attrs.append(("op", op_name))
    if tensor:
        node.attrs.append(("source tensor", tensor))
    if canonical or op_name in ("relax.quantize", "relax.dequantize"):
        node.attrs.append(("numerics", profile))
    for key, value in sorted(_tvm.attrs_dict(call).items()):
        node.attrs.append((key, _text(value)))
    inputs = 0
    for arg in _tvm.items(call.args):
        for held in (_tvm.tuple_fields(arg) or [arg]):
            if _tvm.is_var(held):
                for src, out in source.get(held, []):
                    node.edges.append((src, out, str(inputs)))
                    inputs += 1
            elif _tvm.is_const(held):
                what = arg_names[inputs] if inputs < len(arg_names) else f"input {inputs}"
                node.attrs.append((what, _constant(held)))
                inputs += 1
    return node


def _output_nodes(mod: Any, func: Any, source: dict[Any, list[tuple[str, str]]]) -> list[Node]:
    result = _tvm.function_result(func)
    held = [s for f in (_tvm.tuple_fields(result) or [result]) for s in source.get(f, [])]
    io = module_io(mod)
    names = [o.name for o in io.outputs] if io is not None and len(io.outputs) == len(held) \
        else [f"output {k}" for k in range(len(held))]
    types = _tvm.tensor_types(result)
    return [Node(f"output:{name}", "output", "", attrs=[("name", name)],
                 edges=[(src, out, "0")], outputs=[types[k]] if k < len(types) else [])
            for k, (name, (src, out)) in enumerate(zip(names, held))]


def layer_of(tensor: str | None) -> str:
    """The layer path of a source tensor's name: its folders (``/backbone/conv1/Conv_output_0``
    -> ``backbone/conv1``); TFLite joins the names of the ops it fused with ``;``: the first
    is taken."""
    if not tensor:
        return ""
    parts = [p for p in tensor.split(";")[0].split("/") if p]
    return "/".join(parts[:-1])


def _island_layers(func: Any, island_vars: set[str]) -> dict[str, str]:
    """Each float island op's layer, ``float island k``: one per connected run of island ops."""
    parent = {name: name for name in island_vars}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    order = []
    for var, value in _tvm.function_bindings(func):
        name = _tvm.var_name(var)
        if name not in parent:
            continue
        order.append(name)
        if _tvm.op_name(value) is None:
            continue
        for arg in _tvm.items(value.args):
            for held in (_tvm.tuple_fields(arg) or [arg]):
                if _tvm.is_var(held) and (other := _tvm.var_name(held)) in parent:
                    parent[root(name)] = root(other)
    numbers: dict[str, int] = {}
    for name in order:
        numbers.setdefault(root(name), len(numbers) + 1)
    return {name: f"{ISLAND_LAYER} {numbers[root(name)]}" for name in order}


def _constant(expr: Any) -> str:
    (dtype, shape), = _tvm.tensor_types(expr)
    if int(np.prod(shape)) == 1:
        return f"constant {dtype} {_text(_tvm.const_value(expr).reshape(-1)[0].item())}"
    return f"constant {dtype}{_shape(shape)}"


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)
