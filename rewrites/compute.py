"""Fold quantized convolutions and matrix products.

    q(relu|clip(conv2d(dq(x), dq(w)) [+ reshape(dq(b) | b)]))      -> canonqnn.conv2d
    q(relu|clip(conv{1,2}d_transpose(dq(x), dq(w)) [+ reshape(dq(b) | b)]))
                                                       -> canonqnn.conv2d_transpose
    q(relu|clip(matmul(dq(a) [^T], dq(b) [^T]) [* alpha] [+ dq(b)]))  -> canonqnn.matmul
    astype(conv2d | matmul(dq(x), dq(w)), "int32")   (scales 1)   -> the int32 accumulator

The weight may be a runtime tensor (ONNX models that take it as a graph input, attention's
Q*K^T); only its scale and zero point must be constants. ``^T`` swaps the last two axes. A float
conv bias ``b`` is quantized as onnxruntime's WeightBiasQuantization does.

Under the Q31 roundings conv2d and matmul also fold TFLite's 16x8 layers: int16 input and
output (zero points 0), int8 weights, an int64 (or int32) bias whose type is the accumulator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import conv as conv_ops
from canonqnn.ops import conv_transpose as conv_transpose_ops
from canonqnn.ops import matmul as matmul_ops
from canonqnn.ops import movement
from canonqnn.qdq import QUANTIZE, QdqCall
from canonqnn.qparams import QParams, product_scale

from ._engine import Context, Decline, Rule
from ._match import (
    ASTYPE,
    INT8_OR_INT32,
    Activation,
    accumulator,
    dequantized,
    output,
    per_tensor_int8,
    sixteen_bit,
    strip_activation,
)

CONV2D, MATMUL, ADD, MULTIPLY = "relax.nn.conv2d", "relax.matmul", "relax.add", "relax.multiply"
CONV2D_T, CONV1D_T = "relax.nn.conv2d_transpose", "relax.nn.conv1d_transpose"
RESHAPE, PERMUTE = "relax.reshape", "relax.permute_dims"
INT32_LIMIT = 2.0 ** 31


def _accumulator_of(bias: np.ndarray | None, x_qp: QParams, none: str = "int32") -> str:
    """The accumulator's type: the bias's, or ``none`` for an int16 layer without a bias."""
    if bias is not None:
        return str(bias.dtype)
    return none if x_qp.dtype == "int16" else "int32"


def _bias(ctx: Context, expr: Any, acc_scale: np.ndarray, channels: int, at: Any,
          axis: int, out_rank: int, canonical: Any, float_bias: bool = False):
    """An int32 bias ``dq(b)`` (optionally reshaped) whose scale is the accumulator's, added
    along output axis ``axis`` only (one value for all, broadcast here, or what the
    ``canonical`` op's bias rule accepts); int64 when the source stores it so (TFLite 16x8).
    With ``float_bias``, a float32 constant too, quantized to the accumulator's scale."""
    added_shape = _tvm.shape_of(expr)
    reshape = ctx.call(expr, RESHAPE)
    if reshape is not None:
        expr = reshape.args[0]
    parsed = dequantized(ctx, expr)
    if parsed is not None and _tvm.is_const(parsed.operand) and parsed.qparams.dtype == "int32":
        values = _tvm.const_value(parsed.operand).reshape(-1)
    elif float_bias and _tvm.is_const(expr) and _tvm.dtype_of(expr) == "float32":
        values = _tvm.const_value(expr).reshape(-1)
    else:
        return None
    shape = (1,) * (out_rank - len(added_shape)) + tuple(added_shape)
    if len(shape) != out_rank or any(d != 1 for i, d in enumerate(shape) if i != axis):
        return Decline(f"bias of shape {list(added_shape)} is not one value per output channel",
                       at)
    if values.size != 1 and (why := canonical.accepts(bias_shape=values.shape,
                                                      channels=channels)) is not None:
        return Decline(why, at)
    want = np.broadcast_to(acc_scale, (channels,)).astype(np.float32)
    values = np.broadcast_to(values, (channels,))
    if parsed is None:
        return _quantized_float_bias(values, want, at, ctx.numerics.float_bias)
    qp = parsed.qparams
    if np.any(qp.zero_point):
        return Decline("bias zero point is not 0", at)
    got = np.broadcast_to(qp.scale, (channels,)).astype(np.float32)
    if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
        return Decline("bias scale is not input_scale * weight_scale", at)
    # an int64 bias (TFLite 16x8) makes an int64 accumulator; it is held as int32 (qdq)
    return values.astype(np.int64 if parsed.source_dtype == "int64" else np.int32)


def _quantized_float_bias(values: np.ndarray, acc_scale: np.ndarray, at: Any, how: str):
    """A float bias as the runtime quantizes it (profile ``float_bias``), then an int32 bias:
    "divide": onnxruntime's WeightBiasQuantization, ``int32(Round(f32(b / f32(x_scale *
    w_scale))))`` (ONNX Round: ties to even); "reciprocal": XNNPACK's
    ``RNE(f32(b * f32(1 / f32(x_scale * w_scale))))``."""
    b = values.astype(np.float32)
    if how == "reciprocal":
        q = np.rint((b * (np.float32(1) / acc_scale).astype(np.float32)).astype(np.float32))
    else:
        q = np.rint((b / acc_scale).astype(np.float32))
    if not np.all(np.abs(q) < INT32_LIMIT):
        return Decline("float bias does not fit int32 at the accumulator's scale", at)
    return q.astype(np.int32)


def _split_bias(ctx: Context, expr: Any, *ops: str):
    """``(core, bias_expr)`` for ``add(core, bias)`` where core is a call to one of ``ops``."""
    add = ctx.call(expr, ADD)
    if add is not None and ctx.single_use(expr):
        lhs, rhs = _tvm.items(add.args)
        for core, other in ((lhs, rhs), (rhs, lhs)):
            if ctx.call(core, *ops) is not None:
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


@dataclass(frozen=True)
class ConvChain:
    """``q|astype(act(op(dq x, dq w) [+ bias]))``: the parsed output ``out``, the relu/clip
    ``act``, the conv call ``conv`` bound to ``at``, the added ``bias_expr`` (or None) and the
    parsed input ``x`` and weight ``w``."""

    out: QdqCall
    act: Activation
    conv: Any
    at: Any
    bias_expr: Any
    x: QdqCall
    w: QdqCall


def conv_chain(ctx: Context, call: Any, *ops: str, int16: tuple[str, ...] = ()):
    """The ``ConvChain`` rooted at ``call``; a Decline when the chain is there but cannot fold;
    else None. ``int16``: ``sixteen_bit(ctx)`` where the op folds 16x8 layers."""
    out = output(call, INT8_OR_INT32 + int16) or accumulator(call)
    if out is None:
        return None
    y, act = strip_activation(ctx, out.operand)
    core, bias_expr = _split_bias(ctx, y, *ops)
    conv = ctx.call(core, *ops)
    if conv is None:
        return None
    if not (ctx.single_use(core) and ctx.single_use(y)):
        return Decline("the float result has other users", core)
    x, w = dequantized(ctx, conv.args[0], INT8_OR_INT32 + int16), dequantized(ctx, conv.args[1])
    if x is None or w is None:
        return Decline("input or weight is not dequantized from int8", core)
    if (why := per_tensor_int8(x, "input", core, ("int8", *int16))) is not None:
        return why
    if w.qparams.dtype != "int8":
        return Decline(f"weight is {w.qparams.dtype}, not int8", core)
    return ConvChain(out, act, conv, core, bias_expr, x, w)


def _conv_bias(ctx: Context, bias_expr: Any, x_qp: QParams, w_qp: QParams, channels: int,
               at: Any, out_rank: int, out_dtype: str, canonical: Any):
    """The int32 bias of a conv (zeros without one), or a Decline."""
    if bias_expr is None:
        return np.zeros(channels, np.int32)
    bias = _bias(ctx, bias_expr, product_scale(x_qp.scale, w_qp.scale), channels, at, axis=1,
                 out_rank=out_rank, canonical=canonical, float_bias=out_dtype == "int8")
    if bias is None:
        return Decline("bias is neither an int32 dequantize nor a float constant", at)
    return bias


def conv2d_chain(ctx: Context, call: Any):
    return conv_chain(ctx, call, CONV2D, int16=sixteen_bit(ctx))


@dataclass(frozen=True)
class Conv:
    """A conv chain that folds: its attributes, int32 (or int64) bias and accumulator type."""

    chain: ConvChain
    attrs: dict
    bias: np.ndarray
    accumulator: str


def conv2d_checks(ctx: Context, m: ConvChain):
    out, x, w, at = m.out, m.x, m.w, m.at
    a = _tvm.attrs_dict(m.conv)
    if (a["data_layout"], a["kernel_layout"]) != ("NCHW", "OIHW"):
        return Decline(f"layout {a['data_layout']}/{a['kernel_layout']} is not NCHW/OIHW", at)
    if not w.qparams.per_tensor and w.qparams.axis != 0:
        return Decline(f"weight quantized along axis {w.qparams.axis}, not output channels", at)
    channels = _tvm.shape_of(w.operand)[0]
    bias = _conv_bias(ctx, m.bias_expr, x.qparams, w.qparams, channels, at, 4, out.qparams.dtype,
                      conv_ops.CONV2D)
    if isinstance(bias, Decline):
        return bias
    acc_dtype = _accumulator_of(bias if m.bias_expr is not None else None, x.qparams)
    why = conv_ops.CONV2D.accepts(
        x_dtype=x.qparams.dtype, out_dtype=out.qparams.dtype, accumulator=acc_dtype,
        rounding=ctx.rounding, zero_points=dict(w_zp=w.qparams.zero_point,
                                                out_zp=out.qparams.zero_point))
    if why is not None:
        return Decline(why, at)
    if out.qparams.dtype == "int32":
        if (why := _accumulator_output(out.qparams, x.qparams, w.qparams, at)) is not None:
            return why
        if not m.act.none:
            return Decline("activation on an int32 accumulator", at)
    return Conv(m, a, bias, acc_dtype)


def build_conv2d(ctx: Context, m: Conv):
    out, x, w, a = m.chain.out, m.chain.x, m.chain.w, m.attrs
    return conv_ops.conv2d(
        x.operand, w.operand, m.bias, x.qparams, w.qparams, out.qparams,
        strides=a["strides"], padding=a["padding"], dilation=a["dilation"], groups=a["groups"],
        act=m.chain.act.bounds(out.qparams) if out.qparams.dtype != "int32" else (-128, 127),
        rounding=ctx.rounding, source_dtype=x.source_dtype, accumulator=m.accumulator)


TRANSPOSE_LAYOUTS = {CONV2D_T: ("NCHW", "IOHW"), CONV1D_T: ("NCW", "IOW")}


def _transpose_weight_qparams(qp: QParams, groups: int) -> QParams | None:
    """Weight parameters of ``[C, O/G, k...]`` as one per output channel (``[O]``), or None when
    they vary along the input channels."""
    if qp.per_tensor:
        return qp
    if qp.axis != 1:
        return None
    return QParams.make(np.tile(qp.scale, groups), np.tile(qp.zero_point, groups), 1)


def conv_transpose_chain(ctx: Context, call: Any):
    return conv_chain(ctx, call, CONV2D_T, CONV1D_T)


@dataclass(frozen=True)
class ConvTranspose:
    chain: ConvChain
    one_d: bool  # conv1d_transpose, computed as a 2-D one over [N, C, 1, L]
    groups: int
    w_qp: QParams
    bias: np.ndarray
    geometry: dict


def conv_transpose_checks(ctx: Context, m: ConvChain):
    out, x, w, at, conv = m.out, m.x, m.w, m.at, m.conv
    if out.qparams.dtype != "int8":
        return Decline("transposed convolution to an int32 accumulator", at)
    op = _tvm.op_name(conv)
    assert op is not None  # the chain matched one of TRANSPOSE_LAYOUTS
    a = _tvm.attrs_dict(conv)
    layout = (a["data_layout"], a["kernel_layout"])
    if layout != TRANSPOSE_LAYOUTS[op] or a["out_layout"] != layout[0]:
        return Decline(f"layout {layout[0]}/{layout[1]}/{a['out_layout']} is not "
                       f"{'/'.join(TRANSPOSE_LAYOUTS[op])}", at)
    groups = int(a["groups"])
    w_qp = _transpose_weight_qparams(w.qparams, groups)
    if w_qp is None:
        return Decline(f"weight quantized along axis {w.qparams.axis}, not output channels", at)
    channels = _tvm.shape_of(w.operand)[1] * groups
    bias = _conv_bias(ctx, m.bias_expr, x.qparams, w_qp, channels, at,
                      len(_tvm.shape_of(conv)), out.qparams.dtype,
                      conv_transpose_ops.CONV2D_TRANSPOSE)
    if isinstance(bias, Decline):
        return bias
    geometry = dict(strides=a["strides"], padding=a["padding"],
                    output_padding=a["output_padding"], dilation=a["dilation"])
    one_d = op == CONV1D_T
    if one_d:
        if not (w_qp.per_tensor or _tvm.is_const(w.operand)):
            return Decline("1-D runtime weight with per-channel parameters", at)
        (s,), (p0, p1), (op_,), (d,) = (geometry[k] for k in
                                          ("strides", "padding", "output_padding", "dilation"))
        geometry = dict(strides=[1, s], padding=[0, p0, 0, p1], output_padding=[0, op_],
                        dilation=[1, d])
    return ConvTranspose(m, one_d, groups, w_qp, bias, geometry)


def build_conv_transpose(ctx: Context, m: ConvTranspose):
    out, x = m.chain.out, m.chain.x
    x_q, w_q = x.operand, m.chain.w.operand
    if m.one_d:
        x_q = ctx.emit(movement.reshape(x_q, _with_unit_height(_tvm.shape_of(x_q)), x.qparams))
        w_shape = _with_unit_height(_tvm.shape_of(w_q))
        w_q = _tvm.const(_tvm.const_value(w_q).reshape(w_shape)) if _tvm.is_const(w_q) \
            else ctx.emit(movement.reshape(w_q, w_shape, m.w_qp))
    result = conv_transpose_ops.conv2d_transpose(
        x_q, w_q, m.bias, x.qparams, m.w_qp, out.qparams, groups=m.groups,
        act=m.chain.act.bounds(out.qparams), rounding=ctx.rounding, **m.geometry)
    if m.one_d:
        return movement.reshape(ctx.emit(result), _tvm.shape_of(m.chain.conv), out.qparams)
    return result


def _with_unit_height(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:2], 1, shape[2])


