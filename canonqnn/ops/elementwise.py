"""``canonqnn.add``, ``canonqnn.mul``, ``canonqnn.sub`` and ``canonqnn.squared_difference``:
int8 binary ops with numpy broadcasting.

Rounding ``rne_f32`` reproduces onnxruntime's QLinearAdd (x86 AVX2/FMA kernel) and QLinearMul
(SSE2 kernel) exactly. Their float arithmetic runs on the *stored* integers, so it depends on
whether the source tensors were uint8: ``source_dtype="uint8"`` makes the op compute on
``q + 128`` with zero points ``+ 128`` (the values onnxruntime's uint8 kernels see) and shift
the result back; the real values are the same either way, only ties can round differently.

add (o = 128 for uint8 sources, else 0; A = a + o, ZA = a_zp + o, ...):
    rA = f32(a_scale / out_scale),  rB = f32(b_scale / out_scale)
    fixed = f32(f32(ZC) - fma(rA, ZA, f32(rB * ZB)))
    t = fma(A, rA, fma(B, rB, fixed))      (fma(B, rB, fma(A, rA, fixed)) when ``a`` is the
                                             operand broadcast along the innermost moving axis)
    y = clamp(RNE(t), act_min + o, act_max + o) - o
mul:
    ratio = f32(f32(a_scale * b_scale) / out_scale)
    t = f32(f32(f32((a - a_zp) * (b - b_zp)) * ratio) + f32(ZC))
    y = clamp(RNE(t), act_min + o, act_max + o) - o

sub (onnxruntime has no quantized Sub: DequantizeLinear, float Sub, QuantizeLinear; the real
values do not depend on the stored dtype, so there is no source_dtype):
    d = f32(f32(f32(a - a_zp) * a_scale) - f32(f32(b - b_zp) * b_scale))
    y = clamp(RNE(f32(d / out_scale)), act_min - out_zp, act_max - out_zp) + out_zp

Rounding ``xnnpack`` reproduces XNNPACK's qs8 add and mul (each measured bit-exact on every
pair of int8 inputs); the stored dtype does not matter:
    add: integer multipliers from ``qparams.xnnpack_add_multipliers``,
         acc = (a - a_zp) * mA + (b - b_zp) * mB + 2^(shift - 1)     (exact in int32)
         y = clamp((acc >> shift) + out_zp, act_min, act_max)          (one rounding, ties up)
    sub: the add with mB negated (XNNPACK's subtract is its add with b's scale negated)
    mul: ratio as for rne_f32,
         y = clamp(RNE(f32(f32((a - a_zp) * (b - b_zp)) * ratio)) + out_zp, act_min, act_max)
         (the zero point added after rounding, where rne_f32 adds it before)

Roundings ``q31_double`` / ``q31_single`` reproduce the TFLite interpreter's reference kernels
(ADD, SUB, MUL; int8 and uint8 compute the same integers after the shift by 128, so
``source_dtype`` does not matter there). MBQM = MultiplyByQuantizedMultiplier
(canonqnn/numerics/q31.py) with the op's rounding; multipliers from
``qparams.tflite_add_multipliers`` / ``tflite_mul_multiplier``:
    add/sub: A = MBQM((a - a_zp) * 2^20, mA, sA),  B = MBQM((b - b_zp) * 2^20, mB, sB)
             y = clamp(MBQM(A +/- B, mO, sO) + out_zp, act_min, act_max)
    add also takes TFLite's 16x8 int16 ADD (general scales: ``pot_scale_int16`` false, or a
    scale that is not a power of two): int16 in and out, zero points 0, 2^15 for 2^20.
    mul:     y = clamp(MBQM((a - a_zp) * (b - b_zp), m, s) + out_zp, act_min, act_max)

squared_difference exists in rounding ``q31_double`` only: it is TFLite's int8
SQUARED_DIFFERENCE kernel (reference and optimized alike), multipliers from
``qparams.tflite_squared_difference_multipliers``:
    A = MBQM((a - a_zp) * 2^7, mA, sA),  B = MBQM((b - b_zp) * 2^7, mB, sB)
    y = clamp(MBQM((A - B)^2, mO, sO) + out_zp, act_min, act_max)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..errors import InvalidQuantizationError
from ..numerics.arithmetic import fma_f32, shift_right_round_half_up
from ..numerics.q31 import Q31_ROUNDINGS, multiply_by_quantized_multiplier, requant_q31
from ..qparams import (
    TFLITE_ADD_LEFT_SHIFT,
    TFLITE_ADD_LEFT_SHIFT_INT16,
    TFLITE_SQUARED_DIFFERENCE_LEFT_SHIFT,
    QParams,
    tflite_add_multipliers,
    tflite_mul_multiplier,
    tflite_squared_difference_multipliers,
    xnnpack_add_multipliers,
)
from . import _mlas_neon as mlas_neon
from ._arithmetic import te_fma
from ._dtypes import sixteen_by_eight
from ._q31 import te_multiply_by_quantized_multiplier, te_requant_q31
from ._registry import CanonicalOp, Refusal, UnsupportedRounding, register
from ._requant import requant_accumulator, te_no_contract, te_requant_accumulator

ATTRS = ("a_scale", "a_zp", "b_scale", "b_zp", "out_scale", "out_zp", "act_min", "act_max",
         "rounding", "source_dtype")
F32 = np.float32


def storage_offset(source_dtype: str) -> int:
    return 128 if source_dtype == "uint8" else 0


def a_is_span_scalar(a_shape, b_shape) -> bool:
    """Whether onnxruntime's broadcaster feeds ``a`` as the scalar of each inner span."""
    nd = max(len(a_shape), len(b_shape))
    a = (1,) * (nd - len(a_shape)) + tuple(a_shape)
    b = (1,) * (nd - len(b_shape)) + tuple(b_shape)
    if int(np.prod(a)) == 1 and int(np.prod(b)) > 1:
        return True
    for da, db in zip(reversed(a), reversed(b)):
        if max(da, db) > 1:
            return da == 1 and db > 1
    return False


