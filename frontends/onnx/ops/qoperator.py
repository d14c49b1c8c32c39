"""QOperator ops: each is dequantize(inputs) -> the float converter -> quantize(output).

uint8 operands are shifted to int8 as everywhere else; ``ConvInteger``/``MatMulInteger``
quantize to an int32 accumulator of scale 1 (their exact integer result).
"""

from __future__ import annotations

import numpy as np

from canonqnn.qparams import QParams, product_scale

from .._context import ImportContext, Unsupported, Value, onnx_op
from . import nn, shape
from .elementwise import binary
from .quant import QUANTIZED_DTYPES, dequantize_value, quantize_value, read_qparams


def _rank(ctx: ImportContext, x: Value) -> int:
    return max(len(ctx.shape(x)), 1)


def _quantized(x: Value, what: str) -> Value:
    if x.onnx_dtype not in QUANTIZED_DTYPES:
        raise Unsupported(f"{what} of type {x.onnx_dtype} is not supported (int8/uint8 only)")
    return x


def dq(ctx: ImportContext, x: Value, scale: Value, zp: Value | None, *, axis: int = 1,
       what: str) -> Value:
    qp = read_qparams(ctx, scale, zp, axis=axis, rank=_rank(ctx, x),
                      dtype=_quantized(x, what).onnx_dtype, what=what)
    return dequantize_value(ctx, x, qp)


def q(ctx: ImportContext, y: Value, scale: Value, zp: Value | None) -> Value:
    dtype = zp.onnx_dtype if zp is not None else "uint8"
    qp = read_qparams(ctx, scale, zp, axis=1, rank=_rank(ctx, y), dtype=dtype, what="output")
    if not qp.per_tensor:
        raise Unsupported("per-channel output quantization is not supported")
    return quantize_value(ctx, y, qp, dtype)


def int32_bias(ctx: ImportContext, bias: Value | None, x_qp: QParams, w_qp: QParams,
               scale_mult: float = 1.0) -> Value | None:
    """An int32 bias dequantized with ``x_scale * w_scale`` (the accumulator's scale)."""
    if bias is None:
        return None
    b = ctx.constant(bias, "bias")
    if b.dtype != np.int32:
        raise Unsupported(f"bias of type {b.dtype} is not supported (int32 only)")
    scale = product_scale(x_qp.scale, w_qp.scale)
    if scale_mult != 1.0:
        scale = (scale * np.float32(scale_mult)).astype(np.float32)
    axis = None if scale.ndim == 0 else 0
    qp = QParams.make(scale if axis is None else np.broadcast_to(scale, b.shape[-1:]),
                      0, axis, "int32")
    return dequantize_value(ctx, Value(const=b, onnx_dtype="int32"), qp)


@onnx_op("QLinearConv")
def qlinear_conv(ctx, node, inputs, attrs):
    x, xs, xz, w, ws, wz, ys, yz, b = (inputs + [None])[:9]
    xf = dq(ctx, x, xs, xz, what="input")
    wf = dq(ctx, w, ws, wz, axis=0, what="weight")
    bias = int32_bias(ctx, b, xf.dequantized, wf.dequantized)
    return [q(ctx, nn.conv(ctx, xf, wf, bias, attrs), ys, yz)]


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx, node, inputs, attrs):
    a, as_, az, b, bs, bz, ys, yz = inputs[:8]
    af = dq(ctx, a, as_, az, axis=-1, what="A")
    bf = dq(ctx, b, bs, bz, axis=-1, what="B")
    return [q(ctx, nn.matmul(ctx, af, bf), ys, yz)]


