"""The issue's TFLite networks, end to end: no float island, and bit-exact with the TFLite
interpreter's reference kernels on several inputs (int8; MobileNet-V1 also as uint8, like the
original ``mobilenet_v1_0.25_224_quant``)."""

from __future__ import annotations

import pytest

import canonqnn
from canonqnn.testing import tflite_models as models

CASES = {  # every network also outputs its last feature map: many more values compared
    "mobilenet_v1_int8": lambda: models.mobilenet_v1(alpha=0.25, size=64, features=True),
    "mobilenet_v1_uint8": lambda: models.mobilenet_v1(alpha=0.25, size=64, dtype="uint8",
                                                      features=True),
    "mobilenet_v2_int8": lambda: models.mobilenet_v2(size=64, features=True),
    "classifier_int8": lambda: models.classifier(features=True),
    # As today's converter writes it: the logits' reshape target from SHAPE -> STRIDED_SLICE ->
    # PACK and REDUCE_PROD, folded at import.
    "mobilenet_v1_shape_subgraph_int8": lambda: models.mobilenet_v1(
        alpha=0.25, size=64, features=True, shape_subgraph=True),
}


# mobilenet_v1_shape_subgraph_int8 is mobilenet_v1_int8 with the reshape target computed (and
# folded at import); the constant-target reshape runs in mobilenet_v1_uint8: the plain int8
# network runs under -m slow.
SLOW_CASES = {"mobilenet_v1_int8"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES
                                  else c for c in sorted(CASES)])
def test_network_is_canonical_and_bit_exact_with_reference_kernels(case):
    result = canonqnn.parity(CASES[case](), runs=3)
    assert result.float_islands == [], result.summary()
    assert result.exact, result.summary()
    assert len(result.outputs) == 2
    if case.startswith("mobilenet_v2"):
        assert result.canonical_ops.get("add", 0) >= 3  # residual adds
    assert result.canonical_ops["softmax"] == 1


@pytest.mark.parametrize("dtype, head", [("int16", "flatten"), ("int16", "mean_softmax"),
                                         ("int8", "flatten")])
def test_resnet_with_residual_adds_is_canonical_and_bit_exact(dtype, head):
    """A small ResNet; as int16, TFLite's 16x8 form (int16 activations, int8 weights, int64
    biases, int16 residual ADD with general scales): every layer is a canonical int16 op, the
    classifier head (MEAN, FULLY_CONNECTED, SOFTMAX) too."""
    result = canonqnn.parity(models.resnet(dtype=dtype, features=True, head=head), runs=3)
    assert result.float_islands == [], result.summary()
    assert result.exact, result.summary()
    assert result.canonical_ops["add"] == 2 and result.canonical_ops["conv2d"] == 6
    assert result.canonical_ops["matmul"] == 1
    if head == "mean_softmax":
        assert result.canonical_ops["global_avg_pool2d"] == 1
        assert result.canonical_ops["softmax"] == 1
