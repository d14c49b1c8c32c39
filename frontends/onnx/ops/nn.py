"""Conv, Gemm, MatMul, pooling and ReduceMean as float Relax ops.

The functions taking ``Value`` operands (``conv``, ``gemm``, ``matmul``, ``average_pool``, ...)
are shared with the QOperator converters, which wrap them in dequantize/quantize.
"""

from __future__ import annotations

import numpy as np

from canonqnn._tvm import relax

from .._context import ImportContext, Unsupported, Value, onnx_op


def _spatial_2d(ctx: ImportContext, x: Value, op: str) -> tuple[int, int, int, int]:
    shape = ctx.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"{op} on a rank-{len(shape)} input is not supported (2-D NCHW only)")
    return shape


def padding(attrs: dict, in_hw, kernel, strides, dilations) -> list[int]:
    """ONNX pads/auto_pad as Relax's [top, left, bottom, right]."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise Unsupported(f"pads {pads} do not describe a 2-D window")
        return pads
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad {auto_pad!r} is not supported")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return [begin[0], begin[1], end[0], end[1]]


def conv(ctx: ImportContext, x: Value, w: Value, b: Value | None, attrs: dict) -> Value:
    _, _, h, wd = _spatial_2d(ctx, x, "Conv")
    o, _, kh, kw = ctx.shape(w)
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    if attrs.get("kernel_shape", [kh, kw]) != [kh, kw]:
        raise Unsupported("kernel_shape disagrees with the weight shape")
    pads = padding(attrs, (h, wd), (kh, kw), strides, dilations)
    y = ctx.emit(relax.op.nn.conv2d(ctx.expr(x), ctx.expr(w), strides=strides, padding=pads,
                                    dilation=dilations, groups=int(attrs.get("group", 1))))
    if b is not None:
        y = ctx.emit(relax.op.add(y, ctx.emit(relax.op.reshape(ctx.expr(b), (1, o, 1, 1)))))
    return Value(expr=y)


def matmul(ctx: ImportContext, a: Value, b: Value) -> Value:
    return Value(expr=ctx.emit(relax.op.matmul(ctx.expr(a), ctx.expr(b))))


def gemm(ctx: ImportContext, a: Value, b: Value, c: Value | None, attrs: dict) -> Value:
    """``alpha * A' B' + beta * C`` as matmul [-> multiply(alpha)] [-> add(C [* beta])]."""
    a_expr, b_expr = ctx.expr(a), ctx.expr(b)
    if attrs.get("transA", 0):
        a_expr = ctx.emit(relax.op.permute_dims(a_expr, [1, 0]))
    if attrs.get("transB", 0):
        b_expr = ctx.emit(relax.op.permute_dims(b_expr, [1, 0]))
    y = ctx.emit(relax.op.matmul(a_expr, b_expr))
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        y = ctx.emit(relax.op.multiply(y, relax.const(np.float32(alpha))))
    if c is not None:
        c_expr = ctx.expr(c)
        if beta != 1.0:
            c_expr = ctx.emit(relax.op.multiply(c_expr, relax.const(np.float32(beta))))
        y = ctx.emit(relax.op.add(y, c_expr))
    return Value(expr=y)


def _pool_attrs(ctx: ImportContext, x: Value, attrs: dict, op: str) -> dict:
    _, _, h, w = _spatial_2d(ctx, x, op)
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    return dict(pool_size=kernel, strides=strides, dilation=dilations,
                padding=padding(attrs, (h, w), kernel, strides, dilations),
                ceil_mode=bool(attrs.get("ceil_mode", 0)))


def average_pool(ctx: ImportContext, x: Value, attrs: dict) -> Value:
    p = _pool_attrs(ctx, x, attrs, "AveragePool")
    return Value(expr=ctx.emit(relax.op.nn.avg_pool2d(
        ctx.expr(x), count_include_pad=bool(attrs.get("count_include_pad", 0)), **p)))


def max_pool(ctx: ImportContext, x: Value, attrs: dict) -> Value:
    if attrs.get("storage_order", 0):
        raise Unsupported("MaxPool storage_order=1 is not supported")
    p = _pool_attrs(ctx, x, attrs, "MaxPool")
    return Value(expr=ctx.emit(relax.op.nn.max_pool2d(ctx.expr(x), **p)))


def global_average_pool(ctx: ImportContext, x: Value) -> Value:
    _spatial_2d(ctx, x, "GlobalAveragePool")
    return Value(expr=ctx.emit(relax.op.mean(ctx.expr(x), axis=[2, 3], keepdims=True)))


@onnx_op("Conv")
def conv_op(ctx, node, inputs, attrs):
    x, w, b = (inputs + [None])[:3]
    return [conv(ctx, x, w, b, attrs)]


@onnx_op("MatMul")
def matmul_op(ctx, node, inputs, attrs):
    return [matmul(ctx, inputs[0], inputs[1])]


@onnx_op("Gemm")
def gemm_op(ctx, node, inputs, attrs):
    a, b, c = (inputs + [None])[:3]
    return [gemm(ctx, a, b, c, attrs)]


@onnx_op("AveragePool")
def average_pool_op(ctx, node, inputs, attrs):
    return [average_pool(ctx, inputs[0], attrs)]


@onnx_op("MaxPool", quantized="passthrough")
def max_pool_op(ctx, node, inputs, attrs):
    if len(node.output) > 1 and node.output[1]:
        raise Unsupported("MaxPool indices output is not supported")
    return [max_pool(ctx, inputs[0], attrs)]


@onnx_op("GlobalAveragePool")
def global_average_pool_op(ctx, node, inputs, attrs):
    return [global_average_pool(ctx, inputs[0])]


@onnx_op("ReduceMean")
def reduce_mean_op(ctx, node, inputs, attrs):
    x = inputs[0]
    rank = len(ctx.shape(x))
    if ctx.opset >= 18 and len(inputs) > 1 and inputs[1] is not None:
        axes = ctx.constant(inputs[1], "ReduceMean axes").tolist()
    else:
        axes = attrs.get("axes")
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted(int(a) % rank for a in axes)
    keepdims = bool(attrs.get("keepdims", 1))
    return [Value(expr=ctx.emit(relax.op.mean(ctx.expr(x), axis=axes, keepdims=keepdims)))]
