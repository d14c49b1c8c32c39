"""``canonqnn.conv2d_transpose``: int8 NCHW transposed convolution with IOHW weights.

    acc[n,o,i,j] = sum (x[n,c,h,w] - x_zp) * (w[c, o mod O/G, ky, kx] - w_zp[o])  + bias[o]
                   over c in group(o), ky, kx with i = h*sh - pt + ky*dh, j = w*sw - pl + kx*dw
    y = requant_accumulator(acc, M[o], out_zp, act_min, act_max)
    M[o] = f32(f32(x_scale * w_scale[o]) / out_scale)                  (rounding rne_f32)
    OH = (H - 1)*sh - pt - pb + dh*(kh - 1) + oph + 1                (OW likewise)

Weights are ONNX's ``[C, O/G, kh, kw]``; ``w_scale``/``w_zp`` are per output channel (``[O]``)
or one value. The op is defined as ``canonqnn.conv2d`` of the input upsampled by the
strides (inserted taps hold ``x_zp``, real zero), padded by ``dh*(kh-1) - pt`` before and
``dh*(kh-1) - pb + oph`` after (cropped where that is negative), with the kernel flipped and
regrouped to OIHW: the same integer sum, and conv2d's requantization. The op's own
legalization is that conv (``equivalent_conv``); the build lowers a strided, undilated one with
constant weights as one stride-1 conv per output phase, whose sums are the definition's
without its inserted zeros, the phases then interleaved (``canonqnn.build.forms``).

With a Q31 rounding the op is TFLite's reference TRANSPOSE_CONV kernel (int8): the same
accumulator plus bias, then conv2d's Q31 requantization with the double-precision multiplier
``f64(x_scale) * f64(w_scale[o]) / f64(out_scale)`` (measured on the interpreter, per-channel
and per-tensor weights alike).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..numerics.q31 import Q31_ROUNDINGS
from ..qparams import QParams, check_accumulator_multipliers
from . import conv
from ._dtypes import bias_per_channel
from ._registry import CanonicalOp, Refusal, register

ATTRS = ("x_scale", "x_zp", "out_scale", "out_zp", "strides", "padding", "output_padding",
         "dilation", "groups", "act_min", "act_max", "rounding")


def _margins(a: dict[str, Any], kh: int, kw: int) -> tuple[int, int, int, int]:
    """Padding (negative: cropping) of the upsampled input: (top, left, bottom, right)."""
    (dh, dw), (pt, pl, pb, pr), (oph, opw) = a["dilation"], a["padding"], a["output_padding"]
    return (dh * (kh - 1) - pt, dw * (kw - 1) - pl, dh * (kh - 1) - pb + oph,
            dw * (kw - 1) - pr + opw)


def out_hw(h: int, w: int, kh: int, kw: int, a: dict[str, Any]) -> tuple[int, int]:
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilation"], a["padding"]
    oph, opw = a["output_padding"]
    return ((h - 1) * sh - pt - pb + dh * (kh - 1) + oph + 1,
            (w - 1) * sw - pl - pr + dw * (kw - 1) + opw + 1)


def _upsampled_hw(h: int, w: int, kh: int, kw: int, a: dict[str, Any]) -> tuple[int, int]:
    top, left, bottom, right = _margins(a, kh, kw)
    (sh, sw) = a["strides"]
    return (h - 1) * sh + 1 + top + bottom, (w - 1) * sw + 1 + left + right


def _infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    n, _, h, w = _tvm.shape_of(call.args[0])
    _, opg, kh, kw = _tvm.shape_of(call.args[1])
    return _tvm.tensor_type((n, opg * a["groups"], *out_hw(h, w, kh, kw, a)), "int8")


def conv2d_attrs(a: dict[str, Any]) -> dict[str, Any]:
    """The ``canonqnn.conv2d`` attributes of the equivalent convolution."""
    return dict(x_scale=a["x_scale"], x_zp=a["x_zp"], out_scale=a["out_scale"],
                out_zp=a["out_zp"], strides=[1, 1], padding=[0, 0, 0, 0],
                dilation=list(a["dilation"]), groups=a["groups"], act_min=a["act_min"],
                act_max=a["act_max"], rounding=a["rounding"], out_dtype="int8",
                source_dtype="int8")


# ---------------------------------------------------------------- numpy
def upsample(x: np.ndarray, kh: int, kw: int, **a) -> np.ndarray:
    """The conv2d input: ``x`` spread out by the strides, margins filled with ``x_zp``."""
    n, c, h, w = x.shape
    (sh, sw) = a["strides"]
    top, left, bottom, right = _margins(a, kh, kw)
    hu, wu = (h - 1) * sh + 1, (w - 1) * sw + 1
    out = np.full((n, c, hu + max(top, 0) + max(bottom, 0), wu + max(left, 0) + max(right, 0)),
                  a["x_zp"], np.int8)
    out[:, :, max(top, 0):max(top, 0) + hu:sh, max(left, 0):max(left, 0) + wu:sw] = x
    return out[:, :, max(-top, 0):out.shape[2] - max(-bottom, 0),
               max(-left, 0):out.shape[3] - max(-right, 0)]


def flip_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """``[C, O/G, kh, kw]`` transposed-conv weights as the equivalent conv's OIHW weights."""
    c, opg, kh, kw = w.shape
    cpg = c // groups
    grouped = w.reshape(groups, cpg, opg, kh, kw)[:, :, :, ::-1, ::-1]
    return np.ascontiguousarray(grouped.transpose(0, 2, 1, 3, 4).reshape(groups * opg, cpg, kh, kw))


