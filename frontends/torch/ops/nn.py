"""Ops whose Relax form TVM's converters write otherwise than the rules match: conv2d (a zero
padding before it becomes its own padding, as ONNX writes asymmetric pads), linear (the
weight transposed with explicit axes, as ONNX's Gemm with transB), adaptive average pooling
(a mean over the spatial axes when the output is 1x1, as ONNX's GlobalAveragePool; a pooling
window when the sizes divide), mean (by where ExecuTorch runs it) and hard swish (the form the
other frontends write)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import hard_swish
from .._context import ImportContext, Unsupported, Value, torch_op

if TYPE_CHECKING:
    from torch.fx import Node


@torch_op("aten.pad.default", "aten.constant_pad_nd.default")
def pad(ctx: ImportContext, node: Node, args: list[Any]) -> Value | None:
    """A zero padding of H and W is held unemitted: a conv reading it pads itself (exactly the
    same: its padding reads real zero), anything else gets the padding."""
    x, widths = args[:2]
    mode = args[2] if node.target.__name__ == "pad.default" and len(args) > 2 else \
        node.kwargs.get("mode", "constant")
    value = args[-1] if len(args) > 2 and not isinstance(args[-1], str) else \
        node.kwargs.get("value")
    rank = len(ctx.shape(x))
    if mode != "constant" or (value or 0.0) != 0.0 or len(widths) != 4 or rank != 4 or \
            min(widths) < 0:
        return None  # TVM's converter (importer._convert)
    left, right, top, bottom = (int(w) for w in widths)
    return Value(padded=(x, [top, left, bottom, right]))


def _pair(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(i) for i in v]


@torch_op("aten.conv2d.default")
def conv2d(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    x, w = args[:2]
    b, stride, padding, dilation, groups = (list(args[2:]) + [None, 1, 0, 1, 1][len(args) - 2:])
    pads = _pair(padding) * 2
    if x.padded is not None:
        x, extra = x.padded
        pads = [p + e for p, e in zip(pads, extra)]
    y = ctx.emit(_tvm.conv2d(ctx.expr(x), ctx.expr(w), _pair(stride), pads, _pair(dilation),
                             int(groups)))
    if b is not None:
        bias = ctx.emit(relax.op.reshape(ctx.expr(b), (1, ctx.shape(w)[0], 1, 1)))
        y = ctx.emit(relax.op.add(y, bias))
    return Value(expr=y)


@torch_op("aten.linear.default")
def linear(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    x, w = args[:2]
    b = args[2] if len(args) > 2 else None
    if len(ctx.shape(w)) != 2:
        raise Unsupported(f"a rank-{len(ctx.shape(w))} weight (2-D only)")
    wt = ctx.emit(relax.op.permute_dims(ctx.expr(w), [1, 0]))
    y = ctx.emit(relax.op.matmul(ctx.expr(x), wt))
    if b is not None:
        y = ctx.emit(relax.op.add(y, ctx.expr(b)))
    return Value(expr=y)


@torch_op("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    x, size = args[:2]
    shape = ctx.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"a rank-{len(shape)} input (NCHW only)")
    out = [shape[2 + i] if s is None else int(s) for i, s in enumerate(size)]
    if out == [1, 1]:
        return ctx.value(relax.op.mean(ctx.expr(x), axis=[2, 3], keepdims=True))
    if any(n % o for n, o in zip(shape[2:], out)):
        raise Unsupported(f"output size {out} does not divide the input's {list(shape[2:])}")
    window = [n // o for n, o in zip(shape[2:], out)]
    return ctx.value(relax.op.nn.avg_pool2d(ctx.expr(x), pool_size=window, strides=window))


@torch_op("aten.mean.dim")
def mean(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    """ExecuTorch's XNNPACK partitioner takes a mean over H and W of a 4-D tensor with kept
    dims (its global average pool); any other mean runs in ExecuTorch's portable float kernel,
    written as sum / count (the form that says "float arithmetic", as ONNX's ReduceMean)."""
    x, dims = args[:2]
    keepdim = bool(args[2]) if len(args) > 2 else bool(node.kwargs.get("keepdim", False))
    if node.kwargs.get("dtype") is not None:
        raise Unsupported("mean with a dtype argument")
    rank = len(ctx.shape(x))
    axes = sorted(range(rank) if dims is None or len(dims) == 0 else {int(d) % rank
                                                                       for d in dims})
    if rank == 4 and axes == [2, 3] and keepdim:
        return ctx.value(relax.op.mean(ctx.expr(x), axis=axes, keepdims=True))
    count = 1
    for a in axes:
        count *= ctx.shape(x)[a]
    total = ctx.emit(relax.op.sum(ctx.expr(x), axis=axes, keepdims=keepdim))
    return ctx.value(relax.op.divide(total, relax.const(np.float32(count))))


@torch_op("aten.hardswish.default")
def hardswish(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    """The form the ONNX and TFLite frontends write (``frontends._base.hard_swish``; TVM's
    converter writes x * clip(x + 3, 0, 6) / 6, the same function in another order)."""
    return Value(expr=hard_swish(ctx, ctx.expr(args[0])))
