"""One int8 convolution written three ways, and the one canonical op they all become.

    python examples/one_conv_three_formats.py [--show fq|canonical|params|all]

The same 3x3 convolution (4 -> 8 channels on a 1x8x8 input, stride 1, pads 1, the same int8
weights with per-channel float32 scales, the same int32 bias, the same input and output scale
and zero point, and a ReLU6 whose bounds fall inside the output's int8 range) is written as:

- an ONNX QDQ model (opset 13): DequantizeLinear -> Conv -> Clip(0, 6) -> QuantizeLinear;
- an ONNX QOperator model: QLinearConv -> DequantizeLinear -> Clip(0, 6) -> QuantizeLinear.
  QLinearConv has no activation: onnxruntime's quantizer either drops a following Relu/Clip
  and gives the QLinearConv the activation's output range (asymmetric activations), or keeps
  it in float between DequantizeLinear and QuantizeLinear (symmetric activations). The
  frontend reads no Relu/Clip on an integer tensor; this model uses the second form, so the
  clamp is visible as act_min/act_max;
- a TFLite model: CONV_2D with fusedActivationFunction RELU6. TFLite tensors are NHWC and the
  canonical ops NCHW: the module keeps the model's NHWC interface and transposes the input to
  NCHW (and the result back to NHWC); the weights (OHWI) are transposed to OIHW at import.

For each model it prints the fake-quant Relax ``main`` right after ``canonqnn.load``, the
canonical ``main`` after ``canonqnn.canonicalize``, and ``canonqnn.patterns.params_of`` of the
canonical conv2d. It exits with status 1 if the three conv2d calls differ in anything but
``rounding`` (``rne_f32`` for the ONNX models, ``q31_double`` for TFLite: the TFLite model is
converted for the interpreter's reference kernels, ``NUMERICS``; under its default
configuration's profile on x86-64 the rounding would be ``xnnpack``, docs/parity.md).

Needs the tflite extra: pip install ".[tflite]" (the TFLite model is written with flatbuffers
and the tflite schema package, which the TFLite frontend also reads it with).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import _tvm
from canonqnn.extras import script_needs
from canonqnn.ops import REGISTRY, lookup
from canonqnn.patterns import OpParams, params_of

C_IN, C_OUT, H, W = 4, 8, 8, 8
X_QP = (0.05, -3)      # input (scale, zero point)
Y_QP = (0.05, -20)     # output: int8 covers [-5.4, 7.35]; ReLU6 clamps to codes [-20, 100]
RELU6 = (0.0, 6.0)

_RNG = np.random.default_rng(2024)
WEIGHTS = _RNG.integers(-127, 128, (C_OUT, C_IN, 3, 3)).astype(np.int8)      # OIHW
W_SCALE = _RNG.uniform(0.001, 0.004, C_OUT).astype(np.float32)              # per channel
BIAS = _RNG.integers(-3000, 3000, C_OUT).astype(np.int32)
BIAS_SCALE = (np.float32(X_QP[0]) * W_SCALE).astype(np.float32)             # x_scale * w_scale
INPUT = _RNG.integers(-128, 128, (1, C_IN, H, W)).astype(np.int8)           # NCHW, for the check


# ---------------------------------------------------------------- the three models
def _onnx_model(nodes, inits, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.INT8, [1, C_IN, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, C_OUT, H, W])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def _initializers():
    inits = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    const("x_scale", np.float32(X_QP[0]))
    const("x_zp", np.int8(X_QP[1]))
    const("y_scale", np.float32(Y_QP[0]))
    const("y_zp", np.int8(Y_QP[1]))
    const("w", WEIGHTS)
    const("w_scale", W_SCALE)
    const("w_zp", np.zeros(C_OUT, np.int8))
    const("b", BIAS)
    const("clip_min", np.float32(RELU6[0]))
    const("clip_max", np.float32(RELU6[1]))
    return inits, const


def onnx_qdq() -> onnx.ModelProto:
    """DequantizeLinear -> Conv -> Clip -> QuantizeLinear."""
    inits, const = _initializers()
    const("b_scale", BIAS_SCALE)
    const("b_zp", np.zeros(C_OUT, np.int32))
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["x_f"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["w_f"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["b_f"], axis=0),
        helper.make_node("Conv", ["x_f", "w_f", "b_f"], ["conv"], kernel_shape=[3, 3],
                         strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["conv", "clip_min", "clip_max"], ["relu6"]),
        helper.make_node("QuantizeLinear", ["relu6", "y_scale", "y_zp"], ["y"]),
    ]
    return _onnx_model(nodes, inits, "conv_qdq")


def onnx_qoperator() -> onnx.ModelProto:
    """QLinearConv -> DequantizeLinear -> Clip -> QuantizeLinear."""
    inits, _ = _initializers()
    nodes = [
        helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp",
                                         "y_scale", "y_zp", "b"], ["conv_q"],
                         kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["conv_q", "y_scale", "y_zp"], ["conv"]),
        helper.make_node("Clip", ["conv", "clip_min", "clip_max"], ["relu6"]),
        helper.make_node("QuantizeLinear", ["relu6", "y_scale", "y_zp"], ["y"]),
    ]
    return _onnx_model(nodes, inits, "conv_qoperator")


def tflite() -> bytes:
    """CONV_2D (NHWC, OHWI weights quantized along dimension 0) with a fused RELU6."""
    # imported here so that the module loads without the tflite extra and main() can say so
    from canonqnn.testing.tflite_writer import GraphWriter

    g = GraphWriter()
    x = g.tensor("x", (1, H, W, C_IN), "int8", scale=X_QP[0], zero_point=X_QP[1])
    w = g.tensor("w", (C_OUT, 3, 3, C_IN), "int8", WEIGHTS.transpose(0, 2, 3, 1), W_SCALE,
                 np.zeros(C_OUT), quantized_dimension=0)
    b = g.tensor("b", (C_OUT,), "int32", BIAS, BIAS_SCALE, np.zeros(C_OUT))
    y = g.tensor("y", (1, H, W, C_OUT), "int8", scale=Y_QP[0], zero_point=Y_QP[1])
    g.op("CONV_2D", [x, w, b], [y], padding="SAME", strideH=1, strideW=1, dilationHFactor=1,
         dilationWFactor=1, fusedActivationFunction="RELU6")
    return g.finish([x], [y])


# The numerics profile each format's model is converted for (None: its runtime's on this host)
NUMERICS = {"TFLite (CONV_2D, fused RELU6, NHWC)": "tflite-reference"}
MODELS = {
    "ONNX QDQ (DequantizeLinear -> Conv -> Clip -> QuantizeLinear, opset 13)": onnx_qdq,
    "ONNX QOperator (QLinearConv -> DequantizeLinear -> Clip -> QuantizeLinear)":
        onnx_qoperator,
    "TFLite (CONV_2D, fused RELU6, NHWC)": tflite,
}


# ---------------------------------------------------------------- printing
def main_script(mod) -> str:
    """``mod["main"]`` as TVMScript, without the printer's import and metadata comments,
    followed by what each ``metadata[...]`` constant holds."""
    lines = [line for line in mod["main"].script().splitlines()
             if line and not line.startswith("# ")]
    return "\n".join(lines + _constant_legend(mod["main"]))


def _constant_legend(func) -> list[str]:
    """The non-scalar constants in the order the printer numbers them (scalars print inline)."""
    seen: list = []
    for _, value in _tvm.function_bindings(func):
        for arg in getattr(value, "args", ()):
            if _tvm.is_const(arg) and _tvm.const_value(arg).ndim > 0 \
                    and not any(arg.same_as(s) for s in seen):
                seen.append(arg)
    return [f'# metadata["ir.GenericConst"][{i}]: {_brief(_tvm.const_value(c))}'
            for i, c in enumerate(seen)]


def _brief(value: np.ndarray, first: int = 8) -> str:
    flat = value.reshape(-1)
    shown = ", ".join(_num(v) for v in flat[:first]) + (", ..." if flat.size > first else "")
    return f"{value.dtype}{list(value.shape)} [{shown}]"


def _num(v) -> str:
    return repr(float(v)) if np.issubdtype(type(v), np.floating) else str(int(v))


def canonical_conv(mod):
    calls = [value for _, value in _tvm.function_bindings(mod["main"])
             if (op := lookup(value)) is not None and op.name == "conv2d"]
    if len(calls) != 1:
        raise SystemExit(f"expected one canonical conv2d, found {len(calls)}")
    return calls[0]


def params_text(p: OpParams) -> str:
    a = p.attrs
    rows = [
        ("input_scale, input_zp", f"{p.input_scale!r}, {p.input_zp}"),
        ("weight_scale", _brief(p.weight_scale)),
        ("weight_zp", _brief(p.weight_zp)),
        ("weight.per_channel, .symmetric", f"{p.weight.per_channel}, {p.weight.symmetric}"),
        ("output_scale, output_zp", f"{p.output_scale!r}, {p.output_zp}"),
        ("clamp (act_min, act_max)", f"{p.clamp}"),
        ("rounding", p.rounding),
        ("layout, weight_layout", f"{p.layout}, {p.weight_layout}"),
        ("strides, padding, dilation", f"{a['strides']}, {a['padding']}, {a['dilation']}"),
        ("groups, depthwise", f"{a['groups']}, {p.depthwise}"),
        ("input_shapes -> output_shape", f"{list(p.input_shapes)} -> {p.output_shape} "
                                         f"{p.output_dtype}"),
        ("out_dtype, source_dtype", f"{a['out_dtype']}, {a['source_dtype']}"),
        ("constants", ", ".join(f"{k}: {v.dtype}{list(v.shape)}"
                                for k, v in p.constants.items())),
        ("bias", _brief(p.constants["bias"])),
    ]
    return "\n".join(f"  {name:<32}{value}" for name, value in rows)


# ---------------------------------------------------------------- comparison
def differences(p: OpParams, q: OpParams) -> list[str]:
    """The names of the fields (and attributes) in which two OpParams differ."""
    out = [f for f in ("op", "inputs", "output", "clamp", "rounding", "layout",
                       "weight_layout", "input_shapes", "output_shape", "output_dtype",
                       "epilogue") if getattr(p, f) != getattr(q, f)]
    for f in ("scale", "zero_point", "per_channel"):
        if not np.array_equal(getattr(p.weight, f), getattr(q.weight, f)):
            out.append(f"weight.{f}")
    for key in sorted(set(p.attrs) | set(q.attrs)):
        if p.attrs.get(key) != q.attrs.get(key):
            out.append(f"attrs.{key}")
    for key in sorted(set(p.constants) | set(q.constants)):
        a, b = p.constants.get(key), q.constants.get(key)
        if a is None or b is None or a.dtype != b.dtype or not np.array_equal(a, b):
            out.append(f"constants.{key}")
    return out


def reference_output(call, x: np.ndarray) -> np.ndarray:
    """The conv2d's numpy reference (its executable specification) on ``x``."""
    args = [x] + [_tvm.const_value(arg) for arg in call.args[1:]]
    return REGISTRY["conv2d"].run_reference(call, args)


