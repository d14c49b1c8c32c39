"""Fold dynamic quantization (onnxruntime's ``quantize_dynamic`` models, docs/fq-form.md).

    multiply(astype(matmul(q - zp, W - W_zp), f32), multiply(scale, w_scale))
        -> canonqnn.dynamic_matmul(x, W, w_scale, W_zp)
    multiply(astype(conv2d(q - zp, W - W_zp), f32), multiply(scale, w_scale))
        -> canonqnn.dynamic_conv2d(x, W, w_scale, W_zp)
    q | scale | zero point of DynamicQuantizeLinear(x), used anywhere else
        -> canonqnn.dynamic_quantize | dynamic_scale | dynamic_zero_point(x)

``q``, ``zp`` and ``scale`` are the three results the core writes for DynamicQuantizeLinear of the
same float tensor ``x`` (``qdq.read_dynamic``); ``W`` and ``W_zp`` int8 constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn.ops import dynamic as ops

from ._engine import Context, Decline, Rule

MULTIPLY, ASTYPE, SUBTRACT = "relax.multiply", "relax.astype", "relax.subtract"
PRODUCTS = ("relax.matmul", "relax.nn.conv2d")


def _dynamic(ctx: Context, expr: Any, role: str) -> Any:
    """The float tensor whose DynamicQuantizeLinear result ``role`` ``expr`` is, else None."""
    found = qdq.read_dynamic(ctx.value(expr), ctx.value)
    return found[1] if found is not None and found[0] == role else None


def _widened(ctx: Context, expr: Any) -> Any:
    """``y`` of ``astype(y, "int32")`` (through a reshape to a scalar), else None."""
    call = ctx.call(expr, ASTYPE)
    if call is None:
        return None
    inner = ctx.call(call.args[0], "relax.reshape")
    return inner.args[0] if inner is not None else call.args[0]


def _centred_input(ctx: Context, expr: Any):
    """``x`` when ``expr`` is ``astype(q, int32) - astype(zp, int32)`` of one
    DynamicQuantizeLinear(x), else None."""
    sub = ctx.call(expr, SUBTRACT)
    if sub is None:
        return None
    x = _dynamic(ctx, _widened(ctx, sub.args[0]), "q")
    zp_of = _dynamic(ctx, _widened(ctx, sub.args[1]), "zero_point")
    return x if x is not None and zp_of is not None and x.same_as(zp_of) else None


def _centred_weight(ctx: Context, expr: Any):
    """``(W, W_zp)`` int8 constants when ``expr`` is ``astype(W, int32) - astype(W_zp, int32)``."""
    sub = ctx.call(expr, SUBTRACT)
    if sub is None:
        return None
    w, zp = (_widened(ctx, a) for a in sub.args)
    if not (_tvm.is_const(w) and _tvm.is_const(zp)) or _tvm.dtype_of(w) != "int8" or \
            _tvm.dtype_of(zp) != "int8":
        return None
    return w, _tvm.const_value(zp)


def _scale_product(ctx: Context, expr: Any, x: Any):
    """``w_scale`` when ``expr`` is ``multiply(scale, w_scale)`` (either order) with ``scale``
    DynamicQuantizeLinear(x)'s, else None."""
    mul = ctx.call(expr, MULTIPLY)
    if mul is None:
        return None
    for scale, w_scale in (mul.args, mul.args[::-1]):
        of = _dynamic(ctx, scale, "scale")
        if of is not None and of.same_as(x) and _tvm.is_const(w_scale) and \
                _tvm.dtype_of(w_scale) == "float32":
            return _tvm.const_value(w_scale)
    return None


def _per_channel(values: np.ndarray, rank: int, axis: int, what: str, at: Any):
    """``values`` (broadcast against a rank-``rank`` tensor) as a scalar or one value per index
    of ``axis``, else a Decline."""
    array = np.asarray(values)
    if array.size == 1:
        return array.reshape(())
    shape = (1,) * (rank - array.ndim) + array.shape
    if array.ndim > rank or any(d != 1 for i, d in enumerate(shape) if i != axis % rank):
        return Decline(f"{what} of shape {list(array.shape)} varies along another axis than "
                       f"{axis % rank}", at)
    return array.reshape(-1)


