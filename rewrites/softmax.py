"""Fold quantized softmax the way onnxruntime fuses it into QLinearSoftmax.

    q([relu|clip](softmax(dq(x), axis)))                          -> canonqnn.softmax
    q([relu|clip](reshape(softmax(reshape(dq(x), [N, D]), 1))))   -> canonqnn.reshape ->
                                                   canonqnn.softmax(axis 1) -> canonqnn.reshape

The second form is ONNX Softmax before opset 13 (and QLinearSoftmax with ``opset`` < 13),
which flattens the input to 2-D at ``axis`` as the importer writes it.

With ORT_ENABLE_ALL onnxruntime replaces DQ -> Softmax -> Q by QLinearSoftmax, whose table
arithmetic differs from a float softmax, whenever its QDQ selector accepts the group: input and
output of the same 8-bit type, the Softmax's only consumer a Q (or one Relu/Clip the Q makes
redundant, then one Q). Anything else runs as float Softmax (MLAS) then QuantizeLinear; the
rule declines those groups so that they stay float, as in onnxruntime.

TFLite-source modules (rounding q31_*) hold SOFTMAX in the frontend's form

    q(softmax(dq(x), axis))  or  q(softmax(multiply(dq(x), f32 beta), axis))  -> canonqnn.softmax

(axis: the last one, or 1 of an NCHW tensor; the op runs along any single axis), with
TFLite's gemmlowp arithmetic and ``beta``; int16 -> int16 (16x8 models) with TFLite's int16
kernel. Groups TFLite's kernel refuses decline, named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import movement
from canonqnn.ops import softmax as softmax_op
from canonqnn.qdq import QUANTIZE, QdqCall

from ._engine import Context, Decline, Rule
from ._match import (
    CLIP,
    FULL_RANGE,
    INT8_OR_INT32,
    RELU,
    Activation,
    dequantized,
    output,
    per_tensor_int8,
    sixteen_bit,
)

SOFTMAX, RESHAPE, MULTIPLY = "relax.nn.softmax", "relax.reshape", "relax.multiply"
UNFUSED = "onnxruntime does not fuse this group into QLinearSoftmax (it runs float Softmax " \
          "then QuantizeLinear): "


def _one_activation(ctx: Context, expr: Any) -> tuple[Any, Activation]:
    """At most one relu/clip under the quantize (onnxruntime's selector looks at one)."""
    value = ctx.value(expr)
    name = _tvm.op_name(value)
    if not ctx.single_use(expr) or name not in (RELU, CLIP):
        return expr, Activation()
    if name == RELU:
        return value.args[0], Activation(0.0, math.inf)
    if not _tvm.dtype_of(value.args[0]).startswith("float"):
        return expr, Activation()
    return value.args[0], Activation(_tvm.scalar_arg(value.args[1]),
                                     _tvm.scalar_arg(value.args[2]))


def _flattened_to_2d(ctx: Context, y: Any):
    """``(softmax call, reshape-in call)`` when ``y`` is reshape(softmax(reshape(., [N, D]), 1))
    back to the shape before the first reshape, the row-flattening of ONNX Softmax < 13."""
    back = ctx.call(y, RESHAPE)
    if back is None:
        return None
    inner = ctx.call(back.args[0], SOFTMAX)
    if inner is None:
        return None
    flat = ctx.call(inner.args[0], RESHAPE)
    if flat is None or not ctx.single_use(back.args[0]) or not ctx.single_use(inner.args[0]):
        return None
    shape, flat_shape = _tvm.shape_of(flat.args[0]), _tvm.shape_of(flat)
    if len(flat_shape) != 2 or int(_tvm.attrs_dict(inner)["axis"]) % 2 != 1 \
            or _tvm.shape_of(back) != shape:
        return None
    rows = [math.prod(shape[:k]) for k in range(len(shape) + 1)]
    if flat_shape[0] not in rows or math.prod(shape) != math.prod(flat_shape):
        return None
    return inner, flat


def _beta_product(ctx: Context, expr: Any) -> tuple[Any, float]:
    """``(x, beta)`` for ``multiply(x, f32 scalar constant)`` (either order), else (expr, 1)."""
    mul = ctx.call(expr, MULTIPLY)
    if mul is None or not ctx.single_use(expr):
        return expr, 1.0
    for x, c in (mul.args, mul.args[::-1]):
        if _tvm.is_const(c) and _tvm.dtype_of(c) == "float32" and _tvm.const_value(c).size == 1:
            return x, float(_tvm.const_value(c).reshape(()))
    return expr, 1.0


def _tflite_output_refusal(out_qp, source: str) -> str | None:
    """Why TFLite's SOFTMAX Prepare refuses these output parameters (None: it accepts them).
    Measured: int8 requires zero point -128 and |scale - 1/256| <= 0.001 / 256 in float32;
    uint8 checks nothing (its kernel writes (1/256, 0) codes whatever the parameters say)."""
    if source == "uint8":
        return None
    lsb = np.float32(1.0) / np.float32(256.0)
    if abs(np.float32(out_qp.scalar_scale) - lsb) > np.float32(0.001) * lsb:
        return f"output scale {out_qp.scalar_scale!r} (it must be 1/256 within 0.1%)"
    if out_qp.scalar_zp != -128:
        return f"zero point {out_qp.scalar_zp} (it must be -128)"
    return None


@dataclass(frozen=True)
class Softmax:
    out: QdqCall
    x: QdqCall
    axis: int
    beta: float = 1.0
    source_dtype: str | None = None  # the 8-bit type the kernel reads and writes
    rows_shape: tuple[int, ...] | None = None  # ONNX < 13: softmax over these rows


def tflite_softmax(ctx: Context, out: Any):
    """q(softmax(dq x [* beta], axis)) of a TFLite-source module (q31)."""
    inner = ctx.call(out.operand, SOFTMAX)
    if inner is None:
        return None
    at = out.operand
    if not ctx.single_use(at):
        return Decline("the softmax result has other users (TFLite's SOFTMAX writes only the "
                       "quantized result)", at)
    operand, beta = _beta_product(ctx, inner.args[0])
    dtype = out.qparams.dtype
    x = dequantized(ctx, operand, (*INT8_OR_INT32, dtype))
    if x is None:
        return Decline(f"input is not dequantized from {dtype} (times a float32 beta)", at)
    if (why := per_tensor_int8(x, "input", at, (dtype,))) is not None:
        return why
    axis = int(_tvm.attrs_dict(inner)["axis"])
    if dtype == "int16":  # TFLite 16x8 SOFTMAX; the op checks its output parameters
        return Softmax(out, x, axis, beta)
    source = x.source_dtype
    if source != ctx.source_dtype():
        return Decline(f"TFLite's 8-bit SOFTMAX needs one type: {source} input, "
                       f"{ctx.source_dtype()} output", at)
    if (problem := _tflite_output_refusal(out.qparams, source)) is not None:
        return Decline(f"TFLite's int8 SOFTMAX requires output (1/256, -128): {problem}", at)
    if (refusal := softmax_op.SOFTMAX.accepts(
            x_dtype=x.qparams.dtype, rounding=ctx.rounding, beta=beta,
            in_scale=x.qparams.scalar_scale)) is not None:
        return Decline(refusal, at)
    return Softmax(out, x, axis, beta, source)


def softmax_chain(ctx: Context, call: Any):
    out = output(call, ("int8", *sixteen_bit(ctx)))
    if out is None or out.qparams.dtype not in ("int8", *sixteen_bit(ctx)):
        return None
    if ctx.source == "tflite":
        return tflite_softmax(ctx, out)
    y, act = _one_activation(ctx, out.operand)
    flattened = _flattened_to_2d(ctx, y)
    inner, flat = flattened if flattened else (ctx.call(y, SOFTMAX), None)
    if inner is None:
        return None
    at = y if flat is None else ctx.value(y).args[0]  # the softmax's float result
    if not ctx.single_use(y):
        return Decline(UNFUSED + "the softmax result has other users", y)
    x = dequantized(ctx, (inner if flat is None else flat).args[0])
    if x is None:
        return Decline("input is not dequantized from int8", at)
    if (why := per_tensor_int8(x, "input", at)) is not None:
        return why
    if ctx.source != "onnx":
        return Decline(f"the softmax arithmetic of {ctx.source} is not implemented", at)
    if act.bounds(out.qparams) != FULL_RANGE:
        return Decline(UNFUSED + "a relu/clip the output quantization does not imply", at)
    source = x.source_dtype
    if source != ctx.source_dtype():
        return Decline(UNFUSED + f"{source} input, {ctx.source_dtype()} output", at)
    if flat is None:
        return Softmax(out, x, int(_tvm.attrs_dict(inner)["axis"]), source_dtype=source)
    return Softmax(out, x, 1, source_dtype=source, rows_shape=_tvm.shape_of(flat))


def build_softmax(ctx: Context, m: Softmax):
    source = m.source_dtype or "int8"
    if m.rows_shape is None:
        return softmax_op.softmax(m.x.operand, m.x.qparams, m.out.qparams, m.axis,
                                  source_dtype=source, rounding=ctx.rounding, beta=m.beta)
    rows = ctx.emit(movement.reshape(m.x.operand, m.rows_shape, m.x.qparams))
    y2d = ctx.emit(softmax_op.softmax(rows, m.x.qparams, m.out.qparams, 1, source_dtype=source,
                                      rounding=ctx.rounding, beta=m.beta))
    return movement.reshape(y2d, _tvm.shape_of(m.x.operand), m.out.qparams)


RULES = (
    Rule("softmax", QUANTIZE, (softmax_chain,), build_softmax,
         "q(softmax(dq x)) -> canonqnn.softmax (also ONNX < 13 row-flattened softmax; "
         "TFLite: q(softmax(dq x * beta)))", phase="elementwise_pool_movement"),
)
