"""A fourth model format, for tests/test_formats.py: a JSON file (``.toyq``) describing one
quantized elementwise maximum of two int8 inputs. Its frontend writes the fake-quant form with
``canonqnn.qdq`` and ``frontends._base``; its oracle is a numpy runtime, run in this process.

    {"shape": [1, 8],
     "inputs": [{"name": "a", "scale": 0.05, "zero_point": 3}, {"name": "b", ...}],
     "output": {"name": "y", "scale": 0.06, "zero_point": 1}}
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn.frontends._base import Source, import_function
from canonqnn.io import TensorInfo
from canonqnn.numerics import PROFILES, Profile
from canonqnn.oracle.source import SourceRuntime
from canonqnn.qparams import QParams

SOURCE = Source("Toy", "toy", "rne_f32")


def _spec(model: Any) -> dict[str, Any]:
    with open(os.fspath(model), encoding="utf-8") as f:
        return json.load(f)


def load(model: Any, **options: Any) -> Any:
    """The fake-quant module of the toy model: ``q(max(dq a, dq b))``."""
    spec = _spec(model)
    shape = tuple(spec["shape"])
    inputs = [TensorInfo(i["name"], "int8", shape) for i in spec["inputs"]]
    out = spec["output"]
    bb = _tvm.BlockBuilder()
    params: list[Any] = []

    def convert() -> tuple[list[Any], list[TensorInfo]]:
        a, b = (bb.emit(qdq.dequantize(p, QParams.make(i["scale"], i["zero_point"])))
                for p, i in zip(params, spec["inputs"]))
        largest = bb.emit(_tvm.relax.op.maximum(a, b))
        y = bb.emit(qdq.quantize(largest, QParams.make(out["scale"], out["zero_point"]),
                                 source_op="maximum", source_tensor=out["name"]))
        return [y], [TensorInfo(out["name"], "int8", shape, 1.0)]

    return import_function(SOURCE, bb, inputs, params.extend, convert)


def _quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """QuantizeLinear: RNE(f32(x / scale)) + zero point, saturated."""
    q = np.round(x / np.float32(scale)).astype(np.int32) + zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def run(spec: dict[str, Any], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The toy runtime: DequantizeLinear, Max, QuantizeLinear in float32."""
    real = [np.float32(i["scale"]) * (feed[i["name"]].astype(np.float32) -
                                      np.float32(i["zero_point"])) for i in spec["inputs"]]
    out = spec["output"]
    return [_quantize(np.maximum(*real), out["scale"], out["zero_point"])]


def runtimes(model: Any, io: Any, profile: Any) -> list[SourceRuntime]:
    spec = _spec(model)
    return [SourceRuntime("toy numpy runtime", lambda feed: run(spec, feed))]


def profile() -> Profile:
    return PROFILES["exact"]
