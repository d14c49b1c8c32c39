"""Models as TensorFlow's converter writes them (``tests/fixtures/tflite_converter``, made by
its ``make_models.py`` with tensorflow 2.21 and Keras 3: full-integer post-training
quantization, the batch dimension left dynamic): each converts, builds, and is bit-exact with
the TFLite interpreter's reference kernels and with its default configuration on this host
(on x86-64 the XNNPACK delegate) on its outputs and on its last feature map; the float islands
are the ones named here, with their reasons.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import canonqnn
from canonqnn.frontends.tflite.reader import read_model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tflite_converter"
# The operators left in float, by fixture, and a word of each reason
ISLANDS = {
    "mobilenet_v1": [],
    "mobilenet_v1_uint8": [],
    "mobilenet_v3": [],
    "resnet": [],
    # (TFLite's int16 MAX_POOL_2D has no canonical int16 kernel: a max of real values is exact)
    "resnet_16x8": [("relax.nn.max_pool2d", "TFLite 16x8")],
    "resnet_uint8": [],
    "ssd": [],
    # The layer norms' NEG, which the converter leaves in float between DEQUANTIZE and QUANTIZE
    "transformer": [("relax.negative", "negative(x)"), ("relax.negative", "negative(x)")],
}
POOLS = ("MEAN", "AVERAGE_POOL_2D")


def test_every_fixture_is_tested():
    assert sorted(p.stem for p in FIXTURES.glob("*.tflite")) == sorted(ISLANDS)


def compared_tensors(path: Path) -> list[str]:
    """The model's outputs and the last feature map (the input of its last pooling)."""
    m = read_model(path)
    names = [m.tensors[i].name for i in m.outputs]
    pools = [op for op in m.operators if op.kind in POOLS]
    if pools:
        names.insert(0, m.tensors[pools[-1].inputs[0]].name)
    return names


@pytest.mark.parametrize("name", sorted(ISLANDS))
def test_a_converter_model_matches_the_reference_kernels(name):
    path = FIXTURES / f"{name}.tflite"
    outputs = compared_tensors(path)
    result = canonqnn.parity(str(path), runs=3, seed=5, numerics="tflite-reference",
                             outputs=outputs)
    assert "BUILTIN_REF" in result.reference
    check(result, name, outputs)


@pytest.mark.parametrize("name", sorted(ISLANDS))
def test_a_converter_model_matches_the_default_interpreter(name):
    """The interpreter users run (its XNNPACK delegate on x86-64), the profile probed here."""
    path = FIXTURES / f"{name}.tflite"
    outputs = compared_tensors(path)
    result = canonqnn.parity(str(path), runs=3, seed=5, outputs=outputs)
    assert "default" in result.reference
    check(result, name, outputs)


def check(result, name: str, outputs: list[str]) -> None:
    islands = [(i["op"], i["reason"]) for i in result.float_islands]
    assert len(islands) == len(ISLANDS[name]), result.summary()
    for (op, reason), (want_op, word) in zip(islands, ISLANDS[name]):
        assert op == want_op and word in reason, result.summary()
    assert [o.name for o in result.outputs] == outputs
    assert result.exact, result.summary()
