"""A canonicalization run keeps nothing of its walks alive once it returns: each phase's
mutator (which holds the module version it walked, its block builder and the use counts) goes
when its walk ends, not when the cyclic garbage collector next runs a full collection."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import canonqnn
from canonqnn._tvm.mutator import _CallMutator
from canonqnn.rewrites import DEFAULT_PHASES, Phase, Rule, canonicalize


def _conv_chain() -> onnx.ModelProto:
    """Two QDQ convs with an int32 bias, a Relu after the first: the compute and the
    elementwise phases both fold something."""
    rng = np.random.default_rng(0)
    inits = {"s": np.float32(0.05), "z": np.int8(0), "ws": np.full(4, 0.01, np.float32),
             "wz": np.zeros(4, np.int8), "bs": np.float32(0.05 * 0.01), "bz": np.int32(0)}
    nodes = [helper.make_node("QuantizeLinear", ["input", "s", "z"], ["q0"])]
    x = "q0"
    for i in range(2):
        inits[f"w{i}"] = rng.integers(-100, 100, (4, 4, 3, 3)).astype(np.int8)
        inits[f"b{i}"] = np.arange(4, dtype=np.int32)
        nodes += [helper.make_node("DequantizeLinear", [x, "s", "z"], [f"x{i}"]),
                  helper.make_node("DequantizeLinear", [f"w{i}", "ws", "wz"], [f"wd{i}"],
                                   axis=0),
                  helper.make_node("DequantizeLinear", [f"b{i}", "bs", "bz"], [f"bd{i}"]),
                  helper.make_node("Conv", [f"x{i}", f"wd{i}", f"bd{i}"], [f"c{i}"],
                                   pads=[1, 1, 1, 1])]
        y = f"c{i}"
        if i == 0:
            nodes.append(helper.make_node("Relu", [y], ["r0"]))
            y = "r0"
        nodes.append(helper.make_node("QuantizeLinear", [y, "s", "z"], [f"q{i + 1}"]))
        x = f"q{i + 1}"
    nodes.append(helper.make_node("DequantizeLinear", [x, "s", "z"], ["output"]))
    graph = helper.make_graph(
        nodes, "conv_chain",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _live_mutators() -> list:
    return [o for o in gc.get_objects() if type(o) is _CallMutator._cls]


@pytest.fixture
def no_cyclic_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_run_leaves_no_mutator_alive(no_cyclic_gc):
    mod = canonqnn.load(_conv_chain())
    assert _live_mutators() == []
    canonical, report = canonicalize(mod)
    assert report.canonical_ops["conv2d"] == 2 and not report.float_islands
    assert _live_mutators() == [], "a walk's mutator outlived its walk (a reference cycle)"


def test_a_failing_rule_leaves_no_mutator_alive(no_cyclic_gc):
    def boom(ctx, call):
        raise RuntimeError("rule failed")

    failing = Rule("boom", "relax.quantize", (boom,), lambda ctx, m: m,
                   phase=DEFAULT_PHASES[0].name)
    mod = canonqnn.load(_conv_chain())
    with pytest.raises(RuntimeError, match="rule failed"):
        canonicalize(mod, (Phase(DEFAULT_PHASES[0].name, (failing,)),))
    assert _live_mutators() == []