@onnx_op("QGemm")
def qgemm(ctx, node, inputs, attrs):
    """Y = alpha * A'B' + C, C int32 with scale alpha * a_scale * b_scale (beta must be 1)."""
    a, as_, az, b, bs, bz, c, ys, yz = (inputs + [None] * 3)[:9]
    if float(attrs.get("beta", 1.0)) != 1.0 and c is not None:
        raise Unsupported("QGemm with beta != 1 is not supported")
    af = dq(ctx, a, as_, az, what="A")
    b_axis = 0 if attrs.get("transB", 0) else 1
    bf = dq(ctx, b, bs, bz, axis=b_axis, what="B")
    alpha = float(attrs.get("alpha", 1.0))
    bias = int32_bias(ctx, c, af.dequantized, bf.dequantized, alpha)
    y = nn.gemm(ctx, af, bf, bias, dict(attrs, beta=1.0))
    if ys is None:
        return [y]
    return [q(ctx, y, ys, yz)]


def _binary(op_type):
    def convert(ctx, node, inputs, attrs):
        a, as_, az, b, bs, bz, cs, cz = (inputs + [None] * 8)[:8]
        af = dq(ctx, a, as_, az, what="A")
        bf = dq(ctx, b, bs, bz, what="B")
        return [q(ctx, binary(ctx, op_type, af, bf), cs, cz)]
    return convert


onnx_op("QLinearAdd")(_binary("Add"))
onnx_op("QLinearMul")(_binary("Mul"))


def _channels_first(attrs: dict, op: str) -> None:
    if attrs.get("channels_last", 0):
        raise Unsupported(f"{op} with channels_last=1 is not supported")


@onnx_op("QLinearAveragePool")
def qlinear_average_pool(ctx, node, inputs, attrs):
    _channels_first(attrs, "QLinearAveragePool")
    x, xs, xz, ys, yz = (inputs + [None])[:5]
    return [q(ctx, nn.average_pool(ctx, dq(ctx, x, xs, xz, what="X"), attrs), ys, yz)]


@onnx_op("QLinearGlobalAveragePool")
def qlinear_global_average_pool(ctx, node, inputs, attrs):
    _channels_first(attrs, "QLinearGlobalAveragePool")
    x, xs, xz, ys, yz = (inputs + [None])[:5]
    return [q(ctx, nn.global_average_pool(ctx, dq(ctx, x, xs, xz, what="X")), ys, yz)]


@onnx_op("QLinearConcat")
def qlinear_concat(ctx, node, inputs, attrs):
    ys, yz, *rest = inputs
    if len(rest) % 3:
        raise Unsupported("QLinearConcat inputs must come in (X, scale, zero point) triples")
    xs = [dq(ctx, rest[i], rest[i + 1], rest[i + 2], what=f"input {i // 3}")
          for i in range(0, len(rest), 3)]
    return [q(ctx, shape.concat(ctx, xs, attrs["axis"]), ys, yz)]


def _integer_operand(ctx: ImportContext, x: Value, zp: Value | None, axis: int, what: str):
    """An integer operand of ConvInteger/MatMulInteger as a dequantize of scale 1."""
    z = None if zp is None else ctx.constant(zp, f"{what} zero point")
    one = Value(const=np.ones(() if z is None or z.size == 1 else z.shape, np.float32))
    return dq(ctx, x, one, zp, axis=axis, what=what)


def _accumulator(ctx: ImportContext, y: Value) -> Value:
    return quantize_value(ctx, y, QParams.make(1.0, 0, None, "int32"), "int32")


@onnx_op("ConvInteger")
def conv_integer(ctx, node, inputs, attrs):
    x, w, xz, wz = (inputs + [None, None])[:4]
    xf = _integer_operand(ctx, x, xz, 1, "x")
    wf = _integer_operand(ctx, w, wz, 0, "w")
    return [_accumulator(ctx, nn.conv(ctx, xf, wf, None, attrs))]


@onnx_op("MatMulInteger")
def matmul_integer(ctx, node, inputs, attrs):
    a, b, az, bz = (inputs + [None, None])[:4]
    af = _integer_operand(ctx, a, az, -2, "A")
    bf = _integer_operand(ctx, b, bz, -1, "B")
    return [_accumulator(ctx, nn.matmul(ctx, af, bf))]
