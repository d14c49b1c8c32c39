"""``quantized_decomposed`` quantize / dequantize (what ``convert_pt2e`` writes) into the core's
quantize / dequantize.

Per-tensor and per-channel int8 / uint8 with literal or constant parameters are imported, and
int32 dequantize of a constant (a bias quantized to the accumulator's scale).
Quantize ranges narrower than the dtype's are refused for activations (canonqnn's quantize
saturates to the dtype); a dequantize reads the stored integers whatever range they were
quantized to (PT2E's weights use [-127, 127]). The ``.tensor`` overloads and
``choose_qparams`` (dynamic quantization: parameters computed at run time) are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from canonqnn import qdq
from canonqnn.qparams import QParams, check_scale, uint8_to_int8

from .._context import ImportContext, Unsupported, Value, dtype_name, torch_op

if TYPE_CHECKING:
    from torch.fx import Node

QUANTIZED_DTYPES = {"int8": (-128, 127), "uint8": (0, 255)}
# An int32 constant (a bias some quantizers store quantized) is dequantized, never quantized to.
DEQUANTIZED_DTYPES = ("int8", "uint8", "int32")
_DECOMPOSED = "quantized_decomposed"


def _dtype(dtype, allowed=tuple(QUANTIZED_DTYPES)) -> str:
    name = dtype_name(dtype)
    if name not in allowed:
        raise Unsupported(f"{name} quantization is not supported ({', '.join(allowed)} only)")
    return name


def _per_tensor(ctx: ImportContext, scale, zero_point, dtype: str) -> QParams:
    s = np.asarray(ctx.constant(scale, "scale") if isinstance(scale, Value) else scale,
                   np.float32).reshape(())
    z = np.asarray(ctx.constant(zero_point, "zero point") if isinstance(zero_point, Value)
                   else zero_point, np.int64).reshape(())
    check_scale(s, "scale")
    return QParams.make(s, z, None, dtype).as_int8()


def _per_channel(ctx: ImportContext, scales: Value, zero_points: Value, axis: int, rank: int,
                 dtype: str) -> QParams:
    s = np.asarray(ctx.constant(scales, "scales"), np.float32).reshape(-1)
    z = np.asarray(ctx.constant(zero_points, "zero points"), np.int64).reshape(-1)
    check_scale(s, "scales")
    if s.shape != z.shape:
        raise Unsupported(f"{s.size} scales and {z.size} zero points")
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} is out of range for a rank-{rank} tensor")
    return QParams.make(s, z, axis % rank, dtype).as_int8()


def _check_range(qmin: int, qmax: int, dtype: str) -> None:
    if (qmin, qmax) != QUANTIZED_DTYPES[dtype]:
        raise Unsupported(f"quantize to [{qmin}, {qmax}], a narrower range than {dtype}'s "
                          f"{list(QUANTIZED_DTYPES[dtype])} (canonqnn saturates to the dtype)")


def _quantize(ctx: ImportContext, node, x: Value, qp: QParams, dtype: str) -> Value:
    return ctx.value(qdq.quantize(ctx.expr(x), qp, source_dtype=qdq.source_dtype(dtype),
                                  source_tensor=node.name))


def _dequantize(ctx: ImportContext, q: Value, qp: QParams, dtype: str) -> Value:
    expr = qdq.dequantize(ctx.expr(q), qp, source_dtype=qdq.source_dtype(dtype))
    return ctx.value(expr, step=float(qp.scale.max()))


def _stored(ctx: ImportContext, q: Value, dtype: str) -> Value:
    """A constant's stored integers as held (uint8 shifted to int8)."""
    if q.const is None or dtype != "uint8":
        return q
    return Value(const=uint8_to_int8(q.const))


@torch_op(f"{_DECOMPOSED}.quantize_per_tensor.default")
def quantize_per_tensor(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    x, scale, zp, qmin, qmax, dtype = args[:6]
    dtype = _dtype(dtype)
    _check_range(qmin, qmax, dtype)
    return _quantize(ctx, node, x, _per_tensor(ctx, scale, zp, dtype), dtype)


@torch_op(f"{_DECOMPOSED}.dequantize_per_tensor.default")
def dequantize_per_tensor(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    q, scale, zp, _qmin, _qmax, dtype = args[:6]
    _out_dtype(node)
    dtype = _dequantized_dtype(q, dtype)
    return _dequantize(ctx, _stored(ctx, q, dtype), _per_tensor(ctx, scale, zp, dtype), dtype)


@torch_op(f"{_DECOMPOSED}.quantize_per_channel.default")
def quantize_per_channel(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    raise Unsupported("per-channel quantization of a computed tensor is not supported "
                      "(per-channel parameters apply to constant weights)")


@torch_op(f"{_DECOMPOSED}.dequantize_per_channel.default")
def dequantize_per_channel(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    q, scales, zps, axis, _qmin, _qmax, dtype = args[:7]
    _out_dtype(node)
    dtype = _dequantized_dtype(q, dtype)
    qp = _per_channel(ctx, scales, zps, axis, len(ctx.shape(q)), dtype)
    return _dequantize(ctx, _stored(ctx, q, dtype), qp, dtype)


@torch_op(f"{_DECOMPOSED}.quantize_per_tensor.tensor", f"{_DECOMPOSED}.quantize_per_tensor.tensor2",
          f"{_DECOMPOSED}.dequantize_per_tensor.tensor",
          f"{_DECOMPOSED}.dequantize_per_tensor.tensor2",
          f"{_DECOMPOSED}.choose_qparams.tensor", f"{_DECOMPOSED}.choose_qparams_symmetric.tensor")
def dynamic(ctx: ImportContext, node: Node, args: list[Any]) -> Value:
    raise Unsupported("dynamic quantization (parameters computed at run time) is not supported: "
                      "quantize statically (prepare_pt2e, calibrate, convert_pt2e)")


def _dequantized_dtype(q: Value, dtype) -> str:
    name = _dtype(dtype, DEQUANTIZED_DTYPES)
    if name == "int32" and q.const is None:
        raise Unsupported("int32 dequantize of a computed tensor (int32 constants only: a "
                          "quantized bias)")
    return name


def _out_dtype(node) -> None:
    out_dtype = node.kwargs.get("out_dtype")
    if out_dtype is not None and dtype_name(out_dtype) != "float32":
        raise Unsupported(f"dequantize to {dtype_name(out_dtype)} (float32 only)")
