"""Real architectures quantized by onnxruntime in all 8 settings: canonical and bit-exact."""

from __future__ import annotations

import itertools

import pytest

import canonqnn
from canonqnn.api import parity

FLOAT_COMPUTE = {"relax.nn.conv2d", "relax.matmul", "relax.add", "relax.multiply",
                 "relax.nn.avg_pool2d", "relax.nn.max_pool2d", "relax.mean"}
CASES = list(itertools.product(["resnet", "mobilenet_v1"], ["qdq", "qoperator"], ["u8", "s8"],
                               [False, True]))


@pytest.mark.parametrize("arch,fmt,activation,per_channel", CASES,
                         ids=["-".join([a, f, t, "pc" if p else "pt"]) for a, f, t, p in CASES])
def test_quantized_model_is_canonical_and_bit_exact_with_onnxruntime(
        quantized_model, arch, fmt, activation, per_channel):
    model = quantized_model(arch, fmt, activation, per_channel)
    mod, report = canonqnn.canonicalize(canonqnn.frontends.onnx.load(model))
    assert not [i for i in report.float_islands if i.op in FLOAT_COMPUTE], report.summary()
    assert report.canonical_ops["conv2d"] >= 8
    result = parity(model, runs=3, seed=11)
    assert result.exact, result.summary()
    assert all(o.exact_fraction == 1.0 and o.max_abs_diff == 0 for o in result.outputs)
