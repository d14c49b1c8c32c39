"""canonqnn.testing.tflite_from_canonical writes the canonical module's network: TFLite's default
interpreter runs the flatbuffer within a few quantization steps of canonqnn's output (another
runtime's rounding, the same weights and parameters), and canonqnn converts it back."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from canonqnn.io import interface
from canonqnn.ops import reference
from canonqnn.testing import onnx_models as models
from canonqnn.testing import tflite_from_canonical as writer

NETWORKS = {  # the test sizes benchmarks/runtime.py --small times
    "mobilenet_v1": models.mobilenet_v1_like,
    "mobilenet_v2": lambda: models.mobilenet_v2(resolution=32, classes=10),
    "resnet18": lambda: models.resnet18(resolution=32, width=0.125, classes=10),
    "transformer": models.transformer_encoder_like,
}
MAX_STEPS = 2  # TFLite's rounding against onnxruntime's, as canonqnn reproduces it


def canonical(model):
    quantized = models.quantize(model, fmt="qdq", activation="s8", per_channel=True)
    return canonqnn.canonicalize(canonqnn.load(quantized))[0]


def run_tflite(form: writer.TfliteForm, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=form.data, num_threads=1)  # default: XNNPACK
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], form.inputs([x])[0])
    interpreter.invoke()
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return form.outputs([out])[0]


def assert_same_network(mod, form: writer.TfliteForm, ours) -> None:
    lsb = interface(mod).outputs[0].lsb
    for seed in range(2):
        x = models.random_input(100 + seed, tuple(interface(mod).inputs[0].shape))
        expected = ours(x)
        got = run_tflite(form, x)
        assert got.shape == expected.shape
        assert np.ptp(expected) > 20 * lsb  # outputs spread over many steps: a real check
        assert np.abs(got - expected).max() <= MAX_STEPS * lsb * (1 + 1e-5), seed


@pytest.mark.parametrize("name", ["mobilenet_v1", "mobilenet_v2", "resnet18"])
def test_the_tflite_form_of_a_cnn_computes_canonqnns_network(name):
    mod = canonical(NETWORKS[name]())
    form = writer.write(mod)
    assert form.input_perms == [writer.NHWC]
    assert_same_network(mod, form, lambda x: reference.evaluate(mod, {"input": x})
                        .outputs["logits"])


@pytest.mark.slow  # builds the module (its layer norms have no numpy reference): about 10 s
def test_the_tflite_form_of_the_transformer_computes_canonqnns_network():
    mod = canonical(NETWORKS["transformer"]())
    form = writer.write(mod)
    built = canonqnn.build(mod)
    assert_same_network(mod, form, lambda x: built.run({"input": x})["hidden"])
    _, report = canonqnn.canonicalize(canonqnn.load(form.data))
    # what stays float converting it back is the layer norms written as float ops
    assert {i.op for i in report.float_islands} == {
        "relax.mean", "relax.subtract", "relax.multiply", "relax.add", "relax.rsqrt"}


def test_a_max_pool_over_values_below_the_zero_point_pads_with_the_lowest_code():
    from canonqnn.testing.onnx_graph import INPUT_NAME, GraphBuilder

    g = GraphBuilder(0)  # a conv without a ReLU: its output's zero point is not -128
    x = g.node("MaxPool", [g.conv(INPUT_NAME, 3, 8, 3)], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1], output="pooled")
    mod = canonical(g.model("conv_max_pool", x, [1, 8, 16, 16]))
    form = writer.write(mod)
    assert "PADV2" in [kind for kind, *_ in writer._Writer(mod).g.operators]
    assert_same_network(mod, form, lambda x: reference.evaluate(mod, {"input": x})
                        .outputs["pooled"])


def test_the_tflite_form_converts_back_with_no_float_island():
    mod = canonical(NETWORKS["resnet18"]())
    _, report = canonqnn.canonicalize(canonqnn.load(writer.write(mod).data))
    assert report.float_islands == []


def test_an_op_without_a_builtin_is_refused_naming_it():
    mod = canonical(models.mobilenet_v3_like())  # HardSwish: a table no builtin is written for
    with pytest.raises(writer.NotExpressible, match=r"relax\.canonqnn\.lut .*'hardswish'"):
        writer.write(mod)


def test_explicit_paddings_map_to_tflites_same_only_where_they_pad_alike():
    pad = writer._padding
    assert pad((224, 224), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)) == "SAME"
    assert pad((224, 224), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)) is None  # SAME pads 0, 1
    assert pad((224, 224), (3, 3), (2, 2), (1, 1), (0, 0, 1, 1)) == "SAME"
    assert pad((224, 224), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)) is None  # SAME pads 2, 3
    assert pad((56, 56), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0)) == "VALID"


def test_a_clamp_is_the_fused_activation_tflite_computes_for_it():
    fused = writer._fused_activation
    assert fused(-128, 127, 0.05, -10) == "NONE"
    assert fused(-10, 127, 0.05, -10) == "RELU"
    assert fused(-10, 110, 0.05, -10) == "RELU6"  # -10 + 6 / 0.05
    assert fused(-30, 10, 0.05, -10) == "RELU_N1_TO_1"
    assert fused(-10, 100, 0.05, -10) is None