def _swaps_last_two(axes: list[int] | None, rank: int) -> bool:
    if axes is None:
        return rank == 2
    return rank >= 2 and [int(a) % rank for a in axes] == [*range(rank - 2), rank - 1, rank - 2]


def _matmul_operand(ctx: Context, expr: Any, dtypes: tuple[str, ...] = INT8_OR_INT32):
    """``(dequantize, transposed)`` for ``dq(x)`` or ``permute_dims(dq(x))`` swapping the last
    two axes (a 2-D transpose, or K^T in batched attention)."""
    perm = ctx.call(expr, PERMUTE)
    if perm is not None and ctx.single_use(expr):
        rank = len(_tvm.shape_of(perm.args[0]))
        if _swaps_last_two(_tvm.attrs_dict(perm).get("axes"), rank):
            inner = dequantized(ctx, perm.args[0], dtypes)
            return (inner, True) if inner is not None else (None, False)
    return dequantized(ctx, expr, dtypes), False


def _per_column(qp: QParams, transposed: bool, rank: int) -> QParams | None:
    """B's parameters as per-column (last axis) after an optional swap of the last two axes,
    or None."""
    if qp.per_tensor:
        return qp
    axis = qp.axis
    assert axis is not None  # per-channel parameters have their axis (QParams.make)
    if transposed and axis >= rank - 2:
        axis = 2 * rank - 3 - axis
    return QParams(qp.scale, qp.zero_point, rank - 1, qp.dtype) if axis == rank - 1 else None


