"""Elementwise activations and unary math as float Relax ops, and com.microsoft QLinearSigmoid /
QLinearLeakyRelu as dequantize -> float op -> quantize.

Each ONNX op is written with Relax ops whose evaluation one by one reproduces onnxruntime's
kernel (canonqnn/tables/onnxruntime.py evaluates them when the rewrites fold a quantized chain
into a lookup table):

    Sigmoid, Tanh, Erf, Exp, Log, Sqrt, Abs, Neg   the Relax op of the same meaning
    Softplus                                      nn.softplus (onnxruntime's whole kernel)
    Gelu (opset 20; com.microsoft Gelu)           nn.gelu / nn.gelu_tanh (approximate="tanh")
    LeakyRelu                                     nn.leakyrelu(alpha)
    PRelu                                         nn.leakyrelu (one slope), nn.prelu (slopes
                                                  along one axis), else where(x > 0, x, x * s)
    HardSigmoid                                   clip(x * alpha + beta, 0, 1)   (onnxruntime's
    HardSwish                                     x * clip(x * 1/6 + 1/2, 0, 1)   operation order)
    Elu                                           where(x >= 0, x, alpha * (exp(x) - 1))

Attribute values are float32 in ONNX and are passed on as the exact float32 values.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Attrs, Inputs, hard_sigmoid, hard_swish
from .._context import ImportContext, Unsupported, Value, onnx_op
from .qoperator import dq, q

UNARY = {
    "Sigmoid": relax.op.sigmoid, "Tanh": relax.op.tanh, "Erf": relax.op.erf,
    "Exp": relax.op.exp, "Log": relax.op.log, "Sqrt": relax.op.sqrt, "Abs": relax.op.abs,
    "Neg": relax.op.negative, "Softplus": relax.op.nn.softplus,
}


def _f32(value) -> float:
    """An ONNX float attribute as the exact float32 value it stands for."""
    return float(np.float32(value))


def _emit(ctx: ImportContext, expr) -> Value:
    return Value(expr=ctx.emit(expr))


def _float_input(ctx: ImportContext, x: Value, op: str):
    if x.dtype != "float32":
        raise Unsupported(f"{op} of {x.dtype} data is not supported (float32 only)")
    return ctx.expr(x)


def _scalar(value: float):
    return _tvm.const(np.float32(value))


@onnx_op(*UNARY)
def unary_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [_emit(ctx, UNARY[node.op_type](_float_input(ctx, inputs[0], node.op_type)))]


@onnx_op("Gelu")
def gelu_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = _float_input(ctx, inputs[0], "Gelu")
    mode = attrs.get("approximate", "none")
    if mode == "none":
        return [_emit(ctx, relax.op.nn.gelu(x))]
    if mode == "tanh":
        return [_emit(ctx, relax.op.nn.gelu_tanh(x))]
    raise Unsupported(f"approximate={mode!r} is not a Gelu mode (none or tanh)")


def leaky_relu(ctx: ImportContext, x: Value, alpha: float) -> Value:
    return _emit(ctx, relax.op.nn.leakyrelu(ctx.expr(x), _f32(alpha)))


@onnx_op("LeakyRelu")
def leaky_relu_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    _float_input(ctx, inputs[0], "LeakyRelu")
    return [leaky_relu(ctx, inputs[0], attrs.get("alpha", 0.01))]


@onnx_op("PRelu")
def prelu_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """The slope broadcasts to X (numpy rules): one value, one axis, or anything else."""
    x = _float_input(ctx, inputs[0], "PRelu")
    slope = ctx.constant(inputs[1], "PRelu slope").astype(np.float32)
    shape = tuple(ctx.shape(inputs[0]))
    padded = (1,) * (len(shape) - slope.ndim) + slope.shape
    if slope.ndim > len(shape) or any(d not in (1, n) for d, n in zip(padded, shape)):
        raise Unsupported(f"slope of shape {list(slope.shape)} does not broadcast to the input "
                          f"shape {list(shape)}")
    if slope.size == 1:
        return [leaky_relu(ctx, inputs[0], float(slope.reshape(())))]
    axes = [i for i, d in enumerate(padded) if d != 1]
    if len(axes) == 1:
        return [_emit(ctx, relax.op.nn.prelu(x, _tvm.const(slope.reshape(-1)), axes[0]))]
    scaled = ctx.emit(relax.op.multiply(x, _tvm.const(slope)))
    positive = ctx.emit(relax.op.greater(x, _scalar(0.0)))
    return [_emit(ctx, relax.op.where(positive, x, scaled))]


@onnx_op("HardSigmoid")
def hard_sigmoid_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                    attrs: Attrs) -> list[Value]:
    x = _float_input(ctx, inputs[0], "HardSigmoid")
    return [Value(expr=hard_sigmoid(ctx, x, _f32(attrs.get("alpha", 0.2)),
                                    _f32(attrs.get("beta", 0.5))))]


@onnx_op("HardSwish")
def hard_swish_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """onnxruntime runs ONNX's function body: x * HardSigmoid(x, 1/6, 1/2)."""
    return [Value(expr=hard_swish(ctx, _float_input(ctx, inputs[0], "HardSwish")))]


@onnx_op("Elu")
def elu_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """onnxruntime's Elu takes exp from Eigen where its Exp op uses MLAS, which the table
    follows (``relax.exp``): the tables differ from onnxruntime in rare entries
    (docs/spec.md, ``## lut``)."""
    x = _float_input(ctx, inputs[0], "Elu")
    alpha = _f32(attrs.get("alpha", 1.0))
    e = ctx.emit(relax.op.subtract(ctx.emit(relax.op.exp(x)), _scalar(1.0)))
    negative = ctx.emit(relax.op.multiply(_scalar(alpha), e))
    nonneg = ctx.emit(relax.op.greater_equal(x, _scalar(0.0)))
    return [_emit(ctx, relax.op.where(nonneg, x, negative))]


# ---------------------------------------------------------------- com.microsoft QLinear*
def _qlinear_inputs(inputs: list) -> list:
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point; Y has X's type, so an omitted output
    zero point is a zero of that type."""
    x, xs, xz, ys, yz = (inputs + [None] * 5)[:5]
    if yz is None:
        yz = Value(const=np.zeros((), x.dtype), dtype=x.dtype)
    return [x, xs, xz, ys, yz]


@onnx_op("QLinearSigmoid", quantized="consumes")
def qlinear_sigmoid(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                    attrs: Attrs) -> list[Value]:
    """onnxruntime builds a 256-entry table with MLAS logistic on the dequantized codes."""
    x, xs, xz, ys, yz = _qlinear_inputs(inputs)
    real = dq(ctx, x, xs, xz, what="X")
    return [q(ctx, _emit(ctx, relax.op.sigmoid(ctx.expr(real))), ys, yz)]


@onnx_op("QLinearLeakyRelu", quantized="consumes")
def qlinear_leaky_relu(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                       attrs: Attrs) -> list[Value]:
    x, xs, xz, ys, yz = _qlinear_inputs(inputs)
    real = dq(ctx, x, xs, xz, what="X")
    return [q(ctx, leaky_relu(ctx, real, attrs.get("alpha", 0.01)), ys, yz)]
