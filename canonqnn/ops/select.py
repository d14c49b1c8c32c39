"""Elementwise selection: ``maximum``, ``minimum``, ``where`` (int8 operands -> int8).

Each picks one of its operands per element, so the result is exact once both operands are
expressed in the output's parameters: quantization (division then round half to even) is
monotone, hence ``Q(max(dq a, dq b)) == max(Q(dq a), Q(dq b))``, and ``Q(dq a)`` is the
requantization ``requant_via_real`` (onnxruntime's DequantizeLinear then QuantizeLinear, and the
lookup tables of its QLinearWhere). An operand whose parameters equal the output's is used as
it is. A folded relu/clip is the integer clamp ``[act_min, act_max]`` after the selection.
Operands broadcast as in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx, topi
from ..qparams import INT8_MAX, INT8_MIN, QParams
from ._registry import CanonicalOp, Refusal, register
from ._requant import requant_via_real, te_requant_via_real

FAMILY = "select"
OPERAND_ATTRS = ("a_scale", "a_zp", "b_scale", "b_zp", "out_scale", "out_zp", "act_min",
                 "act_max", "rounding")


def _broadcast_type(call: Any, *tensors: Any) -> Any:
    shape = np.broadcast_shapes(*(_tvm.shape_of(t) for t in tensors))
    return _tvm.tensor_type(shape, "int8")


def _in_output_params(x, scale, zp, a: dict) -> np.ndarray:
    if (scale, zp) == (a["out_scale"], a["out_zp"]):
        return np.asarray(x)
    return requant_via_real(x, scale, zp, a["out_scale"], a["out_zp"])


def _clamp(y: np.ndarray, a: dict) -> np.ndarray:
    return np.clip(y, a["act_min"], a["act_max"]).astype(np.int8)


def _te_in_output_params(x, scale, zp, a: dict):
    if (scale, zp) == (a["out_scale"], a["out_zp"]):
        return x
    return te.compute(x.shape, lambda *i: te_requant_via_real(
        x(*i), scale, zp, a["out_scale"], a["out_zp"]), name="requantize")


def _te_clamp(y, a: dict):
    if (a["act_min"], a["act_max"]) == (INT8_MIN, INT8_MAX):
        return y
    lo, hi = tirx.const(a["act_min"], "int8"), tirx.const(a["act_max"], "int8")
    return te.compute(y.shape, lambda *i: te.max(te.min(y(*i), hi), lo), name="clamp")


# ---------------------------------------------------------------- maximum / minimum
def _int8_operands(dtypes, scales) -> Refusal | None:
    if any(d != "int8" for d in dtypes):
        return Refusal(f"operands of {', '.join(dtypes)} (int8)")
    if not all(s > 0 for s in scales):
        return Refusal(f"scales {list(scales)} (positive)")
    return None


def extremum_constraint(a_dtype: str = "int8", b_dtype: str = "int8", scales=(),
                        rounding: str = "rne_f32", same_params: bool = True) -> Refusal | None:
    """a, b int8 per tensor, numpy broadcasting; positive scales; under q31_double (TFLite,
    whose kernels compare stored values) a and b share the output's parameters (same_params),
    so nothing is rounded"""
    if (why := _int8_operands((a_dtype, b_dtype), scales)) is not None:
        return why
    if rounding != "rne_f32" and not same_params:
        return Refusal(f"operands with other parameters than the output's under {rounding} "
                       "(TFLite compares stored values; only rne_f32 requantizes operands)")
    return None


def _extremum(name: str, np_fn, topi_fn) -> CanonicalOp:
    def reference(a, b, **attrs):
        ra = _in_output_params(a, attrs["a_scale"], attrs["a_zp"], attrs)
        rb = _in_output_params(b, attrs["b_scale"], attrs["b_zp"], attrs)
        return _clamp(np_fn(ra, rb), attrs)

    def legalize(bb: Any, call: Any) -> Any:
        attrs = _tvm.attrs_dict(call)

        def compute(a, b):
            ra = _te_in_output_params(a, attrs["a_scale"], attrs["a_zp"], attrs)
            rb = _te_in_output_params(b, attrs["b_scale"], attrs["b_zp"], attrs)
            return _te_clamp(topi_fn(ra, rb), attrs)

        return bb.call_te(compute, *call.args, primfunc_name_hint=f"canonqnn_{name}")

    return register(CanonicalOp(
        name=name,
        summary=f"int8 elementwise {name} of two operands with their own parameters "
                "(each requantized to the output's first)",
        args=("a", "b"),
        attrs=OPERAND_ATTRS,
        infer=lambda call: _broadcast_type(call, *call.args),
        legalize=legalize,
        reference=reference,
        constraint=extremum_constraint,
        family=FAMILY,
        roundings=("rne_f32", "q31_double"),
    ))


MAXIMUM = _extremum("maximum", np.maximum, topi.maximum)
MINIMUM = _extremum("minimum", np.minimum, topi.minimum)


def _operand_attrs(a_qp: QParams, b_qp: QParams, out_qp: QParams, act, rounding) -> dict:
    return dict(a_scale=a_qp.scalar_scale, a_zp=a_qp.scalar_zp, b_scale=b_qp.scalar_scale,
                b_zp=b_qp.scalar_zp, out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp,
                act_min=int(act[0]), act_max=int(act[1]), rounding=rounding)


def extremum(op: CanonicalOp, a: Any, b: Any, a_qp: QParams, b_qp: QParams, out_qp: QParams,
             act: tuple[int, int] = (INT8_MIN, INT8_MAX), rounding: str = "rne_f32") -> Any:
    """``MAXIMUM`` or ``MINIMUM`` of ``a`` and ``b``."""
    op.require(a_dtype=_tvm.dtype_of(a), b_dtype=_tvm.dtype_of(b),
               scales=(a_qp.scalar_scale, b_qp.scalar_scale, out_qp.scalar_scale),
               rounding=rounding, same_params=a_qp.same_as(out_qp) and b_qp.same_as(out_qp))
    return op.call([a, b], _operand_attrs(a_qp, b_qp, out_qp, act, rounding))


# ---------------------------------------------------------------- where
def _where_reference(cond, a, b, **attrs):
    ra = _in_output_params(a, attrs["a_scale"], attrs["a_zp"], attrs)
    rb = _in_output_params(b, attrs["b_scale"], attrs["b_zp"], attrs)
    return _clamp(np.where(np.asarray(cond, bool), ra, rb), attrs)


def _where_legalize(bb: Any, call: Any) -> Any:
    attrs = _tvm.attrs_dict(call)

    def compute(cond, a, b):
        ra = _te_in_output_params(a, attrs["a_scale"], attrs["a_zp"], attrs)
        rb = _te_in_output_params(b, attrs["b_scale"], attrs["b_zp"], attrs)
        return _te_clamp(topi.where(cond, ra, rb), attrs)

    return bb.call_te(compute, *call.args, primfunc_name_hint="canonqnn_where")


def where_constraint(cond_dtype: str = "bool", a_dtype: str = "int8", b_dtype: str = "int8",
                     scales=(), shapes=()) -> Refusal | None:
    """cond bool (constant or not); a, b int8 per tensor, positive scales; numpy broadcasting
    of all three"""
    if cond_dtype != "bool":
        return Refusal(f"{cond_dtype} condition (bool)")
    if (why := _int8_operands((a_dtype, b_dtype), scales)) is not None:
        return why
    try:
        np.broadcast_shapes(*(tuple(s) for s in shapes))
    except ValueError:
        return Refusal(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
    return None


WHERE = register(CanonicalOp(
    name="where",
    summary="select between two int8 operands by a bool condition (each operand requantized "
            "to the output's parameters first)",
    args=("cond", "a", "b"),
    attrs=OPERAND_ATTRS,
    infer=lambda call: _broadcast_type(call, *call.args),
    legalize=_where_legalize,
    reference=_where_reference,
    constraint=where_constraint,
    family=FAMILY,
))


def where(cond: Any, a: Any, b: Any, a_qp: QParams, b_qp: QParams, out_qp: QParams,
          act: tuple[int, int] = (INT8_MIN, INT8_MAX), rounding: str = "rne_f32") -> Any:
    WHERE.require(cond_dtype=_tvm.dtype_of(cond), a_dtype=_tvm.dtype_of(a),
                  b_dtype=_tvm.dtype_of(b),
                  scales=(a_qp.scalar_scale, b_qp.scalar_scale, out_qp.scalar_scale),
                  shapes=[_tvm.shape_of(t) for t in (cond, a, b)])
    return WHERE.call([cond, a, b], _operand_attrs(a_qp, b_qp, out_qp, act, rounding))