def _swap_last_two(ctx: Context, q: Any, qp: QParams) -> Any:
    """``q`` with its last two axes swapped: at rewrite time for a constant, else an int8
    ``transpose`` (data movement)."""
    if _tvm.is_const(q):
        return _tvm.const(np.ascontiguousarray(np.swapaxes(_tvm.const_value(q), -1, -2)))
    rank = len(_tvm.shape_of(q))
    return ctx.emit(movement.transpose(q, [*range(rank - 2), rank - 1, rank - 2], qp))


def _accumulation(ctx: Context, a: QdqCall, b: QdqCall) -> str:
    """How the profile sums this product: onnxruntime's x86 uint8 x int8 GEMM saturates pair
    sums to int16 on CPUs without VNNI, and ``session.x64quantprecision`` only avoids that for
    a constant B (converted to uint8 ahead of time)."""
    if (not _tvm.is_const(b.operand) and a.source_dtype == "uint8"
            and b.source_dtype == "int8"):
        return ctx.numerics.u8s8_runtime_b
    return "exact"


def _matmul_source_op(ctx: Context, b: Any) -> str:
    """Which TFLite kernel a matmul reproduces under the Q31 roundings: the frontend records
    it; otherwise a constant B is a fully connected layer's weight."""
    recorded = ctx.source_op()
    if recorded in ("FULLY_CONNECTED", "BATCH_MATMUL"):
        return recorded.lower()
    return "fully_connected" if _tvm.is_const(b) else "batch_matmul"


