"""LayerNormalization as a float Relax op (no canonical int8 form: it stays a float island)."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn._tvm import relax

from ..._base import Attrs, Inputs
from .._context import ImportContext, Unsupported, Value, onnx_op


@onnx_op("LayerNormalization")
def layer_normalization(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                        attrs: Attrs) -> list[Value]:
    if any(node.output[1:]):
        raise Unsupported("the Mean and InvStdDev outputs are not supported")
    x, scale, bias = (inputs + [None, None])[:3]
    rank = len(ctx.shape(x))
    axis = attrs.get("axis", -1) % rank
    if attrs.get("stash_type", 1) != 1:
        raise Unsupported(f"stash_type {attrs['stash_type']} (only float32 statistics)")
    normalized = ctx.shape(x)[axis:]
    if bias is None:
        bias = Value(const=np.zeros(normalized, np.float32))
    gamma, beta = (ctx.expr(v) if ctx.shape(v) == tuple(normalized) else
                   ctx.emit(relax.op.broadcast_to(ctx.expr(v), normalized)) for v in (scale, bias))
    out = relax.op.nn.layer_norm(ctx.expr(x), gamma, beta, axes=list(range(axis, rank)),
                                 epsilon=float(attrs.get("epsilon", 1e-5)))
    return [Value(expr=ctx.emit(out))]