def main(argv: list[str] | None = None) -> int:
    if status := script_needs("tflite", __file__):
        return status
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", choices=("fq", "canonical", "params", "all"), default="all")
    args = parser.parse_args(argv)
    show = {"fq", "canonical", "params"} if args.show == "all" else {args.show}

    calls = {}
    for title, make in MODELS.items():
        fq = canonqnn.load(make())
        mod, report = canonqnn.canonicalize(fq, numerics=NUMERICS.get(title))
        call = canonical_conv(mod)
        calls[title] = call
        print(f"=== {title}")
        if "fq" in show:
            print("--- fake-quant form (canonqnn.load)")
            print(main_script(fq))
        if "canonical" in show:
            print("--- canonical form (canonqnn.canonicalize)")
            print(main_script(mod))
            print("\n".join("# " + line for line in report.summary().splitlines()))
        if "params" in show:
            print("--- canonqnn.patterns.params_of(conv2d)")
            print(params_text(params_of(call)))
        print()

    titles = list(calls)
    params = [params_of(calls[t]) for t in titles]
    print("=== the three canonical conv2d calls")
    status = 0
    for title, p in zip(titles[1:], params[1:]):
        diff = differences(params[0], p)
        unexpected = [d for d in diff if d not in ("rounding", "attrs.rounding")]
        name = title.split(" (")[0]
        print(f"  {name} vs ONNX QDQ: differ in {', '.join(diff) or 'nothing'}")
        if unexpected:
            status = 1
    outputs = [reference_output(calls[t], INPUT) for t in titles]
    act_min, act_max = params[0].clamp
    onnx_out, tfl_out = outputs[0], outputs[2]
    print(f"  numpy reference on one seeded input ({onnx_out.size} outputs): "
          f"QDQ and QOperator equal on {int(np.sum(outputs[0] == outputs[1]))}, "
          f"rne_f32 and q31_double equal on {int(np.sum(onnx_out == tfl_out))}; "
          f"clamped to act_min {int(np.sum(onnx_out == act_min))}, "
          f"to act_max {int(np.sum(onnx_out == act_max))}")
    if not np.array_equal(outputs[0], outputs[1]):
        status = 1
    print("  same conv2d up to rounding: " + ("yes" if status == 0 else "NO"))
    return status


if __name__ == "__main__":
    sys.exit(main())
