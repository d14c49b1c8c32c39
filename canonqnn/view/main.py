"""A Model Explorer adapter for canonqnn: ``model-explorer --extensions=canonqnn.view`` opens
ONNX, TFLite and ``.pt2`` models as their canonical graphs (``canonqnn.view.graph``).

Model Explorer loads an extension's ``main`` module and registers the adapter classes it
defines. The adapter converts in Model Explorer's server, with no parity and no progress;
``canonqnn view`` shows more (docs/view.md).
"""

from __future__ import annotations

from typing import Any

import dacite
from model_explorer import Adapter, AdapterMetadata, ModelExplorerGraphs, graph_builder


def graphs_of(collection: dict[str, Any]) -> list[graph_builder.Graph]:
    """The graphs of a ``GraphCollection`` as Model Explorer's dataclasses; an unknown field or
    a value of the wrong type raises (``dacite``'s strict conversion)."""
    typed = dacite.from_dict(graph_builder.GraphCollection, collection,
                             config=dacite.Config(strict=True))
    return typed.graphs


class CanonqnnAdapter(Adapter):
    metadata = AdapterMetadata(
        id="canonqnn", name="canonqnn (canonical ops)",
        description="The canonical integer graph canonqnn converts the model into: float "
                    "islands with their reasons, ops grouped by layer and by build kernel.",
        source_repo="", fileExts=["onnx", "tflite", "pt2"])

    def __init__(self) -> None:
        super().__init__()

    def convert(self, model_path: str, settings: dict) -> ModelExplorerGraphs:
        from . import view_of

        return {"graphs": graphs_of(view_of(model_path).graphs)}