def _f(value: float | np.float32):
    return tirx.const(float(value), "float32")


def _out_shape(call: Any) -> Any:
    shape = np.broadcast_shapes(_tvm.shape_of(call.args[0]), _tvm.shape_of(call.args[1]))
    return _tvm.tensor_type(shape, "int8")


def _add_out_shape(call: Any) -> Any:
    """add's result has its inputs' dtype: int8, or int16 (TFLite 16x8)."""
    shape = np.broadcast_shapes(_tvm.shape_of(call.args[0]), _tvm.shape_of(call.args[1]))
    return _tvm.tensor_type(shape, _tvm.dtype_of(call.args[0]))


def _add_left_shift(dtype: str) -> int:
    return TFLITE_ADD_LEFT_SHIFT_INT16 if dtype == "int16" else TFLITE_ADD_LEFT_SHIFT


def _add_constants(a: dict) -> tuple[np.float32, np.float32, np.float32]:
    o = storage_offset(a["source_dtype"])
    ra = F32(F32(a["a_scale"]) / F32(a["out_scale"]))
    rb = F32(F32(a["b_scale"]) / F32(a["out_scale"]))
    fixed = F32(F32(a["out_zp"] + o)
                - fma_f32(ra, F32(a["a_zp"] + o), F32(rb * F32(a["b_zp"] + o))))
    return ra, rb, fixed


def add_reference(x, y, **a) -> np.ndarray:
    if a["rounding"] in Q31_ROUNDINGS:
        return _add_sub_q31_reference(x, y, 1, a)
    if a["rounding"] == "xnnpack":
        return _add_sub_xnnpack_reference(x, y, 1, a)
    o = storage_offset(a["source_dtype"])
    if a["rounding"] == "mlas_neon":
        return mlas_neon.add_reference(x, y, a, o, not a_is_span_scalar(x.shape, y.shape))
    ra, rb, fixed = _add_constants(a)
    xf, yf = (x.astype(np.int32) + o).astype(F32), (y.astype(np.int32) + o).astype(F32)
    if a_is_span_scalar(x.shape, y.shape):
        t = fma_f32(yf, rb, fma_f32(xf, ra, fixed))
    else:
        t = fma_f32(xf, ra, fma_f32(yf, rb, fixed))
    return _round_clamp(t, a, o)


