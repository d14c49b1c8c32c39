"""Fold quantized Resize.

    q(act(resize2d(dq(x))))                       -> canonqnn.resize2d (kernel "float")
    q(trunc(resize2d(dq(x, 1, zp))), 1, zp)       -> canonqnn.resize2d (kernel "integer")

The second form is how the ONNX frontend writes onnxruntime's integer bilinear kernel (a
QOperator model resizing uint8/int8 data): stored values in, truncated values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from canonqnn import _tvm
from canonqnn.ops import resize
from canonqnn.qdq import QUANTIZE, QdqCall

from ._engine import Context, Decline, Rule
from ._match import Activation, UnaryChain, dequantized, output, per_tensor_int8, unary_step

RESIZE, TRUNC = "relax.image.resize2d", "relax.trunc"
METHODS = {"nearest_neighbor": "nearest", "linear": "linear"}


def _geometry(inner: Any, at: Any) -> dict | Decline:
    """The resize2d attributes canonqnn.resize2d takes, or why it cannot."""
    a = _tvm.attrs_dict(inner)
    if a["layout"] != "NCHW":
        return Decline(f"layout {a['layout']} is not NCHW", at)
    if a["method"] not in METHODS:
        return Decline(f"{a['method']} resize (nearest and linear fold)", at)
    method = METHODS[a["method"]]
    nearest = a["rounding_method"] if method == "nearest" else "round_prefer_floor"
    if (why := resize.RESIZE2D.accepts(
            method=method, coordinate_transformation_mode=a["coordinate_transformation_mode"],
            nearest_mode=nearest)) is not None:
        return Decline(why, at)
    if a.get("out_dtype") not in (None, "", "float32"):
        return Decline(f"resize to {a['out_dtype']}", at)
    return dict(size=_tvm.shape_of(inner)[2:], method=method, nearest_mode=nearest,
                coordinate_transformation_mode=a["coordinate_transformation_mode"])


@dataclass(frozen=True)
class Resize:
    out: QdqCall
    act: Activation
    x: QdqCall
    geometry: dict


def resize_geometry(ctx: Context, m: UnaryChain):
    geometry = _geometry(m.inner, m.at)
    if isinstance(geometry, Decline):
        return geometry
    if geometry["method"] == "linear" and ctx.rounding == "rne_f32":
        # onnxruntime's float bilinear Resize: ``require`` raises the profile's refusal
        ctx.numerics.require("float_resize", ("x86", "fma"), "its float linear Resize")
    return Resize(m.out, m.act, m.x, geometry)


def build_resize(ctx: Context, m: Resize):
    geometry = dict(m.geometry)
    size = geometry.pop("size")
    rounding = ctx.rounding
    if rounding == "rne_f32" and geometry["method"] == "linear" and \
            ctx.numerics.float_resize == "fma":
        rounding = "mlas_neon"  # onnxruntime's AArch64 build: its sum contracted
    return resize.resize2d(m.x.operand, size, m.x.qparams, m.out.qparams, **geometry,
                           act=m.act.bounds(m.out.qparams), rounding=rounding,
                           source_dtype=ctx.source_dtype())


def integer_resize_chain(ctx: Context, call: Any):
    out = output(call)
    if out is None or out.qparams.dtype != "int8" or out.qparams.scalar_scale != 1.0:
        return None
    truncated = ctx.call(out.operand, TRUNC)
    inner = None if truncated is None else ctx.call(truncated.args[0], RESIZE)
    if inner is None:
        return None
    at = out.operand
    if not (ctx.single_use(at) and ctx.single_use(truncated.args[0])):
        return Decline("the float result has other users", at)
    x = dequantized(ctx, inner.args[0])
    if x is None:
        return Decline("input is not dequantized from int8", at)
    if (why := per_tensor_int8(x, "input", at)) is not None:
        return why
    if not x.qparams.same_as(out.qparams):
        return Decline("truncated resize whose stored-value parameters change", at)
    geometry = _geometry(inner, at)
    if isinstance(geometry, Decline):
        return geometry
    if geometry["method"] != "linear":
        return Decline("truncated nearest resize", at)
    in_h, in_w = _tvm.shape_of(x.operand)[2:]
    mode, size = geometry["coordinate_transformation_mode"], geometry["size"]
    if not all(resize.weights_are_fixed_point_exact(i, o, mode)
               for i, o in ((in_h, size[0]), (in_w, size[1]))):
        return Decline("onnxruntime's integer bilinear Resize rounds these interpolation weights "
                       "differently in its NCHW (float) and NHWC (10-bit fixed point) kernels, "
                       "and its layout optimizer picks one by context; folded only where the "
                       "weights are multiples of 1/256", at)
    return Resize(out, Activation(rounding=ctx.rounding), x, geometry)


def build_integer_resize(ctx: Context, m: Resize):
    geometry = dict(m.geometry)
    size = geometry.pop("size")
    return resize.resize2d(m.x.operand, size, m.x.qparams, m.out.qparams, **geometry,
                           kernel="integer", rounding=ctx.rounding)


RULES = (
    Rule("resize2d_integer", QUANTIZE, (integer_resize_chain,), build_integer_resize,
         "q(trunc(resize2d(dq(x, 1, zp))), 1, zp) -> canonqnn.resize2d (integer kernel)",
         phase="elementwise_pool_movement"),
    Rule("resize2d", QUANTIZE, (unary_step(RESIZE), resize_geometry), build_resize,
         "q(act(resize2d(dq x))) -> canonqnn.resize2d", phase="elementwise_pool_movement"),
)
