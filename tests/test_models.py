"""The example models' size knobs: benchmark sizes change shapes only, defaults stay as tested."""

from __future__ import annotations

import pytest

from canonqnn.testing import onnx_models as models


def test_size_knobs_scale_the_input_and_channels():
    m = models.mobilenet_v1_like(resolution=64, width=2)
    assert models.input_shape(m) == (1, 3, 64, 64)
    first_conv = next(i for i in m.graph.initializer if i.name.startswith("conv_w"))
    assert first_conv.dims[0] == 32
    assert models.input_shape(models.resnet_like(resolution=48)) == (1, 3, 48, 48)
    t = models.transformer_encoder_like(seq=8, width=64, heads=4, ffn=128)
    assert models.input_shape(t) == (1, 8, 64)


def test_defaults_are_the_test_sizes():
    assert models.input_shape(models.mobilenet_v1_like()) == models.INPUT_SHAPE
    assert models.input_shape(models.transformer_encoder_like()) == models.SEQ_SHAPE


def test_mobilenet_resolution_must_survive_three_stride_two_layers():
    with pytest.raises(ValueError, match="multiple of 8"):
        models.mobilenet_v1_like(resolution=36)
