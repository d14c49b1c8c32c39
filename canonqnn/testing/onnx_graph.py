"""The graph builder the test-size ONNX models are written with: nodes and initializers with
unique names and seeded weights, and the names and versions every such model shares.

Dependencies: numpy and onnx only.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
INPUT_SHAPE = (1, 3, 32, 32)
SEQ_SHAPE = (1, 16, 32)  # transformer_encoder_like: [batch, sequence, model width]
# The tensor ``with_features`` exposes: a large quantized activation deep in each new model.
FEATURES_NAME = "features"
NUM_CLASSES = 10
OPSET = 13
IR_VERSION = 10  # onnxruntime 1.31 loads IR <= 10 only



class GraphBuilder:
    """Accumulates nodes/initializers with unique names and seeded weights."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def name(self, prefix: str) -> str:
        n = self._count.get(prefix, 0)
        self._count[prefix] = n + 1
        return f"{prefix}{n}"

    def const(self, prefix: str, arr: np.ndarray) -> str:
        nm = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), nm))
        return nm

    def node(self, op: str, inputs: list[str], prefix: str | None = None,
             output: str | None = None, **attrs) -> str:
        nm = self.name(prefix or op.lower())
        out = output or f"{nm}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=nm, **attrs))
        return out

    # -- layers ------------------------------------------------------------
    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        group: int = 1,
        gain: float = 1.0,
        bias_std: float = 0.05,
        output: str | None = None,
    ) -> str:
        """Conv with He-normal weights (std = gain*sqrt(2/fan_in)) and a small random bias."""
        fan_in = (cin // group) * k * k
        std = gain * np.sqrt(2.0 / fan_in)
        w = self.rng.normal(0.0, std, size=(cout, cin // group, k, k)).astype(np.float32)
        b = self.rng.normal(0.0, bias_std, size=(cout,)).astype(np.float32)
        wn = self.const("conv_w", w)
        bn = self.const("conv_b", b)
        p = k // 2
        return self.node(
            "Conv",
            [x, wn, bn],
            prefix="conv",
            output=output,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[p, p, p, p],
            group=group,
            dilations=[1, 1],
        )

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def relu6(self, x: str) -> str:
        # opset >= 11: min/max are inputs; use scalar initializers.
        lo = self.const("clip_min", np.array(0.0, dtype=np.float32))
        hi = self.const("clip_max", np.array(6.0, dtype=np.float32))
        return self.node("Clip", [x, lo, hi])

    def hardswish(self, x: str) -> str:
        return self.node("HardSwish", [x])

    def hardsigmoid(self, x: str) -> str:
        # relu6(x + 3) / 6, as MobileNet-V3 and PyTorch's Hardsigmoid define it (ONNX's
        # default alpha is 0.2).
        return self.node("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)

    def leaky_relu(self, x: str) -> str:
        return self.node("LeakyRelu", [x], alpha=0.1)

    def sigmoid(self, x: str) -> str:
        return self.node("Sigmoid", [x])

    def linear(self, x: str, din: int, dout: int, gain: float = 1.0) -> str:
        """MatMul with W[din, dout] (std gain/sqrt(din)) then Add of a bias, as exporters emit."""
        w = self.rng.normal(0.0, gain / np.sqrt(din), size=(din, dout)).astype(np.float32)
        b = self.rng.normal(0.0, 0.05, size=(dout,)).astype(np.float32)
        y = self.node("MatMul", [x, self.const("linear_w", w)])
        return self.node("Add", [y, self.const("linear_b", b)])

    def layer_norm(self, x: str, width: int) -> str:
        gamma = (1.0 + self.rng.normal(0.0, 0.1, size=(width,))).astype(np.float32)
        beta = self.rng.normal(0.0, 0.05, size=(width,)).astype(np.float32)
        return self.node("LayerNormalization",
                         [x, self.const("ln_gamma", gamma), self.const("ln_beta", beta)],
                         axis=-1, epsilon=1e-5)

    def shape_const(self, dims: list[int]) -> str:
        return self.const("shape", np.array(dims, dtype=np.int64))

    def model(self, graph_name: str, out: str, out_shape: list[int],
              in_shape: tuple[int, ...] = INPUT_SHAPE, opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, list(in_shape))],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
            initializer=self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="canonqnn.testing.onnx_models")
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m, full_check=True)
        return m