def _add_sub_xnnpack_reference(x, y, sign: int, a: dict) -> np.ndarray:
    """XNNPACK's add (``sign`` 1) and subtract (-1: the add with b's multiplier negated)."""
    ma, mb, shift = xnnpack_add_multipliers(a["a_scale"], a["b_scale"], a["out_scale"])
    acc = (x.astype(np.int64) - a["a_zp"]) * ma + (y.astype(np.int64) - a["b_zp"]) * sign * mb
    out = shift_right_round_half_up(acc, shift) + a["out_zp"]
    return np.clip(out, a["act_min"], a["act_max"]).astype(np.int8)


def _round_clamp(t: np.ndarray, a: dict, o: int) -> np.ndarray:
    t = np.clip(t, F32(a["act_min"] + o), F32(a["act_max"] + o))
    return (np.rint(t).astype(np.int32) - o).astype(np.int8)


def _te_round_clamp(t, a: dict, o: int):
    t = te.max(te.min(t, _f(a["act_max"] + o)), _f(a["act_min"] + o))
    return (tirx.round(t).astype("int32") - o).astype("int8")


def _broadcast_compute(name: str, elem):
    """A TE broadcast of ``elem(x_value, y_value)`` over two int8 tensors."""

    def compute(x, y):
        shape = [int(d) for d in np.broadcast_shapes(tuple(int(d) for d in x.shape),
                                                     tuple(int(d) for d in y.shape))]

        def index(t, idx):
            off = len(idx) - len(t.shape)
            return t(*[0 if int(t.shape[i]) == 1 else idx[off + i] for i in range(len(t.shape))])

        return te.compute(shape, lambda *idx: elem(index(x, idx), index(y, idx)), name=name)

    return compute


def _add_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if a["rounding"] in Q31_ROUNDINGS:
        return _add_sub_q31_legalize(bb, call, 1, "add")
    if a["rounding"] == "xnnpack":
        return _add_sub_xnnpack_legalize(bb, call, 1, a)
    o = storage_offset(a["source_dtype"])
    ra, rb, fixed = (_f(v) for v in _add_constants(a))
    a_first = not a_is_span_scalar(_tvm.shape_of(call.args[0]), _tvm.shape_of(call.args[1]))
    if a["rounding"] == "mlas_neon":
        return bb.call_te(_broadcast_compute("add", mlas_neon.te_add(a, o, a_first)),
                          call.args[0], call.args[1], primfunc_name_hint="canonqnn_add")

    def elem(xv, yv):
        xf = (xv.astype("int32") + o).astype("float32")
        yf = (yv.astype("int32") + o).astype("float32")
        if a_first:
            t = te_fma(xf, ra, te_fma(yf, rb, fixed))
        else:
            t = te_fma(yf, rb, te_fma(xf, ra, fixed))
        return _te_round_clamp(t, a, o)

    return bb.call_te(_broadcast_compute("add", elem), call.args[0], call.args[1],
                      primfunc_name_hint="canonqnn_add")


def _add_sub_xnnpack_legalize(bb: Any, call: Any, sign: int, a: dict) -> Any:
    ma, mb, shift = xnnpack_add_multipliers(a["a_scale"], a["b_scale"], a["out_scale"])
    mb *= sign
    name = "add" if sign == 1 else "sub"
    # te_shift_right_round_half_up with its rounding constant and both zero points folded into
    # one int32 constant (|acc| < 2^31: qparams)
    fixed = (1 << (shift - 1)) - ma * a["a_zp"] - mb * a["b_zp"]

    def elem(xv, yv):
        acc = xv.astype("int32") * _i32(ma) + yv.astype("int32") * _i32(mb) + _i32(fixed)
        y = (acc >> _i32(shift)) + _i32(a["out_zp"])
        return te.max(te.min(y, _i32(a["act_max"])), _i32(a["act_min"])).astype("int8")

    return bb.call_te(_broadcast_compute(name, elem), call.args[0], call.args[1],
                      primfunc_name_hint=f"canonqnn_{name}")


def _mul_ratio(a: dict) -> np.float32:
    return F32(F32(F32(a["a_scale"]) * F32(a["b_scale"])) / F32(a["out_scale"]))


