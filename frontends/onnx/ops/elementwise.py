"""Add, Sub, Mul, Relu, Clip as float Relax ops."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn import _tvm
from canonqnn._tvm import relax

from ..._base import Attrs, Inputs
from .._context import ImportContext, Value, onnx_op

BINARY = {"Add": relax.op.add, "Sub": relax.op.subtract, "Mul": relax.op.multiply}


def binary(ctx: ImportContext, op_type: str, a: Value, b: Value) -> Value:
    return Value(expr=ctx.emit(BINARY[op_type](ctx.expr(a), ctx.expr(b))))


@onnx_op(*BINARY)
def binary_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [binary(ctx, node.op_type, inputs[0], inputs[1])]


@onnx_op("Relu")
def relu_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return [Value(expr=ctx.emit(relax.op.nn.relu(ctx.expr(inputs[0]))))]


@onnx_op("Clip")
def clip_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    """``clip(x, lo, hi)`` with float bounds (attributes before opset 11, inputs after)."""
    x = inputs[0]
    if ctx.opset < 11:
        lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)
    else:
        bounds = (inputs + [None, None])[1:3]
        lo, hi = (float(ctx.constant(v, "Clip bound").reshape(())) if v is not None else default
                  for v, default in zip(bounds, (-np.inf, np.inf)))
    return [Value(expr=ctx.emit(_tvm.clip_float(ctx.expr(x), float(lo), float(hi))))]