@dataclass(frozen=True)
class MatmulChain:
    """``q|astype(act(matmul(A, B) [* alpha] [+ bias]))``: the matmul call ``mm`` bound to
    ``at``."""

    out: QdqCall
    act: Activation
    mm: Any
    at: Any
    alpha: float
    bias_expr: Any


def matmul_chain(ctx: Context, call: Any):
    int16 = sixteen_bit(ctx)
    out = output(call, INT8_OR_INT32 + int16) or accumulator(call)
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
    if not (ctx.single_use(core) and ctx.single_use(y)):
        return Decline("the float result has other users", core)
    return MatmulChain(out, act, mm, core, alpha, bias_expr)


@dataclass(frozen=True)
class Matmul:
    chain: MatmulChain
    a: QdqCall
    a_t: bool  # A's last two axes swapped
    b: QdqCall
    b_t: bool
    b_qp: QParams  # B's parameters per tensor or per column (after the swap)
    bias: np.ndarray | None
    accumulator: str


def matmul_checks(ctx: Context, m: MatmulChain):
    int16 = sixteen_bit(ctx)
    out, at = m.out, m.at
    (a, a_t) = _matmul_operand(ctx, m.mm.args[0], INT8_OR_INT32 + int16)
    (b, b_t) = _matmul_operand(ctx, m.mm.args[1])
    if a is None or b is None:
        return Decline("an operand is not dequantized from int8", at)
    if (why := per_tensor_int8(a, "A", at, ("int8", *int16))) is not None:
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
    if len(b_shape) == 1 and not b_qp.per_tensor:
        return Decline("1-D B with per-column parameters", at)
    out_shape = _tvm.shape_of(m.mm)
    columns = 1 if len(b_shape) == 1 else b_shape[-2 if b_t else -1]
    bias = None
    if m.bias_expr is not None:
        acc_scale = product_scale(a.qparams.scale, b_qp.scale)
        if m.alpha != 1.0:
            acc_scale = (acc_scale * np.float32(m.alpha)).astype(np.float32)
        bias = _bias(ctx, m.bias_expr, acc_scale, columns, at, axis=len(out_shape) - 1,
                     out_rank=len(out_shape), canonical=matmul_ops.MATMUL,
                     float_bias=ctx.numerics.matmul_float_bias and out.qparams.dtype == "int8")
        if bias is None:
            return None  # add of a quantized tensor: the add rule folds it
        if isinstance(bias, Decline):
            return bias
    # TFLite's 16x8 FULLY_CONNECTED accumulates in int64 without a bias (measured: exact)
    acc_dtype = _accumulator_of(bias, a.qparams, none="int64")
    refusal = matmul_ops.MATMUL.accepts(
        a_dtype=a.qparams.dtype, out_dtype=out.qparams.dtype, accumulator=acc_dtype,
        rounding=ctx.rounding,
        zero_points=dict(b_zp=b_qp.zero_point, out_zp=out.qparams.zero_point))
    if refusal is not None:
        return Decline(refusal, at)
    if out.qparams.dtype == "int32":
        if (why := _accumulator_output(out.qparams, a.qparams, b_qp, at)) is not None:
            return why
        if not m.act.none or m.alpha != 1.0:
            return Decline("activation or alpha on an int32 accumulator", at)
        if len(a_shape) == 1 or len(b_shape) == 1:
            return Decline("1-D int32 matmul", at)
    return Matmul(m, a, a_t, b, b_t, b_qp, bias, acc_dtype)