def mul_reference(x, y, **a) -> np.ndarray:
    if a["rounding"] in Q31_ROUNDINGS:
        m, shift = _mul_q31_multiplier(a)
        acc = (x.astype(np.int64) - a["a_zp"]) * (y.astype(np.int64) - a["b_zp"])
        return requant_q31(acc, m, shift, a["out_zp"], a["act_min"], a["act_max"],
                           a["rounding"])
    o = storage_offset(a["source_dtype"])
    if a["rounding"] == "mlas_neon":
        return mlas_neon.mul_reference(x, y, a, o, _mul_ratio(a))
    p = (x.astype(np.int32) - a["a_zp"]) * (y.astype(np.int32) - a["b_zp"])
    if a["rounding"] == "xnnpack":
        r = np.rint((p.astype(F32) * _mul_ratio(a)).astype(F32)).astype(np.int64) + a["out_zp"]
        return np.clip(r, a["act_min"], a["act_max"]).astype(np.int8)
    t = ((p.astype(F32) * _mul_ratio(a)).astype(F32) + F32(a["out_zp"] + o)).astype(F32)
    return _round_clamp(t, a, o)


def _mul_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if a["rounding"] in Q31_ROUNDINGS:
        return _mul_q31_legalize(bb, call)
    o = storage_offset(a["source_dtype"])
    if a["rounding"] == "mlas_neon":
        return bb.call_te(_broadcast_compute("mul", mlas_neon.te_mul(a, o, _mul_ratio(a))),
                          call.args[0], call.args[1], primfunc_name_hint="canonqnn_mul")
    ratio = _f(_mul_ratio(a))

    def elem(xv, yv):
        p = (xv.astype("int32") - a["a_zp"]) * (yv.astype("int32") - a["b_zp"])
        if a["rounding"] == "xnnpack":
            r = tirx.round(p.astype("float32") * ratio).astype("int32") + _i32(a["out_zp"])
            return te.max(te.min(r, _i32(a["act_max"])), _i32(a["act_min"])).astype("int8")
        # f32(p * ratio) is rounded before the add (ORT's SSE2 kernel has no FMA)
        return _te_round_clamp(te_no_contract(p.astype("float32") * ratio)
                               + _f(a["out_zp"] + o), a, o)

    return bb.call_te(_broadcast_compute("mul", elem), call.args[0], call.args[1],
                      primfunc_name_hint="canonqnn_mul")


INT16_ADD_ONLY = "int16 operands are TFLite's 16x8 ADD only, both int16"


def _add_scales(scales, rounding: str | None, left_shift: int) -> Refusal | None:
    """The (a_scale, b_scale, out_scale) TFLite's ADD/SUB (q31) and XNNPACK's add take."""
    if scales is None:
        return None
    a_scale, b_scale, out_scale = scales
    if rounding in Q31_ROUNDINGS:
        mults = tflite_add_multipliers(a_scale, b_scale, out_scale,
                                       single_rounding=rounding == "q31_single",
                                       left_shift=left_shift)
        if mults[2][1] > 0:
            # TFLite aborts (QuantizeMultiplierSmallerThanOneExp): no result to reproduce
            return Refusal(f"TFLite's ADD/SUB needs 2 * max(a_scale, b_scale) < 2^{left_shift} "
                           f"* out_scale; got a_scale {a_scale!r}, b_scale {b_scale!r}, "
                           f"out_scale {out_scale!r}", UnsupportedRounding)
    if rounding == "xnnpack":
        try:
            xnnpack_add_multipliers(a_scale, b_scale, out_scale)
        except InvalidQuantizationError as exc:
            return Refusal(str(exc), UnsupportedRounding)
    return None


