"""``canonqnn demo``: the whole flow on a small ResNet-style CNN quantized by onnxruntime."""

from __future__ import annotations

import os
import tempfile

import onnx

from ..api import load
from ..build import build, load_built
from ..oracle.parity import parity
from ..rewrites import canonicalize
from . import onnx_models


def run_demo(workdir: str | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="canonqnn-demo-") as tmp:
        where = workdir or tmp
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, "resnet_like_qdq_u8.onnx")
        print("1. quantizing a ResNet-style CNN with onnxruntime.quantization.quantize_static "
              "(QDQ, uint8 activations, per-channel int8 weights)")
        onnx.save(onnx_models.quantize(onnx_models.resnet_like(), fmt="qdq", activation="u8",
                                       per_channel=True), path)
        print(f"   {path}")
        print("2. converting to canonical ops")
        mod, report = canonicalize(load(path))
        print("   " + report.summary().replace("\n", "\n   "))
        print("3. building integer code with tvm.compile")
        lib = os.path.join(where, "resnet_like_qdq_u8.so")
        built = build(mod)
        built.export(lib)
        load_built(lib)
        print(f"   {lib} ({built.target})")
        print("4. parity against onnxruntime on 3 random inputs")
        result = parity(path, runs=3)
        print("   " + result.summary().replace("\n", "\n   "))
        return 0 if result.exact else 1
