"""Conv, Gemm, MatMul, pooling and ReduceMean as float Relax ops.

The functions taking ``Value`` operands (``conv``, ``gemm``, ``matmul``, ``average_pool``, ...)
are shared with the QOperator converters, which wrap them in dequantize/quantize.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Attrs, Inputs
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


def conv(ctx: ImportContext, x: Value, w: Value, b: Value | None, attrs: dict,
         out_dtype: str | None = None) -> Value:
    _, _, h, wd = _spatial_2d(ctx, x, "Conv")
    o, _, kh, kw = ctx.shape(w)
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    if attrs.get("kernel_shape", [kh, kw]) != [kh, kw]:
        raise Unsupported("kernel_shape disagrees with the weight shape")
    pads = padding(attrs, (h, wd), (kh, kw), strides, dilations)
    y = ctx.emit(_tvm.conv2d(ctx.expr(x), ctx.expr(w), strides, pads, dilations,
                             int(attrs.get("group", 1)), out_dtype))
    if b is not None:
        y = ctx.emit(relax.op.add(y, ctx.emit(relax.op.reshape(ctx.expr(b), (1, o, 1, 1)))))
    return Value(expr=y, dtype=out_dtype or "float32")


def matmul(ctx: ImportContext, a: Value, b: Value, out_dtype: str | None = None) -> Value:
    return Value(expr=ctx.emit(relax.op.matmul(ctx.expr(a), ctx.expr(b), out_dtype=out_dtype)),
                 dtype=out_dtype or "float32")


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
def conv_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x, w, b = (inputs + [None])[:3]
    return [conv(ctx, x, w, b, attrs)]


def _transpose_pads(attrs: dict, in_sizes, kernel, strides, dilations, output_padding):
    """ConvTranspose ``(pads_begin, pads_end, output_padding)`` as onnxruntime derives them.

    With ``output_shape`` or a SAME ``auto_pad`` the total padding is what trims the full
    output ``(in - 1)*s + op + (k - 1)*d + 1`` to the requested size (``in * s`` for SAME); the
    odd unit goes last for SAME_UPPER and first otherwise (the ONNX rule; onnxruntime 1.31
    follows it, measured). An ``output_shape`` beyond the full size adds output padding.
    Otherwise ``pads`` apply (VALID included, as in onnxruntime).
    """
    rank = len(in_sizes)
    pads = list(attrs.get("pads", [0] * (2 * rank)))
    if len(pads) != 2 * rank:
        raise Unsupported(f"pads {pads} do not describe a {rank}-D window")
    begin, end, out_pad = pads[:rank], pads[rank:], list(output_padding)
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad {auto_pad!r} is not supported")
    output_shape = list(attrs.get("output_shape", []))
    if output_shape and len(output_shape) not in (rank, rank + 2):
        raise Unsupported(f"output_shape {output_shape} does not match a {rank}-D input")
    for i, (size, k, s, d) in enumerate(zip(in_sizes, kernel, strides, dilations)):
        full = (size - 1) * s + out_pad[i] + (k - 1) * d + 1
        if output_shape:
            target = output_shape[i - rank]
        elif auto_pad.startswith("SAME"):
            target = size * s
        else:
            continue
        total = max(full - target, 0)
        out_pad[i] += max(target - full, 0)
        head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin[i], end[i] = head, total - head
    return begin, end, out_pad


def conv_transpose(ctx: ImportContext, x: Value, w: Value, b: Value | None, attrs: dict) -> Value:
    """1-D and 2-D ConvTranspose (onnxruntime's CPU kernel has the same limit)."""
    x_shape, w_shape = ctx.shape(x), ctx.shape(w)
    rank = len(x_shape) - 2
    if rank not in (1, 2) or len(w_shape) != rank + 2:
        raise Unsupported(f"ConvTranspose on a rank-{len(x_shape)} input is not supported "
                          "(1-D and 2-D only, as onnxruntime's CPU kernel)")
    kernel = list(w_shape[2:])
    if list(attrs.get("kernel_shape", kernel)) != kernel:
        raise Unsupported("kernel_shape disagrees with the weight shape")
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    begin, end, out_pad = _transpose_pads(attrs, x_shape[2:], kernel, strides, dilations,
                                          attrs.get("output_padding", [0] * rank))
    if any(p >= s for p, s in zip(out_pad, strides)):
        raise Unsupported(f"output padding {out_pad} not below the strides {strides} "
                          "(Relax's conv transpose requires it)")
    group = int(attrs.get("group", 1))
    op = relax.op.nn.conv2d_transpose if rank == 2 else relax.op.nn.conv1d_transpose
    y = ctx.emit(op(ctx.expr(x), ctx.expr(w), strides=strides, padding=begin + end,
                    output_padding=out_pad, dilation=dilations, groups=group))
    if b is not None:
        bias_shape = (1, w_shape[1] * group) + (1,) * rank
        y = ctx.emit(relax.op.add(y, ctx.emit(relax.op.reshape(ctx.expr(b), bias_shape))))
    return Value(expr=y)


@onnx_op("ConvTranspose")
def conv_transpose_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                      attrs: Attrs) -> list[Value]:
    x, w, b = (inputs + [None])[:3]
    return [conv_transpose(ctx, x, w, b, attrs)]


@onnx_op("MatMul")
def matmul_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [matmul(ctx, inputs[0], inputs[1])]


@onnx_op("Gemm")
def gemm_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    a, b, c = (inputs + [None])[:3]
    return [gemm(ctx, a, b, c, attrs)]


@onnx_op("AveragePool")
def average_pool_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                    attrs: Attrs) -> list[Value]:
    return [average_pool(ctx, inputs[0], attrs)]


@onnx_op("MaxPool", quantized="passthrough")
def max_pool_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    if len(node.output) > 1 and node.output[1]:
        raise Unsupported("MaxPool indices output is not supported")
    return [max_pool(ctx, inputs[0], attrs)]


@onnx_op("GlobalAveragePool")
def global_average_pool_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                           attrs: Attrs) -> list[Value]:
    return [global_average_pool(ctx, inputs[0])]


@onnx_op("ReduceMean")
def reduce_mean_op(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                   attrs: Attrs) -> list[Value]:
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
    # sum, then divide by the count: what onnxruntime computes, and distinct from the
    # ``mean`` that GlobalAveragePool imports as (onnxruntime fuses that one into an integer
    # pool, but runs ReduceMean in float)
    total = ctx.emit(relax.op.sum(ctx.expr(x), axis=axes, keepdims=keepdims))
    count = np.float32(np.prod([ctx.shape(x)[a] for a in axes]))
    return [Value(expr=ctx.emit(relax.op.divide(total, relax.const(count))))]
