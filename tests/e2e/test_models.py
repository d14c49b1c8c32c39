"""Real architectures quantized by onnxruntime in all 8 settings: canonical and bit-exact."""

from __future__ import annotations

import itertools

import pytest

import canonqnn
from canonqnn.build import isa as dot_isa
from canonqnn.oracle.parity import parity

FLOAT_COMPUTE = {"relax.nn.conv2d", "relax.matmul", "relax.add", "relax.multiply",
                 "relax.nn.avg_pool2d", "relax.nn.max_pool2d", "relax.mean"}
# By default, per model one per-tensor and one per-channel case that differ in format and
# activation type too, so that every model runs QDQ and QOperator, u8 and s8, pt and pc, and
# the kept set has every format x activation and format x granularity pair; the other 12
# combinations run under the slow marker.
DEFAULT = {("resnet", "qdq", "u8", True), ("resnet", "qoperator", "s8", False),
           ("mobilenet_v1", "qdq", "s8", False), ("mobilenet_v1", "qoperator", "u8", True)}
CASES = [pytest.param(a, f, t, p, id="-".join([a, f, t, "pc" if p else "pt"]),
                      marks=[] if (a, f, t, p) in DEFAULT else [pytest.mark.slow])
         for a, f, t, p in itertools.product(["resnet", "mobilenet_v1"], ["qdq", "qoperator"],
                                             ["u8", "s8"], [False, True])]


@pytest.mark.parametrize("arch,fmt,activation,per_channel", CASES)
def test_quantized_model_is_canonical_and_bit_exact_with_onnxruntime(
        quantized_model, arch, fmt, activation, per_channel):
    model = quantized_model(arch, fmt, activation, per_channel)
    mod, report = canonqnn.canonicalize(canonqnn.frontends.onnx.load(model))
    assert not [i for i in report.float_islands if i.op in FLOAT_COMPUTE], report.summary()
    assert report.canonical_ops["conv2d"] >= 8
    result = parity(model, runs=3, seed=11)
    assert result.exact, result.summary()
    assert all(o.exact_fraction == 1.0 and o.max_abs_diff == 0 for o in result.outputs)


ISA_CASES = [("avx512_vnni", "resnet", "s8")] + [
    pytest.param(isa, arch, act, marks=pytest.mark.slow)
    for isa in (isa.name for isa in dot_isa.ISAS)
    for arch, act in (("resnet", "u8"), ("mobilenet_v1", "s8"), ("mobilenet_v3", "u8"),
                      ("transformer", "s8"))]


@pytest.mark.parametrize("isa,arch,activation", ISA_CASES)
def test_every_isas_int8_kernels_are_bit_exact_on_whole_models(quantized_model, isa, arch,
                                                                activation):
    """Each dot-product ISA's packed forms (``build.forms``), legalized for it on this host (its
    instructions run only where the host has them, else the same arithmetic untensorized),
    keep whole models bit-exact with onnxruntime."""
    model = quantized_model(arch, "qdq", activation, True)
    with dot_isa.emulating(isa):
        result = parity(model, runs=2, seed=5)
    assert result.exact, result.summary()
