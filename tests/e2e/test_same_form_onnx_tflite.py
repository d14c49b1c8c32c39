"""One network, two formats, one canonical form.

The same small residual network (conv 3x3/2 + RELU6, depthwise 3x3 + RELU6, linear 1x1,
residual add, mean over H and W, fully connected, softmax) is written as an ONNX QDQ model and
as a TFLite model with the same weights and quantization parameters. Both canonicalize to the
same sequence of canonical ops; only the interface layout (TFLite's NHWC input and output
become NCHW through a transpose), the rounding attribute and TFLite-specific attributes differ.
Each is also bit-exact with its own runtime.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import _tvm
from canonqnn.frontends.tflite import runtime as tflite_runtime
from canonqnn.ops import lookup
from canonqnn.rewrites import canonicalize
from canonqnn.testing.tflite_writer import GraphWriter

RNG = np.random.default_rng(3)
H = W = 12
C_IN, C, CLASSES = 3, 8, 5
# activation (scale, zero point), shared by both formats
QP = {"x": (0.05, 3), "a": (0.03, -128), "b": (0.03, -128), "c": (0.06, 4), "d": (0.07, -10),
      "m": (0.05, -20), "mf": (0.05, -20), "logits": (0.2, 0), "y": (1 / 256, -128)}


def _weights(shape_oihw):
    o = shape_oihw[0]
    scale = RNG.uniform(0.004, 0.02, o).astype(np.float32)
    return RNG.integers(-127, 128, shape_oihw).astype(np.int8), scale


CONV_A = _weights((C, C_IN, 3, 3))
CONV_B = _weights((C, 1, 3, 3))        # depthwise
CONV_C = _weights((C, C, 1, 1))
FC_W = RNG.integers(-127, 128, (CLASSES, C)).astype(np.int8)
FC_SCALE = np.float32(0.01)


def _bias(x_scale, w_scale, n):
    scale = (np.float32(x_scale) * np.broadcast_to(w_scale, (n,))).astype(np.float32)
    return RNG.integers(-300, 300, n).astype(np.int32), scale


BIAS_A, BIAS_B, BIAS_C = (_bias(QP[x][0], w[1], C) for x, w in
                          (("x", CONV_A), ("a", CONV_B), ("b", CONV_C)))
BIAS_FC = _bias(QP["m"][0], FC_SCALE, CLASSES)


# ---------------------------------------------------------------- ONNX QDQ
def onnx_model() -> onnx.ModelProto:
    nodes, inits = [], {}

    def const(name, value):  # one initializer per name, however many nodes read it
        inits.setdefault(name, numpy_helper.from_array(np.asarray(value), name))
        return name

    def qp(name):
        s, z = QP[name]
        return const(f"{name}_s", np.float32(s)), const(f"{name}_z", np.int8(z))

    def dq(name):  # one DequantizeLinear per reader, as QDQ quantizers write them
        out = f"{name}_f{len(nodes)}"
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", *qp(name)], [out]))
        return out

    def q(src, name):
        nodes.append(helper.make_node("QuantizeLinear", [src, *qp(name)], [f"{name}_q"]))

    def weight(name, w, scale, axis=0):
        const(name + "_w", w)
        const(name + "_ws", scale)
        const(name + "_wz", np.zeros(scale.size, np.int8))
        nodes.append(helper.make_node("DequantizeLinear", [name + "_w", name + "_ws",
                                                           name + "_wz"], [name + "_wf"],
                                      axis=axis))
        return name + "_wf"

    def bias(name, b):
        const(name + "_b", b[0])
        const(name + "_bs", b[1])
        const(name + "_bz", np.zeros(b[1].size, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", [name + "_b", name + "_bs",
                                                           name + "_bz"], [name + "_bf"],
                                      axis=0))
        return name + "_bf"

    def conv(name, src, w, b, group, stride, pads, relu6):
        out = f"{name}_conv"
        nodes.append(helper.make_node("Conv", [dq(src), weight(name, *w), bias(name, b)], [out],
                                      group=group, strides=[stride, stride], pads=pads))
        if relu6:
            nodes.append(helper.make_node("Clip", [out, const(name + "_lo", np.float32(0)),
                                                   const(name + "_hi", np.float32(6))],
                                          [out + "_act"]))
            out += "_act"
        q(out, name)

    conv("a", "x", CONV_A, BIAS_A, 1, 2, [0, 0, 1, 1], True)  # TFLite SAME at stride 2
    conv("b", "a", CONV_B, BIAS_B, C, 1, [1, 1, 1, 1], True)
    conv("c", "b", CONV_C, BIAS_C, 1, 1, [0, 0, 0, 0], False)
    nodes.append(helper.make_node("Add", [dq("a"), dq("c")], ["d_add"]))
    q("d_add", "d")
    nodes.append(helper.make_node("GlobalAveragePool", [dq("d")], ["m_pool"]))
    q("m_pool", "m")
    nodes.append(helper.make_node("Flatten", [dq("m")], ["m_flat"]))
    q("m_flat", "mf")
    nodes.append(helper.make_node("Gemm", [dq("mf"), weight("fc", FC_W, np.atleast_1d(FC_SCALE)),
                                           bias("fc", BIAS_FC)], ["logits_gemm"], transB=1))
    q("logits_gemm", "logits")
    nodes.append(helper.make_node("Softmax", [dq("logits")], ["y_soft"], axis=1))
    q("y_soft", "y")
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x_q", TensorProto.INT8,
                                                          [1, C_IN, H, W])],
        [helper.make_tensor_value_info("y_q", TensorProto.INT8, [1, CLASSES])],
        list(inits.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


# ---------------------------------------------------------------- TFLite
def tflite_model() -> bytes:
    g = GraphWriter()

    def act(name, shape):
        s, z = QP[name]
        return g.tensor(name, shape, "int8", scale=s, zero_point=z)

    def conv(name, src, w, b, depthwise, stride, relu6, out_shape):
        q, scale = w
        if depthwise:  # OIHW [C, 1, 3, 3] -> [1, 3, 3, C], per channel along dim 3
            data, axis = q.transpose(1, 2, 3, 0), 3
        else:          # OIHW -> OHWI
            data, axis = q.transpose(0, 2, 3, 1), 0
        wt = g.tensor(name + "_w", data.shape, "int8", data, scale, np.zeros(scale.size),
                      quantized_dimension=axis)
        bt = g.tensor(name + "_b", (C,), "int32", b[0], b[1], np.zeros(C))
        y = act(name, out_shape)
        options = dict(padding="SAME", strideH=stride, strideW=stride, dilationHFactor=1,
                       dilationWFactor=1, fusedActivationFunction="RELU6" if relu6 else "NONE")
        if depthwise:
            options["depthMultiplier"] = 1
        g.op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [src, wt, bt], [y], **options)
        return y

    x = act("x", (1, H, W, C_IN))
    half = (1, H // 2, W // 2, C)
    a = conv("a", x, CONV_A, BIAS_A, False, 2, True, half)
    b = conv("b", a, CONV_B, BIAS_B, True, 1, True, half)
    c = conv("c", b, CONV_C, BIAS_C, False, 1, False, half)
    d = act("d", half)
    g.op("ADD", [a, c], [d], fusedActivationFunction="NONE")
    axes = g.tensor("axes", (2,), "int32", np.array([1, 2], np.int32))
    m = act("m", (1, C))
    g.op("MEAN", [d, axes], [m], keepDims=False)
    fw = g.tensor("fc_w", FC_W.shape, "int8", FC_W, FC_SCALE, 0)
    fb = g.tensor("fc_b", (CLASSES,), "int32", BIAS_FC[0], BIAS_FC[1][:1], 0)
    logits = act("logits", (1, CLASSES))
    g.op("FULLY_CONNECTED", [m, fw, fb], [logits], fusedActivationFunction="NONE")
    y = act("y", (1, CLASSES))
    g.op("SOFTMAX", [logits], [y], beta=1.0)
    return g.finish([x], [y])


def canonical_sequence(mod) -> list[str]:
    ops = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = lookup(binding.value)
            if op is not None:
                ops.append(op.name)
            elif _tvm.op_name(binding.value):
                ops.append(_tvm.op_name(binding.value))
    return ops


def test_onnx_and_tflite_canonicalize_to_the_same_op_sequence():
    onnx_mod, onnx_report = canonicalize(canonqnn.load(onnx_model()))
    tfl_mod, tfl_report = canonicalize(canonqnn.load(tflite_model()))
    assert onnx_report.float_islands == [] and tfl_report.float_islands == []
    onnx_ops, tfl_ops = canonical_sequence(onnx_mod), canonical_sequence(tfl_mod)
    # TFLite's interface is NHWC: one transpose in, none out (the result is [1, classes]).
    assert tfl_ops[0] == "transpose"
    assert tfl_ops[1:] == onnx_ops
    assert onnx_ops == ["conv2d", "conv2d", "conv2d", "add", "global_avg_pool2d", "reshape",
                        "matmul", "softmax"]


def test_the_two_forms_differ_in_rounding_and_each_matches_its_runtime():
    onnx_mod, _ = canonicalize(canonqnn.load(onnx_model()))
    tfl_mod, _ = canonicalize(canonqnn.load(tflite_model()))
    roundings = [{str(b.value.attrs["rounding"]) for block in mod["main"].body.blocks
                  for b in block.bindings if lookup(b.value) is not None
                  and "rounding" in lookup(b.value).attrs} for mod in (onnx_mod, tfl_mod)]
    # TFLite: the default interpreter's profile here; SOFTMAX runs the built-in kernel
    assert roundings == [{"rne_f32"}, {tflite_runtime.profile().rounding, "q31_double"}]
    for model in (onnx_model(), tflite_model()):
        result = canonqnn.parity(model, runs=3)
        assert result.exact, result.summary()
