"""canonqnn.testing.torch_from_onnx: the float ONNX network as a PyTorch module computes what
onnxruntime computes on the ONNX model (same layers, same weights), and its PT2E form runs on
ExecuTorch's XNNPACK delegate close to the float network."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from canonqnn.testing import onnx_models as models
from canonqnn.testing import torch_from_onnx

NETWORKS = {  # the test sizes benchmarks/runtime.py --small times
    "mobilenet_v1": models.mobilenet_v1_like,
    "mobilenet_v2": lambda: models.mobilenet_v2(resolution=32, classes=10),
    "resnet18": lambda: models.resnet18(resolution=32, width=0.125, classes=10),
    "transformer": models.transformer_encoder_like,
}


def float_output(model, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {models.INPUT_NAME: x})[0]


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_the_module_computes_the_float_onnx_network(name):
    model = NETWORKS[name]()
    module = torch_from_onnx.torch_module(model)
    x = models.random_input(7, models.input_shape(model))
    expected = float_output(model, x)
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


def test_the_module_is_written_with_the_layers_a_pytorch_author_uses():
    module = torch_from_onnx.torch_module(models.transformer_encoder_like())
    kinds = sorted({type(m).__name__ for m in module.layers})
    assert kinds == ["GELU", "LayerNorm", "Linear"]  # MatMul + Add of a bias: one Linear
    assert sum(isinstance(m, torch.nn.Linear) for m in module.layers) == 6


def test_a_node_without_a_layer_is_refused_naming_it():
    with pytest.raises(ValueError, match="LeakyRelu"):
        torch_from_onnx.torch_module(models.conv_classifier_like())


@pytest.mark.slow  # PT2E quantization and lowering to XNNPACK: about 20 s
def test_the_pt2e_form_runs_on_executorchs_xnnpack_delegate():
    from executorch.runtime import Runtime

    model = NETWORKS["resnet18"]()
    program = torch_from_onnx.pt2e_program(model)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "quantized_decomposed.dequantize_per_channel.default" in targets  # int8 weights
    # the program holds the bytes its method runs on: kept alive while the method runs
    loaded = Runtime.get().load_program(torch_from_onnx.executorch_pte(program))
    method = loaded.load_method("forward")
    x = models.random_input(7, models.input_shape(model))
    expected = float_output(model, x)
    got = np.asarray(method.execute([torch.from_numpy(x)])[0])
    # a quantized run of the same network: near the float output, not equal to it
    error = np.abs(got - expected).max() / np.abs(expected).max()
    assert 0 < error < 0.25