def add_constraint(a_dtype: str = "int8", b_dtype: str = "int8", out_dtype: str = "int8",
                   rounding: str | None = None,
                   zero_points: dict[str, object] | None = None, scales=None) -> Refusal | None:
    """a, b int8 per tensor, numpy-broadcastable; q31: 2 * max(a_scale, b_scale) < 2^20 *
    out_scale (as TFLite; scales = (a_scale, b_scale, out_scale)); q31 only: a, b int16 (TFLite
    16x8 ADD, general scales, zero points 0), 2^15 for 2^20; xnnpack: max(a_scale, b_scale) /
    out_scale in [2^-10, 2^8) (as XNNPACK)"""
    if "int16" in (a_dtype, b_dtype, out_dtype):
        if b_dtype != a_dtype:
            return Refusal(INT16_ADD_ONLY)
        if (why := sixteen_by_eight(a_dtype, out_dtype, "int32", rounding, zero_points)):
            return why
    elif a_dtype != "int8" or b_dtype != "int8":
        return Refusal(f"{a_dtype} and {b_dtype} operands (int8)")
    return _add_scales(scales, rounding, _add_left_shift(a_dtype))


ADD = register(CanonicalOp(
    name="add",
    summary="int8 + int8 -> int8 with broadcasting (rne_f32: onnxruntime QLinearAdd "
            "arithmetic; mlas_neon: its AArch64 kernel; q31: TFLite ADD; xnnpack: XNNPACK's "
            "add)",
    args=("a", "b"), attrs=ATTRS, infer=_add_out_shape, legalize=_add_legalize,
    reference=add_reference,
    constraint=add_constraint,
    family="elementwise",
    roundings=("rne_f32", "mlas_neon", "xnnpack") + Q31_ROUNDINGS,
    absorbs_clamp=True,
    absorbs_table=True,
))


def mul_constraint(a_dtype: str = "int8", b_dtype: str = "int8", out_dtype: str = "int8",
                   rounding: str | None = None,
                   zero_points: dict[str, object] | None = None) -> Refusal | None:
    """a, b int8 per tensor, numpy-broadcastable (int16 operands: TFLite's 16x8 ADD only, no
    MUL)"""
    return Refusal(INT16_ADD_ONLY) if "int16" in (a_dtype, b_dtype, out_dtype) else None


MUL = register(CanonicalOp(
    name="mul",
    summary="int8 * int8 -> int8 with broadcasting (rne_f32: onnxruntime QLinearMul "
            "arithmetic; mlas_neon: its AArch64 kernel; q31: TFLite MUL; xnnpack: XNNPACK's "
            "mul)",
    args=("a", "b"), attrs=ATTRS, infer=_out_shape, legalize=_mul_legalize,
    reference=mul_reference,
    constraint=mul_constraint,
    family="elementwise",
    roundings=("rne_f32", "mlas_neon", "xnnpack") + Q31_ROUNDINGS,
    absorbs_clamp=True,
    absorbs_table=True,
))

# ---------------------------------------------------------------- sub
SUB_ATTRS = ("a_scale", "a_zp", "b_scale", "b_zp", "out_scale", "out_zp", "act_min", "act_max",
             "rounding")


def _real(q, scale: float, zp: int) -> np.ndarray:
    """DequantizeLinear: ``f32(f32(q - zp) * scale)``."""
    return ((q.astype(np.int32) - zp).astype(F32) * F32(scale)).astype(F32)


def sub_reference(x, y, **a) -> np.ndarray:
    if a["rounding"] in Q31_ROUNDINGS:
        return _add_sub_q31_reference(x, y, -1, a)
    if a["rounding"] == "xnnpack":
        return _add_sub_xnnpack_reference(x, y, -1, a)
    d = (_real(x, a["a_scale"], a["a_zp"]) - _real(y, a["b_scale"], a["b_zp"])).astype(F32)
    # QuantizeLinear divides; requant_accumulator's multiply by 1 keeps that quotient exact
    v = (d / F32(a["out_scale"])).astype(F32)
    return requant_accumulator(v, F32(1.0), a["out_zp"], a["act_min"], a["act_max"])


def _sub_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if a["rounding"] in Q31_ROUNDINGS:
        return _add_sub_q31_legalize(bb, call, -1, "sub")
    if a["rounding"] == "xnnpack":
        return _add_sub_xnnpack_legalize(bb, call, -1, a)

    def real(v, scale, zp):
        # fenced: LLVM would otherwise fuse one product into the subtraction (an FMA)
        return te_no_contract((v.astype("int32") - zp).astype("float32") * _f(scale))

    def elem(xv, yv):
        d = real(xv, a["a_scale"], a["a_zp"]) - real(yv, a["b_scale"], a["b_zp"])
        return te_requant_accumulator(d / _f(a["out_scale"]), _f(1.0), a["out_zp"],
                                      a["act_min"], a["act_max"])

    return bb.call_te(_broadcast_compute("sub", elem), call.args[0], call.args[1],
                      primfunc_name_hint="canonqnn_sub")


