"""QuantizeLinear / DequantizeLinear (opsets 10-28) into the core's quantize/dequantize.

int8/uint8, int16/uint16 (16-bit activations: the ops between stay float, as onnxruntime
computes them) and int32 DequantizeLinear, per tensor or per axis, with float32 scales are
imported; blocked, 4/2-bit and float8/float4/float6 variants are refused.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn import _tvm, qdq
from canonqnn.errors import InvalidModelError, InvalidQuantizationError
from canonqnn.qparams import SIGNED, QParams, as_signed, check_scale

from ..._base import Attrs, Inputs
from .._context import ImportContext, Unsupported, Value, onnx_op

QUANTIZED_DTYPES = ("int8", "uint8")
SIXTEEN_BIT_DTYPES = ("int16", "uint16")  # QuantizeLinear / DequantizeLinear only
# QuantizeLinear output_dtype attribute (opset 21)
ONNX_OUTPUT_DTYPE = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16"}


def read_qparams(ctx: ImportContext, scale: Value | None, zero_point: Value | None, *,
                 axis: int, rank: int, dtype: str | None, what: str,
                 float16_scale: bool = False) -> QParams:
    """Constant (scale, zero point) of one tensor as int8-normalized ``QParams``.

    ``dtype`` is the quantized tensor's dtype when known; otherwise the zero point's (uint8
    when absent, as ONNX specifies). ``float16_scale`` accepts float16 scales, converted to
    float32 (exactly), for ops whose arithmetic onnxruntime runs in float32 anyway.
    """
    memo = _tvm.conversion_memo()  # (a Q/DQ pair reads the same initializers)
    key = ("onnx_qparams", id(scale), id(zero_point), axis, rank, dtype, float16_scale)
    known = memo.get(key) if memo is not None else None
    if known is not None:
        return known[2]
    qp = _read_qparams(ctx, scale, zero_point, axis=axis, rank=rank, dtype=dtype, what=what,
                       float16_scale=float16_scale)
    if memo is not None:
        memo[key] = (scale, zero_point, qp)  # (the values kept: their ids stay theirs)
    return qp


def _read_qparams(ctx: ImportContext, scale: Value | None, zero_point: Value | None, *,
                  axis: int, rank: int, dtype: str | None, what: str,
                  float16_scale: bool) -> QParams:
    s = ctx.constant(scale, f"{what} scale")
    if s.dtype == np.float16 and float16_scale:
        s = s.astype(np.float32)
    if s.dtype != np.float32:
        raise Unsupported(f"{what} scale of type {s.dtype} is not supported (float32 only)")
    check_scale(s, f"{what} scale")
    if zero_point is not None:
        z = ctx.constant(zero_point, f"{what} zero point")
        zdtype = zero_point.dtype
    else:
        zdtype = dtype or "uint8"
        z = np.zeros(s.shape, np.int64)
    dtype = dtype or zdtype
    if dtype != zdtype:
        raise Unsupported(f"{what} zero point type {zdtype} differs from the data type {dtype}")
    if dtype not in QUANTIZED_DTYPES + SIXTEEN_BIT_DTYPES + ("int32",):
        raise Unsupported(f"{dtype} quantization of {what} is not supported (int8/uint8, "
                          "int16/uint16 only)")
    if s.size == 1 and z.size == 1:
        return QParams.make(s.reshape(()), z.reshape(()), None, dtype).as_int8()
    if s.ndim > 1 or z.ndim > 1:
        shape = s.shape if s.ndim > 1 else z.shape
        raise Unsupported(f"{what} scale/zero point of shape {tuple(shape)}: only scalar or 1-D "
                          "per-axis quantization parameters are supported (N-D, per-element or "
                          "blocked parameters are not)")
    if s.size > 1 and z.size > 1 and s.shape != z.shape:
        raise Unsupported(f"{what} scale shape {s.shape} and zero point shape {z.shape} differ")
    if not -rank <= axis < rank:  # (validate.py checks it where ONNX inference knows the rank)
        raise InvalidQuantizationError(f"axis {axis} is out of range for the rank-{rank} {what}")
    return QParams.make(s, z, axis % rank, dtype).as_int8()


def _reject_blocked(attrs: dict) -> None:
    if attrs.get("block_size", 0):
        raise Unsupported(
            f"blocked quantization (block_size={attrs['block_size']}) is not supported")


def _check_axis(shape: tuple[int, ...], qp: QParams) -> None:
    if not qp.per_tensor and (qp.axis >= len(shape) or shape[qp.axis] != qp.scale.size):
        raise InvalidModelError(f"{qp.scale.size} per-axis scales/zero points along axis "
                                f"{qp.axis} of a tensor of shape {list(shape)}")


def dequantize_value(ctx: ImportContext, x: Value, qp: QParams) -> Value:
    """``dequantize`` of an int8-held tensor (constants are shifted from uint8 here)."""
    _check_axis(ctx.shape(x), qp)
    if x.const is not None:
        data = as_signed(x.const, x.dtype) if x.dtype in SIGNED else x.const
        expr = ctx.expr(Value(const=np.asarray(data, qp.dtype)))
    else:
        expr = ctx.expr(x)
    dq = qdq.dequantize(expr, qp, source_dtype=qdq.source_dtype(x.dtype))
    return Value(expr=ctx.emit(dq), dequantized=qp,
                 step=qp.scalar_scale if qp.per_tensor else None)


def quantize_value(ctx: ImportContext, y: Value, qp: QParams, dtype: str) -> Value:
    _check_axis(ctx.shape(y), qp)
    q = qdq.quantize(ctx.expr(y), qp, source_dtype=qdq.source_dtype(dtype),
                     source_tensor=ctx.node_output or None)
    return Value(expr=ctx.emit(q), dtype=dtype, qparams=qp)


@onnx_op("DequantizeLinear", quantized="consumes")
def dequantize_linear(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                      attrs: Attrs) -> list[Value]:
    _reject_blocked(attrs)
    x, scale, zp = (inputs + [None, None])[:3]
    if x.dtype not in QUANTIZED_DTYPES + SIXTEEN_BIT_DTYPES + ("int32",):
        raise Unsupported(f"DequantizeLinear of {x.dtype} data is not supported "
                          "(int8/uint8, int16/uint16, int32 only)")
    if attrs.get("output_dtype", 0) not in (0, 1):  # opset 23: 1 = FLOAT
        raise Unsupported(f"output_dtype {attrs['output_dtype']} is not supported (float32 only)")
    qp = read_qparams(ctx, scale, zp, axis=attrs.get("axis", 1), rank=max(len(ctx.shape(x)), 1),
                      dtype=x.dtype, what="input")
    if qp.dtype == "int32" and np.any(qp.zero_point):
        raise Unsupported("int32 DequantizeLinear with a nonzero zero point is not supported")
    return [dequantize_value(ctx, x, qp)]


@onnx_op("QuantizeLinear")
def quantize_linear(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                    attrs: Attrs) -> list[Value]:
    _reject_blocked(attrs)
    if attrs.get("precision", 0):
        raise Unsupported("the precision attribute is not supported")
    x, scale, zp = (inputs + [None, None])[:3]
    if x.dtype != "float32":
        raise Unsupported(f"QuantizeLinear of {x.dtype} data is not supported (float32 only)")
    out_dtype = None
    if attrs.get("output_dtype"):
        out_dtype = ONNX_OUTPUT_DTYPE.get(attrs["output_dtype"])
        if out_dtype is None:
            raise Unsupported(f"output_dtype {attrs['output_dtype']} is not supported")
    if zp is not None:
        out_dtype = zp.dtype
    if out_dtype not in (None,) + QUANTIZED_DTYPES + SIXTEEN_BIT_DTYPES:
        raise Unsupported(f"QuantizeLinear to {out_dtype} is not supported (int8/uint8, "
                          "int16/uint16 only)")
    qp = read_qparams(ctx, scale, zp, axis=attrs.get("axis", 1), rank=max(len(ctx.shape(x)), 1),
                      dtype=out_dtype, what="output")
    return [quantize_value(ctx, x, qp, out_dtype or "uint8")]
