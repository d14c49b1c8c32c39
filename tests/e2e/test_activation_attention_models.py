"""MobileNet-V3, a transformer encoder layer and a two-branch Resize/Concat CNN, quantized by
onnxruntime: canonical except layer normalization, bit-exact with onnxruntime, and built into
kernels that pass int8 to each other.

The three networks (``canonqnn.testing.onnx_models``) bring in what ResNet/MobileNet-V1 do not:
HardSwish, HardSigmoid, LeakyRelu, Sigmoid and Gelu lookup tables, squeeze-excite (a broadcast Mul),
Softmax, matmuls of two activations, Reshape/Transpose to attention heads, LayerNormalization,
nearest and linear Resize, and Concat of differently quantized branches.
"""

from __future__ import annotations

import collections
import itertools

import numpy as np
import onnx
import pytest

import canonqnn
from canonqnn.frontends.onnx.oracle import ort_session
from canonqnn.testing import onnx_models as models

ARCHS = ["mobilenet_v3", "transformer", "conv_classifier"]
# QOperator with int8 activations adds little over uint8 (same graph, other dtype).
SLOW = {("qoperator", "s8")}
CASES = [pytest.param(arch, fmt, act, id=f"{arch}-{fmt}-{act}",
                      marks=[pytest.mark.slow] if (fmt, act) in SLOW else [])
         for arch, (fmt, act) in itertools.product(
             ARCHS, [("qdq", "u8"), ("qdq", "s8"), ("qoperator", "u8"), ("qoperator", "s8")])]
# Parity builds each model, the costly part: by default each network once as QDQ and once as
# QOperator, QDQ with int8 activations for two networks and uint8 for the third (every table
# is checked for both types against onnxruntime in tests/tables); the rest under -m slow.
PARITY_DEFAULT = {("mobilenet_v3", "qdq", "s8"), ("transformer", "qdq", "u8"),
                  ("conv_classifier", "qdq", "s8")} | {(arch, "qoperator", "u8") for arch in ARCHS}
PARITY_CASES = [pytest.param(*case.values, id=case.id,
                             marks=[] if case.values in PARITY_DEFAULT else [pytest.mark.slow])
                for case in CASES]

# Float ops that may stay float islands: onnxruntime computes them in float between a
# dequantize and a quantize itself (statistics over a row, a reciprocal square root), so they
# have no canonical int8 form. Everything else must become canonical ops.
LAYER_NORM_LIKE = {"relax.nn.layer_norm", "relax.nn.group_norm", "relax.nn.instance_norm",
                   "relax.nn.rms_norm"}
GENERIC_REASON = "no rule folds"  # the Report's reason when no rule claimed the op

# Outputs allowed to differ from onnxruntime, by (arch, fmt, activation): output name ->
# (max |diff| in LSB, max fraction of differing values). Bit-exact is the bar: an entry belongs
# here only together with the docs/spec.md section that explains and bounds the difference.
PARITY_TOLERANCE: dict[tuple[str, str, str], dict[str, tuple[float, float]]] = {}

# The canonical compute op each network must fold to, and how many.
COMPUTE = {"mobilenet_v3": ("conv2d", 15), "transformer": ("matmul", 8),
           "conv_classifier": ("conv2d", 6)}

# What onnxruntime's QOperator quantizer leaves in float (between DequantizeLinear and
# QuantizeLinear): ops with no QLinear form, and GlobalAveragePool/Flatten fed by one of them
# (its QGlobalAveragePool only quantizes an already quantized input).
QOPERATOR_FLOAT_OPS = {
    "mobilenet_v3": {"HardSwish", "HardSigmoid", "GlobalAveragePool", "Flatten"},
    "transformer": {"LayerNormalization", "Gelu"},
    "conv_classifier": set(),
}

# Float islands that are float in the source model itself: in the QOperator mobilenet_v3 the
# quantizer leaves HardSwish -> GlobalAveragePool -> Flatten in float (QOPERATOR_FLOAT_OPS), so
# onnxruntime computes them in float32 and so does the build: the Report must say so.
SOURCE_FLOAT_ISLANDS = {
    ("mobilenet_v3", "qoperator"): ({"relax.multiply", "relax.add", "relax.clip", "relax.mean",
                                     "relax.reshape"}, 16),
}


@pytest.fixture(scope="module")
def canonical():
    """``canonical(model) -> (module, report)``, computed once per model."""
    cache: dict[bytes, tuple] = {}

    def make(model: onnx.ModelProto):
        key = model.SerializeToString()
        if key not in cache:
            cache[key] = canonqnn.canonicalize(canonqnn.load(model))
        return cache[key]

    return make


