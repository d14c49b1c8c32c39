"""The scaling benchmark's graph generators and its command line, at small sizes.

Timings are printed by the benchmark, never asserted here.
"""

from __future__ import annotations

import collections
import re

import onnx
import pytest

import canonqnn
from _benchmark_script import load
from canonqnn import _tvm

cs = load("convert_scaling")

BLOCK_NODES = {"conv": cs.CONV_BLOCK_NODES, "transformer": cs.TRANSFORMER_BLOCK_NODES}
SMALL = 200


def _ops(mod) -> collections.Counter:
    counts = collections.Counter()
    for _, func in mod.functions_items():
        if isinstance(func, _tvm.relax.Function):
            for block in func.body.blocks:
                for binding in block.bindings:
                    counts[_tvm.op_name(binding.value)] += 1
    return counts


@pytest.mark.parametrize("family", sorted(cs.FAMILIES))
def test_node_count_within_one_block(family):
    for n in (SMALL, 237, 455, 1000):
        model = cs.FAMILIES[family](n)
        assert abs(len(model.graph.node) - n) < BLOCK_NODES[family], (n, len(model.graph.node))


@pytest.mark.parametrize("activation", ["int8", "uint8"])
@pytest.mark.parametrize("family", sorted(cs.FAMILIES))
def test_small_graph_is_a_valid_model_onnxruntime_runs(family, activation):
    model = cs.FAMILIES[family](SMALL, activation=activation)
    assert model.ir_version == 10
    onnx.checker.check_model(model, full_check=True)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert list(cs.ort_check(model)) == shape


@pytest.mark.parametrize("activation", ["int8", "uint8"])
@pytest.mark.parametrize("family", sorted(cs.FAMILIES))
def test_small_graph_canonicalizes_completely(family, activation):
    model = cs.FAMILIES[family](SMALL, activation=activation)
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert report.float_islands == []
    ops = _ops(mod)
    assert not {"relax.nn.conv2d", "relax.matmul", "relax.nn.softmax", "relax.add"} & set(ops)
    # only canonical ops, between the input's quantize and the output's dequantize
    others = {op: n for op, n in ops.items() if op and not op.startswith("relax.canonqnn.")}
    assert others == {"relax.quantize": 1, "relax.dequantize": 1}
    anchor = "relax.canonqnn.conv2d" if family == "conv" else "relax.canonqnn.matmul"
    assert ops[anchor] > 0


def test_main_prints_exponents(capsys, tmp_path):
    out_json = tmp_path / "scaling.json"
    assert cs.main(["--sizes", "60,120", "--no-memory", "--repeat", "1",
                    "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    for family in cs.FAMILIES:
        line = re.search(rf"^exponent {family}: (.*)$", printed, re.M)
        assert line is not None, printed
        for stage in cs.STAGES:
            assert re.search(rf"\b{stage} -?\d+\.\d+", line.group(1)), line.group(1)
        assert re.search(rf"^ratio {family}: ", printed, re.M)
    assert out_json.exists()
