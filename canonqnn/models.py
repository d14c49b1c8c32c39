"""Small real-architecture float ONNX models and a quantize_static wrapper.

These models exist to exercise onnxruntime's static quantizer
(``onnxruntime.quantization.quantize_static``) on graphs that look like real
CNNs (ResNet basic blocks, MobileNet-v1 depthwise-separable blocks), while
staying tiny (input ``1x3x32x32``) so tests run in milliseconds.

Public API
----------
``resnet_like(seed=0)``          -> float32 ``onnx.ModelProto``
``mobilenet_v1_like(seed=0)``    -> float32 ``onnx.ModelProto``
``quantize(model, fmt=..., activation=..., per_channel=..., seed=0, n_calib=16)``
                                  -> quantized ``onnx.ModelProto``
``random_input(seed, shape=INPUT_SHAPE)`` -> calibration / test input array

All models use opset 13 and are stamped ``ir_version = 10`` because
onnx >= 1.19 writes IR 11 by default, which onnxruntime 1.31 refuses to load.

Dependencies: numpy, onnx, onnxruntime only.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "INPUT_NAME",
    "OUTPUT_NAME",
    "INPUT_SHAPE",
    "NUM_CLASSES",
    "OPSET",
    "IR_VERSION",
    "resnet_like",
    "mobilenet_v1_like",
    "random_input",
    "quantize",
]

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
INPUT_SHAPE = (1, 3, 32, 32)
NUM_CLASSES = 10
OPSET = 13
IR_VERSION = 10  # onnxruntime 1.31 loads IR <= 10 only


# --------------------------------------------------------------------------
# Graph-building helper
# --------------------------------------------------------------------------
class _GraphBuilder:
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

    def model(self, graph_name: str, out: str, out_shape: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, list(INPUT_SHAPE))],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
            initializer=self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="canonqnn.models")
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m, full_check=True)
        return m


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------
def resnet_like(seed: int = 0) -> onnx.ModelProto:
    """Tiny ResNet: stem Conv+Relu, MaxPool, 3 basic blocks, GAP, Flatten, Gemm.

    Shapes (NCHW)::

        input 1x3x32x32
        stem   Conv3x3 3->16 (+bias) Relu          -> 1x16x32x32
        MaxPool 3x3 s2 p1                          -> 1x16x16x16
        block1 identity  (16->16, s1)              -> 1x16x16x16
        block2 projection (16->32, s2, 1x1 s2 conv shortcut) -> 1x32x8x8
        block3 identity  (32->32, s1)              -> 1x32x8x8
        GlobalAveragePool, Flatten                 -> 1x32
        Gemm (transB=1) W[10,32] + b[10]           -> logits 1x10

    Each basic block is Conv-Relu-Conv, Add(shortcut), Relu. The second conv
    of every block uses gain 0.5 so the residual sum stays well scaled.
    """
    g = _GraphBuilder(seed)
    x = g.relu(g.conv(INPUT_NAME, 3, 16, 3))
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def basic_block(x: str, cin: int, cout: int, stride: int) -> str:
        y = g.relu(g.conv(x, cin, cout, 3, stride=stride))
        y = g.conv(y, cout, cout, 3, gain=0.5)
        sc = x if (stride == 1 and cin == cout) else g.conv(x, cin, cout, 1, stride=stride)
        return g.relu(g.node("Add", [y, sc]))

    x = basic_block(x, 16, 16, 1)
    x = basic_block(x, 16, 32, 2)
    x = basic_block(x, 32, 32, 1)
    x = g.node("GlobalAveragePool", [x])
    x = g.node("Flatten", [x], axis=1)
    w = g.rng.normal(0.0, np.sqrt(1.0 / 32), size=(NUM_CLASSES, 32)).astype(np.float32)
    b = g.rng.normal(0.0, 0.05, size=(NUM_CLASSES,)).astype(np.float32)
    out = g.node("Gemm", [x, g.const("fc_w", w), g.const("fc_b", b)], prefix="fc",
                 output=OUTPUT_NAME, transB=1)
    return g.model("resnet_like", out, [1, NUM_CLASSES])


def mobilenet_v1_like(seed: int = 0) -> onnx.ModelProto:
    """Tiny MobileNet-v1: stride-2 stem, 4 depthwise-separable blocks, AvgPool, Reshape, MatMul+Add.

    Shapes (NCHW)::

        input 1x3x32x32
        stem Conv3x3 s2 3->16 + Clip(0,6)                -> 1x16x16x16
        dw1  DW3x3 s1 (group=16) Clip, PW1x1 16->32 Clip -> 1x32x16x16
        dw2  DW3x3 s2 (group=32) Clip, PW1x1 32->64 Clip -> 1x64x8x8
        dw3  DW3x3 s1 (group=64) Clip, PW1x1 64->64 Clip -> 1x64x8x8
        dw4  DW3x3 s2 (group=64) Clip, PW1x1 64->128 Clip-> 1x128x4x4
        AveragePool kernel 4x4 (= remaining spatial)     -> 1x128x1x1
        Reshape [1,128]; MatMul W[128,10]; Add b[10]     -> logits 1x10

    Relu6 is expressed as opset-13 Clip with min=0, max=6 initializer inputs.
    Depthwise convs use pads 1. Conv weights are He-normal with gain 1.5 so
    that Clip(0,6) saturates on a few percent of elements.
    """
    g = _GraphBuilder(seed)
    # gain 1.5 so that a few percent of activations exceed 6 and Clip's max
    # bound is actually exercised.
    x = g.relu6(g.conv(INPUT_NAME, 3, 16, 3, stride=2, gain=1.5))
    c = 16
    for cout, stride in [(32, 1), (64, 2), (64, 1), (128, 2)]:
        x = g.relu6(g.conv(x, c, c, 3, stride=stride, group=c, gain=1.5))
        x = g.relu6(g.conv(x, c, cout, 1, gain=1.5))
        c = cout
    x = g.node("AveragePool", [x], kernel_shape=[4, 4], strides=[1, 1])
    x = g.node("Reshape", [x, g.const("reshape_shape", np.array([1, c], dtype=np.int64))])
    w = g.rng.normal(0.0, np.sqrt(1.0 / c), size=(c, NUM_CLASSES)).astype(np.float32)
    b = g.rng.normal(0.0, 0.05, size=(NUM_CLASSES,)).astype(np.float32)
    x = g.node("MatMul", [x, g.const("fc_w", w)], prefix="fc_matmul")
    out = g.node("Add", [x, g.const("fc_b", b)], prefix="fc_add", output=OUTPUT_NAME)
    return g.model("mobilenet_v1_like", out, [1, NUM_CLASSES])


# --------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------
def random_input(seed: int, shape: tuple[int, ...] = INPUT_SHAPE) -> np.ndarray:
    """Standard-normal float32 input; used both for calibration and testing."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _make_reader(n: int, seed: int):
    from onnxruntime.quantization import CalibrationDataReader

    class _RandomReader(CalibrationDataReader):
        """Yields ``n`` seeded standard-normal inputs (seeds seed*1000 + i)."""

        def __init__(self):
            self._it = iter([{INPUT_NAME: random_input(seed * 1000 + i)} for i in range(n)])

        def get_next(self):
            return next(self._it, None)

    return _RandomReader()


