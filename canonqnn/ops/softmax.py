"""``canonqnn.softmax``: int8 softmax along one axis, onnxruntime QLinearSoftmax arithmetic.

onnxruntime never evaluates exp per element: it builds a 256-entry float32 table of
``exp(x_scale * (k - 255) + shift)`` once (``exp_table``, an argument of the op, made by
``exp_table()`` from ``in_scale`` and the row length), and indexes it by the distance to the
row maximum (softmax is shift-invariant, so ``in_zp`` plays no part). Per row of the axis
(rounding rne_f32; ``o`` = 128 for uint8 sources):

    e[j] = exp_table[255 - (max(x) - x[j])]
    s    = 0; for j in order: s = f32(s + e[j])             (sequential float32 sum)
    Y    = floor(f32(1 / out_scale))                          (a float32 integer)
    r[j] = RNE(f32(f32(e[j] * Y) / s))
    int8:  y = clamp(r + out_zp, -128, 127)   where r converts to int32; otherwise (r >= 2^31,
           inf, NaN: x86 gives INT32_MIN) y = 127 if out_zp < 0 else -128 (the int32 sum wraps)
    uint8: t = (low 32 bits of int64(r) + out_zp + 128) mod 2^32  (int64(r) = INT64_MIN when r
           >= 2^63, inf or NaN); y = min(t, 255) - 128

``f32(e * Y)`` overflows to inf when ``Y`` exceeds about ``148 * row length`` (e.g. rows of 1
with ``out_scale`` 1/256): onnxruntime then returns the overflow values above for the row's
maximum, and so does this op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..qparams import QParams
from ._registry import CanonicalOp, register

F32 = np.float32
TABLE_SIZE = 256
ATTRS = ("in_scale", "in_zp", "out_scale", "out_zp", "axis", "rounding", "source_dtype")
INT32_LIMIT = 2.0 ** 31
INT64_LIMIT = 2.0 ** 63
UINT32_SPAN = 2 ** 32


# ---------------------------------------------------------------- the exp table
@functools.cache
def c_logf():
    """The C library's ``logf`` (None if ctypes cannot find one): onnxruntime calls it, and it
    is not correctly rounded (glibc 2.36 differs from the correctly rounded float32 log for 53
    of the row lengths up to 3e6, the first at 60594, where onnxruntime follows glibc)."""
    for name in ("libm.so.6", "libm.dylib", None):
        name = name or ctypes.util.find_library("m")  # (runs ldconfig: last resort)
        try:
            logf = ctypes.CDLL(name).logf
        except (OSError, AttributeError, TypeError):
            continue
        logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
        return logf
    return None


def _logf(value: np.float32) -> float:
    logf = c_logf()
    if logf is not None:
        return float(F32(logf(float(value))))
    return float(F32(math.log(float(value))))  # correctly rounded: rare 1-ulp differences


def exp_table(in_scale: float, row_length: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax table: ``table[k] = f32(exp((k - 255 + b) * in_scale))``.

    ``b = max(0, logf(f32(FLT_MAX / f32(row_length))) - 5) / in_scale`` (in double): the row
    maximum maps to ``exp`` of a large shift that keeps the float32 sum of ``row_length``
    entries finite. ``k = 255 - (max - x)``.
    """
    scale = float(F32(in_scale))
    headroom = F32(F32(np.finfo(F32).max) / F32(row_length))
    shift = max(0.0, _logf(headroom) - 5.0) / scale
    k = np.arange(TABLE_SIZE, dtype=np.float64)
    return np.exp((k - 255.0 + shift) * scale).astype(F32)


def _inverse_out_scale(out_scale: float) -> np.float32:
    return F32(np.floor(F32(F32(1.0) / F32(out_scale))))


# ---------------------------------------------------------------- numpy reference
def _store_reference(r: np.ndarray, out_zp: int, source_dtype: str) -> np.ndarray:
    """Rounded float32 quotients to int8 as onnxruntime's int8 / uint8 kernels store them."""
    if source_dtype == "uint8":
        fits = r < INT64_LIMIT  # False for NaN
        low = np.where(fits, r, F32(0)).astype(np.int64) % UINT32_SPAN
        t = (low + out_zp + 128) % UINT32_SPAN
        return (np.minimum(t, 255) - 128).astype(np.int8)
    fits = r < INT32_LIMIT
    y = np.clip(np.where(fits, r, F32(0)).astype(np.int64) + out_zp, -128, 127)
    return np.where(fits, y, 127 if out_zp < 0 else -128).astype(np.int8)