def build_matmul(ctx: Context, m: Matmul):
    out, a, b, b_qp = m.chain.out, m.a, m.b, m.b_qp
    a_q, b_q = a.operand, b.operand
    a_shape, b_shape = _tvm.shape_of(a_q), _tvm.shape_of(b_q)
    if m.b_t:
        b_q = _swap_last_two(ctx, b_q, b_qp)
        b_shape = (*b_shape[:-2], b_shape[-1], b_shape[-2])
    if m.a_t:
        a_q = _swap_last_two(ctx, a_q, a.qparams)
        a_shape = (*a_shape[:-2], a_shape[-1], a_shape[-2])
    # 1-D operands: matmul of [1, K] / [K, 1] views, the unit axis dropped again at the end.
    if len(a_shape) == 1:
        a_q = ctx.emit(movement.reshape(a_q, (1, a_shape[0]), a.qparams))
    if len(b_shape) == 1:
        b_q = ctx.emit(movement.reshape(b_q, (b_shape[0], 1), b_qp)) if not _tvm.is_const(b_q) \
            else _tvm.const(_tvm.const_value(b_q).reshape(-1, 1))
    result = matmul_ops.matmul(
        a_q, b_q, m.bias, a.qparams, b_qp, out.qparams, alpha=m.chain.alpha,
        act=m.chain.act.bounds(out.qparams) if out.qparams.dtype != "int32" else (-128, 127),
        accumulate=_accumulation(ctx, a, b), rounding=ctx.rounding,
        source_op=_matmul_source_op(ctx, b.operand), accumulator=m.accumulator)
    if len(a_shape) == 1 or len(b_shape) == 1:
        return movement.reshape(ctx.emit(result), _tvm.shape_of(m.chain.mm), out.qparams)
    return result


