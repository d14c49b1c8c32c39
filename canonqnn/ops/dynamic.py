"""Dynamic quantization: parameters computed at run time from the float input.

onnxruntime's ``quantize_dynamic`` models quantize each float activation with
DynamicQuantizeLinear (uint8, scale and zero point from the tensor's own range) right before an
integer MatMul/Conv, whose int32 result is turned back to float by ``Cast`` and ``Mul(x_scale *
w_scale)``. The canonical ops take the **float** input and give the **float** output of that
chain, exactly as onnxruntime computes it (``qparams.dynamic_qparams`` / ``dynamic_quantize``):

    dynamic_matmul(x, b, b_scale, b_zp)    = f32(acc) * f32(x_scale * b_scale[n])
    dynamic_conv2d(x, w, w_scale, w_zp)    = f32(acc) * f32(x_scale * w_scale[o])

where ``acc`` is the exact int32 product of ``q(x) - x_zp`` and ``b - b_zp``. The product is
fenced (``te_no_contract``): a following bias add must not fuse into an FMA, onnxruntime rounds
the product first. ``dynamic_quantize`` / ``dynamic_scale`` / ``dynamic_zero_point`` are
DynamicQuantizeLinear's three outputs, for uses outside such a chain; the quantized values and
the zero point are uint8 held as int8 (value - 128), like every uint8 tensor in canonqnn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx, topi
from ..qparams import DYNAMIC_LEVELS, UINT8_TO_INT8_SHIFT, dynamic_qparams, dynamic_quantize
from . import conv as conv_op
from . import matmul as matmul_op
from ._registry import CanonicalOp, Refusal, register
from ._requant import te_no_contract

FAMILY = "dynamic"
CONV_ATTRS = ("strides", "padding", "dilation", "groups")


# ---------------------------------------------------------------- numpy (the specification)
def _centred(x: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """``q(x) - zp`` (int64) and the scale."""
    scale, zp = dynamic_qparams(x)
    return dynamic_quantize(x, scale, zp).astype(np.int64) - zp, scale


def _held(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values).astype(np.int64) - UINT8_TO_INT8_SHIFT).astype(np.int8)


def _scaled(acc: np.ndarray, scale: np.float32, w_scale: np.ndarray) -> np.ndarray:
    product = (np.float32(scale) * np.asarray(w_scale, np.float32)).astype(np.float32)
    return (acc.astype(np.float32) * product).astype(np.float32)


def _matmul_reference(x, b, b_scale, b_zp) -> np.ndarray:
    centred, scale = _centred(x)
    acc = matmul_op._accumulator(centred, b, np.asarray(b_zp, np.int64), 0, "exact")
    return _scaled(acc.astype(np.int32), scale, np.broadcast_to(b_scale, (b.shape[-1],)))


def _conv_reference(x, w, w_scale, w_zp, **a) -> np.ndarray:
    centred, scale = _centred(x)
    o = w.shape[0]
    acc = conv_op.reference(centred, w, np.zeros(o, np.int32), w_scale, np.asarray(w_zp),
                            x_zp=0, out_dtype="int32", **a)
    return _scaled(acc, scale, np.broadcast_to(w_scale, (o,))[None, :, None, None])


# ---------------------------------------------------------------- TE (the same operations)
def te_parameters(x: Any) -> tuple[Any, Any]:
    """0-d float32 tensors ``(scale, zero point)`` of ``x`` (``qparams.dynamic_qparams``)."""
    zero, levels = tirx.const(0.0, "float32"), tirx.const(float(DYNAMIC_LEVELS), "float32")
    lowest, highest = topi.min(x), topi.max(x)
    scale = te.compute((), lambda: tirx.Select(
        te.max(highest(), zero) == te.min(lowest(), zero), tirx.const(1.0, "float32"),
        (te.max(highest(), zero) - te.min(lowest(), zero)) / levels), name="dynamic_scale")
    zp = te.compute((), lambda: te.round(te.max(te.min(
        zero - te.min(lowest(), zero) / scale(), levels), zero)), name="dynamic_zero_point")
    return scale, zp


def _te_level(v, scale, zp):
    """``round(clamp(v / scale, -zp, 255 - zp))`` as float32 (NaN: the lower bound)."""
    quotient = v / scale()
    quotient = tirx.Select(tirx.isnan(quotient), -zp(), quotient)
    return te.round(te.max(te.min(quotient, tirx.const(float(DYNAMIC_LEVELS), "float32") - zp()),
                           -zp()))


def _te_centred(x: Any) -> tuple[Any, Any]:
    scale, zp = te_parameters(x)
    centred = te.compute(x.shape, lambda *i: _te_level(x(*i), scale, zp).astype("int32"),
                         name="centred")
    return centred, scale


def _te_scaled(acc_value, scale, w_scale_value):
    product = te_no_contract(scale() * w_scale_value)
    return te_no_contract(acc_value.astype("float32") * product)


def _matmul_legalize(bb: Any, call: Any) -> Any:
    x, b, b_scale, b_zp = call.args
    n = _tvm.shape_of(b)[-1]
    scales = _tvm.const(np.broadcast_to(_tvm.const_value(b_scale), (n,)).astype(np.float32))
    zps = _tvm.const(np.broadcast_to(_tvm.const_value(b_zp), (n,)).astype(np.int32))

    def compute(x, b, scales, zps):
        centred, scale = _te_centred(x)
        k = te.reduce_axis((0, int(b.shape[0])), "k")
        shape = tuple(x.shape[:-1]) + (b.shape[1],)
        acc = te.compute(shape, lambda *i: te.sum(
            centred(*i[:-1], k) * (b[k, i[-1]].astype("int32") - zps[i[-1]]), axis=k),
            name="acc")
        return te.compute(shape, lambda *i: _te_scaled(acc(*i), scale, scales[i[-1]]),
                          name="dynamic_matmul")

    return bb.call_te(compute, x, b, scales, zps, primfunc_name_hint="canonqnn_dynamic_matmul")


def _conv_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    x, w, w_scale, w_zp = call.args
    o = _tvm.shape_of(w)[0]
    scales = _tvm.const(np.broadcast_to(_tvm.const_value(w_scale), (o,)).astype(np.float32))
    zps = _tvm.const(np.broadcast_to(_tvm.const_value(w_zp), (o,)).astype(np.int32))

    def compute(x, w, scales, zps):
        centred, scale = _te_centred(x)
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilation"], a["padding"]
        _, cg, kh, kw = (int(d) for d in w.shape)
        n, _, h, wd = (int(d) for d in x.shape)
        oh, ow = conv_op.out_hw(h, wd, kh, kw, a)
        opg = o // a["groups"]
        padded = topi.nn.pad(centred, [0, 0, pt, pl], [0, 0, pb, pr], name="centred_pad")
        rc, ry, rx = (te.reduce_axis((0, e), name) for e, name in
                      ((cg, "rc"), (kh, "ry"), (kw, "rx")))

        def tap(nn, oo, i, j):
            cin = rc if a["groups"] == 1 else (oo // opg) * cg + rc
            return padded[nn, cin, i * sh + ry * dh, j * sw + rx * dw] * \
                (w[oo, rc, ry, rx].astype("int32") - zps[oo])

        acc = te.compute((n, o, oh, ow), lambda nn, oo, i, j: te.sum(
            tap(nn, oo, i, j), axis=[rc, ry, rx]), name="acc")
        return te.compute(acc.shape, lambda nn, oo, i, j: _te_scaled(
            acc[nn, oo, i, j], scale, scales[oo]), name="dynamic_conv2d")

    return bb.call_te(compute, x, w, scales, zps, primfunc_name_hint="canonqnn_dynamic_conv2d")


def _matmul_infer(call: Any) -> Any:
    x, b = call.args[0], call.args[1]
    return _tvm.tensor_type(_tvm.shape_of(x)[:-1] + _tvm.shape_of(b)[-1:], "float32")


def _conv_infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    n, _, h, wd = _tvm.shape_of(call.args[0])
    o, _, kh, kw = _tvm.shape_of(call.args[1])
    return _tvm.tensor_type((n, o, *conv_op.out_hw(h, wd, kh, kw, a)), "float32")


def _dynamic_operands(x_dtype: str, name: str, w_dtype: str, w_constant: bool,
                      scale_size: int, zp_size: int, channels: int | None) -> Refusal | None:
    """The operands dynamic_matmul and dynamic_conv2d share: a float32 input, constant int8
    weights ``name`` and one weight scale / zero point or one per output channel."""
    if x_dtype != "float32":
        return Refusal(f"{x_dtype} input (float32: quantized at run time)")
    if w_dtype != "int8" or not w_constant:
        return Refusal(f"weights {name} must be an int8 constant, got "
                       f"{'a constant' if w_constant else 'a run-time'} {w_dtype} tensor")
    for what, size in (("scale", scale_size), ("zero point", zp_size)):
        if channels is not None and size not in (1, channels):
            return Refusal(f"{size} weight {what} values for {channels} output channels (one, "
                           "or one per channel)")
    return None


def dynamic_matmul_constraint(x_dtype: str = "float32", b_dtype: str = "int8",
                              b_constant: bool = True, b_shape=None, b_scale_size: int = 1,
                              b_zp_size: int = 1) -> Refusal | None:
    """x float32 [..., M, K]; b int8 [K, N] constant (uint8 held as int8); b_scale float32 [N]
    or []; b_zp int8 [N] or []"""
    if b_shape is not None and len(b_shape) != 2:
        return Refusal("batched constant weights (dynamic_matmul takes [K, N])")
    return _dynamic_operands(x_dtype, "b", b_dtype, b_constant, b_scale_size, b_zp_size,
                             None if b_shape is None else int(b_shape[-1]))


DYNAMIC_MATMUL = register(CanonicalOp(
    name="dynamic_matmul",
    weight_layout="KN",
    summary="float input quantized at run time (DynamicQuantizeLinear), int8 matmul with "
            "constant weights, float output f32(acc) * f32(x_scale * b_scale)",
    args=("x", "b", "b_scale", "b_zp"),
    attrs=(),
    infer=_matmul_infer,
    legalize=_matmul_legalize,
    reference=_matmul_reference,
    constraint=dynamic_matmul_constraint,
    family=FAMILY,
))


def dynamic_conv2d_constraint(x_dtype: str = "float32", w_dtype: str = "int8",
                              w_constant: bool = True, w_shape=None, w_scale_size: int = 1,
                              w_zp_size: int = 1) -> Refusal | None:
    """x float32 NCHW; w int8 OIHW constant (uint8 held as int8); w_scale float32 [O] or [];
    w_zp int8 [O] or [] (padded taps contribute 0: ConvInteger pads with the zero point)"""
    if w_shape is not None and len(w_shape) != 4:
        return Refusal(f"weights of rank {len(w_shape)} (dynamic_conv2d takes OIHW)")
    return _dynamic_operands(x_dtype, "w", w_dtype, w_constant, w_scale_size, w_zp_size,
                             None if w_shape is None else int(w_shape[0]))


DYNAMIC_CONV2D = register(CanonicalOp(
    name="dynamic_conv2d",
    layout="NCHW",
    weight_layout="OIHW",
    summary="float input quantized at run time (DynamicQuantizeLinear), int8 NCHW/OIHW "
            "convolution with constant weights, float output f32(acc) * f32(x_scale * w_scale)",
    args=("x", "w", "w_scale", "w_zp"),
    attrs=CONV_ATTRS,
    infer=_conv_infer,
    legalize=_conv_legalize,
    reference=_conv_reference,
    constraint=dynamic_conv2d_constraint,
    family=FAMILY,
))


# ---------------------------------------------------------------- DynamicQuantizeLinear alone
def _quantize_legalize(bb: Any, call: Any) -> Any:
    def compute(x):
        scale, zp = te_parameters(x)
        return te.compute(x.shape, lambda *i: (_te_level(x(*i), scale, zp) + zp() - tirx.const(
            float(UINT8_TO_INT8_SHIFT), "float32")).astype("int8"), name="dynamic_quantize")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_dynamic_quantize")


def float_input_constraint(x_dtype: str = "float32") -> Refusal | None:
    """x float32"""
    if x_dtype != "float32":
        return Refusal(f"{x_dtype} input (DynamicQuantizeLinear quantizes float32)")
    return None


def _parameter_op(index: int) -> CanonicalOp:
    """DynamicQuantizeLinear's scale (index 0, float32) or zero point (1, uint8 held as int8),
    each a scalar."""
    name, dtype = (("dynamic_scale", "float32"), ("dynamic_zero_point", "int8"))[index]

    def legalize(bb: Any, call: Any) -> Any:
        def compute(x):
            scale, zp = te_parameters(x)
            if index == 0:
                return scale
            return te.compute((), lambda: (zp() - tirx.const(
                float(UINT8_TO_INT8_SHIFT), "float32")).astype("int8"), name="zero_point")

        return bb.call_te(compute, call.args[0], primfunc_name_hint=f"canonqnn_{name}")

    def reference(x) -> np.ndarray:
        value = dynamic_qparams(x)[index]
        return np.asarray(value, np.float32) if index == 0 else _held(np.asarray(value))

    return register(CanonicalOp(
        name=name,
        summary=f"DynamicQuantizeLinear's {('scale', 'zero point (uint8 held as int8)')[index]}"
                ", a scalar",
        args=("x",), attrs=(),
        infer=lambda call: _tvm.tensor_type((), dtype),
        legalize=legalize, reference=reference, constraint=float_input_constraint, family=FAMILY,
    ))


def _quantize_reference(x) -> np.ndarray:
    scale, zp = dynamic_qparams(x)
    return _held(dynamic_quantize(x, scale, zp))


DYNAMIC_QUANTIZE = register(CanonicalOp(
    name="dynamic_quantize",
    summary="DynamicQuantizeLinear's quantized output (uint8 held as int8)",
    args=("x",), attrs=(),
    infer=lambda call: _tvm.tensor_type(_tvm.shape_of(call.args[0]), "int8"),
    legalize=_quantize_legalize, reference=_quantize_reference,
    constraint=float_input_constraint, family=FAMILY,
))
DYNAMIC_SCALE = _parameter_op(0)
DYNAMIC_ZERO_POINT = _parameter_op(1)
ROLES = {"q": DYNAMIC_QUANTIZE, "scale": DYNAMIC_SCALE, "zero_point": DYNAMIC_ZERO_POINT}


def dynamic_result(role: str, x: Any) -> Any:
    """DynamicQuantizeLinear's output ``role`` ("q", "scale" or "zero_point") of ``x``."""
    op = ROLES[role]
    op.require(x_dtype=_tvm.dtype_of(x))
    return op.call([x], {})


