"""Whole models as public exporters write them (``tests/_real_models.py``): their float pre- and
post-processing and shape subgraphs import, the quantized part folds, and each matches its
runtime: bit-exact where the runtime is integer, within the float bound of docs/parity.md
("Float regions of the model itself") where the model itself computes in float."""

from __future__ import annotations

import numpy as np
import pytest

import _real_models as real
import canonqnn
from canonqnn.frontends.onnx.oracle import ort_session
from canonqnn.testing import onnx_models as models

# docs/parity.md: a float output of the model's own float region is within this many units in
# the last place of the output's largest magnitude (TVM's and MLAS's exp / logistic differ in
# their last bits; the cancellation in box corners makes relative error meaningless).
FLOAT_REGION_ULPS = 4
# ... and with dynamic quantization after a float region: a float value one ulp away can move
# the range DynamicQuantizeLinear reads, hence its scale, or a quantized value by one step
# (docs/parity.md: measured worst 3,615 ulps, 4.3e-4 of the largest magnitude, median 1).
DYNAMIC_FLOAT_ULPS = 2 ** 15


def within_float_bound(ref: np.ndarray, got: np.ndarray) -> float:
    """The difference in units in the last place of ``ref``'s largest magnitude."""
    unit = np.spacing(np.float32(np.abs(ref).max()))
    return float(np.abs(ref.astype(np.float64) - got.astype(np.float64)).max() / unit)


@pytest.fixture(scope="module")
def yolo():
    return real.quantized_yolo()


def test_yolo_head_imports_as_float_and_the_shape_subgraph_folds(yolo):
    assert {"Shape", "Gather", "Div", "Exp", "Split"} <= {n.op_type for n in yolo.graph.node}
    mod, report = canonqnn.canonicalize(canonqnn.load(yolo))
    assert report.canonical_ops["conv2d"] == 3
    islands = {i.op for i in report.float_islands}
    assert {"relax.divide", "relax.exp", "relax.sigmoid", "relax.concat"} <= islands
    assert all(i.reason for i in report.float_islands)
    # The Shape -> Gather -> Concat target folded to a constant: no integer shape arithmetic.
    text = canonqnn._tvm.script(mod)
    assert "int64" not in text and "R.shape_of" not in text


def test_yolo_matches_onnxruntime_within_the_float_bound(yolo):
    lib = canonqnn.build(canonqnn.canonicalize(canonqnn.load(yolo))[0])
    session, _ = ort_session(yolo)
    for seed in range(4):
        x = {models.INPUT_NAME: models.random_input(seed) * np.float32(1.5)}
        ref = session.run([real.DETECTIONS], x)[0]
        got = lib.run(x)[real.DETECTIONS]
        assert within_float_bound(ref, got) <= FLOAT_REGION_ULPS


# QOperator attention is also run by default in test_activation_attention_models
@pytest.mark.parametrize("fmt", ["qdq", pytest.param("qoperator", marks=pytest.mark.slow)])
def test_torch_exported_transformer_is_bit_exact(fmt):
    float_model = real.torch_transformer_like()
    assert {"Shape", "Div", "Erf"} <= {n.op_type for n in float_model.graph.node}
    q = models.quantize(float_model, fmt=fmt, activation="u8", per_channel=True)
    result = canonqnn.parity(q)
    assert all(o.exact_fraction == 1.0 for o in result.outputs), result.outputs
    assert result.canonical_ops["matmul"] == 8
    # Only layer normalization stays float (docs/declined-ops.md).
    assert {i["op"] for i in result.float_islands} == {"relax.nn.layer_norm"}


@pytest.mark.parametrize("weights,per_channel", [("s8", False), ("s8", True), ("u8", False)])
def test_dynamically_quantized_mlp_is_bit_exact(weights, per_channel):
    q = real.quantize_dynamic(real.mlp_like(), weights, per_channel)
    assert "DynamicQuantizeLinear" in {n.op_type for n in q.graph.node}
    result = canonqnn.parity(q)
    assert all(o.exact_fraction == 1.0 for o in result.outputs), result.outputs
    assert result.canonical_ops == {"dynamic_matmul": 3}
    assert {i["op"] for i in result.float_islands} <= {"relax.add", "relax.nn.relu"}


@pytest.mark.parametrize("name", ["transformer", "cnn"])
def test_dynamically_quantized_models_match_onnxruntime_within_the_float_bound(name):
    """Everything quantize_dynamic quantizes folds into dynamic_matmul / dynamic_conv2d; what it
    leaves float (layer norm, softmax, erf, pooling) differs from onnxruntime's float kernels in
    the last bits, and a 1-ulp change of a value can move the range the next
    DynamicQuantizeLinear reads."""
    if name == "transformer":
        float_model, shape, expected = real.torch_transformer_like(), models.SEQ_SHAPE, \
            {"dynamic_matmul": 6}
    else:
        float_model, shape, expected = models.resnet_like(), models.INPUT_SHAPE, \
            {"dynamic_conv2d": 8, "dynamic_matmul": 1}
    q = real.quantize_dynamic(float_model, "u8" if name == "cnn" else "s8")
    mod, report = canonqnn.canonicalize(canonqnn.load(q))
    assert dict(report.canonical_ops) == expected
    lib = canonqnn.build(mod)
    session, _ = ort_session(q)
    out = q.graph.output[0].name
    for seed in range(6):
        x = {models.INPUT_NAME: models.random_input(seed, shape)}
        ref = session.run([out], x)[0]
        assert within_float_bound(ref, lib.run(x)[out]) <= DYNAMIC_FLOAT_ULPS, seed


# docs/parity.md, "16-bit activations (ONNX QDQ)": onnxruntime computes the ops between 16-bit
# Q/DQ in float, so does the build, in another summation order (measured: at most 2 steps).
SIXTEEN_BIT_STEPS = 4


@pytest.mark.parametrize("arch, activations", [
    ("resnet", "s16"),  # the other combinations under the slow marker
    pytest.param("transformer", "u16", marks=pytest.mark.slow),
    pytest.param("resnet", "u16", marks=pytest.mark.slow),
    pytest.param("transformer", "s16", marks=pytest.mark.slow)])
def test_sixteen_bit_qdq_converts_as_named_float_islands_within_steps(arch, activations):
    float_model = models.resnet_like() if arch == "resnet" else models.transformer_encoder_like()
    q = real.quantize_16bit(float_model, activations)
    result = canonqnn.parity(q, runs=4)
    assert result.canonical_ops == {}
    assert any("16-bit quantization" in i["reason"] for i in result.float_islands)
    assert all(o.max_abs_diff <= SIXTEEN_BIT_STEPS for o in result.outputs), result.outputs
