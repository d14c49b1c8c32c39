"""Fold quantized elementwise selection.

    q([act](maximum|minimum(A, B)))   -> canonqnn.maximum | minimum   (nested ones flattened)
    q([act](where(cond, A, B)))        -> canonqnn.where

Operands are ``dq(int8)`` tensors or float constants. Quantization is monotone, so
``Q(max(u, v)) == max(Q(u), Q(v))`` and ``Q(where(c, u, v)) == where(c, Q(u), Q(v))``: a
constant becomes the int8 constant ``Q_out(c)`` in the output's parameters, and a scalar
constant of maximum/minimum is only a bound of the integer clamp (``max(x, 0)`` is a relu).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import select
from canonqnn.qdq import QUANTIZE, QdqCall
from canonqnn.qparams import QParams, quantize_value

from ._engine import Context, Decline, Rule
from ._match import Activation, QuantizedOp, dequantized, per_tensor_int8, quantized_op, requantized

EXTREMA = {"relax.maximum": (select.MAXIMUM, np.maximum),
           "relax.minimum": (select.MINIMUM, np.minimum)}
WHERE = "relax.where"


def _float_constant(ctx: Context, expr: Any) -> np.ndarray | None:
    value = ctx.value(expr)
    if _tvm.is_const(value) and _tvm.dtype_of(value).startswith("float"):
        return _tvm.const_value(value).astype(np.float32)
    return None


def quantized_constant(values: np.ndarray, qp: QParams) -> np.ndarray:
    """``Q(values)`` elementwise (ONNX QuantizeLinear), as an int8 array."""
    flat = [quantize_value(float(v), qp) for v in np.asarray(values, np.float32).reshape(-1)]
    return np.asarray(flat, np.int8).reshape(np.shape(values))


def _operand(ctx: Context, expr: Any, out_qp: QParams, at: Any, what: str):
    """``(int8 expr, qparams)`` for a dequantized operand or a float constant."""
    x = dequantized(ctx, expr)
    if x is not None:
        return per_tensor_int8(x, what, at) or (x.operand, x.qparams)
    c = _float_constant(ctx, expr)
    if c is None:
        return Decline(f"{what} is neither dequantized from int8 nor a constant", at)
    if np.isnan(c).any():
        return Decline(f"{what} holds NaN", at)
    return _tvm.const(quantized_constant(c, out_qp)), out_qp


# ---------------------------------------------------------------- maximum / minimum
def _leaves(ctx: Context, expr: Any, op: str) -> list[Any]:
    """Operands of a tree of single-use ``op`` calls: max(max(a, b), c) -> [a, b, c]."""
    value = ctx.call(expr, op)
    if value is None or not ctx.single_use(expr):
        return [expr]
    return _leaves(ctx, value.args[0], op) + _leaves(ctx, value.args[1], op)


def _clamp_with_scalar(op: str, q: int, bounds: tuple[int, int]) -> tuple[int, int]:
    """Bounds of clamp(max(x, c)) (or min) when clamp follows: the scalar raises the lower
    bound (lowers the upper one), never past the other bound."""
    lo, hi = bounds
    if op == "relax.maximum":
        return min(max(lo, q), hi), hi
    return lo, max(min(hi, q), lo)


@dataclass(frozen=True)
class Extremum:
    out: QdqCall
    canonical: Any
    tensors: list[tuple[Any, QParams]]  # (int8 expression, its parameters)
    bounds: tuple[int, int]


def extremum_chain(ctx: Context, call: Any):
    return quantized_op(ctx, call, *EXTREMA)


def extremum_operands(ctx: Context, m: QuantizedOp):
    out, y, inner = m.out, m.y, m.inner
    name = _tvm.op_name(inner)
    assert name is not None  # quantized_op matched one of EXTREMA
    canonical, np_fn = EXTREMA[name]
    tensors, scalars = [], []
    for i, leaf in enumerate(_leaves(ctx, inner.args[0], name) + _leaves(ctx, inner.args[1], name)):
        c = _float_constant(ctx, leaf)
        if c is not None and c.size == 1 and not np.isnan(c).any():
            scalars.append(c.reshape(()))
            continue
        parsed = _operand(ctx, leaf, out.qparams, y, f"operand {i}")
        if isinstance(parsed, Decline):
            return parsed
        tensors.append(parsed)
    bounds = m.act.bounds(out.qparams)
    if scalars:
        bounds = _clamp_with_scalar(name, quantize_value(float(np_fn.reduce(scalars)),
                                                         out.qparams), bounds)
    if not tensors:
        return Decline("every operand is a constant", y)
    shapes = [_tvm.shape_of(t) for t, _ in tensors]
    if tuple(np.broadcast_shapes(*shapes)) != tuple(_tvm.shape_of(inner)):
        return Decline("a scalar constant changes the output's rank", y)
    if len(tensors) > 1 and (why := canonical.accepts(
            rounding=ctx.rounding,
            same_params=all(qp.same_as(out.qparams) for _, qp in tensors))) is not None:
        return Decline(why, y)
    return Extremum(out, canonical, tensors, bounds)


def build_extremum(ctx: Context, m: Extremum):
    out = m.out
    if len(m.tensors) == 1:
        (x, qp), = m.tensors
        return requantized(ctx, x, qp, out.qparams, m.bounds)
    (acc, acc_qp), rest = m.tensors[0], m.tensors[1:]
    for i, (x, qp) in enumerate(rest):
        last = i == len(rest) - 1
        step = select.extremum(m.canonical, acc, x, acc_qp, qp, out.qparams,
                               m.bounds if last else Activation(rounding=ctx.rounding).bounds(
                                   out.qparams), rounding=ctx.rounding)
        acc, acc_qp = (step if last else ctx.emit(step)), out.qparams
    return acc


# ---------------------------------------------------------------- where
def ort_dummy_dq_value(value: np.float32, source_dtype: str) -> np.float32:
    """The real value onnxruntime's WhereDummyDq gives a scalar float branch of a QDQ Where
    (it adds a DequantizeLinear so that QLinearWhere can take the branch): the constant is
    stored as the extreme integer k of the type (zero point 0 for int8, 127 for uint8) with
    scale f32(v / k), and dequantized back as f32(k * scale), which may differ from v in the
    last bit."""
    if value == 0:
        return np.float32(0.0)
    if source_dtype == "uint8":
        k = np.float32(128 if value > 0 else -127)
    else:
        k = np.float32(127 if value > 0 else -128)
    return np.float32(k * np.float32(value / k))


def _where_branch(ctx: Context, expr: Any, other: Any, out, act: Activation, at, what: str):
    """A where branch as ``(int8 expr, qparams)``; a 0-d float constant facing a dequantized
    branch is read as onnxruntime reads it (``ort_dummy_dq_value``) when the model came from
    ONNX and the Where feeds its QuantizeLinear directly."""
    c = _float_constant(ctx, expr)
    facing = dequantized(ctx, other)
    if (c is None or c.ndim != 0 or np.isnan(c) or facing is None or ctx.source != "onnx"
            or not act.none):
        return _operand(ctx, expr, out.qparams, at, what)
    source = facing.source_dtype
    if source != ctx.source_dtype():  # onnxruntime skips the dummy DQ when types differ
        return _operand(ctx, expr, out.qparams, at, what)
    q = quantize_value(float(ort_dummy_dq_value(np.float32(c), source)), out.qparams)
    return _tvm.const(np.int8(q)), out.qparams


@dataclass(frozen=True)
class Where:
    out: QdqCall
    act: Activation
    cond: Any
    a: tuple[Any, QParams]
    b: tuple[Any, QParams]


def where_chain(ctx: Context, call: Any):
    return quantized_op(ctx, call, WHERE)


def where_branches(ctx: Context, m: QuantizedOp):
    cond, a_expr, b_expr = m.inner.args  # (Relax's where requires a bool condition)
    a = _where_branch(ctx, a_expr, b_expr, m.out, m.act, m.y, "X")
    b = _where_branch(ctx, b_expr, a_expr, m.out, m.act, m.y, "Y")
    for parsed in (a, b):
        if isinstance(parsed, Decline):
            return parsed
    return Where(m.out, m.act, cond, a, b)


def build_where(ctx: Context, m: Where):
    return select.where(m.cond, m.a[0], m.b[0], m.a[1], m.b[1], m.out.qparams,
                        m.act.bounds(m.out.qparams), rounding=ctx.rounding)


RULES = (
    Rule("extremum", QUANTIZE, (extremum_chain, extremum_operands), build_extremum,
         "q(act(maximum|minimum(A, B))) -> canonqnn.maximum | minimum",
         phase="elementwise_pool_movement"),
    Rule("where", QUANTIZE, (where_chain, where_branches), build_where,
         "q(act(where(cond, A, B))) -> canonqnn.where", phase="elementwise_pool_movement"),
)