def sub_constraint(a_dtype: str = "int8", b_dtype: str = "int8", out_dtype: str = "int8",
                   rounding: str | None = None, scales=None) -> Refusal | None:
    """a, b int8 per tensor, numpy-broadcastable, int8 out; q31: 2 * max(a_scale, b_scale) <
    2^20 * out_scale (as TFLite; scales = (a_scale, b_scale, out_scale)); xnnpack: as add"""
    if (a_dtype, b_dtype, out_dtype) != ("int8", "int8", "int8"):
        return Refusal(f"{a_dtype} - {b_dtype} -> {out_dtype} (int8 only: TFLite's int16 SUB "
                       "is not implemented)")
    return _add_scales(scales, rounding if rounding in (*Q31_ROUNDINGS, "xnnpack") else None,
                       TFLITE_ADD_LEFT_SHIFT)


SUB = register(CanonicalOp(
    name="sub",
    summary="int8 - int8 -> int8 with broadcasting (rne_f32: onnxruntime's dequantize, float "
            "Sub, quantize; q31: TFLite SUB; xnnpack: XNNPACK's add, b's multiplier negated)",
    args=("a", "b"), attrs=SUB_ATTRS, infer=_out_shape, legalize=_sub_legalize,
    reference=sub_reference,
    constraint=sub_constraint,
    family="elementwise",
    roundings=("rne_f32", "xnnpack") + Q31_ROUNDINGS,
    absorbs_clamp=True,
    absorbs_table=True,
))


def _binary_attrs(a_qp: QParams, b_qp: QParams, out_qp: QParams, act, rounding: str) -> dict:
    """The attributes every binary op shares (``SUB_ATTRS``)."""
    return dict(
        a_scale=a_qp.scalar_scale, a_zp=a_qp.scalar_zp, b_scale=b_qp.scalar_scale,
        b_zp=b_qp.scalar_zp, out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp,
        act_min=int(act[0]), act_max=int(act[1]), rounding=rounding)


def sub(a_q: Any, b_q: Any, a_qp: QParams, b_qp: QParams, out_qp: QParams, *,
        act=(-128, 127), rounding: str = "rne_f32") -> Any:
    """Build ``canonqnn.sub`` (a - b)."""
    attrs = _binary_attrs(a_qp, b_qp, out_qp, act, rounding)
    SUB.require(a_dtype=_tvm.dtype_of(a_q), b_dtype=_tvm.dtype_of(b_q), out_dtype=out_qp.dtype,
                rounding=rounding, scales=(a_qp.scalar_scale, b_qp.scalar_scale,
                                           out_qp.scalar_scale))
    return SUB.call([a_q, b_q], attrs)


def binary(op: CanonicalOp, a_q: Any, b_q: Any, a_qp: QParams, b_qp: QParams, out_qp: QParams,
           *, act=(-128, 127), source_dtype: str = "int8", rounding: str = "rne_f32") -> Any:
    """Build ``canonqnn.add`` / ``canonqnn.mul``."""
    attrs = dict(_binary_attrs(a_qp, b_qp, out_qp, act, rounding), source_dtype=source_dtype)
    dtype = _tvm.dtype_of(a_q)
    op.require(a_dtype=dtype, b_dtype=_tvm.dtype_of(b_q), out_dtype=out_qp.dtype,
               rounding=rounding,
               zero_points=dict(a_zp=a_qp.scalar_zp, b_zp=b_qp.scalar_zp, out_zp=out_qp.scalar_zp),
               **({"scales": (a_qp.scalar_scale, b_qp.scalar_scale, out_qp.scalar_scale)}
                  if op is ADD else {}))
    return op.call([a_q, b_q], attrs)


