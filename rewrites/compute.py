"""Fold quantized convolutions and matrix products.

    q(relu|clip(conv2d(dq(x), dq(w)) [+ reshape(dq(b))]))      -> canonqnn.conv2d
    q(relu|clip(matmul(dq(a) [^T], dq(b) [^T]) [* alpha] [+ dq(b)]))  -> canonqnn.matmul
    astype(conv2d | matmul(dq(x), dq(w)), "int32")   (scales 1)   -> the int32 accumulator

The weight may be a runtime tensor (ONNX models that take it as a graph input); only its
scale and zero point must be constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import conv as conv_ops
from canonqnn.ops import matmul as matmul_ops
from canonqnn.ops import movement
from canonqnn.qdq import QUANTIZE
from canonqnn.qparams import QParams, product_scale

from ._engine import Context, Decline, Rule
from ._match import ASTYPE, accumulator, dequantized, output, per_tensor_int8, strip_activation

CONV2D, MATMUL, ADD, MULTIPLY = "relax.nn.conv2d", "relax.matmul", "relax.add", "relax.multiply"
RESHAPE, PERMUTE = "relax.reshape", "relax.permute_dims"


def _bias(ctx: Context, expr: Any, acc_scale: np.ndarray, channels: int, at: Any,
          axis: int, out_rank: int):
    """An int32 bias ``dq(b)`` (optionally reshaped) whose scale is the accumulator's, added
    along output axis ``axis`` only (one value per channel, or one for all)."""
    added_shape = _tvm.shape_of(expr)
    reshape = ctx.call(expr, RESHAPE)
    if reshape is not None:
        expr = reshape.args[0]
    parsed = dequantized(ctx, expr)
    if parsed is None or not _tvm.is_const(parsed.operand):
        return None
    qp = parsed.qparams
    if qp.dtype != "int32":
        return None
    shape = (1,) * (out_rank - len(added_shape)) + tuple(added_shape)
    if len(shape) != out_rank or any(d != 1 for i, d in enumerate(shape) if i != axis):
        return Decline(f"bias of shape {list(added_shape)} is not one value per output channel",
                       at)
    values = _tvm.const_value(parsed.operand).reshape(-1)
    if values.size not in (1, channels):
        return Decline(f"bias of {values.size} values for {channels} channels", at)
    if np.any(qp.zero_point):
        return Decline("bias zero point is not 0", at)
    want = np.broadcast_to(acc_scale, (channels,)).astype(np.float32)
    got = np.broadcast_to(qp.scale, (channels,)).astype(np.float32)
    if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
        return Decline("bias scale is not input_scale * weight_scale", at)
    return np.broadcast_to(values, (channels,)).astype(np.int32)


def _split_bias(ctx: Context, expr: Any, op: str):
    """``(core, bias_expr)`` for ``add(core, bias)`` where core is a call to ``op``."""
    add = ctx.call(expr, ADD)
    if add is not None and ctx.single_use(expr):
        for core, other in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
            if ctx.call(core, op) is not None:
                return core, other
    return expr, None


def _accumulator_output(out_qp: QParams, x_qp: QParams, w_qp: QParams, at: Any):
    """An int32 quantize of scale 1 is a raw accumulator (ConvInteger / MatMulInteger)."""
    if out_qp.dtype != "int32":
        return None
    ones = np.all(x_qp.scale == 1.0) and np.all(w_qp.scale == 1.0)
    if not (ones and out_qp.scalar_scale == 1.0 and out_qp.scalar_zp == 0):
        return Decline("int32 output that is not the raw accumulator (scales must be 1)", at)
    return None


def fold_conv2d(ctx: Context, call: Any):
    out = output(call) or accumulator(call)
    if out is None:
        return None
    y, act = strip_activation(ctx, out.operand)
    core, bias_expr = _split_bias(ctx, y, CONV2D)
    conv = ctx.call(core, CONV2D)
    if conv is None:
        return None
    at = core
    if not (ctx.single_use(core) and ctx.single_use(y)):
        return Decline("the float result has other users", at)
    a = _tvm.attrs_dict(conv)
    if (a["data_layout"], a["kernel_layout"]) != ("NCHW", "OIHW"):
        return Decline(f"layout {a['data_layout']}/{a['kernel_layout']} is not NCHW/OIHW", at)
    x, w = dequantized(ctx, conv.args[0]), dequantized(ctx, conv.args[1])
    if x is None or w is None:
        return Decline("input or weight is not dequantized from int8", at)
    if (why := per_tensor_int8(x, "input", at)) is not None:
        return why
    if w.qparams.dtype != "int8":
        return Decline(f"weight is {w.qparams.dtype}, not int8", at)
    if not w.qparams.per_tensor and w.qparams.axis != 0:
        return Decline(f"weight quantized along axis {w.qparams.axis}, not output channels", at)
    channels = _tvm.shape_of(w.operand)[0]
    bias = np.zeros(channels, np.int32)
    if bias_expr is not None:
        bias = _bias(ctx, bias_expr, product_scale(x.qparams.scale, w.qparams.scale), channels, at,
                     axis=1, out_rank=4)
        if bias is None:
            return Decline("bias is not an int32 dequantize", at)
        if isinstance(bias, Decline):
            return bias
    if out.qparams.dtype == "int32":
        if (why := _accumulator_output(out.qparams, x.qparams, w.qparams, at)) is not None:
            return why
        if not act.none:
            return Decline("activation on an int32 accumulator", at)
    return conv_ops.conv2d(
        x.operand, w.operand, bias, x.qparams, w.qparams, out.qparams,
        strides=a["strides"], padding=a["padding"], dilation=a["dilation"], groups=a["groups"],
        act=act.bounds(out.qparams) if out.qparams.dtype == "int8" else (-128, 127))


def _matmul_operand(ctx: Context, expr: Any):
    """``(dequantize, transposed)`` for ``dq(x)`` or ``permute_dims(dq(x), [1, 0])``."""
    perm = ctx.call(expr, PERMUTE)
    if perm is not None and ctx.single_use(expr):
        axes = _tvm.attrs_dict(perm).get("axes")
        if axes is not None and list(axes) == [1, 0]:
            inner = dequantized(ctx, perm.args[0])
            return (inner, True) if inner is not None else (None, False)
    return dequantized(ctx, expr), False


def _per_column(qp: QParams, transposed: bool, rank: int) -> QParams | None:
    """B's parameters as per-column (last axis) after an optional 2-D transpose, or None."""
    if qp.per_tensor:
        return qp
    axis = (1 - qp.axis) if transposed else qp.axis
    return QParams(qp.scale, qp.zero_point, rank - 1, qp.dtype) if axis == rank - 1 else None


