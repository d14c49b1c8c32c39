"""Dynamic quantization as onnxruntime's ``quantize_dynamic`` writes it:

    x -> DynamicQuantizeLinear -> (q uint8, scale, zero point)
    MatMulInteger | ConvInteger(q, W int8/uint8, zero point, W zero point) -> int32
    -> Cast -> Mul(scale * W scale) [-> Add(bias)]                              (float)

The scale and zero point are computed at run time: ``qdq.dynamic_quantize`` writes them with
onnxruntime's arithmetic (docs/spec.md, ``## dynamic_quantize``). The products that read the
run-time zero point are integer Relax ops on ``q - zp`` and ``W - W zero point`` (int32
accumulation, exact: onnxruntime accumulates u8 x s8 with constant weights exactly). The
Cast/Mul/Add after them are the model's own float ops, which onnxruntime computes the same way
fused (MatMulIntegerToFloat, DynamicQuantizeMatMul) or not:
``fl(fl(float(acc) * fl(scale * w_scale)) + bias)``, no FMA. The rewrites fold the chain into
``canonqnn.dynamic_matmul`` / ``dynamic_conv2d``.
uint8 values are held as int8 (q - 128) like every quantized tensor of the FQ form.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.qparams import uint8_to_int8

from ..._base import Attrs, Inputs
from .._context import ImportContext, Unsupported, Value, onnx_op
from . import nn


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: ImportContext, node: NodeProto, inputs: Inputs,
                            attrs: Attrs) -> list[Value]:
    x = inputs[0]
    if x.dtype != "float32":
        raise Unsupported(f"DynamicQuantizeLinear of {x.dtype} data (float32 only)")
    q, scale, zp = qdq.dynamic_quantize(ctx.emit, ctx.expr(x))
    return [Value(expr=q, dtype="uint8"), Value(expr=scale),
            Value(expr=zp, dtype="uint8")]


def runtime_zero_point(zp: Value | None) -> bool:
    return zp is not None and zp.const is None


def _centred_runtime(ctx: ImportContext, x: Value, zp: Value, what: str):
    """``x - zp`` in int32, both int8-held (their -128 shifts cancel)."""
    if x.dtype != zp.dtype or x.dtype not in ("int8", "uint8") or \
            x.qparams is not None:
        raise Unsupported(f"{what} of type {x.dtype} with a run-time zero point of type "
                          f"{zp.dtype} (expected DynamicQuantizeLinear's uint8 outputs)")
    if ctx.shape(zp) not in ((), (1,)):
        raise Unsupported(f"{what} run-time zero point of shape {list(ctx.shape(zp))} "
                          "(per tensor only)")
    e, op = ctx.emit, relax.op
    centred = op.subtract(e(op.astype(ctx.expr(x), "int32")),
                          e(op.astype(e(op.reshape(ctx.expr(zp), ())), "int32")))
    return Value(expr=e(centred), dtype="int32")


def _centred_constant(ctx: ImportContext, w: Value, zp: Value | None, axis: int, what: str):
    """``W - W zero point`` in int32 (per tensor or along ``axis``), written on the int8-held
    constants so that the rules read the weights and their zero point back."""
    data = ctx.constant(w, what)
    if w.dtype not in ("int8", "uint8"):
        raise Unsupported(f"{what} of type {w.dtype} (int8/uint8 only)")
    z = np.zeros((), data.dtype) if zp is None else ctx.constant(zp, f"{what} zero point")
    if zp is not None and zp.dtype != w.dtype:
        raise Unsupported(f"{what} zero point type {zp.dtype} differs from {w.dtype}")
    if z.ndim > 1 or z.size not in (1, data.shape[axis % data.ndim]):
        raise Unsupported(f"{what} zero point of shape {list(z.shape)} (per tensor or per "
                          f"{'column' if axis == -1 else 'output channel'} only)")
    shape = [1] * data.ndim
    if z.size > 1:
        shape[axis % data.ndim] = z.size
    if w.dtype == "uint8":
        data, z = uint8_to_int8(data), uint8_to_int8(z)
    e, op = ctx.emit, relax.op
    centred = op.subtract(e(op.astype(_tvm.const(np.asarray(data, np.int8)), "int32")),
                          e(op.astype(_tvm.const(np.asarray(z, np.int8).reshape(shape)), "int32")))
    return Value(expr=e(centred), dtype="int32")


def matmul_integer(ctx: ImportContext, a: Value, b: Value, az: Value, bz: Value | None) -> Value:
    return nn.matmul(ctx, _centred_runtime(ctx, a, az, "A"),
                     _centred_constant(ctx, b, bz, -1, "B"), out_dtype="int32")


def conv_integer(ctx: ImportContext, x: Value, w: Value, xz: Value, wz: Value | None,
                 attrs: dict) -> Value:
    return nn.conv(ctx, _centred_runtime(ctx, x, xz, "x"), _centred_constant(ctx, w, wz, 0, "w"),
                   None, attrs, out_dtype="int32")
