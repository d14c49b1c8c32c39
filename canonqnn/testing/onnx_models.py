"""Small real-architecture float ONNX models and a quantize_static wrapper.

These models exist to exercise onnxruntime's static quantizer
(``onnxruntime.quantization.quantize_static``) on graphs that look like real
networks while staying tiny, so each quantizes in a fraction of a second and
builds with TVM in a few seconds. ``resolution``/``width`` (``seq``/``width`` for the
transformer) scale them up for benchmarks; the defaults are the sizes tests use.

Public API
----------
``resnet_like(seed=0, resolution=32, width=1)``       -> ResNet basic blocks (opset 13)
``mobilenet_v1_like(seed=0, resolution=32, width=1)`` -> depthwise-separable blocks, Relu6
                                                          (opset 13)
``mobilenet_v3_like(seed=0)``        -> inverted residuals, squeeze-excite, HardSwish (opset 17)
``transformer_encoder_like(seed=0, heads=2, ffn=64, seq=16, width=32)``
                                     -> one pre-LN encoder layer, attention + Gelu FFN (opset 20)
``conv_classifier_like(seed=0)``     -> LeakyRelu/Sigmoid convs, Concat, Resize (opset 17)
``with_features(model)``             -> the same model also outputting tensor ``features``
``quantize(model, fmt=..., activation=..., per_channel=..., seed=0, n_calib=16)``
                                      -> quantized ``onnx.ModelProto``
``random_input(seed, shape=INPUT_SHAPE)`` -> calibration / test input array
``input_shape(model)``                -> the static shape of the model's one input

Every model has one float input named ``input`` (N(0, 1) data is the intended
range) and one float output. Models are stamped ``ir_version = 10`` because
onnx >= 1.19 writes IR 11 by default, which onnxruntime 1.31 refuses to load.

Dependencies: numpy, onnx, onnxruntime only.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx

from .onnx_graph import (
    FEATURES_NAME,
    INPUT_NAME,
    INPUT_SHAPE,
    IR_VERSION,
    NUM_CLASSES,
    OPSET,
    OUTPUT_NAME,
    SEQ_SHAPE,
    GraphBuilder,
)

__all__ = [
    "INPUT_NAME",
    "OUTPUT_NAME",
    "INPUT_SHAPE",
    "NUM_CLASSES",
    "OPSET",
    "IR_VERSION",
    "SEQ_SHAPE",
    "resnet_like",
    "mobilenet_v1_like",
    "mobilenet_v3_like",
    "transformer_encoder_like",
    "conv_classifier_like",
    "ARCHITECTURES",
    "FEATURES_NAME",
    "with_features",
    "input_shape",
    "random_input",
    "quantize",
]

# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------
def resnet_like(seed: int = 0, resolution: int = 32, width: int = 1) -> onnx.ModelProto:
    """Tiny ResNet: stem Conv+Relu, MaxPool, 3 basic blocks, GAP, Flatten, Gemm.

    ``resolution`` sets the input's height and width and ``width`` multiplies every channel
    count (the defaults give the shapes below; benchmarks use larger ones).

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
    g = GraphBuilder(seed)
    c1, c2 = 16 * width, 32 * width
    x = g.relu(g.conv(INPUT_NAME, 3, c1, 3))
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def basic_block(x: str, cin: int, cout: int, stride: int) -> str:
        y = g.relu(g.conv(x, cin, cout, 3, stride=stride))
        y = g.conv(y, cout, cout, 3, gain=0.5)
        sc = x if (stride == 1 and cin == cout) else g.conv(x, cin, cout, 1, stride=stride)
        return g.relu(g.node("Add", [y, sc]))

    x = basic_block(x, c1, c1, 1)
    x = basic_block(x, c1, c2, 2)
    x = basic_block(x, c2, c2, 1)
    out = _classifier_head(g, x, c2, NUM_CLASSES)
    return g.model("resnet_like", out, [1, NUM_CLASSES],
                   in_shape=(1, 3, resolution, resolution))


