"""Parity as Model Explorer node data: per canonical op, how its result compares with the
source runtime's tensor (docs/view.md).

Model Explorer's node data (``model_explorer.node_data_builder``) gives each node one number,
coloured by thresholds, per graph id; canonqnn writes two: the count of differing values and
the largest difference in LSB. Equal ops are green, differing ones red, and the first diverging
layer a stronger red.
"""

from __future__ import annotations

from typing import Any

DIFFERING = "differing"  # the node data's names, in export file names too
MAX_LSB = "max-lsb"
TITLES = {DIFFERING: "parity: differing values", MAX_LSB: "parity: max |diff| (LSB)"}

EQUAL_COLOR = "#b2f2bb"
DIFFERS_COLOR = "#ffc9c9"
FIRST_DIVERGING_COLOR = "#fa5252"


def parity_node_data(layers: list[dict[str, Any]], diverging: str | None,
                     graph_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{name: ModelNodeData}`` of ``layers`` (``LayerDifference`` as JSON, keyed to nodes by
    variable), for each graph of ``graph_ids``; ``diverging``: the first diverging layer's
    variable."""
    data = {}
    for name, key in ((DIFFERING, "differing"), (MAX_LSB, "max_lsb")):
        results = {}
        for layer in layers:
            result: dict[str, Any] = {"value": layer[key]}
            if layer["var"] == diverging:
                result["bgColor"] = FIRST_DIVERGING_COLOR
            results[layer["var"]] = result
        graph = {"name": TITLES[name], "results": results,
                 "thresholds": [{"value": 0, "bgColor": EQUAL_COLOR},
                                {"value": 2 ** 62, "bgColor": DIFFERS_COLOR}]}
        data[name] = {graph_id: graph for graph_id in graph_ids}
    return data
