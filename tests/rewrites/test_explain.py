"""``Report.near_misses`` / ``explain``: every rule that found its pattern at a float island,
the step where it declined, and why."""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import cli

SCALE, W_SCALE = 0.05, 0.01


def conv_with_bias(bias_scale: float, extra_reader: bool = False) -> onnx.ModelProto:
    """QDQ conv with an int32 bias of scale ``bias_scale`` (folds only at 0.05 * 0.01);
    ``extra_reader``: the conv's float result also feeds the model's second output."""
    rng = np.random.default_rng(0)
    inits = {"s": np.float32(SCALE), "z": np.int8(0),
             "w": rng.integers(-100, 100, (4, 4, 3, 3)).astype(np.int8),
             "ws": np.full(4, W_SCALE, np.float32), "wz": np.zeros(4, np.int8),
             "b": np.arange(4, dtype=np.int32), "bs": np.float32(bias_scale), "bz": np.int32(0)}
    nodes = [helper.make_node("QuantizeLinear", ["input", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"]),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["output"])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 8, 8])]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["c"], ["raw"]))
        outputs.append(helper.make_tensor_value_info("raw", TensorProto.FLOAT, [1, 4, 8, 8]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 8, 8])],
        outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _convert(model: onnx.ModelProto):
    return canonqnn.canonicalize(canonqnn.frontends.onnx.load(model), numerics="exact")


def test_a_check_that_declines_is_named_with_its_step_and_reason():
    _, report = _convert(conv_with_bias(0.001))
    conv = next(i for i in report.float_islands if i.op == "relax.nn.conv2d")
    misses = report.near_misses[conv.var]
    assert [(m.rule, m.phase, m.step) for m in misses] == [("conv2d", "compute", "conv2d_checks")]
    assert misses[0].reason == "bias scale is not input_scale * weight_scale"


def test_a_pattern_step_that_declines_is_named_too():
    # The biased conv's float sum also feeds a relu: the add is where the chain breaks.
    _, report = _convert(conv_with_bias(SCALE * W_SCALE, extra_reader=True))
    add = next(i for i in report.float_islands if i.op == "relax.add")
    steps = {(m.rule, m.step, m.reason) for m in report.near_misses[add.var]}
    assert ("binary", "binary_chain", "the float result has other users") in steps
    conv = next(i for i in report.float_islands if i.op == "relax.nn.conv2d")
    assert conv.var not in report.near_misses  # no rule found a pattern rooted there
    assert "no rule matched a pattern here" in report.explain()


def test_a_chain_that_folds_leaves_no_near_miss():
    mod, report = _convert(conv_with_bias(SCALE * W_SCALE))
    assert report.canonical_ops["conv2d"] == 1
    assert not report.float_islands and not report.near_misses


def test_explain_lists_each_island_with_the_rules_that_came_close():
    _, report = _convert(conv_with_bias(0.001))
    text = report.explain()
    assert "rule conv2d (compute) declined at conv2d_checks: bias scale is not " \
           "input_scale * weight_scale" in text
    json_island = next(i for i in report.to_json()["float_islands"]
                       if i["op"] == "relax.nn.conv2d")
    assert json_island["near_misses"][0]["step"] == "conv2d_checks"


def test_convert_explain_prints_the_near_misses(tmp_path, capsys):
    path = str(tmp_path / "m.onnx")
    onnx.save(conv_with_bias(0.001), path)
    assert cli.main(["convert", path, "--numerics", "exact", "--explain",
                     "-o", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    reason = "bias scale is not input_scale * weight_scale"
    # each island once, with the rules that came close under it
    assert re.search(rf"\n  \w+ = relax.nn.conv2d: conv2d: {re.escape(reason)}\n"
                     rf"    rule conv2d \(compute\) declined at conv2d_checks: "
                     rf"{re.escape(reason)}\n", out), out
    assert out.count(f"conv2d: {reason}") == 1
