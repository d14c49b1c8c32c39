"""The memory budget: its syntax and sources, and each check refusing before allocating."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import api, budget
from canonqnn.cli import main
from canonqnn.errors import CanonqnnError, ResourceError
from canonqnn.frontends.tflite import oracle as tflite_oracle
from canonqnn.oracle import parity as parity_driver


def pad_model(side: int) -> bytes:
    """int8 1x2x2x3 -> PAD -> 1 x side x side x 3 (a few hundred bytes)."""
    from canonqnn.testing.tflite_writer import GraphWriter

    g = GraphWriter()
    x = g.tensor("x", (1, 2, 2, 3), "int8", None, 0.05, 0)
    pads = g.tensor("pads", (4, 2), "int32",
                    np.array([[0, 0], [0, side - 2], [0, side - 2], [0, 0]], np.int32))
    y = g.tensor("pad_out", (1, side, side, 3), "int8", None, 0.05, 0)
    g.op("PAD", [x, pads], [y])
    return g.finish([x], [y])


def dynamic_model() -> onnx.ModelProto:
    """float x [N, 4] -> Q -> DQ -> y, N dynamic."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.fixture(autouse=True)
def no_budget_in_the_environment(monkeypatch):
    monkeypatch.delenv(budget.ENV_VAR, raising=False)


# ---------------------------------------------------------------- the budget
@pytest.mark.parametrize("text, size", [
    ("4096", 4096), ("2G", 2 * 2**30), ("512M", 512 * 2**20), ("1.5GiB", 3 * 2**29),
    ("64k", 64 * 1024), ("4GB", 4 * 10**9), ("1e6", 10**6), (" 3 MiB ", 3 * 2**20), (7, 7),
])
def test_sizes_parse_to_bytes(text, size):
    assert budget.parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "", "2Q", "G", "1.2.3", "0", "-1", "-2G", "0.5",
                                  "nan", "inf", 0, -5, True, 2.0])
def test_garbage_zero_and_negative_sizes_are_refused_naming_the_option(text):
    with pytest.raises(CanonqnnError, match="--max-memory"):
        budget.parse_size(text)


def test_the_default_is_half_of_physical_memory():
    assert budget.current() == budget.default() == int(budget.physical_memory() * 0.5)
    assert budget.physical_memory() > 2**28


def test_the_environment_variable_sets_the_budget_and_limit_wins(monkeypatch):
    monkeypatch.setenv(budget.ENV_VAR, "3G")
    assert budget.current() == 3 * 2**30
    with budget.limit("1M") as chosen:
        assert chosen == budget.current() == 2**20
    assert budget.current() == 3 * 2**30
    monkeypatch.setenv(budget.ENV_VAR, "plenty")
    with pytest.raises(CanonqnnError, match="CANONQNN_MAX_MEMORY 'plenty'"):
        budget.current()


def test_dimension_products_never_wrap():
    shape = (99999999999, 4, 2**40)
    assert budget.elements(shape) == 99999999999 * 4 * 2**40
    assert budget.nbytes("float32", shape) == 4 * budget.elements(shape)
    assert np.prod(np.array(shape, np.int64)) != budget.elements(shape)  # numpy's wraps


# ---------------------------------------------------------------- the checks
def test_a_tensor_over_the_budget_is_refused_naming_it():
    with budget.limit("1M"), pytest.raises(ResourceError) as refused:
        api.canonical_module(pad_model(1000))
    message = str(refused.value)
    assert "tensor 'pad_out' (int8 [1, 1000, 1000, 3])" in message
    assert "relax.canonqnn.pad" in message and "needs 2.86 MiB" in message
    assert "the memory budget is 1 MiB (--max-memory, CANONQNN_MAX_MEMORY)" in message


def test_a_huge_dynamic_dimension_is_refused_naming_the_input():
    with pytest.raises(ResourceError, match=r"tensor 'x' \(float32 \[99999999999, 4\]\), an "
                                            r"input of main, needs 1.46 TiB"):
        api.canonical_module(dynamic_model(), input_shapes={"x": [99999999999, 4]})


def test_a_run_over_the_budget_is_refused_though_each_tensor_fits():
    mod = api.canonical_module(pad_model(1000))  # 2.86 MiB, and 12 bytes an element to work
    with budget.limit("10M"), pytest.raises(ResourceError) as refused:
        budget.check_module(mod, "pad.tflite")
    assert str(refused.value).startswith("pad.tflite: a run of the module (inputs 12 bytes, ")
    assert "the largest: tensor 'pad_out' (int8 [1, 1000, 1000, 3]) 2.86 MiB" in \
        str(refused.value)
    with budget.limit("64M"):
        assert budget.check_module(mod).total == 12 + 13 * 3 * 10**6


def test_a_normal_module_passes_under_the_default_budget():
    mod = api.canonical_module(pad_model(8))
    estimate = budget.check_module(mod)
    assert (estimate.inputs, estimate.bindings, estimate.largest.name) == (12, 192, "pad_out")
    assert canonqnn.build(mod).run({"x": np.ones((1, 2, 2, 3), np.int8)})["pad_out"].shape \
        == (1, 8, 8, 3)


def test_build_and_its_run_refuse_before_allocating():
    mod = api.canonical_module(pad_model(100))
    with budget.limit("10K"), pytest.raises(ResourceError, match="tensor 'pad_out'"):
        canonqnn.build(mod)
    built = canonqnn.build(mod)
    with budget.limit("20K"), pytest.raises(ResourceError, match=r"^output tensor 'pad_out' "
                                                                 r"\(int8 \[1, 100, 100, 3\]\)"):
        built.run({"x": np.ones((1, 2, 2, 3), np.int8)})
    with budget.limit("60K"), pytest.raises(ResourceError, match="a run of the build"):
        built.run({"x": np.ones((1, 2, 2, 3), np.int8)})


def test_parity_refuses_before_making_inputs_or_starting_a_runtime(monkeypatch, tmp_path):
    def not_here(*args, **kwargs):
        raise AssertionError("inputs or a runtime made over the budget")

    monkeypatch.setattr(parity_driver, "random_inputs", not_here)
    monkeypatch.setattr(tflite_oracle, "runtimes", not_here)
    model = tmp_path / "pad.tflite"
    model.write_bytes(pad_model(300))  # 264 KiB; its module's run about 3.4 MiB
    with budget.limit("4M"), pytest.raises(ResourceError) as refused:
        canonqnn.parity(model, runs=2)
    assert str(refused.value).startswith("parity over 2 run(s) with 3 source runtime(s)")


def test_the_command_line_takes_the_option_and_the_environment(monkeypatch, tmp_path, capsys):
    model = tmp_path / "pad.tflite"
    model.write_bytes(pad_model(1000))
    out = str(tmp_path / "m.json")
    assert main(["convert", str(model), "-o", out, "--max-memory", "1M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"canonqnn: error: {model}: tensor 'pad_out'")
    monkeypatch.setenv(budget.ENV_VAR, "1M")
    assert main(["convert", str(model), "-o", out]) == 2
    assert "the memory budget is 1 MiB" in capsys.readouterr().err
    assert main(["convert", str(model), "-o", out, "--max-memory", "1G"]) == 0  # option wins
    monkeypatch.setenv(budget.ENV_VAR, "-1")
    assert main(["convert", str(model), "-o", out]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "canonqnn: error: CANONQNN_MAX_MEMORY '-1': the memory budget must be 1 byte or more"