@dataclass(frozen=True)
class DynamicProduct:
    x: Any  # the float tensor DynamicQuantizeLinear quantizes
    w: Any
    w_scale: np.ndarray
    w_zp: np.ndarray
    conv_attrs: dict | None  # None: a matmul


def dynamic_product(ctx: Context, call: Any):
    at = ctx.binding_var  # the root multiply's variable: where the report names the island
    args = _tvm.items(call.args)
    for accumulator, scales in (args, args[::-1]):
        widened = ctx.call(accumulator, ASTYPE)
        if widened is None or _tvm.dtype_of(widened) != "float32":
            continue
        product = ctx.call(widened.args[0], *PRODUCTS)
        if product is None or _tvm.dtype_of(product) != "int32":
            continue
        x = _centred_input(ctx, product.args[0])
        if x is None:
            return Decline("the integer product does not read DynamicQuantizeLinear's result "
                           "and zero point of one tensor", at)
        weight = _centred_weight(ctx, product.args[1])
        if weight is None:
            return Decline("the weights are not a constant with a constant zero point", at)
        w_scale = _scale_product(ctx, scales, x)
        if w_scale is None:
            return Decline("the scale is not DynamicQuantizeLinear's times a constant", at)
        w, w_zp = weight
        is_conv = _tvm.op_name(product) == "relax.nn.conv2d"
        if not is_conv and (why := ops.DYNAMIC_MATMUL.accepts(
                b_shape=_tvm.shape_of(w))) is not None:
            return Decline(why, at)
        w_scale = _per_channel(w_scale, len(_tvm.shape_of(product)), 1 if is_conv else -1,
                               "weight scale", at)
        w_zp = _per_channel(w_zp, len(_tvm.shape_of(w)), 0 if is_conv else -1,
                            "weight zero point", at)
        for value in (w_scale, w_zp):
            if isinstance(value, Decline):
                return value
        if not is_conv:
            return DynamicProduct(x, w, w_scale, w_zp, None)
        attrs = _tvm.attrs_dict(product)
        if attrs.get("data_layout", "NCHW") != "NCHW" or \
                attrs.get("kernel_layout", "OIHW") != "OIHW":
            return Decline("convolution layout other than NCHW/OIHW", at)
        return DynamicProduct(x, w, w_scale, w_zp, attrs)
    return None


def build_dynamic_product(ctx: Context, m: DynamicProduct):
    if m.conv_attrs is None:
        return ops.dynamic_matmul(m.x, m.w, m.w_scale, m.w_zp)
    return ops.dynamic_conv2d(m.x, m.w, m.w_scale, m.w_zp, **m.conv_attrs)


@dataclass(frozen=True)
class DynamicResult:
    role: str
    x: Any


def dynamic_result(ctx: Context, call: Any):
    found = qdq.read_dynamic(call, ctx.value)
    return None if found is None else DynamicResult(*found)


def build_dynamic_result(ctx: Context, m: DynamicResult):
    return ops.dynamic_result(m.role, m.x)


RULES = (
    Rule("dynamic_product", MULTIPLY, (dynamic_product,), build_dynamic_product,
         "multiply(astype(matmul|conv2d(q - zp, W - W_zp), f32), scale * w_scale) -> "
         "canonqnn.dynamic_matmul | dynamic_conv2d", phase="compute", needs=(ASTYPE,)),
    Rule("dynamic_quantize", ASTYPE, (dynamic_result,), build_dynamic_result,
         "DynamicQuantizeLinear q / zero point -> canonqnn.dynamic_quantize | "
         "dynamic_zero_point", phase="dynamic_results"),
    Rule("dynamic_scale", "relax.where", (dynamic_result,), build_dynamic_result,
         "DynamicQuantizeLinear scale -> canonqnn.dynamic_scale", phase="dynamic_results"),
)
