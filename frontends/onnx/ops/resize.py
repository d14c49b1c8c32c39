"""ONNX Resize (opsets 10-28) as Relax ``image.resize2d``: 4-D NCHW input, H and W resized.

The FQ form carries the output size only. onnxruntime's coordinates use the scale it is given
(or ``out / in`` when given sizes), so a ``scales`` input is accepted when it equals
``f32(out) / f32(in)`` on H and W (2, 0.5, ... on sizes they divide), else refused.

On a quantized tensor (QOperator models apply Resize to uint8/int8 data directly):
- nearest copies values: ``dequantize -> resize -> quantize`` with the tensor's own parameters;
- linear runs onnxruntime's integer kernel, which interpolates the *stored* values and
  truncates: ``dequantize(x, 1, -o) -> resize -> trunc -> quantize(1, -o)``, o = 128 for uint8
  (the scale-1 dequantize gives the stored values exactly); the result keeps x's parameters.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from canonqnn import qdq
from canonqnn._tvm import relax
from canonqnn.qparams import QParams

from ..._base import Attrs, Inputs
from .._context import ImportContext, Unsupported, Value, onnx_op
from .quant import dequantize_value, quantize_value

F32 = np.float32
COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners",
                    "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}


def _given(value: Value | None, ctx: ImportContext, what: str) -> np.ndarray | None:
    """A constant input, or None when omitted or empty (exporters pass empty scales)."""
    if value is None:
        return None
    array = ctx.constant(value, f"Resize {what}")
    return None if array.size == 0 else array.reshape(-1)


def _full_rank(values: np.ndarray, axes: list[int] | None, rank: int, fill, what: str):
    if axes is None:
        if values.size != rank:
            raise Unsupported(f"Resize {what} has {values.size} values for a rank-{rank} input")
        return list(values)
    if values.size != len(axes):
        raise Unsupported(f"Resize {what} has {values.size} values for {len(axes)} axes")
    out = [fill(i) for i in range(rank)]
    for axis, v in zip(axes, values):
        out[axis % rank] = v
    return out


def output_size(ctx: ImportContext, inputs: list, attrs: dict, shape) -> list[int]:
    """The output shape, checking that onnxruntime's scales are ``f32(out) / f32(in)``."""
    rank = len(shape)
    axes = attrs.get("axes")
    if ctx.opset < 11:
        scales, sizes = _given((inputs + [None])[1], ctx, "scales"), None
    else:
        scales, sizes = (_given(v, ctx, w) for v, w in zip((inputs + [None] * 3)[2:4],
                                                          ("scales", "sizes")))
    if (scales is None) == (sizes is None):
        raise Unsupported("Resize needs exactly one of scales and sizes")
    if sizes is not None:
        return [int(v) for v in _full_rank(sizes, axes, rank, lambda i: shape[i], "sizes")]
    scales = [F32(s) for s in _full_rank(scales.astype(F32), axes, rank, lambda i: 1.0, "scales")]
    out = [int(F32(s * F32(d))) for s, d in zip(scales, shape)]  # onnxruntime: f32, truncated
    for axis, (s, d, o) in enumerate(zip(scales, shape, out)):
        if o < 1:
            raise Unsupported(f"Resize scale {float(s)!r} leaves no element on axis {axis}")
        if s != F32(F32(o) / F32(d)):
            raise Unsupported(
                f"Resize scale {float(s)!r} on axis {axis} (size {d} -> {o}) differs from "
                f"{o}/{d}; onnxruntime computes coordinates with the scale itself, canonqnn "
                "with the sizes (give sizes, or a scale that divides the size)")
    return out


def _nearest_mode(ctx: ImportContext, attrs: dict, shape, out) -> str:
    if ctx.opset >= 11:
        mode = attrs.get("nearest_mode", "round_prefer_floor")
        if mode not in NEAREST_MODES:
            raise Unsupported(f"Resize nearest_mode {mode!r} is not supported")
        return mode
    # opset 10: truncation (floor) when upsampling, ceil when downsampling, per axis
    directions = {o < d for d, o in zip(shape[2:], out[2:]) if o != d}
    if len(directions) > 1:
        raise Unsupported("opset-10 nearest Resize that upsamples one axis and downsamples the "
                          "other is not supported")
    return "ceil" if directions == {True} else "floor"


def _check_attrs(ctx: ImportContext, attrs: dict, mode: str) -> str:
    if mode not in METHODS:
        raise Unsupported(f"Resize mode {mode!r} is not supported")
    if attrs.get("antialias", 0):
        raise Unsupported("Resize with antialias=1 is not supported")
    if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Unsupported(f"Resize keep_aspect_ratio_policy "
                          f"{attrs['keep_aspect_ratio_policy']!r} is not supported")
    coordinate = attrs.get("coordinate_transformation_mode", "half_pixel") \
        if ctx.opset >= 11 else "asymmetric"
    if coordinate not in COORDINATE_MODES:
        raise Unsupported(f"Resize coordinate_transformation_mode {coordinate!r} is not "
                          "supported")
    return coordinate


def _resize(ctx: ImportContext, x: Value, out, mode: str, coordinate: str, nearest: str,
            attrs: dict) -> Value:
    return Value(expr=ctx.emit(relax.op.image.resize2d(
        ctx.expr(x), size=(int(out[2]), int(out[3])), layout="NCHW", method=METHODS[mode],
        coordinate_transformation_mode=coordinate, rounding_method=nearest,
        cubic_alpha=float(attrs.get("cubic_coeff_a", -0.75)),
        cubic_exclude=int(attrs.get("exclude_outside", 0)))))


@onnx_op("Resize", quantized="consumes")
def resize_op(ctx: ImportContext, node: NodeProto, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    shape = ctx.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"Resize of a rank-{len(shape)} input is not supported (NCHW only)")
    mode = attrs.get("mode", "nearest")
    coordinate = _check_attrs(ctx, attrs, mode)
    out = output_size(ctx, inputs, attrs, shape)
    if list(out[:2]) != list(shape[:2]):
        raise Unsupported(f"Resize from {list(shape)} to {out} changes the batch or channel axis")
    nearest = _nearest_mode(ctx, attrs, shape, out)
    if x.qparams is None:
        return [_resize(ctx, x, out, mode, coordinate, nearest, attrs)]
    if mode == "cubic":
        raise Unsupported("cubic Resize of a quantized tensor is not supported")
    if mode == "nearest":
        y = _resize(ctx, dequantize_value(ctx, x, x.qparams), out, mode, coordinate, nearest,
                    attrs)
        return [quantize_value(ctx, y, x.qparams, x.dtype)]
    stored = QParams.make(1.0, -128 if x.dtype == "uint8" else 0)
    y = _resize(ctx, dequantize_value(ctx, x, stored), out, mode, coordinate, nearest, attrs)
    q = qdq.quantize(ctx.emit(relax.op.trunc(ctx.expr(y))), stored,
                     source_dtype=qdq.source_dtype(x.dtype),
                     source_tensor=ctx.node_output or None)
    return [Value(expr=ctx.emit(q), dtype=x.dtype, qparams=x.qparams)]
