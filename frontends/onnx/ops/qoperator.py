"""QOperator ops: each is dequantize(inputs) -> the float converter -> quantize(output).

uint8 operands are shifted to int8 as everywhere else. ``ConvInteger``/``MatMulInteger`` are
the float op on scale-1 dequantizes followed by ``astype(int32)``: the exact integer
accumulator (Relax's quantize has no int32 output), which the rewrites fold; with a zero point
computed at run time (DynamicQuantizeLinear's) they are integer ops (``dynamic``).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn._tvm import relax
from canonqnn.qparams import QParams, product_scale

from ..._base import Attrs, Inputs
from .._context import Converter, ImportContext, Unsupported, Value, onnx_op
from . import dynamic, nn
from . import shape as shape_ops
from .elementwise import binary
from .quant import QUANTIZED_DTYPES, dequantize_value, quantize_value, read_qparams


def _rank(ctx: ImportContext, x: Value) -> int:
    return max(len(ctx.shape(x)), 1)


def _quantized(x: Value, what: str) -> Value:
    if x.dtype not in QUANTIZED_DTYPES:
        raise Unsupported(f"{what} of type {x.dtype} is not supported (int8/uint8 only)")
    return x


def dq(ctx: ImportContext, x: Value, scale: Value, zp: Value | None, *, axis: int = 1,
       what: str, float16_scale: bool = False) -> Value:
    qp = read_qparams(ctx, scale, zp, axis=axis, rank=_rank(ctx, x),
                      dtype=_quantized(x, what).dtype, what=what,
                      float16_scale=float16_scale)
    return dequantize_value(ctx, x, qp)


def q(ctx: ImportContext, y: Value, scale: Value, zp: Value | None, *,
      float16_scale: bool = False) -> Value:
    dtype = zp.dtype if zp is not None else "uint8"
    qp = read_qparams(ctx, scale, zp, axis=1, rank=_rank(ctx, y), dtype=dtype, what="output",
                      float16_scale=float16_scale)
    if not qp.per_tensor:
        raise Unsupported("per-channel output quantization is not supported")
    return quantize_value(ctx, y, qp, dtype)


def quantized_reshape(ctx: ImportContext, x: Value, shape) -> Value:
    """Reshape a quantized tensor (``x.qparams`` set): dq -> reshape -> q with its own
    parameters, which the rewrites fold to a plain int8 reshape."""
    real = dequantize_value(ctx, x, x.qparams)
    return quantize_value(ctx, shape_ops.reshape_to(ctx, real, shape), x.qparams, x.dtype)


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
    return dequantize_value(ctx, Value(const=b, dtype="int32"), qp)


@onnx_op("QLinearConv", quantized="consumes")
def qlinear_conv(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x, xs, xz, w, ws, wz, ys, yz, b = (inputs + [None])[:9]
    xf = dq(ctx, x, xs, xz, what="input")
    wf = dq(ctx, w, ws, wz, axis=0, what="weight")
    bias = int32_bias(ctx, b, xf.dequantized, wf.dequantized)
    return [q(ctx, nn.conv(ctx, xf, wf, bias, attrs), ys, yz)]


@onnx_op("QLinearMatMul", quantized="consumes")
def qlinear_matmul(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                   attrs: Attrs) -> list[Value]:
    """A's parameters are per tensor or per row, B's per tensor or per column (ONNX); float16
    scales (opset 21) are converted to float32 exactly, as onnxruntime computes in float32."""
    a, as_, az, b, bs, bz, ys, yz = inputs[:8]
    af = dq(ctx, a, as_, az, axis=-2 if _rank(ctx, a) > 1 else 0, what="A", float16_scale=True)
    bf = dq(ctx, b, bs, bz, axis=-1, what="B", float16_scale=True)
    return [q(ctx, nn.matmul(ctx, af, bf), ys, yz, float16_scale=True)]


def _bias_layout(c: Value | None, m: int, n: int) -> str:
    """How an int32 Gemm bias broadcasts to [M, N]: "column" (scalar, [N], [1, N]), "row"
    ([M, 1]) or "element"."""
    if c is None or c.const is None:
        return "column"
    shape = (1,) * (2 - c.const.ndim) + tuple(c.const.shape)
    if c.const.ndim > 2 or shape[0] not in (1, m) or shape[1] not in (1, n):
        raise Unsupported(f"bias of shape {list(c.const.shape)} does not broadcast to [{m}, {n}]")
    if shape[0] == 1 or m == 1:
        return "column"
    return "row" if shape[1] == 1 else "element"


@onnx_op("QGemm", quantized="consumes")
def qgemm(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """Y = alpha * A'B' + C, C int32 with scale alpha * a_scale * b_scale (beta must be 1).

    A bias per row ([M, 1]) is folded as the transposed product Y^T = B'^T A'^T + C^T, whose
    bias is per column (exact: the integer accumulator and the multiplier are the same).
    """
    a, as_, az, b, bs, bz, c, ys, yz = (inputs + [None] * 3)[:9]
    if float(attrs.get("beta", 1.0)) != 1.0 and c is not None:
        raise Unsupported("QGemm with beta != 1 is not supported")
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    af = dq(ctx, a, as_, az, what="A")
    bf = dq(ctx, b, bs, bz, axis=0 if tb else 1, what="B")
    alpha = float(attrs.get("alpha", 1.0))
    m, n = ctx.shape(a)[1 if ta else 0], ctx.shape(b)[0 if tb else 1]
    layout = _bias_layout(c, m, n)
    if layout == "element":
        raise Unsupported(f"bias of shape {list(c.const.shape)} (one value per element) is not "
                          "supported (scalar, per column or per row only)")
    if layout == "row":
        if alpha != 1.0 or not bf.dequantized.per_tensor:
            raise Unsupported("a per-row bias needs alpha 1 and per-tensor B parameters")
        bias = int32_bias(ctx, Value(const=c.const.reshape(m), dtype="int32"),
                          bf.dequantized, af.dequantized)
        y_t = nn.gemm(ctx, bf, af, bias, {"transA": 1 - tb, "transB": 1 - ta})
        if ys is None:
            return [shape_ops.transpose(ctx, y_t, [1, 0])]
        y_t = q(ctx, y_t, ys, yz)
        real = shape_ops.transpose(ctx, dequantize_value(ctx, y_t, y_t.qparams), [1, 0])
        return [quantize_value(ctx, real, y_t.qparams, y_t.dtype)]
    bias = int32_bias(ctx, c, af.dequantized, bf.dequantized, alpha)
    y = nn.gemm(ctx, af, bf, bias, dict(attrs, beta=1.0))
    if ys is None:
        return [y]
    return [q(ctx, y, ys, yz)]


def _binary(op_type: str) -> Converter:
    def convert(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                attrs: Attrs) -> list[Value]:
        a, as_, az, b, bs, bz, cs, cz = (inputs + [None] * 8)[:8]
        af = dq(ctx, a, as_, az, what="A")
        bf = dq(ctx, b, bs, bz, what="B")
        return [q(ctx, binary(ctx, op_type, af, bf), cs, cz)]
    return convert


onnx_op("QLinearAdd", quantized="consumes")(_binary("Add"))
onnx_op("QLinearMul", quantized="consumes")(_binary("Mul"))


def _channels_first(attrs: dict, op: str) -> None:
    if attrs.get("channels_last", 0):
        raise Unsupported(f"{op} with channels_last=1 is not supported")


def _pool_attrs_1d_as_2d(attrs: dict) -> dict:
    """1-D pooling attributes as 2-D ones over [N, C, 1, W]."""
    out = dict(attrs)
    for key, unit in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in attrs:
            out[key] = [unit, *attrs[key]]
    if "pads" in attrs:
        begin, end = attrs["pads"]
        out["pads"] = [0, begin, 0, end]
    return out


@onnx_op("QLinearAveragePool", quantized="consumes")
def qlinear_average_pool(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                         attrs: Attrs) -> list[Value]:
    """2-D pooling; 1-D pooling runs as 2-D over [N, C, 1, W] (int8 reshapes around it)."""
    _channels_first(attrs, "QLinearAveragePool")
    if any(int(d) != 1 for d in attrs.get("dilations", [])):
        raise Unsupported(f"dilations {attrs['dilations']}: dilated average pooling is not "
                          "supported (com.microsoft QLinearAveragePool has no dilations)")
    x, xs, xz, ys, yz = (inputs + [None])[:5]
    shape = ctx.shape(x)
    if len(shape) not in (3, 4):
        raise Unsupported(f"{len(shape) - 2}-D pooling (rank-{len(shape)} input) is not "
                          "supported (1-D and 2-D only)")
    if len(shape) == 4:
        return [q(ctx, nn.average_pool(ctx, dq(ctx, x, xs, xz, what="X"), attrs), ys, yz)]
    qp = read_qparams(ctx, xs, xz, axis=1, rank=3, dtype=_quantized(x, "X").dtype,
                      what="X")
    x4 = quantized_reshape(ctx, Value(expr=x.expr, const=x.const, qparams=qp,
                                      dtype=x.dtype), (*shape[:2], 1, shape[2]))
    pooled = nn.average_pool(ctx, dequantize_value(ctx, x4, x4.qparams),
                             _pool_attrs_1d_as_2d(attrs))
    y4 = q(ctx, pooled, ys, yz)
    n, c, _, w = ctx.shape(y4)
    return [quantized_reshape(ctx, y4, (n, c, w))]


@onnx_op("QLinearGlobalAveragePool", quantized="consumes")
def qlinear_global_average_pool(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                                attrs: Attrs) -> list[Value]:
    _channels_first(attrs, "QLinearGlobalAveragePool")
    x, xs, xz, ys, yz = (inputs + [None])[:5]
    return [q(ctx, nn.global_average_pool(ctx, dq(ctx, x, xs, xz, what="X")), ys, yz)]


@onnx_op("QLinearConcat", quantized="consumes")
def qlinear_concat(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                   attrs: Attrs) -> list[Value]:
    ys, yz, *rest = inputs
    if len(rest) % 3:
        raise Unsupported("QLinearConcat inputs must come in (X, scale, zero point) triples")
    xs = [dq(ctx, rest[i], rest[i + 1], rest[i + 2], what=f"input {i // 3}")
          for i in range(0, len(rest), 3)]
    return [q(ctx, shape_ops.concat(ctx, xs, attrs["axis"]), ys, yz)]


def _integer_operand(ctx: ImportContext, x: Value, zp: Value | None, axis: int, what: str, *,
                     per_tensor: bool = False):
    """An integer operand of ConvInteger/MatMulInteger as a dequantize of scale 1."""
    z = None if zp is None else ctx.constant(zp, f"{what} zero point")
    if per_tensor and z is not None and z.size != 1:
        raise Unsupported(f"{what} zero point of shape {list(z.shape)}: only a scalar (per-tensor) "
                          f"zero point is supported for {what} (not per-row or per-element)")
    one = Value(const=np.ones(() if z is None or z.size == 1 else z.shape, np.float32))
    return dq(ctx, x, one, zp, axis=axis, what=what)


def _accumulator(ctx: ImportContext, y: Value) -> Value:
    """The exact int32 result of a product of scale-1 dequantizes (folded by the rewrites)."""
    return Value(expr=ctx.emit(relax.op.astype(ctx.expr(y), "int32")), dtype="int32")


@onnx_op("ConvInteger", quantized="consumes")
def conv_integer(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """x zero point per tensor; w zero point per tensor or per output channel."""
    x, w, xz, wz = (inputs + [None, None])[:4]
    if dynamic.runtime_zero_point(xz):
        return [dynamic.conv_integer(ctx, x, w, xz, wz, attrs)]
    xf = _integer_operand(ctx, x, xz, 1, "x", per_tensor=True)
    wf = _integer_operand(ctx, w, wz, 0, "w")
    return [_accumulator(ctx, nn.conv(ctx, xf, wf, None, attrs))]


@onnx_op("MatMulInteger", quantized="consumes")
def matmul_integer(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                   attrs: Attrs) -> list[Value]:
    """A zero point per tensor; B zero point per tensor or per column."""
    a, b, az, bz = (inputs + [None, None])[:4]
    if dynamic.runtime_zero_point(az):
        return [dynamic.matmul_integer(ctx, a, b, az, bz)]
    af = _integer_operand(ctx, a, az, -2, "A", per_tensor=True)
    bf = _integer_operand(ctx, b, bz, -1, "B")
    return [_accumulator(ctx, nn.matmul(ctx, af, bf))]
