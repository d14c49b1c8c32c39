"""Shared test helpers: quantized example models are built once per session."""

from __future__ import annotations

import functools

import onnx
import pytest

from canonqnn.testing import onnx_models as models


@functools.cache
def quantized_bytes(arch: str, fmt: str, activation: str, per_channel: bool,
                    features: bool = False) -> bytes:
    model = models.ARCHITECTURES[arch]()
    if features:
        model = models.with_features(model)
    return models.quantize(model, fmt=fmt, activation=activation,
                           per_channel=per_channel).SerializeToString()


@pytest.fixture
def quantized_model():
    """``quantized_model(arch, fmt, activation, per_channel, features) -> onnx.ModelProto``.

    ``arch`` is a key of ``canonqnn.testing.onnx_models.ARCHITECTURES``; ``features=True`` quantizes
    ``models.with_features(...)`` of it (a second output, for a stronger parity check).
    """

    def make(arch="resnet", fmt="qdq", activation="u8", per_channel=True,
             features=False) -> onnx.ModelProto:
        return onnx.load_from_string(quantized_bytes(arch, fmt, activation, per_channel,
                                                     features))

    return make