def quantize(
    model: onnx.ModelProto,
    *,
    fmt: str,
    activation: str,
    per_channel: bool,
    seed: int = 0,
    n_calib: int = 16,
    extra_options: dict | None = None,
) -> onnx.ModelProto:
    """Statically quantize ``model`` with onnxruntime's quantizer and return the result.

    Parameters
    ----------
    fmt : "qdq" | "qoperator"
        ``QuantFormat.QDQ`` (Q/DQ pairs around float ops) or
        ``QuantFormat.QOperator`` (QLinearConv, QGemm, ... com.microsoft ops).
    activation : "u8" | "s8"
        Activation type ``QuantType.QUInt8`` or ``QuantType.QInt8``.
    per_channel : bool
        Per-output-channel weight quantization.
    seed, n_calib :
        Calibration data = ``n_calib`` standard-normal inputs, seeds
        ``seed*1000 + i``. MinMax calibration (the default).
    extra_options :
        Passed through to ``quantize_static`` (default: none, i.e. all ORT
        defaults: ActivationSymmetric=False, WeightSymmetric=True,
        QDQKeepRemovableActivations=False, ...).

    Weights are always ``QuantType.QInt8``: ORT refuses S8 activations with
    U8 weights (``check_static_quant_arguments``), S8 symmetric weights
    (zero point 0, WeightSymmetric defaults to True) are what ORT recommends
    for x86 CPUs and what MLAS's U8S8/S8S8 kernels are built around, and
    keeping the weight type fixed means the 8 configurations vary only in
    format, activation signedness and per-channel.

    ``reduce_range`` is left False (the default; 7-bit weights are only
    useful on non-VNNI hardware).

    The returned model has ``ir_version`` forced to 10 so that onnxruntime
    1.31 can load it.
    """
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    fmts = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}
    acts = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}
    if fmt not in fmts:
        raise ValueError(f"fmt must be one of {sorted(fmts)}, got {fmt!r}")
    if activation not in acts:
        raise ValueError(f"activation must be one of {sorted(acts)}, got {activation!r}")

    src = onnx.ModelProto()
    src.CopyFrom(model)
    src.ir_version = IR_VERSION
    with tempfile.TemporaryDirectory(prefix="ortq_") as d:
        out_path = os.path.join(d, "quant.onnx")
        quantize_static(
            src,
            out_path,
            _make_reader(n_calib, seed),
            quant_format=fmts[fmt],
            per_channel=per_channel,
            reduce_range=False,
            activation_type=acts[activation],
            weight_type=QuantType.QInt8,
            extra_options=dict(extra_options or {}),
        )
        q = onnx.load(out_path)
    q.ir_version = IR_VERSION
    return q