def dynamic_matmul(x: Any, b: Any, b_scale: np.ndarray, b_zp: np.ndarray) -> Any:
    DYNAMIC_MATMUL.require(x_dtype=_tvm.dtype_of(x), b_dtype=_tvm.dtype_of(b),
                           b_constant=_tvm.is_const(b), b_shape=_tvm.shape_of(b),
                           b_scale_size=np.size(b_scale), b_zp_size=np.size(b_zp))
    return DYNAMIC_MATMUL.call([x, b, _tvm.const(np.asarray(b_scale, np.float32)),
                                _tvm.const(np.asarray(b_zp, np.int8))], {})


def dynamic_conv2d(x: Any, w: Any, w_scale: np.ndarray, w_zp: np.ndarray, **attrs: Any) -> Any:
    DYNAMIC_CONV2D.require(x_dtype=_tvm.dtype_of(x), w_dtype=_tvm.dtype_of(w),
                           w_constant=_tvm.is_const(w), w_shape=_tvm.shape_of(w),
                           w_scale_size=np.size(w_scale), w_zp_size=np.size(w_zp))
    return DYNAMIC_CONV2D.call([x, w, _tvm.const(np.asarray(w_scale, np.float32)),
                                _tvm.const(np.asarray(w_zp, np.int8))],
                               {k: attrs[k] for k in CONV_ATTRS})
