"""A clamp a model quantizes on its own folds into the producing op's clamp, exactly."""

from __future__ import annotations

import canonqnn
from _onnx_chains import conv_then_separately_quantized


def test_separately_quantized_relu_and_clip_fold_into_the_conv_clamp():
    for activation, bounds in (("Relu", (-5, 127)), ("Clip", (-30, 30))):
        model = conv_then_separately_quantized(activation)
        mod, report = canonqnn.canonicalize(canonqnn.load(model))
        assert dict(report.canonical_ops) == {"conv2d": 1}, activation
        assert report.counts["epilogue_clamp"] == 1
        assert f"act_min={bounds[0]}" in mod.script().replace(" ", "")
        result = canonqnn.parity(model, runs=2)
        assert result.exact, result.summary()


def test_clamp_with_new_parameters_stays_a_requantize():
    model = conv_then_separately_quantized("Relu", act_scale=0.03)
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {"conv2d": 1, "requantize": 1}
    assert report.counts["epilogue_clamp"] == 0