RULES = (
    Rule("conv2d", QUANTIZE, (conv2d_chain, conv2d_checks), build_conv2d,
         "q(act(conv2d(dq x, dq w) + dq b)) -> canonqnn.conv2d", phase="compute",
         needs=(CONV2D,)),
    Rule("conv2d_transpose", QUANTIZE, (conv_transpose_chain, conv_transpose_checks),
         build_conv_transpose,
         "q(act(conv{1,2}d_transpose(dq x, dq w) + b)) -> canonqnn.conv2d_transpose",
         phase="compute", needs=(CONV2D_T, CONV1D_T)),
    Rule("matmul", QUANTIZE, (matmul_chain, matmul_checks), build_matmul,
         "q(act(matmul(dq a, dq b) * alpha + dq b)) -> canonqnn.matmul", phase="compute",
         needs=(MATMUL,)),
    Rule("conv2d_integer", ASTYPE, (conv2d_chain, conv2d_checks), build_conv2d,
         "astype(conv2d(dq x, dq w), int32) -> canonqnn.conv2d (int32 accumulator)",
         phase="compute", needs=(CONV2D,)),
    Rule("matmul_integer", ASTYPE, (matmul_chain, matmul_checks), build_matmul,
         "astype(matmul(dq a, dq b), int32) -> canonqnn.matmul (int32 accumulator)",
         phase="compute", needs=(MATMUL,)),
)
