"""See a model in Model Explorer: its canonical graph, float islands, fused kernels and, with
parity, where it parts ways with the source runtime (docs/view.md).

- ``graph``: the module as Model Explorer's graph JSON (two graphs: by layer, by kernel)
- ``overlay``: parity as Model Explorer node data
- ``server``: Model Explorer started on those files (the view extra)
- ``main``: the same as a Model Explorer adapter (``model-explorer --extensions canonqnn.view``)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .. import progress
from ..io import write_file
from .graph import graph_collection
from .overlay import parity_node_data


@dataclass
class View:
    label: str
    graphs: dict[str, Any]  # Model Explorer's GraphCollection
    node_data: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> ModelNodeData
    parity: Any = None  # the ParityResult the node data comes from

    def export(self, path: str | os.PathLike) -> list[str]:
        """Write the graph JSON to ``path`` and each node data beside it (``node_data_path``),
        each file whole or not at all; the files written."""
        path = os.fspath(path)
        write_file(path, json.dumps(self.graphs))
        files = [path]
        for name, data in self.node_data.items():
            files.append(node_data_path(path, name))
            write_file(files[-1], json.dumps(data))
        return files


def node_data_path(graph_path: str, name: str) -> str:
    """Where the node data ``name`` of the graph exported to ``graph_path`` goes:
    ``graph.json`` -> ``graph.parity-differing.json``."""
    stem, ext = os.path.splitext(graph_path)
    return f"{stem}.parity-{name}{ext or '.json'}"


def _exposes_tensors(mod: Any) -> bool:
    """Whether the source runtime of ``mod``'s format gives parity the model's inner tensors
    (``runtime_tensors`` of ``canonqnn.formats.FormatModule``)."""
    from .. import formats
    from ..io import module_io

    io = module_io(mod)
    return io is not None and hasattr(formats.get(io.source).implementation(), "runtime_tensors")


def view_of(model: Any, *, parity: bool = False, target: Any = None,
            numerics: str | None = None, inputs: Any = None, runs: int = 1, seed: int = 0,
            **options: Any) -> View:
    """``model`` (any input ``canonqnn.load`` takes) as Model Explorer graphs. ``parity``:
    run it in its source runtime and the build on ``inputs`` (default ``runs`` seeded random
    ones) and attach each canonical op's comparison with the runtime's tensor as node data
    (``oracle.parity.parity`` with ``layers``); ``target``: the build's (the kernels)."""
    from ..api import _source_name, convert
    from ..build.builder import kernel_of_vars

    label = os.path.basename(_source_name(model)) or "model"
    layers: list[dict[str, Any]] = []
    diverging = result = None
    if parity:
        from ..oracle.parity import parity as run_parity

        result = run_parity(model, inputs, runs=runs, seed=seed, target=target,
                            numerics=numerics, layers=True, **options)
        mod, report = result.module, result.report
        layers = result.extra["layers"]
        if report.canonical_ops and not _exposes_tensors(mod):
            progress.note(f"{result.reference} does not expose the model's inner tensors: no op "
                          "gets a parity overlay; only the outputs are compared (the summary)")
        if found := result.extra.get("first_divergence"):
            diverging = (found["var"], result.extra["first_divergence_summary"])
    else:
        mod, report = convert(model, numerics, **options)
    with progress.step("grouping the ops by the kernels of the build"):
        kernels = kernel_of_vars(mod, target)
    graphs = graph_collection(label, mod, report, kernels, {layer["var"]: layer
                                                            for layer in layers}, diverging)
    node_data = parity_node_data(layers, diverging[0] if diverging else None,
                                 [g["id"] for g in graphs["graphs"]]) if parity else {}
    return View(label, graphs, node_data, result)
