"""Activations: fused ones (a float relu/clip before the output quantize) and the
LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU, ELU, GELU, RELU, RELU6, RELU_N1_TO_1 and SOFTMAX
operators,
plus RSQRT, the other unary function TFLite computes as one int8 kernel.

Each is written with the Relax op of the same meaning (HARD_SWISH as the same composite the
ONNX frontend writes, ELU as ``where(x >= 0, x, exp(x) - 1)``, the form rewrites/lut.py
recognizes); the rewrites build its int8 table the way TFLite computes it.
"""

from __future__ import annotations

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Inputs, hard_swish
from .._context import ImportContext, Unsupported, Value, tflite_op
from .._schema import ACTIVATIONS
from ..reader import Operator, Tensor

CLAMPS = {"NONE": None, "RELU": (0.0, None), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}


def clamp(ctx: ImportContext, y, lo: float, hi: float | None):
    if hi is None and lo == 0.0:
        return ctx.emit(relax.op.nn.relu(y))
    return ctx.emit(_tvm.clip_float(y, lo, np.inf if hi is None else hi))


def fused_activation(ctx: ImportContext, y, code: int):
    name = ACTIVATIONS.get(code, str(code))
    if name not in CLAMPS:
        raise Unsupported(f"fused activation {name} is not supported (NONE, RELU, RELU6 and "
                          "RELU_N1_TO_1 are)")
    bounds = CLAMPS[name]
    return y if bounds is None else clamp(ctx, y, *bounds)


def _unary(ctx, inputs, outputs, fn):
    x = inputs[0]
    return [ctx.quantized(fn(ctx.dq(x)), outputs[0], nchw=x.nchw)]


@tflite_op("LOGISTIC")
def logistic_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                outputs: list[Tensor]) -> list[Value]:
    return _unary(ctx, inputs, outputs, lambda x: ctx.emit(relax.op.sigmoid(x)))


@tflite_op("TANH")
def tanh_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    return _unary(ctx, inputs, outputs, lambda x: ctx.emit(relax.op.tanh(x)))


@tflite_op("GELU")
def gelu_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    approximate = bool(op.options.Approximate()) if op.options is not None else False
    fn = relax.op.nn.gelu_tanh if approximate else relax.op.nn.gelu
    return _unary(ctx, inputs, outputs, lambda x: ctx.emit(fn(x)))


@tflite_op("LEAKY_RELU")
def leaky_relu_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                  outputs: list[Tensor]) -> list[Value]:
    alpha = float(np.float32(op.options.Alpha())) if op.options is not None else 0.2
    return _unary(ctx, inputs, outputs, lambda x: ctx.emit(relax.op.nn.leakyrelu(x, alpha)))


@tflite_op("HARD_SWISH")
def hard_swish_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                  outputs: list[Tensor]) -> list[Value]:
    return _unary(ctx, inputs, outputs, lambda x: hard_swish(ctx, x))


@tflite_op("ELU")
def elu_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    if inputs[0].dtype == "uint8":
        raise Unsupported("ELU on uint8: TFLite's ELU kernel takes float32 and int8 only (the "
                          "interpreter refuses this model)")
    return _unary(ctx, inputs, outputs, lambda x: elu(ctx, x))


def elu(ctx: ImportContext, x):
    """ELU with alpha 1 (TFLite's has no options)."""
    negative = ctx.emit(relax.op.subtract(ctx.emit(relax.op.exp(x)), _tvm.const(np.float32(1.0))))
    nonneg = ctx.emit(relax.op.greater_equal(x, _tvm.const(np.float32(0.0))))
    return ctx.emit(relax.op.where(nonneg, x, negative))


@tflite_op("RSQRT")
def rsqrt_op(ctx: ImportContext, op: Operator, inputs: Inputs,
             outputs: list[Tensor]) -> list[Value]:
    if inputs[0].dtype == "uint8":
        raise Unsupported("RSQRT on uint8: TFLite's RSQRT kernel takes float32, int8 or int16 "
                          "(the interpreter refuses this model)")
    return _unary(ctx, inputs, outputs, lambda x: ctx.emit(relax.op.rsqrt(x)))


@tflite_op("RELU", "RELU6", "RELU_N1_TO_1")
def relu_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    lo, hi = CLAMPS[op.kind]
    return _unary(ctx, inputs, outputs, lambda x: clamp(ctx, x, lo, hi))


@tflite_op("SOFTMAX")
def softmax_op(ctx: ImportContext, op: Operator, inputs: Inputs,
               outputs: list[Tensor]) -> list[Value]:
    x = inputs[0]
    beta = float(np.float32(op.options.Beta())) if op.options is not None else 1.0
    axis = 1 if x.nchw else len(x.shape) - 1  # TFLite: the last (channel) axis
    real = ctx.dq(x)
    if beta != 1.0:
        real = ctx.emit(relax.op.multiply(real, _tvm.const(np.float32(beta))))
    return [ctx.quantized(ctx.emit(relax.op.nn.softmax(real, axis)), outputs[0], nchw=x.nchw)]