# ---------------------------------------------------------------- the quantized models
def _float_ops(model: onnx.ModelProto) -> set[str]:
    """Op types of the nodes that compute on float tensors (other than Q/DQ)."""
    float_tensors = {i.name for i in model.graph.input
                     if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    ops = set()
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            float_tensors.update(node.output)
        elif node.op_type != "QuantizeLinear" and node.input[0] in float_tensors:
            ops.add(node.op_type)
            float_tensors.update(node.output)
    return ops


@pytest.mark.parametrize("arch", ARCHS)
def test_quantize_static_quantizes_every_op(quantized_model, arch):
    """QDQ: every op sits between DequantizeLinear and QuantizeLinear; QOperator: only the ops
    without a QLinear form (and float-fed pools) stay float."""
    qdq = quantized_model(arch, "qdq", "u8")
    producers = {o: n.op_type for n in qdq.graph.node for o in n.output}
    consumers = collections.defaultdict(set)
    for node in qdq.graph.node:
        for name in node.input:
            consumers[name].add(node.op_type)
    inits = {i.name for i in qdq.graph.initializer}
    unquantized = []
    for node in qdq.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        data = [i for i in node.input if i and i not in inits]
        if any(producers.get(i) != "DequantizeLinear" for i in data) or \
                any(consumers[o] != {"QuantizeLinear"} for o in node.output):
            unquantized.append(f"{node.name} ({node.op_type})")
    assert not unquantized
    assert _float_ops(quantized_model(arch, "qoperator", "u8")) == QOPERATOR_FLOAT_OPS[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_onnxruntime_runs_the_quantized_models_close_to_float(quantized_model, arch):
    """The examples are sane: ir_version 10, onnxruntime runs them, quantization error < 5%."""
    float_model = models.ARCHITECTURES[arch]()
    x = models.random_input(7, models.input_shape(float_model))
    (expected,) = ort_session(float_model)[0].run(None, {"input": x})
    for fmt, act in [("qdq", "u8"), ("qdq", "s8"), ("qoperator", "u8"), ("qoperator", "s8")]:
        model = quantized_model(arch, fmt, act)
        assert model.ir_version == 10
        (got,) = ort_session(model)[0].run(None, {"input": x})
        assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max(), (fmt, act)


def test_builders_are_deterministic_from_the_seed():
    for arch in ARCHS:
        build = models.ARCHITECTURES[arch]
        assert build(3).SerializeToString() == build(3).SerializeToString()
        assert build(3).graph.initializer[0].raw_data != build(4).graph.initializer[0].raw_data


# ---------------------------------------------------------------- canonqnn on them
@pytest.mark.parametrize("arch,fmt,act", CASES)
def test_only_layer_norm_and_float_chains_of_the_source_stay_float(quantized_model, canonical,
                                                                  arch, fmt, act):
    mod, report = canonical(quantized_model(arch, fmt, act))
    source_float_ops, count = SOURCE_FLOAT_ISLANDS.get((arch, fmt), (set(), 0))
    from_source = [i for i in report.float_islands if i.op in source_float_ops]
    assert len(from_source) == count, report.summary()
    not_allowed = [i for i in report.float_islands
                   if i.op not in LAYER_NORM_LIKE and i.op not in source_float_ops]
    assert not not_allowed, report.summary()
    unexplained = [i for i in report.float_islands if i.reason.startswith(GENERIC_REASON)]
    assert not unexplained, report.summary()
    op, count = COMPUTE[arch]
    assert report.canonical_ops[op] == count, report.summary()


@pytest.mark.parametrize("arch,fmt,act", PARITY_CASES)
def test_bit_exact_with_onnxruntime(quantized_model, arch, fmt, act):
    """Compared: the model's output and its ``features`` tensor (see models.with_features)."""
    result = canonqnn.parity(quantized_model(arch, fmt, act, features=True), runs=3, seed=11)
    assert [o.name for o in result.outputs][1:] == [models.FEATURES_NAME]
    tolerance = PARITY_TOLERANCE.get((arch, fmt, act), {})
    for out in result.outputs:
        if out.name in tolerance:
            max_lsb, max_fraction = tolerance[out.name]
            assert out.max_abs_diff <= max_lsb, result.summary()
            assert 1.0 - out.exact_fraction <= max_fraction, result.summary()
        else:
            assert out.exact_fraction == 1.0 and out.max_abs_diff == 0, result.summary()


@pytest.mark.parametrize("arch,fmt,act", CASES)
def test_built_kernels_pass_only_int8(quantized_model, canonical, arch, fmt, act):
    mod, _ = canonical(quantized_model(arch, fmt, act))
    info = canonqnn.inspect_built(mod)
    assert not info.non_int8_edges, info.summary()
    assert not info.unfused_luts, info.summary()