# ---------------------------------------------------------------- q31 roundings (TFLite)
def _add_q31_multipliers(a: dict, left_shift: int = TFLITE_ADD_LEFT_SHIFT) \
        -> list[tuple[int, int]]:
    """Input a, input b and output (multiplier, shift) of TFLite's 8-bit ADD/SUB (int16 ADD:
    ``left_shift`` 15)."""
    scales = (a["a_scale"], a["b_scale"], a["out_scale"])
    if (why := _add_scales(scales, a["rounding"], left_shift)) is not None:
        raise why.error(str(why))
    return tflite_add_multipliers(*scales, single_rounding=a["rounding"] == "q31_single",
                                  left_shift=left_shift)


def _add_sub_q31_reference(x, y, sign: int, a: dict) -> np.ndarray:
    left_shift = _add_left_shift(str(x.dtype))
    return _scaled_pair_q31_reference(x, y, a, left_shift, _add_q31_multipliers(a, left_shift),
                                      lambda xs, ys: xs + sign * ys, str(x.dtype))


def _scaled_pair_q31_reference(x, y, a: dict, left_shift: int, multipliers, combine,
                               out_dtype: str = "int8") -> np.ndarray:
    """TFLite's two-input 8-bit kernels (and int16 ADD): each input
    ``MBQM((q - zp) * 2^left_shift)`` to one scale, ``combine`` the two int32 values,
    requantize with the output multiplier."""
    (ma, sa), (mb, sb), (mo, so) = multipliers
    r = a["rounding"]
    xs = multiply_by_quantized_multiplier(
        (x.astype(np.int64) - a["a_zp"]) << left_shift, ma, sa, r)
    ys = multiply_by_quantized_multiplier(
        (y.astype(np.int64) - a["b_zp"]) << left_shift, mb, sb, r)
    return requant_q31(combine(xs, ys), mo, so, a["out_zp"], a["act_min"], a["act_max"], r,
                       out_dtype)


def _i32(value: int):
    return tirx.const(int(value), "int32")


def _add_sub_q31_legalize(bb: Any, call: Any, sign: int, name: str) -> Any:
    a = _tvm.attrs_dict(call)
    left_shift = _add_left_shift(_tvm.dtype_of(call.args[0]))
    return _scaled_pair_q31_legalize(bb, call, name, left_shift,
                                     _add_q31_multipliers(a, left_shift),
                                     lambda xs, ys: xs + ys if sign > 0 else xs - ys)


def _scaled_pair_q31_legalize(bb: Any, call: Any, name: str, left_shift: int, multipliers,
                              combine) -> Any:
    """TE form of ``_scaled_pair_q31_reference`` (``combine`` on int32 TE values)."""
    a = _tvm.attrs_dict(call)
    (ma, sa), (mb, sb), (mo, so) = multipliers
    r, up = a["rounding"], _i32(1 << left_shift)

    def scaled(t, zp, m, shift, tag):
        # each input is scaled on its own shape, in its own stage: nesting the three MBQM
        # expressions in one stage makes TVM's simplifier run for minutes
        return te.compute(t.shape, lambda *i: te_multiply_by_quantized_multiplier(
            (t(*i).astype("int32") - _i32(zp)) * up, _i32(m), _i32(shift), r), name=tag)

    def out(xs, ys):
        return te_requant_q31(combine(xs, ys), _i32(mo), _i32(so), a["out_zp"], a["act_min"],
                              a["act_max"], r, _tvm.dtype_of(call.args[0]))

    def compute(x, y):
        return _broadcast_compute(name, out)(scaled(x, a["a_zp"], ma, sa, "scaled_a"),
                                             scaled(y, a["b_zp"], mb, sb, "scaled_b"))

    return bb.call_te(compute, call.args[0], call.args[1], primfunc_name_hint=f"canonqnn_{name}")


def _mul_q31_multiplier(a: dict) -> tuple[int, int]:
    return tflite_mul_multiplier(a["a_scale"], a["b_scale"], a["out_scale"],
                                 single_rounding=a["rounding"] == "q31_single")


def _mul_q31_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    m, shift = _mul_q31_multiplier(a)

    def elem(xv, yv):
        acc = (xv.astype("int32") - _i32(a["a_zp"])) * (yv.astype("int32") - _i32(a["b_zp"]))
        return te_requant_q31(acc, _i32(m), _i32(shift), a["out_zp"], a["act_min"],
                              a["act_max"], a["rounding"])

    return bb.call_te(_broadcast_compute("mul", elem), call.args[0], call.args[1],
                      primfunc_name_hint="canonqnn_mul")