def _reference(x, table, *, in_scale, in_zp, out_scale, out_zp, axis, rounding,
               source_dtype) -> np.ndarray:
    xr = np.moveaxis(np.asarray(x).astype(np.int32), axis, -1)
    e = np.asarray(table, F32)[255 - (xr.max(axis=-1, keepdims=True) - xr)]
    total = np.cumsum(e, axis=-1, dtype=F32)[..., -1:]  # accumulate = sequential float32 sum
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.rint((e * _inverse_out_scale(out_scale)).astype(F32) / total).astype(F32)
    return np.moveaxis(_store_reference(r, int(out_zp), source_dtype), -1, axis)


# ---------------------------------------------------------------- TE legalization
def _f(value: float):
    return tirx.const(float(value), "float32")


def _te_store(r, out_zp: int, source_dtype: str):
    """TE twin of ``_store_reference`` for one rounded float32 quotient ``r``."""
    if source_dtype == "uint8":
        fits = r < _f(INT64_LIMIT)
        low = tirx.Select(fits, r, _f(0.0)).astype("int64") & tirx.const(UINT32_SPAN - 1, "int64")
        t = low + (out_zp + 128)
        t = tirx.Select(t >= tirx.const(UINT32_SPAN, "int64"), t - UINT32_SPAN, t)
        return (te.min(t, tirx.const(255, "int64")) - 128).astype("int8")
    fits = r < _f(INT32_LIMIT)
    y = tirx.Select(fits, r, _f(0.0)).astype("int32") + out_zp
    y = te.max(te.min(y, 127), -128)
    return tirx.Select(fits, y, 127 if out_zp < 0 else -128).astype("int8")


def _legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    axis = a["axis"]
    inv = _f(_inverse_out_scale(a["out_scale"]))

    def compute(x, table):
        shape = [int(d) for d in x.shape]
        kept = [1 if i == axis else d for i, d in enumerate(shape)]

        def at(idx, j):  # index ``idx`` with the axis coordinate replaced by ``j``
            return [j if i == axis else v for i, v in enumerate(idx)]

        k = te.reduce_axis((0, shape[axis]), "k")
        row_max = te.compute(kept, lambda *i: te.max(x(*at(i, k)), axis=k), name="row_max")

        def exp_of(idx):
            m = row_max(*at(idx, 0)).astype("int32")
            return table[x(*idx).astype("int32") - m + 255]

        j = te.reduce_axis((0, shape[axis]), "j")
        # A serial reduction: LLVM keeps the order of float adds (no reassociation allowed).
        total = te.compute(kept, lambda *i: te.sum(exp_of(at(i, j)), axis=j), name="row_sum")

        def out(*idx):
            q = (exp_of(idx) * inv) / total(*at(idx, 0))
            return _te_store(tirx.round(q), int(a["out_zp"]), a["source_dtype"])

        return te.compute(shape, out, name="softmax")

    return bb.call_te(compute, call.args[0], call.args[1], primfunc_name_hint="canonqnn_softmax")


def _infer(call: Any) -> Any:
    table = call.args[1]
    if _tvm.shape_of(table) != (TABLE_SIZE,) or _tvm.dtype_of(table) != "float32":
        raise ValueError("canonqnn.softmax: exp_table must be float32[256]")
    return _tvm.tensor_type(_tvm.shape_of(call.args[0]), "int8")


SOFTMAX = register(CanonicalOp(
    name="softmax",
    summary="int8 softmax along one axis (onnxruntime QLinearSoftmax: exp table, float32 sum)",
    args=("x", "exp_table"),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=_reference,
    constraints=("x int8 per tensor, static shape; axis non-negative; exp_table float32[256] "
                 "= exp_table(in_scale, shape[axis]); source_dtype int8 or uint8"),
    family="softmax",
))


def softmax(x: Any, x_qp: QParams, out_qp: QParams, axis: int, *, source_dtype: str = "int8",
            rounding: str = "rne_f32") -> Any:
    """Build ``canonqnn.softmax`` over ``axis`` (any sign) with onnxruntime's table."""
    shape = _tvm.shape_of(x)
    axis = int(axis) % len(shape)
    table = exp_table(x_qp.scalar_scale, shape[axis])
    return SOFTMAX.call([x, _tvm.const(table, "float32")], dict(
        in_scale=x_qp.scalar_scale, in_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
        out_zp=out_qp.scalar_zp, axis=axis, rounding=rounding, source_dtype=source_dtype))
