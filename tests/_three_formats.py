"""One small MobileNet-style network written as ONNX QDQ, ONNX QOperator and TFLite.

The three models hold the same int8 weights, int32 biases and quantization parameters:

    x  int8 NHWC [1, 16, 16, 3]
    -> transpose to NCHW                     (ONNX: as tf2onnx writes it; TFLite: the importer)
    -> conv 3x3 stride 2 + ReLU6  "a"        output range [0, 6]
    -> depthwise 3x3 + ReLU6      "b"        output range [0, 6], per-channel weights
    -> pointwise 1x1              "c"
    -> add(a, c)                  "d"        the residual
    -> pointwise 1x1              "e"
    -> sigmoid                    "s"        output 1/256, -128 (TFLite's LOGISTIC contract)
    -> global average pool        "m"
    -> flatten                    "mf"
    -> fully connected            "logits"   int8 output [1, 5]

How each format writes it:

    ============ =========================== ============================ =====================
    layer        ONNX QDQ                    ONNX QOperator               TFLite
    ============ =========================== ============================ =====================
    transpose    DQ -> Transpose -> Q        Transpose on the int8 input  NHWC interface
    conv + ReLU6 DQ -> Conv -> Clip(0, 6)    QLinearConv, output range    CONV_2D /
                 -> Q                        [0, 6]: the clamp is the     DEPTHWISE_CONV_2D,
                                             output range                 fused RELU6
    add          DQ, DQ -> Add -> Q          com.microsoft QLinearAdd     ADD
    sigmoid      DQ -> Sigmoid -> Q          com.microsoft QLinearSigmoid LOGISTIC
    pool         DQ -> GlobalAveragePool     com.microsoft                MEAN over H, W
                 -> Q                        QLinearGlobalAveragePool     (keep_dims false)
    flatten      DQ -> Flatten -> Q          Flatten on int8              (part of MEAN)
    dense        DQ -> Gemm(transB) -> Q     com.microsoft QGemm(transB)  FULLY_CONNECTED
    ============ =========================== ============================ =====================

ReLU6 is written so that QOperator can express it: QLinearConv has no activation, so the two
ReLU6 layers quantize their output to exactly [0, 6] (scale 6/255, zero point -128). The float
clamp is real (the convolution's accumulators fall on both sides of [0, 6] and saturate), and
every format gives the integer clamp [-128, 127]: the QDQ Clip and TFLite's fused RELU6 fold to
that range, QOperator's saturation is that range.

Weights are symmetric (zero point 0); the convolutions are per channel, the dense layer per
tensor (TFLite FULLY_CONNECTED and QGemm both take one scale for the tensor here). Bias scales
are ``float32(x_scale) * w_scale`` in float32, the accumulator scale each runtime assumes.
The sigmoid's 256-entry table is built the way each runtime computes it; for these parameters
onnxruntime's and TFLite's tables are the same.

In the QOperator form the input transpose moves int8 data that has no parameters yet: only the
QLinearConv reading it names them. Canonicalization has to carry them back onto the transpose
for the three forms to meet (a ``canonqnn.transpose``, not a bare int8 ``permute_dims``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from canonqnn.testing.tflite_writer import GraphWriter

H = W = 16
C_IN, C, CLASSES = 3, 8, 5
HALF = H // 2
RELU6 = (float(np.float32(6 / 255)), -128)   # real range exactly [0, 6]
# activation (scale, zero point), shared by the three formats
QP = {"x": (0.05, 3), "xt": (0.05, 3), "a": RELU6, "b": RELU6, "c": (0.06, 4), "d": (0.07, -10),
      "e": (0.08, 2), "s": (1 / 256, -128), "m": (0.004, -128), "mf": (0.004, -128),
      "logits": (0.1, -3)}

_RNG = np.random.default_rng(11)


def _conv_weights(shape_oihw):
    scale = _RNG.uniform(0.002, 0.006, shape_oihw[0]).astype(np.float32)
    return _RNG.integers(-127, 128, shape_oihw).astype(np.int8), scale


CONV_A = _conv_weights((C, C_IN, 3, 3))
CONV_B = _conv_weights((C, 1, 3, 3))        # depthwise
CONV_C = _conv_weights((C, C, 1, 1))
CONV_E = _conv_weights((C, C, 1, 1))
FC_W = _RNG.integers(-127, 128, (CLASSES, C)).astype(np.int8)
FC_SCALE = np.array([0.01], np.float32)


def _bias(x, w_scale, n):
    scale = (np.float32(QP[x][0]) * np.broadcast_to(w_scale, (n,))).astype(np.float32)
    return _RNG.integers(-300, 300, n).astype(np.int32), scale


BIAS_A = _bias("x", CONV_A[1], C)
BIAS_B = _bias("a", CONV_B[1], C)
BIAS_C = _bias("b", CONV_C[1], C)
BIAS_E = _bias("d", CONV_E[1], C)
BIAS_FC = _bias("mf", FC_SCALE, CLASSES)

# (name, input, weights, bias, groups, stride, ONNX pads, ReLU6); ONNX pads are TFLite's SAME
CONVS = (("a", "xt", CONV_A, BIAS_A, 1, 2, [0, 0, 1, 1], True),
         ("b", "a", CONV_B, BIAS_B, C, 1, [1, 1, 1, 1], True),
         ("c", "b", CONV_C, BIAS_C, 1, 1, [0, 0, 0, 0], False),
         ("e", "d", CONV_E, BIAS_E, 1, 1, [0, 0, 0, 0], False))


# ---------------------------------------------------------------- ONNX, both forms
class _OnnxGraph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: set[str] = set()

    def const(self, name: str, value) -> str:
        if name not in self.names:
            self.names.add(name)
            self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qp(self, name: str) -> tuple[str, str]:
        s, z = QP[name]
        return self.const(f"{name}_s", np.float32(s)), self.const(f"{name}_z", np.int8(z))

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], domain=domain or None,
                                           name=f"{op}_{len(self.nodes)}", **attrs))
        return output

    def model(self, name: str, output: str, com_microsoft: bool) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("x_q", TensorProto.INT8, [1, H, W, C_IN])],
            [helper.make_tensor_value_info(output, TensorProto.INT8, [1, CLASSES])],
            self.inits)
        opsets = [helper.make_opsetid("", 13)]
        if com_microsoft:
            opsets.append(helper.make_opsetid("com.microsoft", 1))
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 10
        onnx.checker.check_model(model)
        return model


def qdq_model() -> onnx.ModelProto:
    """The network in ONNX QDQ form (float ops between DequantizeLinear and QuantizeLinear)."""
    g = _OnnxGraph()

    def dq(name):  # one DequantizeLinear per reader, as QDQ quantizers write them
        return g.node("DequantizeLinear", [f"{name}_q", *g.qp(name)], f"{name}_f{len(g.nodes)}")

    def q(src, name):
        g.node("QuantizeLinear", [src, *g.qp(name)], f"{name}_q")

    def dq_const(name, value, scale, zp):
        return g.node("DequantizeLinear", [g.const(name, value), g.const(name + "_s", scale),
                                           g.const(name + "_z", zp)], name + "_f", axis=0)

    g.node("Transpose", [dq("x")], "xt_f", perm=[0, 3, 1, 2])
    q("xt_f", "xt")
    for name, src, (w, ws), (b, bs), group, stride, pads, relu6 in CONVS:
        out = g.node("Conv", [dq(src), dq_const(name + "_w", w, ws, np.zeros(ws.size, np.int8)),
                              dq_const(name + "_b", b, bs, np.zeros(bs.size, np.int32))],
                     name + "_conv", group=group, strides=[stride, stride], pads=pads)
        if relu6:
            out = g.node("Clip", [out, g.const(name + "_lo", np.float32(0)),
                                  g.const(name + "_hi", np.float32(6))], name + "_relu6")
        q(out, name)
        if name == "c":
            q(g.node("Add", [dq("a"), dq("c")], "d_add"), "d")
    q(g.node("Sigmoid", [dq("e")], "s_sigmoid"), "s")
    q(g.node("GlobalAveragePool", [dq("s")], "m_pool"), "m")
    q(g.node("Flatten", [dq("m")], "mf_flat"), "mf")
    fc_w = dq_const("fc_w", FC_W, FC_SCALE, np.zeros(1, np.int8))
    fc_b = dq_const("fc_b", BIAS_FC[0], BIAS_FC[1], np.zeros(CLASSES, np.int32))
    q(g.node("Gemm", [dq("mf"), fc_w, fc_b], "logits_gemm", transB=1), "logits")
    return g.model("three_formats_qdq", "logits_q", com_microsoft=False)


def qoperator_model() -> onnx.ModelProto:
    """The network in ONNX QOperator form (QLinearConv and com.microsoft QLinear* ops)."""
    g = _OnnxGraph()
    ms = "com.microsoft"
    g.node("Transpose", ["x_q"], "xt_q", perm=[0, 3, 1, 2])
    for name, src, (w, ws), (b, _), group, stride, pads, _relu6 in CONVS:
        # ReLU6: the output range [0, 6] of QP["a"] and QP["b"] is the clamp
        g.node("QLinearConv", [f"{src}_q", *g.qp(src), g.const(name + "_w", w),
                               g.const(name + "_ws", ws),
                               g.const(name + "_wz", np.zeros(ws.size, np.int8)), *g.qp(name),
                               g.const(name + "_b", b)],
               f"{name}_q", group=group, strides=[stride, stride], pads=pads,
               kernel_shape=list(w.shape[2:]))
        if name == "c":
            g.node("QLinearAdd", ["a_q", *g.qp("a"), "c_q", *g.qp("c"), *g.qp("d")], "d_q",
                   domain=ms)
    g.node("QLinearSigmoid", ["e_q", *g.qp("e"), *g.qp("s")], "s_q", domain=ms)
    g.node("QLinearGlobalAveragePool", ["s_q", *g.qp("s"), *g.qp("m")], "m_q", domain=ms,
           channels_last=0)
    g.node("Flatten", ["m_q"], "mf_q")
    g.node("QGemm", ["mf_q", *g.qp("mf"), g.const("fc_w", FC_W), g.const("fc_ws", FC_SCALE[0]),
                     g.const("fc_wz", np.int8(0)), g.const("fc_b", BIAS_FC[0]), *g.qp("logits")],
           "logits_q", domain=ms, transB=1)
    return g.model("three_formats_qoperator", "logits_q", com_microsoft=True)


# ---------------------------------------------------------------- TFLite
def tflite_model() -> bytes:
    """The network as a TFLite flatbuffer (NHWC; fused RELU6; LOGISTIC; MEAN)."""
    g = GraphWriter()

    def act(name, shape):
        s, z = QP[name]
        return g.tensor(name, shape, "int8", scale=s, zero_point=z)

    x = act("x", (1, H, W, C_IN))
    half = (1, HALF, HALF, C)
    t = {"xt": x}
    for name, src, (w, ws), (b, bs), group, stride, _, relu6 in CONVS:
        depthwise = group > 1
        if depthwise:  # OIHW [C, 1, 3, 3] -> [1, 3, 3, C], per channel along dim 3
            data, axis = w.transpose(1, 2, 3, 0), 3
        else:          # OIHW -> OHWI
            data, axis = w.transpose(0, 2, 3, 1), 0
        wt = g.tensor(name + "_w", data.shape, "int8", data, ws, np.zeros(ws.size),
                      quantized_dimension=axis)
        bt = g.tensor(name + "_b", (C,), "int32", b, bs, np.zeros(C))
        t[name] = act(name, half)
        options = dict(padding="SAME", strideH=stride, strideW=stride, dilationHFactor=1,
                       dilationWFactor=1, fusedActivationFunction="RELU6" if relu6 else "NONE")
        if depthwise:
            options["depthMultiplier"] = 1
        g.op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [t[src], wt, bt], [t[name]],
             **options)
        if name == "c":
            t["d"] = act("d", half)
            g.op("ADD", [t["a"], t["c"]], [t["d"]], fusedActivationFunction="NONE")
    s = act("s", half)
    g.op("LOGISTIC", [t["e"]], [s])
    axes = g.tensor("axes", (2,), "int32", np.array([1, 2], np.int32))
    m = act("m", (1, C))
    g.op("MEAN", [s, axes], [m], keepDims=False)
    fw = g.tensor("fc_w", FC_W.shape, "int8", FC_W, FC_SCALE, 0)
    fb = g.tensor("fc_b", (CLASSES,), "int32", BIAS_FC[0], BIAS_FC[1][:1], 0)
    logits = act("logits", (1, CLASSES))
    g.op("FULLY_CONNECTED", [m, fw, fb], [logits], fusedActivationFunction="NONE")
    return g.finish([x], [logits])


# ---------------------------------------------------------------- PyTorch (PT2E form)
def torch_program():
    """The network as a PT2E ExportedProgram: what convert_pt2e writes (quantized_decomposed
    quantize/dequantize around aten ops, int8 weight buffers read by dequantize_per_channel),
    with the parameters above instead of calibrated ones. Biases are float, as PT2E keeps
    them: f32(b * scale) of the other formats' int32 b, which quantizes back to exactly b.
    The stride-2 conv's SAME padding [0, 0, 1, 1] is a zero pad before it, as PyTorch writes
    asymmetric padding."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (the q/dq ops)

    qd = torch.ops.quantized_decomposed
    i8 = (-128, 127, torch.int8)

    def float_bias(b, scale):
        return torch.from_numpy((b.astype(np.float32) * scale).astype(np.float32))

    def dq(t, name):
        return qd.dequantize_per_tensor(t, QP[name][0], QP[name][1], *i8)

    def q(t, name):
        return qd.quantize_per_tensor(t, QP[name][0], QP[name][1], *i8)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, _, (w, ws), (b, bs), *_ in CONVS:
                self.register_buffer(name + "_w", torch.from_numpy(w.copy()))
                self.register_buffer(name + "_ws", torch.from_numpy(ws.copy()))
                self.register_parameter(name + "_b", torch.nn.Parameter(float_bias(b, bs)))
            self.register_buffer("fc_w", torch.from_numpy(FC_W.copy()))
            self.fc_b = torch.nn.Parameter(float_bias(*BIAS_FC))
            self.register_buffer("zeros", torch.zeros(C, dtype=torch.int64))

        def weights(self, name):
            w = qd.dequantize_per_channel(getattr(self, name + "_w"), getattr(self, name + "_ws"),
                                          self.zeros, 0, -127, 127, torch.int8)
            return w, getattr(self, name + "_b")

        def forward(self, x_q):
            t = {"xt": q(dq(x_q, "x").permute(0, 3, 1, 2), "xt")}
            for name, src, _, _, group, stride, pads, relu6 in CONVS:
                x = dq(t[src], src)
                top, left, bottom, right = pads
                if top != bottom or left != right:
                    x, padding = torch.nn.functional.pad(x, (left, right, top, bottom)), 0
                else:
                    padding = top
                y = torch.nn.functional.conv2d(x, *self.weights(name), stride, padding, 1, group)
                t[name] = q(torch.nn.functional.hardtanh(y, 0.0, 6.0) if relu6 else y, name)
                if name == "c":
                    t["d"] = q(dq(t["a"], "a") + dq(t["c"], "c"), "d")
            s = q(torch.sigmoid(dq(t["e"], "e")), "s")
            m = q(torch.nn.functional.adaptive_avg_pool2d(dq(s, "s"), 1), "m")
            mf = q(dq(m, "m").flatten(1), "mf")
            w = qd.dequantize_per_tensor(self.fc_w, float(FC_SCALE[0]), 0, -127, 127, torch.int8)
            return dq(q(torch.nn.functional.linear(dq(mf, "mf"), w, self.fc_b), "logits"),
                      "logits")

    example = torch.zeros((1, H, W, C_IN), dtype=torch.int8)
    return torch.export.export(Net(), (example,))


FORMATS = {"onnx_qdq": qdq_model, "onnx_qoperator": qoperator_model, "tflite": tflite_model}
