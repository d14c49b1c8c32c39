"""examples/one_conv_three_formats.py: one int8 conv written as ONNX QDQ, ONNX QOperator and
TFLite becomes the same canonical conv2d, up to the rounding attribute (docs/pattern-authors.md
shows the example's output)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import canonqnn
from canonqnn.patterns import params_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "one_conv_three_formats.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("one_conv_three_formats", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def conv_params(example):
    """{model: OpParams of its canonical conv2d}, QDQ first."""
    out = {}
    for title, make in example.MODELS.items():
        mod, report = canonqnn.canonicalize(canonqnn.load(make()),
                                            numerics=example.NUMERICS.get(title))
        assert report.float_islands == []
        out[title] = params_of(example.canonical_conv(mod))
    return out


def test_the_three_conv2d_calls_differ_only_in_rounding(example, conv_params):
    qdq, qop, tfl = conv_params.values()
    assert example.differences(qdq, qop) == []
    assert example.differences(qdq, tfl) == ["rounding", "attrs.rounding"]
    assert (qdq.rounding, qop.rounding, tfl.rounding) == ("rne_f32", "rne_f32", "q31_double")


def test_the_shared_parameters_are_the_models_own(example, conv_params):
    for p in conv_params.values():
        assert (p.input_scale, p.input_zp) == (np.float32(0.05), -3)
        assert (p.output_scale, p.output_zp) == (np.float32(0.05), -20)
        # ReLU6 in output codes: 0 / 0.05 - 20 and 6 / 0.05 - 20; narrower than int8
        assert p.clamp == (-20, 100)
        np.testing.assert_array_equal(p.weight_scale, example.W_SCALE)
        assert p.weight.per_channel and p.weight.symmetric
        np.testing.assert_array_equal(p.constants["w"], example.WEIGHTS)
        np.testing.assert_array_equal(p.constants["bias"], example.BIAS)
        assert (p.layout, p.weight_layout) == ("NCHW", "OIHW")
        assert (p.attrs["strides"], p.attrs["padding"], p.attrs["groups"]) == \
            ([1, 1], [1, 1, 1, 1], 1)
        assert p.attrs["source_dtype"] == "int8" and not p.depthwise


def test_the_differences_check_notices_a_changed_parameter(example, conv_params):
    qdq = next(iter(conv_params.values()))
    other = dataclasses.replace(qdq, clamp=(-20, 127), attrs={**qdq.attrs, "act_max": 127})
    assert example.differences(qdq, other) == ["clamp", "attrs.act_max"]
    bias = qdq.constants["bias"].copy()
    bias[0] += 1
    other = dataclasses.replace(qdq, constants={**qdq.constants, "bias": bias})
    assert example.differences(qdq, other) == ["constants.bias"]


def test_the_example_exits_0_and_prints_each_stage(example, capsys):
    assert example.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("--- fake-quant form (canonqnn.load)") == 3
    assert out.count("R.canonqnn.conv2d(") == 3
    assert out.count("R.canonqnn.transpose(") == 2       # TFLite's NHWC interface
    assert "same conv2d up to rounding: yes" in out