def mobilenet_v1_like(seed: int = 0, resolution: int = 32, width: int = 1) -> onnx.ModelProto:
    """Tiny MobileNet-v1: stride-2 stem, 4 depthwise-separable blocks, AvgPool, Reshape, MatMul+Add.

    ``resolution`` (a multiple of 8) sets the input's height and width and ``width`` multiplies
    every channel count (the defaults give the shapes below; benchmarks use larger ones).

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
    g = GraphBuilder(seed)
    # gain 1.5 so that a few percent of activations exceed 6 and Clip's max
    # bound is actually exercised.
    if resolution % 8:
        raise ValueError(f"resolution must be a multiple of 8, got {resolution}")
    c = 16 * width
    x = g.relu6(g.conv(INPUT_NAME, 3, c, 3, stride=2, gain=1.5))
    for cout, stride in [(32, 1), (64, 2), (64, 1), (128, 2)]:
        cout *= width
        x = g.relu6(g.conv(x, c, c, 3, stride=stride, group=c, gain=1.5))
        x = g.relu6(g.conv(x, c, cout, 1, gain=1.5))
        c = cout
    pool = resolution // 8
    x = g.node("AveragePool", [x], kernel_shape=[pool, pool], strides=[1, 1])
    x = g.node("Reshape", [x, g.const("reshape_shape", np.array([1, c], dtype=np.int64))])
    w = g.rng.normal(0.0, np.sqrt(1.0 / c), size=(c, NUM_CLASSES)).astype(np.float32)
    b = g.rng.normal(0.0, 0.05, size=(NUM_CLASSES,)).astype(np.float32)
    x = g.node("MatMul", [x, g.const("fc_w", w)], prefix="fc_matmul")
    out = g.node("Add", [x, g.const("fc_b", b)], prefix="fc_add", output=OUTPUT_NAME)
    return g.model("mobilenet_v1_like", out, [1, NUM_CLASSES],
                   in_shape=(1, 3, resolution, resolution))


def mobilenet_v3_like(seed: int = 0) -> onnx.ModelProto:
    """Tiny MobileNet-V3: HardSwish stem, 3 inverted residual blocks (two with squeeze-excite),
    HardSwish head conv, GlobalAveragePool, Flatten, Gemm.

    Shapes (NCHW)::

        input 1x3x32x32
        stem Conv3x3 s2 3->16 + HardSwish                              -> 1x16x16x16
        ir1  PW 16->32 HardSwish, DW3x3 s1 HardSwish, SE(32->8->32),
             PW 32->16, Add(block input)                               -> 1x16x16x16
        ir2  PW 16->48 Relu, DW3x3 s2 Relu, PW 48->24 (no SE, no skip) -> 1x24x8x8
        ir3  PW 24->72 HardSwish, DW5x5 s1 HardSwish, SE(72->18->72),
             PW 72->24, Add(block input)                               -> 1x24x8x8
        head Conv1x1 24->64 (its output is ``features``) + HardSwish,
             GlobalAveragePool, Flatten                                -> 1x64
        Gemm (transB=1) W[10,64] + b[10]                               -> logits 1x10

    Squeeze-excite is GlobalAveragePool -> Conv1x1 -> Relu -> Conv1x1 -> HardSigmoid(1/6, 0.5)
    -> Mul with the block tensor ([1,C,H,W] x [1,C,1,1] broadcast). HardSwish is the opset-14
    operator. Projection convs use gain 0.5 so the residual sums stay well scaled.
    """
    g = GraphBuilder(seed)

    def squeeze_excite(x: str, c: int) -> str:
        s = g.node("GlobalAveragePool", [x])
        s = g.relu(g.conv(s, c, c // 4, 1))
        # A larger bias spreads the gate over HardSigmoid's whole ramp, not just near 0.5.
        s = g.hardsigmoid(g.conv(s, c // 4, c, 1, bias_std=0.5))
        return g.node("Mul", [x, s])

    def inverted_residual(x, cin, cexp, cout, k, stride, act, se):
        y = act(g.conv(x, cin, cexp, 1))
        y = act(g.conv(y, cexp, cexp, k, stride=stride, group=cexp))
        if se:
            y = squeeze_excite(y, cexp)
        y = g.conv(y, cexp, cout, 1, gain=0.5)
        return g.node("Add", [y, x]) if stride == 1 and cin == cout else y

    x = g.hardswish(g.conv(INPUT_NAME, 3, 16, 3, stride=2))
    x = inverted_residual(x, 16, 32, 16, 3, 1, g.hardswish, se=True)
    x = inverted_residual(x, 16, 48, 24, 3, 2, g.relu, se=False)
    x = inverted_residual(x, 24, 72, 24, 5, 1, g.hardswish, se=True)
    x = g.hardswish(g.conv(x, 24, 64, 1, output=FEATURES_NAME))
    out = _classifier_head(g, x, 64, NUM_CLASSES)
    return g.model("mobilenet_v3_like", out, [1, NUM_CLASSES], opset=17)


def transformer_encoder_like(seed: int = 0, heads: int = 2, ffn: int = 64,
                             seq: int = SEQ_SHAPE[1], width: int = SEQ_SHAPE[2]) -> onnx.ModelProto:
    """One pre-LN transformer encoder layer on ``input`` [1, S, D] (default SEQ_SHAPE: S 16, D 32).

    Graph, as exporters emit it::

        h0 = LayerNormalization(input)                    (opset-17 operator, axis -1)
        q, k, v = h0 @ Wq + bq, h0 @ Wk + bk, h0 @ Wv + bv          [1,S,D]
        heads: Reshape [1,S,H,D/H]; Transpose q,v (0,2,1,3), k (0,2,3,1)
        scores = MatMul(q, k^T) * (1/sqrt(D/H))   (Mul by a scalar)  [1,H,S,S]
        attn = MatMul(Softmax(scores, axis -1), v)                   [1,H,S,D/H]
             (the Softmax output is ``features``)
        Transpose (0,2,1,3), Reshape [1,S,D]; @ Wo + bo; Add(input)  -> h1
        h1 + (Gelu(LayerNormalization(h1) @ W1 + b1) @ W2 + b2)      -> output [1,S,D]

    Gelu is the opset-20 operator (exact erf form). Linear weights have std 1/sqrt(fan_in),
    the two output projections gain 0.5 so the residual stream stays near unit scale.
    """
    g = GraphBuilder(seed)
    head = width // heads
    x = g.layer_norm(INPUT_NAME, width)
    q, k, v = (g.linear(x, width, width) for _ in range(3))

    def split_heads(t: str, perm: list[int]) -> str:
        t = g.node("Reshape", [t, g.shape_const([1, seq, heads, head])])
        return g.node("Transpose", [t], perm=perm)

    q = split_heads(q, [0, 2, 1, 3])
    k = split_heads(k, [0, 2, 3, 1])
    v = split_heads(v, [0, 2, 1, 3])
    scores = g.node("MatMul", [q, k])
    scores = g.node("Mul", [scores, g.const("attn_scale", np.array(1.0 / np.sqrt(head),
                                                                    dtype=np.float32))])
    probs = g.node("Softmax", [scores], axis=-1, output=FEATURES_NAME)
    attn = g.node("MatMul", [probs, v])
    attn = g.node("Transpose", [attn], perm=[0, 2, 1, 3])
    attn = g.node("Reshape", [attn, g.shape_const([1, seq, width])])
    h = g.node("Add", [g.linear(attn, width, width, gain=0.5), INPUT_NAME])
    y = g.linear(g.layer_norm(h, width), width, ffn)
    y = g.linear(g.node("Gelu", [y]), ffn, width, gain=0.5)
    out = g.node("Add", [h, y], output="hidden")
    shape = (1, seq, width)
    return g.model("transformer_encoder_like", out, list(shape), in_shape=shape, opset=20)


def conv_classifier_like(seed: int = 0) -> onnx.ModelProto:
    """Tiny two-branch CNN: LeakyRelu and Sigmoid convs, Concat, nearest and linear Resize,
    AveragePool, Flatten, Gemm.

    Shapes (NCHW)::

        input 1x3x32x32
        Conv3x3 3->16 + LeakyRelu(0.1)                               -> 1x16x32x32
        Conv3x3 s2 16->24 + LeakyRelu                                -> t 1x24x16x16
        branch a: Conv1x1 24->16 + Sigmoid                           -> 1x16x16x16
        branch b: Conv3x3 s2 24->16 + LeakyRelu, Resize nearest x2   -> 1x16x16x16
        Concat(a, b) axis 1                                          -> 1x32x16x16
        Conv3x3 s2 32->32 + LeakyRelu, Resize linear x2              -> 1x32x16x16
        Conv3x3 32->32 + Sigmoid (``features``), AveragePool 4x4 s4  -> 1x32x4x4
        Flatten, Gemm (transB=1) W[10,512] + b[10]                   -> logits 1x10

    The nearest Resize uses the attributes PyTorch exports for ``nn.Upsample(scale_factor=2)``
    (asymmetric, floor); the linear one ``align_corners=False`` (half_pixel).
    """
    g = GraphBuilder(seed)

    def upsample2x(x: str, **attrs) -> str:
        scales = g.const("resize_scales", np.array([1, 1, 2, 2], dtype=np.float32))
        return g.node("Resize", [x, "", scales], **attrs)

    x = g.leaky_relu(g.conv(INPUT_NAME, 3, 16, 3))
    t = g.leaky_relu(g.conv(x, 16, 24, 3, stride=2))
    a = g.sigmoid(g.conv(t, 24, 16, 1))
    b = g.leaky_relu(g.conv(t, 24, 16, 3, stride=2))
    b = upsample2x(b, mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")
    x = g.node("Concat", [a, b], axis=1)
    x = g.leaky_relu(g.conv(x, 32, 32, 3, stride=2))
    x = upsample2x(x, mode="linear", coordinate_transformation_mode="half_pixel")
    x = g.node("Sigmoid", [g.conv(x, 32, 32, 3)], output=FEATURES_NAME)
    x = g.node("AveragePool", [x], kernel_shape=[4, 4], strides=[4, 4])
    out = _dense_head(g, x, 512, NUM_CLASSES)
    return g.model("conv_classifier_like", out, [1, NUM_CLASSES], opset=17)


def with_features(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs its ``features`` tensor.

    The classifiers' 10 logits average most of the network away (a one-step difference in a
    feature map rarely moves them), so parity checks compare this large intermediate tensor
    too: mobilenet_v3's head conv output (1x64x8x8), the transformer's attention
    probabilities (1x2x16x16), conv_classifier's last Sigmoid output (1x32x16x16).
    """
    inferred = onnx.shape_inference.infer_shapes(model)
    (info,) = [v for v in inferred.graph.value_info if v.name == FEATURES_NAME]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.output.append(info)
    return out


