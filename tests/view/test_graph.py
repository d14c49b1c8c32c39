"""The canonical graph as Model Explorer's graph JSON: every op a node on the edges of the
module, float islands grouped and coloured with their reasons, canonical ops with their
parameters, a second graph nested by the build's kernels, and parity as node data; each file
in Model Explorer's own format (its dataclasses, converted strictly)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dacite
import numpy as np
import pytest
from model_explorer import graph_builder, node_data_builder

import _real_models as real
import canonqnn
from _onnx_chains import attention_scores, extreme_inputs
from canonqnn import _tvm
from canonqnn.api import convert
from canonqnn.build.builder import kernel_of_vars
from canonqnn.frontends.onnx import runtime as onnx_runtime
from canonqnn.rewrites import Report
from canonqnn.rewrites._engine import FloatIsland, NearMiss
from canonqnn.view import graph, node_data_path, view_of
from canonqnn.view.main import graphs_of

STRICT = dacite.Config(strict=True)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    model = real.quantized_yolo()
    path = tmp_path_factory.mktemp("view") / "detector.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture(scope="module")
def detector_view(detector):
    return view_of(detector)


def nodes_of(view, graph_id=graph.LAYERS):
    (found,) = [g for g in view.graphs["graphs"] if g["id"] == graph_id]
    return {n["id"]: n for n in found["nodes"]}


def attrs(node):
    return {a["key"]: a["value"] for a in node["attrs"]}


def test_every_op_of_the_module_is_a_node_and_every_edge_joins_two_nodes(detector_view,
                                                                          detector):
    mod, _ = convert(detector)
    calls = [_tvm.var_name(v) for v, c in _tvm.function_bindings(mod["main"])
             if _tvm.op_name(c) is not None]
    nodes = nodes_of(detector_view)
    assert [n for n in nodes if not n.startswith(("input:", "output:"))] == calls
    assert set(nodes) - set(calls) == {"input:input", f"output:{real.DETECTIONS}"}
    for node in nodes.values():
        for edge in node["incomingEdges"]:
            assert edge["sourceNodeId"] in nodes, (node["id"], edge)
    # the first conv reads the quantized input; the output reads the head's last concat
    first_conv = next(n for n in nodes.values() if n["label"] == "canonqnn.conv2d")
    assert [e["sourceNodeId"] for e in first_conv["incomingEdges"]] == [
        next(n for n in nodes.values() if n["label"] == "quantize")["id"]]
    assert nodes[f"output:{real.DETECTIONS}"]["incomingEdges"][0]["sourceNodeId"] == calls[-1]


def test_float_islands_are_one_coloured_group_carrying_each_ops_reason(detector_view,
                                                                       detector):
    _, report = convert(detector)
    nodes = nodes_of(detector_view)
    assert len(report.float_islands) == 14
    for island in report.float_islands:
        node = nodes[island.var]
        assert node["namespace"] == "float island 1"  # the head: one connected run
        assert attrs(node)["float island"] == island.reason
        assert node["style"]["backgroundColor"] == graph.ISLAND_COLOR
    canonical = [n for n in nodes.values() if n["label"].startswith("canonqnn.")]
    assert len(canonical) == 7
    assert all(n["style"]["backgroundColor"] == graph.CANONICAL_COLOR for n in canonical)
    (config,) = detector_view.graphs["graphs"][0]["groupNodeConfigs"]
    assert re.fullmatch(config["namespaceRegex"], "float island 1")


def test_a_canonical_node_shows_its_scales_zero_points_clamp_rounding_and_profile(detector_view):
    conv = next(n for n in nodes_of(detector_view).values() if n["label"] == "canonqnn.conv2d")
    shown = attrs(conv)
    assert shown["op"] == "relax.canonqnn.conv2d"
    assert shown["numerics"] == onnx_runtime.profile().name
    assert shown["rounding"] == "rne_f32"
    assert (shown["act_min"], shown["act_max"]) == ("-128", "127")
    assert float(shown["x_scale"]) > 0 and float(shown["out_scale"]) > 0
    assert int(shown["x_zp"]) in range(-128, 128) and int(shown["out_zp"]) in range(-128, 128)
    assert shown["source tensor"] == "conv0_out_QuantizeLinear_Output"
    assert shown["w"].startswith("constant int8[8, 3, 3, 3]")
    (out,) = conv["outputsMetadata"]
    assert {a["key"]: a["value"] for a in out["attrs"]} == {
        "tensor_name": conv["id"], "dtype": "int8", "shape": "[1, 8, 16, 16]"}


def test_the_kernel_graph_nests_each_op_in_the_kernel_of_its_build(detector_view, detector):
    kernels = {k.name for k in canonqnn.inspect_built(detector).kernels}
    by_kernel = nodes_of(detector_view, graph.KERNELS)
    assert set(by_kernel) == set(nodes_of(detector_view))  # the same nodes, other nesting
    computed = {n["namespace"] for n in by_kernel.values() if n["namespace"]}
    # the rest compute no op of the module: the layout pass's (the conv's unfolded input)
    mod, _ = convert(detector)
    bound = {_tvm.var_name(v) for v, _ in _tvm.function_bindings(mod["main"])}
    helpers = {k for var, k in kernel_of_vars(mod).items() if var not in bound}
    assert computed == kernels - helpers and helpers <= kernels
    luts = [n for n in by_kernel.values() if n["label"] == "canonqnn.lut"]
    muls = [n for n in by_kernel.values() if n["label"] == "canonqnn.mul"]
    # each sigmoid table is fused with the mul that reads it (SiLU), one kernel each
    assert [n["namespace"] for n in luts] == [n["namespace"] for n in muls]
    assert all(n["namespace"].startswith("fused_canonqnn_lut") for n in luts)
    assert all(attrs(n)["kernel"] == n["namespace"] for n in by_kernel.values()
               if n["namespace"])


def test_layers_come_from_the_folders_of_source_tensor_names():
    assert graph.layer_of("/backbone/stage1/conv/Conv_output_0") == "backbone/stage1/conv"
    assert graph.layer_of("model/conv2d/Relu;model/conv2d/BiasAdd") == "model/conv2d"
    assert graph.layer_of("conv0_out_QuantizeLinear_Output") == ""
    assert graph.layer_of(None) == ""


def test_an_islands_near_misses_are_on_its_node(detector):
    mod, report = convert(detector)
    island = report.float_islands[-1]
    miss = NearMiss("concat", "ops", "operands", "the operands' scales differ")
    report = Report(float_islands=[FloatIsland(island.op, island.var, island.reason)],
                    numerics=report.numerics, near_misses={island.var: [miss]})
    nodes = {n.id: n for n in graph.module_nodes(mod, report, {}, {}, None)}
    assert dict(nodes[island.var].attrs)["near miss 1"] == (
        "rule concat (ops) declined at operands: the operands' scales differ")


def test_an_export_is_model_explorers_graph_format_and_loads_without_canonqnn(
        detector_view, tmp_path):
    files = detector_view.export(tmp_path / "graph.json")
    assert files == [str(tmp_path / "graph.json")]
    collection = json.loads((tmp_path / "graph.json").read_text())
    typed = dacite.from_dict(graph_builder.GraphCollection, collection, config=STRICT)
    assert [g.id for g in typed.graphs] == [graph.LAYERS, graph.KERNELS]
    assert collection["label"] == "detector.onnx"
    assert len(graphs_of(collection)) == 2  # what the adapter hands Model Explorer


def test_parity_is_node_data_per_layer_with_the_first_diverging_layer_marked(tmp_path):
    # Converted for the other x86 class than this host's onnxruntime: the matmul differs.
    other = {"x86-avx2": "onnxruntime-1.31-x86-vnni", "x86-vnni": "onnxruntime-1.31-x86-avx2"}
    model = tmp_path / "scores.onnx"
    model.write_bytes(attention_scores(np.uint8, np.int8).SerializeToString())
    view = view_of(model, parity=True, numerics=other[onnx_runtime.profile().host],
                   inputs=[extreme_inputs(np.uint8, np.int8, 1)])
    found = view.parity.extra["first_divergence"]
    assert found["op"] == "matmul"
    files = view.export(tmp_path / "graph.json")
    assert files[1:] == [node_data_path(files[0], "differing"),
                         node_data_path(files[0], "max-lsb")]
    differing, max_lsb = (json.loads(Path(f).read_text()) for f in files[1:])
    for data in (differing, max_lsb):
        assert set(data) == {graph.LAYERS, graph.KERNELS}
        for graph_data in data.values():
            dacite.from_dict(node_data_builder.GraphNodeData, graph_data, config=STRICT)
    layer = next(v for v in view.parity.extra["layers"] if v["var"] == found["var"])
    assert layer["differing"] == found["reference_vs_runtime"] > 0 and layer["max_lsb"] >= 1
    result = differing[graph.LAYERS]["results"][found["var"]]
    assert result == {"value": layer["differing"], "bgColor": "#fa5252"}
    assert max_lsb[graph.LAYERS]["results"][found["var"]]["value"] == layer["max_lsb"]
    node = nodes_of(view)[found["var"]]
    assert node["style"]["borderColor"] == graph.DIVERGING_BORDER
    assert attrs(node)["parity: first diverging layer"] == \
        view.parity.extra["first_divergence_summary"]
    assert attrs(node)["parity: max |diff|"] == f"{layer['max_lsb']} LSB"
