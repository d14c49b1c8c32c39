"""Shared test helpers: quantized example models are built once per session."""

from __future__ import annotations

import functools

import onnx
import pytest

from canonqnn import models


@functools.lru_cache(maxsize=None)
def quantized_bytes(arch: str, fmt: str, activation: str, per_channel: bool) -> bytes:
    build = {"resnet": models.resnet_like, "mobilenet_v1": models.mobilenet_v1_like}[arch]
    return models.quantize(build(), fmt=fmt, activation=activation,
                           per_channel=per_channel).SerializeToString()


@pytest.fixture
def quantized_model():
    """``quantized_model(arch, fmt, activation, per_channel) -> onnx.ModelProto``."""

    def make(arch="resnet", fmt="qdq", activation="u8", per_channel=True) -> onnx.ModelProto:
        return onnx.load_from_string(quantized_bytes(arch, fmt, activation, per_channel))

    return make