def _classifier_head(g: GraphBuilder, x: str, c: int, classes: int) -> str:
    """GlobalAveragePool, then ``_dense_head`` of the ``c`` pooled channels."""
    return _dense_head(g, g.node("GlobalAveragePool", [x]), c, classes)


def _dense_head(g: GraphBuilder, x: str, c: int, classes: int) -> str:
    """Flatten ``x`` (``c`` values) and a random Gemm to ``classes`` logits, the output."""
    x = g.node("Flatten", [x], axis=1)
    w = g.rng.normal(0.0, np.sqrt(1.0 / c), size=(classes, c)).astype(np.float32)
    b = g.rng.normal(0.0, 0.05, size=(classes,)).astype(np.float32)
    return g.node("Gemm", [x, g.const("fc_w", w), g.const("fc_b", b)], prefix="fc",
                  output=OUTPUT_NAME, transB=1)


def resnet18(seed: int = 0, resolution: int = 224, width: float = 1.0,
             classes: int = 1000) -> onnx.ModelProto:
    """ResNet-18 (He et al.): stem Conv7x7 s2 + Relu, MaxPool 3x3 s2, four stages of two basic
    blocks (64, 128, 256, 512 channels times ``width``; the first block of stages 2-4 strided
    with a 1x1 projection shortcut), GlobalAveragePool, Gemm. Real-size benchmark network."""
    g = GraphBuilder(seed)
    chans = [max(8, int(c * width)) for c in (64, 128, 256, 512)]
    x = g.relu(g.conv(INPUT_NAME, 3, chans[0], 7, stride=2))
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = chans[0]
    for stage, cout in enumerate(chans):
        for block in range(2):
            stride = 2 if stage and not block else 1
            y = g.relu(g.conv(x, c, cout, 3, stride=stride))
            y = g.conv(y, cout, cout, 3, gain=0.5)
            sc = x if stride == 1 and c == cout else g.conv(x, c, cout, 1, stride=stride)
            x, c = g.relu(g.node("Add", [y, sc])), cout
    out = _classifier_head(g, x, c, classes)
    return g.model("resnet18", out, [1, classes], in_shape=(1, 3, resolution, resolution))


