"""The Relax ops canonqnn's writers emit (quantize/dequantize, casts, conv2d), with their result
types set here where TVM's inference would be slow or would not share them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tvm import relax

from .types import dtype_of, shape_of, tensor_type


def quantize(x: Any, scale: Any, zero_point: Any, axis: int, out_dtype: str) -> Any:
    return _typed_like(relax.op.quantize(x, scale, zero_point, axis=axis, out_dtype=out_dtype),
                       x, scale, axis, out_dtype)


def dequantize(q: Any, scale: Any, zero_point: Any, axis: int) -> Any:
    return _typed_like(relax.op.dequantize(q, scale, zero_point, axis=axis, out_dtype="float32"),
                       q, scale, axis, "float32")


def _typed_like(call: Any, x: Any, scale: Any, axis: int, dtype: str) -> Any:
    """``call`` (a quantize or dequantize of ``x``) with its result type set: ``x``'s static
    shape, ``dtype`` - shared within ``converting`` (``tensor_type``), which TVM's inference
    would not share. Left to TVM's inference (and its errors) unless the shape is static and
    the scales are one, or one along ``axis``."""
    try:
        shape = shape_of(x)
        scales = shape_of(scale)
    except (AttributeError, ValueError):
        return call
    if scales not in ((), (1,)) and not (0 <= axis < len(shape) and scales == (shape[axis],)):
        return call
    relax.expr._update_type(call, tensor_type(shape, dtype))
    return call


def astype(x: Any, dtype: str) -> Any:
    return relax.op.astype(x, dtype)


def add(a: Any, b: Any) -> Any:
    return relax.op.add(a, b)


def subtract(a: Any, b: Any) -> Any:
    return relax.op.subtract(a, b)


def clip(x: Any, lo: int, hi: int) -> Any:
    return relax.op.clip(x, lo, hi)


def clip_float(x: Any, lo: float, hi: float) -> Any:
    return relax.op.clip(x, float(lo), float(hi))


def permute_dims(x: Any, axes: Sequence[int]) -> Any:
    return relax.op.permute_dims(x, [int(a) for a in axes])


def conv2d(x: Any, w: Any, strides: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int, out_dtype: str | None = None) -> Any:
    """``relax.nn.conv2d`` (NCHW/OIHW, padding [top, left, bottom, right]) whose result type
    is set here when both shapes are static and consistent. TVM 0.27 infers a conv2d's type in
    about 0.6 ms (it builds layout maps and an arithmetic analyzer each call): most of the time
    of importing a conv network, and of TVM's own ``from_onnx``. Anything else is left to TVM's
    inference, which raises its errors as before."""
    call = relax.op.nn.conv2d(x, w, strides=list(strides), padding=list(padding),
                              dilation=list(dilation), groups=int(groups), out_dtype=out_dtype)
    try:
        n, c, h, wd = shape_of(x)
        o, i, kh, kw = shape_of(w)
        dtype, w_dtype = dtype_of(x), dtype_of(w)
        (sh, sw), (dh, dw) = strides, dilation
        top, left, bottom, right = padding
    except (AttributeError, ValueError, TypeError):  # symbolic, untyped, other forms
        return call
    out_h = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    if groups < 1 or c != i * groups or o % groups or out_h < 1 or out_w < 1 or \
            dtype != w_dtype:
        return call
    relax.expr._update_type(call, tensor_type((n, o, out_h, out_w), out_dtype or dtype))
    return call