def reference(x, w, bias, w_scale, w_zp, **a) -> np.ndarray:
    kh, kw = w.shape[2:]
    return conv.reference(upsample(x, kh, kw, **a), flip_weight(w, a["groups"]), bias, w_scale,
                          w_zp, **conv2d_attrs(a))


# ---------------------------------------------------------------- TE
def _te_upsample(a: dict[str, Any], kh: int, kw: int):
    (sh, sw) = a["strides"]
    top, left, _, _ = _margins(a, kh, kw)
    zero = tirx.const(a["x_zp"], "int8")

    def compute(x):
        n, c, h, w = (int(d) for d in x.shape)
        rows, cols = _upsampled_hw(h, w, kh, kw, a)

        def value(nn, cc, i, j):
            u, v = i - top, j - left  # position on the stride grid of the input
            inside = tirx.all(u >= 0, u <= (h - 1) * sh, u % sh == 0,
                              v >= 0, v <= (w - 1) * sw, v % sw == 0)
            uc = tirx.max(tirx.min(u, (h - 1) * sh), 0)
            vc = tirx.max(tirx.min(v, (w - 1) * sw), 0)
            return tirx.if_then_else(inside, x[nn, cc, uc // sh, vc // sw], zero)

        return te.compute((n, c, rows, cols), value, name="upsample")

    return compute


def _te_flip(groups: int):
    def compute(w):
        c, opg, kh, kw = (int(d) for d in w.shape)
        cpg = c // groups
        return te.compute((groups * opg, cpg, kh, kw), lambda o, ci, ky, kx: w[
            (o // opg) * cpg + ci, o % opg, kh - 1 - ky, kw - 1 - kx], name="flip")

    return compute


def equivalent_conv(bb: Any, call: Any) -> Any:
    """The ``canonqnn.conv2d`` call the transposed conv ``call`` is defined as (module doc):
    of its input upsampled (emitted into ``bb``), with its weights flipped and regrouped."""
    a = _tvm.attrs_dict(call)
    x, w, bias, w_scale, w_zp = call.args
    kh, kw = _tvm.shape_of(w)[2:]
    xu = bb.emit_te(_te_upsample(a, kh, kw), x,
                    primfunc_name_hint="canonqnn_conv2d_transpose_upsample")
    if _tvm.is_const(w):
        wf = _tvm.const(flip_weight(_tvm.const_value(w), a["groups"]), "int8")
    else:
        wf = bb.emit_te(_te_flip(a["groups"]), w,
                        primfunc_name_hint="canonqnn_conv2d_transpose_flip")
    return conv.CONV2D.call([xu, wf, bias, w_scale, w_zp], conv2d_attrs(a))


def _legalize(bb: Any, call: Any) -> Any:
    return conv.CONV2D.legalize(bb, equivalent_conv(bb, call))


def conv2d_transpose_constraint(weight_scales: int = 1, channels: int = 1,
                                bias_shape=None) -> Refusal | None:
    """x int8 NCHW, w int8 [C, O/G, kh, kw] (constant or not), bias int32 [O], w_scale float32
    [O] or [], w_zp int8 [O] or []; per-tensor x and output; output size >= 1"""
    if weight_scales not in (1, channels):
        return Refusal(f"{weight_scales} weight scales for {channels} output channels")
    return None if bias_shape is None else bias_per_channel(bias_shape, channels)


CONV2D_TRANSPOSE = register(CanonicalOp(
    name="conv2d_transpose",
    layout="NCHW",
    weight_layout="IOHW",
    summary="int8 NCHW transposed convolution (IOHW weights, groups, dilation, pads, "
            "output_padding, per-output-channel weights), int32 bias, requantized to int8 "
            "with an integer activation clamp",
    args=("x", "w", "bias", "w_scale", "w_zp"),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=reference,
    constraint=conv2d_transpose_constraint,
    roundings=("rne_f32", "xnnpack", *Q31_ROUNDINGS),
    absorbs_clamp=True,
    absorbs_table=True,
))


def conv2d_transpose(x: Any, w: Any, bias: np.ndarray, x_qp: QParams, w_qp: QParams,
                     out_qp: QParams, *, strides, padding, output_padding, dilation, groups: int,
                     act: tuple[int, int] = (-128, 127), rounding: str = "rne_f32") -> Any:
    """Build ``canonqnn.conv2d_transpose``; ``w_qp`` holds one value or one per output channel."""
    channels = _tvm.shape_of(w)[1] * int(groups)
    CONV2D_TRANSPOSE.require(weight_scales=w_qp.scale.size, channels=channels,
                             bias_shape=(np.size(bias),))
    check_accumulator_multipliers(x_qp.scalar_scale, w_qp.scale, out_qp)
    return CONV2D_TRANSPOSE.call(
        [x, w, _tvm.const(np.asarray(bias, np.int32).reshape(channels), "int32"),
         _tvm.const(w_qp.scale, "float32"), _tvm.const(w_qp.zero_point.astype(np.int8), "int8")],
        dict(x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp, out_scale=out_qp.scalar_scale,
             out_zp=out_qp.scalar_zp, strides=list(strides), padding=list(padding),
             output_padding=list(output_padding), dilation=list(dilation), groups=int(groups),
             act_min=int(act[0]), act_max=int(act[1]), rounding=rounding),
    )