def mobilenet_v1(seed: int = 0, resolution: int = 224, alpha: float = 1.0,
                 classes: int = 1000) -> onnx.ModelProto:
    """MobileNet-V1 (Howard et al.): Conv3x3 s2 32, 13 depthwise-separable blocks (channels
    times ``alpha``), each conv followed by Relu6, GlobalAveragePool, Gemm. Real-size
    benchmark network."""
    g = GraphBuilder(seed)
    scaled = [max(8, int(c * alpha)) for c in (32, 64, 128, 256, 512, 1024)]
    c = scaled[0]
    x = g.relu6(g.conv(INPUT_NAME, 3, c, 3, stride=2, gain=1.5))
    plan = [(1, 1), (2, 2), (2, 1), (3, 2), (3, 1), (4, 2)] + [(4, 1)] * 5 + [(5, 2), (5, 1)]
    for index, stride in plan:
        cout = scaled[index]
        x = g.relu6(g.conv(x, c, c, 3, stride=stride, group=c, gain=1.5))
        x, c = g.relu6(g.conv(x, c, cout, 1, gain=1.5)), cout
    out = _classifier_head(g, x, c, classes)
    return g.model("mobilenet_v1", out, [1, classes], in_shape=(1, 3, resolution, resolution))


def mobilenet_v2(seed: int = 0, resolution: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """MobileNet-V2 (Sandler et al.): Conv3x3 s2 32, 17 inverted residual blocks (expansion
    1x1 + Relu6, depthwise 3x3 + Relu6, linear 1x1 projection, Add where the shape allows),
    Conv1x1 1280 + Relu6, GlobalAveragePool, Gemm. Real-size benchmark network."""
    g = GraphBuilder(seed)
    x = g.relu6(g.conv(INPUT_NAME, 3, 32, 3, stride=2))
    c = 32
    for t, cout, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for block in range(n):
            stride = s if block == 0 else 1
            y = x if t == 1 else g.relu6(g.conv(x, c, c * t, 1))
            y = g.relu6(g.conv(y, c * t, c * t, 3, stride=stride, group=c * t))
            y = g.conv(y, c * t, cout, 1, gain=0.5)
            x = g.node("Add", [y, x]) if stride == 1 and c == cout else y
            c = cout
    x = g.relu6(g.conv(x, c, 1280, 1))
    out = _classifier_head(g, x, 1280, classes)
    return g.model("mobilenet_v2", out, [1, classes], in_shape=(1, 3, resolution, resolution))


# Builders by the short names tests and examples use.
ARCHITECTURES = {
    "resnet": resnet_like,
    "mobilenet_v1": mobilenet_v1_like,
    "mobilenet_v3": mobilenet_v3_like,
    "transformer": transformer_encoder_like,
    "conv_classifier": conv_classifier_like,
}


# --------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------
def random_input(seed: int, shape: tuple[int, ...] = INPUT_SHAPE) -> np.ndarray:
    """Standard-normal float32 input; used both for calibration and testing."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    """The static shape of the model's input ``input``."""
    (vi,) = [v for v in model.graph.input if v.name == INPUT_NAME]
    return tuple(int(d.dim_value) for d in vi.type.tensor_type.shape.dim)


def _make_reader(n: int, seed: int, shape: tuple[int, ...]):
    from onnxruntime.quantization import CalibrationDataReader

    class _RandomReader(CalibrationDataReader):
        """Yields ``n`` seeded standard-normal inputs (seeds seed*1000 + i)."""

        def __init__(self):
            self._it = iter([{INPUT_NAME: random_input(seed * 1000 + i, shape)}
                             for i in range(n)])

        def get_next(self):
            return next(self._it, None)

    return _RandomReader()


def _all_op_types(model: onnx.ModelProto) -> list[str]:
    """The quantizer's default operator types plus every type the model uses."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry)
                  | {n.op_type for n in model.graph.node})


def quantize(
    model: onnx.ModelProto,
    *,
    fmt: str,
    activation: str,
    per_channel: bool,
    seed: int = 0,
    n_calib: int = 16,
    extra_options: dict | None = None,
    nodes_to_exclude: list[str] | None = None,
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
    nodes_to_exclude :
        Node names left in float (a detector's box-decoding head, as users exclude it).

    Weights are always ``QuantType.QInt8``: ORT refuses S8 activations with
    U8 weights (``check_static_quant_arguments``), S8 symmetric weights
    (zero point 0, WeightSymmetric defaults to True) are what ORT recommends
    for x86 CPUs and what MLAS's U8S8/S8S8 kernels are built around, and
    keeping the weight type fixed means the 8 configurations vary only in
    format, activation signedness and per-channel.

    ``reduce_range`` is left False (the default; 7-bit weights are only
    useful on non-VNNI hardware).

    Every operator type of the model is passed in ``op_types_to_quantize``
    (with the quantizer's own registries): by default ``quantize_static``
    only touches the types it has registered, so HardSwish, HardSigmoid,
    Gelu, Sub, Div, Erf, ... would otherwise stay float between float
    tensors. In QDQ form each of them gets DequantizeLinear inputs and a
    QuantizeLinear output; in QOperator form, types without a QLinear
    operator stay float ops bracketed by DequantizeLinear / QuantizeLinear.

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
            _make_reader(n_calib, seed, input_shape(model)),
            quant_format=fmts[fmt],
            op_types_to_quantize=_all_op_types(model),
            per_channel=per_channel,
            reduce_range=False,
            activation_type=acts[activation],
            weight_type=QuantType.QInt8,
            extra_options=dict(extra_options or {}),
            nodes_to_exclude=list(nodes_to_exclude or []),
        )
        q = onnx.load(out_path)
    q.ir_version = IR_VERSION
    return q
