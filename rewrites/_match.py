"""Matching helpers shared by the rules: dequantized operands, activations, output params."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from canonqnn import _tvm
from canonqnn.ops import Q31_ROUNDINGS, lookup, movement
from canonqnn.qdq import DEQUANTIZE, QdqCall, read_dequantize, read_quantize
from canonqnn.qparams import (
    INT8_MAX,
    INT8_MIN,
    QParams,
    activation_bounds,
    activation_range,
    xnnpack_convert_multiplier,
)

from ._engine import Context, Decline

RELU, CLIP = "relax.nn.relu", "relax.clip"
INT8_OR_INT32 = ("int8", "int32")


def sixteen_bit(ctx: Context) -> tuple[str, ...]:
    """The int16 dtype where this run folds int16 chains (TFLite's 16x8 kernels, under the Q31
    roundings), else nothing: onnxruntime computes between 16-bit Q/DQ in float."""
    return ("int16",) if ctx.rounding in Q31_ROUNDINGS else ()


def dequantized(ctx: Context, expr: Any, dtypes: tuple[str, ...] = INT8_OR_INT32) \
        -> QdqCall | None:
    """``(int8 operand, qparams)`` when ``expr`` is bound to a dequantize of an int8 (or int32)
    tensor; ``dtypes`` widens that (``sixteen_bit``)."""
    call = ctx.call(expr, DEQUANTIZE)
    if call is None:
        return None
    parsed = read_dequantize(call)
    if parsed is None or parsed.qparams.dtype not in dtypes:
        return None
    return parsed


def output(call: Any, dtypes: tuple[str, ...] = INT8_OR_INT32) -> QdqCall | None:
    """The float operand and parameters of a per-tensor int8 (or int32) quantize root;
    ``dtypes`` widens that (``sixteen_bit``)."""
    parsed = read_quantize(call)
    if parsed is None or not parsed.qparams.per_tensor or parsed.qparams.dtype not in dtypes:
        return None
    return parsed


ASTYPE = "relax.astype"
ACCUMULATOR = QParams.make(1.0, 0, None, "int32")


def accumulator(call: Any) -> QdqCall | None:
    """``astype(y, "int32")`` of a float ``y``: the exact integer accumulator of a product of
    scale-1 dequantizes (ONNX ConvInteger / MatMulInteger), as an int32 quantize of scale 1
    would be (Relax's quantize has no int32 output)."""
    if _tvm.op_name(call) != ASTYPE or _tvm.dtype_of(call) != "int32":
        return None
    operand = call.args[0]
    if not _tvm.is_tensor(operand) or not _tvm.dtype_of(operand).startswith("float"):
        return None
    return QdqCall(operand, ACCUMULATOR)


@dataclass(frozen=True)
class Activation:
    """A float relu/clip chain stripped from below a quantize: real-valued bounds."""

    lo: float = -math.inf
    hi: float = math.inf
    rounding: str = "rne_f32"  # how the source runtime quantizes the bounds

    def bounds(self, out_qp: QParams) -> tuple[int, int]:
        return activation_bounds(self.lo if math.isfinite(self.lo) else None,
                                 self.hi if math.isfinite(self.hi) else None, out_qp,
                                 self.rounding)

    @property
    def none(self) -> bool:
        return self.lo == -math.inf and self.hi == math.inf


def strip_activation(ctx: Context, expr: Any) -> tuple[Any, Activation]:
    """Peel single-use relu/clip ops off ``expr``; returns what they applied to."""
    lo, hi = -math.inf, math.inf
    while ctx.single_use(expr):
        value = ctx.value(expr)
        name = _tvm.op_name(value)
        if name == RELU:
            lo = max(lo, 0.0)
        elif name == CLIP and _tvm.dtype_of(value.args[0]).startswith("float"):
            lo = max(lo, _tvm.scalar_arg(value.args[1]))
            hi = min(hi, _tvm.scalar_arg(value.args[2]))
        else:
            break
        expr = value.args[0]
    return expr, Activation(lo, hi, ctx.rounding)


def per_tensor_int8(parsed: QdqCall, what: str, at: Any,
                    dtypes: tuple[str, ...] = ("int8",)) -> Decline | None:
    """A Decline unless ``parsed`` is per tensor of one of ``dtypes`` (int8; ``sixteen_bit``
    adds int16, whose zero point must then be 0, as the canonical ops' 16x8 constraint says)."""
    qp = parsed.qparams
    if qp.dtype not in dtypes:
        return Decline(f"{what} is {qp.dtype}, not {' or '.join(dtypes)}", at)
    if qp.dtype == "int16" and qp.per_tensor and (why := movement.REQUANTIZE.accepts(
            x_dtype="int16", zero_points=(qp.scalar_zp,))) is not None:
        # (the 16x8 activation rule every int16 op shares: canonqnn.ops._dtypes)
        return Decline(f"{what} is int16 with zero point {qp.scalar_zp}: {why}", at)
    if not qp.per_tensor:
        return Decline(f"{what} is quantized per channel (axis {qp.axis}); per tensor required", at)
    return None


FULL_RANGE = (INT8_MIN, INT8_MAX)


def full_range(qp: QParams) -> tuple[int, int]:
    """The clamp that clamps nothing for a tensor of ``qp.dtype`` (int8 or int16)."""
    return activation_range(qp.dtype)


@dataclass(frozen=True)
class QuantizedOp:
    """``q([act](op(...)))``: the quantize's parsed output ``out``, the relu/clip bounds ``act``
    stripped from below it, the call ``inner`` to the op and the variable ``y`` bound to it
    (the float op a Decline names)."""

    out: QdqCall
    act: Activation
    inner: Any
    y: Any


def quantized_op(ctx: Context, call: Any, *ops: str, activation: bool = True,
                 dtypes: tuple[str, ...] = ("int8",)) -> QuantizedOp | Decline | None:
    """The chain ``q([act](op(...)))`` rooted at ``call``, for a per-tensor quantize to one of
    ``dtypes`` (relu/clip stripped when ``activation``); a Decline when the float result has
    other users; None when the pattern is not there."""
    out = output(call, dtypes)
    if out is None or out.qparams.dtype not in dtypes:
        return None
    y, act = strip_activation(ctx, out.operand) if activation else \
        (out.operand, Activation(rounding=ctx.rounding))
    inner = ctx.call(y, *ops)
    if inner is None:
        return None
    if not ctx.single_use(y):
        return Decline("the float result has other users", y)
    return QuantizedOp(out, act, inner, y)


@dataclass(frozen=True)
class UnaryChain:
    """``q([act](op(dq(x))))``: as ``QuantizedOp``, with the parsed input ``x``; ``at`` is the
    op's variable."""

    out: QdqCall
    act: Activation
    inner: Any
    x: QdqCall
    at: Any


def unary_chain(ctx: Context, call: Any, op: str, *, activation: bool,
                int16: bool = False) -> UnaryChain | Decline | None:
    """The chain ``q([act](op(dq(x))))`` with per-tensor int8 ``x``; a Decline when it is there
    but cannot fold; None when it is not there.

    ``activation`` allows a relu/clip between ``op`` and the quantize. ``int16``: ``op`` has a
    TFLite 16x8 kernel (data movement, MEAN), so int16 in and out is folded too where the run
    folds int16 (``sixteen_bit``); input and output then have the same dtype.
    """
    dtypes = ("int8", *sixteen_bit(ctx)) if int16 else ("int8",)
    m = quantized_op(ctx, call, op, activation=activation, dtypes=dtypes)
    if not isinstance(m, QuantizedOp):
        return m
    x = dequantized(ctx, m.inner.args[0], (*INT8_OR_INT32, *dtypes))
    if x is None:
        return Decline(f"input is not dequantized from {' or '.join(dtypes)}", m.y)
    if (why := per_tensor_int8(x, "input", m.y, (m.out.qparams.dtype,))) is not None:
        return why
    return UnaryChain(m.out, m.act, m.inner, x, m.y)


def unary_step(op: str, *, activation: bool = True, int16: bool = False,
               name: str | None = None) -> Callable[[Context, Any], Any]:
    """A rule's first step: ``unary_chain`` of ``op`` at the root call."""
    def step(ctx: Context, call: Any) -> UnaryChain | Decline | None:
        return unary_chain(ctx, call, op, activation=activation, int16=int16)
    step.__name__ = name or f"{op.rsplit('.', 1)[-1]}_chain"
    # (Rule.needs, read with getattr: no pattern where nothing calls ``op``)
    step.needs = (op,)  # type: ignore[attr-defined]  # an attribute of this function object
    return step


@dataclass(frozen=True)
class Moved:
    """A data-movement chain: the canonical op ``moved`` (not yet emitted) of the int8 input
    ``x``, then requantized to ``out`` and clamped to ``act`` (``requantized``)."""

    out: QdqCall
    act: Activation
    x: QdqCall
    moved: Any


def build_moved(ctx: Context, m: Moved) -> Any:
    return requantized(ctx, m.moved, m.x.qparams, m.out.qparams, m.act.bounds(m.out.qparams))


def requantized(ctx: Context, moved: Any, in_qp: QParams, out_qp: QParams,
                bounds: tuple[int, int] | None = None) -> Any:
    """``moved`` (int8 or int16, parameters ``in_qp``) re-expressed with ``out_qp`` (of the same
    dtype) and clamped to ``bounds`` (default: none): itself when that changes nothing."""
    bounds = full_range(out_qp) if bounds is None else bounds
    if in_qp.same_as(out_qp):
        if bounds == full_range(out_qp):
            return moved
        return movement.requantize(ctx.emit(moved), in_qp, out_qp, bounds, rounding=ctx.rounding)
    ctx.numerics.require("requantize", ("rounding",), "its requantization of int8 data")
    rounding = ctx.rounding
    if rounding == "xnnpack" and xnnpack_convert_multiplier(in_qp.scalar_scale,
                                                            out_qp.scalar_scale) is None:
        # XNNPACK makes no convert for this ratio: TFLite's delegate leaves the operator to the
        # built-in kernels
        rounding = ctx.undelegated().rounding
    return movement.requantize(ctx.emit(moved), in_qp, out_qp, bounds, rounding=rounding)


@dataclass(frozen=True)
class Refolded:
    """A canonical op called again with other arguments and attributes."""

    call: Any
    args: list[Any]
    attrs: dict


def build_refolded(ctx: Context, m: Refolded) -> Any:
    op = lookup(m.call)
    assert op is not None  # a refolded call is a canonical op's
    return op.call(m.args, m.attrs)