# ---------------------------------------------------------------- squared_difference (TFLite)
def _squared_difference_multipliers(a: dict) -> list[tuple[int, int]]:
    """Input a, input b and output (multiplier, shift) of TFLite's int8 SQUARED_DIFFERENCE."""
    scales = (a["a_scale"], a["b_scale"], a["out_scale"])
    SQUARED_DIFFERENCE.require(rounding=a["rounding"], scales=scales)
    return tflite_squared_difference_multipliers(*scales)


def _square_of_difference(xs, ys):
    # |xs|, |ys| <= 255 * 2^7 / 2, so (xs - ys)^2 < 2^30: int32 as in TFLite, no wrap
    d = xs - ys
    return d * d


def squared_difference_reference(x, y, **a) -> np.ndarray:
    return _scaled_pair_q31_reference(x, y, a, TFLITE_SQUARED_DIFFERENCE_LEFT_SHIFT,
                                      _squared_difference_multipliers(a), _square_of_difference)


def _squared_difference_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    return _scaled_pair_q31_legalize(bb, call, "squared_difference",
                                     TFLITE_SQUARED_DIFFERENCE_LEFT_SHIFT,
                                     _squared_difference_multipliers(a), _square_of_difference)


def squared_difference_constraint(a_dtype: str = "int8", b_dtype: str = "int8",
                                  out_dtype: str = "int8", rounding: str = "q31_double",
                                  scales=None) -> Refusal | None:
    """a, b int8 per tensor, numpy-broadcastable, int8 out; rounding q31_double only; (2 *
    max(a_scale, b_scale))^2 < 2^14 * out_scale (as TFLite; scales = (a_scale, b_scale,
    out_scale))"""
    if (a_dtype, b_dtype, out_dtype) != ("int8", "int8", "int8"):
        return Refusal(f"{a_dtype}, {b_dtype} -> {out_dtype} (int8 only)")
    if rounding != "q31_double":
        return Refusal("TFLite's int8 SQUARED_DIFFERENCE kernel (rounding q31_double); the "
                       f"rounding is {rounding}", UnsupportedRounding)
    if scales is not None and tflite_squared_difference_multipliers(*scales)[2][1] > 0:
        # TFLite aborts (QuantizeMultiplierSmallerThanOneExp): no result to reproduce
        a_scale, b_scale, out_scale = scales
        return Refusal(f"TFLite's SQUARED_DIFFERENCE needs (2 * max(a_scale, b_scale))^2 < "
                       f"2^14 * out_scale; got a_scale {a_scale!r}, b_scale {b_scale!r}, "
                       f"out_scale {out_scale!r}", UnsupportedRounding)
    return None


SQUARED_DIFFERENCE = register(CanonicalOp(
    name="squared_difference",
    summary="(int8 - int8)^2 -> int8 with broadcasting (q31_double: TFLite SQUARED_DIFFERENCE)",
    args=("a", "b"), attrs=SUB_ATTRS, infer=_out_shape, legalize=_squared_difference_legalize,
    reference=squared_difference_reference,
    constraint=squared_difference_constraint,
    family="elementwise",
    roundings=("q31_double",),
))


def squared_difference(a_q: Any, b_q: Any, a_qp: QParams, b_qp: QParams, out_qp: QParams, *,
                       act=(-128, 127), rounding: str = "q31_double") -> Any:
    """Build ``canonqnn.squared_difference`` ((a - b)^2)."""
    attrs = _binary_attrs(a_qp, b_qp, out_qp, act, rounding)
    call = SQUARED_DIFFERENCE.call([a_q, b_q], attrs)  # refuses roundings other than q31_double
    SQUARED_DIFFERENCE.require(a_dtype=_tvm.dtype_of(a_q), b_dtype=_tvm.dtype_of(b_q),
                               out_dtype=out_qp.dtype, rounding=rounding,
                               scales=(a_qp.scalar_scale, b_qp.scalar_scale,
                                       out_qp.scalar_scale))
    return call