def fold_matmul(ctx: Context, call: Any):
    out = output(call) or accumulator(call)
    if out is None:
        return None
    y, act = strip_activation(ctx, out.operand)
    core, bias_expr = _split_bias(ctx, y, MATMUL)
    alpha = 1.0
    scaled = ctx.call(core, MULTIPLY)
    if scaled is not None and ctx.single_use(core) and _tvm.is_const(scaled.args[1]):
        alpha_v = _tvm.const_value(scaled.args[1])
        if alpha_v.size == 1 and ctx.call(scaled.args[0], MATMUL) is not None:
            alpha, core = float(alpha_v.reshape(())), scaled.args[0]
    mm = ctx.call(core, MATMUL)
    if mm is None:
        return None
    at = core
    if not (ctx.single_use(core) and ctx.single_use(y)):
        return Decline("the float result has other users", at)
    (a, a_t), (b, b_t) = _matmul_operand(ctx, mm.args[0]), _matmul_operand(ctx, mm.args[1])
    if a is None or b is None:
        return Decline("an operand is not dequantized from int8", at)
    if (why := per_tensor_int8(a, "A", at)) is not None:
        return why
    a_shape, b_shape = _tvm.shape_of(a.operand), _tvm.shape_of(b.operand)
    if len(a_shape) < 1 or len(b_shape) < 1:
        return Decline("0-d matmul operand", at)
    if b.qparams.dtype != "int8":
        return Decline(f"B is {b.qparams.dtype}, not int8", at)
    b_qp = _per_column(b.qparams, b_t, len(b_shape))
    if b_qp is None:
        return Decline(f"B quantized along axis {b.qparams.axis}, not per column", at)
    if b_t and not _tvm.is_const(b.operand) and not b_qp.per_tensor:
        return Decline("transposed runtime B with per-column parameters", at)
    a_q, b_q = a.operand, b.operand
    if b_t:
        b_q = _tvm.const(np.ascontiguousarray(_tvm.const_value(b_q).T)) if _tvm.is_const(b_q) \
            else ctx.emit(movement.transpose(b_q, [1, 0], b_qp))
        b_shape = b_shape[::-1]
    if a_t:
        a_q = ctx.emit(movement.transpose(a_q, [1, 0], a.qparams))
        a_shape = a_shape[::-1]
    # 1-D operands: matmul of [1, K] / [K, 1] views, the unit axis dropped again at the end.
    out_shape = _tvm.shape_of(mm)
    if len(a_shape) == 1:
        a_q = ctx.emit(movement.reshape(a_q, (1, a_shape[0]), a.qparams))
    if len(b_shape) == 1:
        if not b_qp.per_tensor:
            return Decline("1-D B with per-column parameters", at)
        b_q = ctx.emit(movement.reshape(b_q, (b_shape[0], 1), b_qp)) if not _tvm.is_const(b_q) \
            else _tvm.const(_tvm.const_value(b_q).reshape(-1, 1))
    columns = _tvm.shape_of(b_q)[-1]
    bias = None
    if bias_expr is not None:
        acc_scale = product_scale(a.qparams.scale, b_qp.scale)
        if alpha != 1.0:
            acc_scale = (acc_scale * np.float32(alpha)).astype(np.float32)
        bias = _bias(ctx, bias_expr, acc_scale, columns, at, axis=len(out_shape) - 1,
                     out_rank=len(out_shape))
        if bias is None:
            return None  # add of a quantized tensor: the add rule folds it
        if isinstance(bias, Decline):
            return bias
    if out.qparams.dtype == "int32":
        if (why := _accumulator_output(out.qparams, a.qparams, b_qp, at)) is not None:
            return why
        if not act.none or alpha != 1.0:
            return Decline("activation or alpha on an int32 accumulator", at)
    result = matmul_ops.matmul(
        a_q, b_q, bias, a.qparams, b_qp, out.qparams, alpha=alpha,
        act=act.bounds(out.qparams) if out.qparams.dtype == "int8" else (-128, 127))
    if len(a_shape) == 1 or len(b_shape) == 1:
        result = ctx.emit(result)
        out_qp = out.qparams
        if out_qp.dtype != "int8":
            return Decline("1-D int32 matmul", at)
        return movement.reshape(result, out_shape, out_qp)
    return result


RULES = (
    Rule("conv2d", QUANTIZE, fold_conv2d, "q(act(conv2d(dq x, dq w) + dq b)) -> canonqnn.conv2d"),
    Rule("matmul", QUANTIZE, fold_matmul, "q(act(matmul(dq a, dq b) * alpha + dq b)) -> "
                                          "canonqnn.matmul"),
    Rule("conv2d_integer", ASTYPE, fold_conv2d,
         "astype(conv2d(dq x, dq w), int32) -> canonqnn.conv2d (int32 accumulator)"),
    Rule("matmul_integer", ASTYPE, fold_matmul,
         "astype(matmul(dq a, dq b), int32) -> canonqnn.matmul (int32 accumulator)"),
)
