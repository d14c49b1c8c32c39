"""``canonqnn.conv2d_transpose`` as the build runs it: a strided, undilated one with constant
weights as one stride-1 conv per output phase (``_phase``), the phases then interleaved: each
output the same integer sum as in the op's definition (``ops.conv_transpose``: a conv of the
input upsampled by the strides), without multiplying the ``stride^2 - 1`` zeros the upsampling
inserts for every input. Otherwise the definition's one conv of the upsampled input. Either
way the convs take the build's conv forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import _tvm
from ..._tvm import te, tirx
from ...ops import conv, conv_transpose


def form(bb: Any, call: Any, legalize_conv: Callable[[Any, Any], Any]) -> Any:
    """The transposed conv ``call`` legalized by its output phases where ``_by_phases``, else as
    its definition's conv (``conv_transpose.equivalent_conv``); ``legalize_conv(bb, call)``
    legalizes each ``canonqnn.conv2d`` call it makes (the build's dispatch)."""
    a = _tvm.attrs_dict(call)
    x, w = call.args[:2]
    kh, kw = _tvm.shape_of(w)[2:]
    _, _, h, wd = _tvm.shape_of(x)
    out_size = conv_transpose.out_hw(h, wd, kh, kw, a)
    if _tvm.is_const(w) and _by_phases(a, kh, kw, out_size):
        return _legalize_phases(bb, a, list(call.args), kh, kw, out_size, legalize_conv)
    return legalize_conv(bb, conv_transpose.equivalent_conv(bb, call))


def _phase(r: int, stride: int, pad: int, kernel: int, out_size: int):
    """One output phase ``r`` (outputs ``i = q*stride + r``) along an axis, undilated:
    ``(first tap, taps, first input read, outputs)``. Output ``i`` sums input ``h`` with tap
    ``ky`` where ``i + pad = h*stride + ky``: the taps ``k0, k0 + stride, ...`` with ``k0 =
    (r + pad) mod stride``, and output ``q`` of the phase reads inputs ``q + first ..
    q + first + taps - 1`` against those taps reversed: a stride-1 convolution."""
    k0 = (r + pad) % stride
    taps = -(-(kernel - k0) // stride)
    first = (r + pad - k0) // stride - taps + 1
    return k0, taps, first, -(-(out_size - r) // stride)


def _by_phases(a: dict[str, Any], kh: int, kw: int, out_size: tuple[int, int]) -> bool:
    """Whether the transposed conv is lowered one output phase at a time (``form``):
    strided, undilated, every phase with a tap and an output."""
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    return ((sh, sw) != (1, 1) and (dh, dw) == (1, 1) and kh >= sh and kw >= sw
            and out_size[0] >= sh and out_size[1] >= sw)


def _te_window(first: tuple[int, int], size: tuple[int, int], x_zp: int):
    """The input rows and columns a phase's convolution reads, ``x_zp`` (a real zero) where
    they fall outside ``x``."""
    zero = tirx.const(x_zp, "int8")

    def compute(x):
        n, c, h, w = (int(d) for d in x.shape)

        def value(nn, cc, i, j):
            y, xx = i + first[0], j + first[1]
            inside = tirx.all(y >= 0, y < h, xx >= 0, xx < w)
            return tirx.if_then_else(inside, x[nn, cc, tirx.max(tirx.min(y, h - 1), 0),
                                               tirx.max(tirx.min(xx, w - 1), 0)], zero)

        return te.compute((n, c, *size), value, name="phase_window")

    return compute


def _te_interleave(strides: tuple[int, int], out_hw_: tuple[int, int]):
    """The output from its phases (row-major by phase): ``y[i, j] = phases[i % sh, j % sw]
    [i // sh, j // sw]``."""
    sh, sw = strides

    def compute(*phases):
        n, o = (int(d) for d in phases[0].shape[:2])

        def value(nn, oo, i, j):
            out = phases[-1][nn, oo, i // sh, j // sw]
            for index in range(len(phases) - 2, -1, -1):
                ry, rx = divmod(index, sw)
                out = tirx.if_then_else(tirx.all(i % sh == ry, j % sw == rx),
                                        phases[index][nn, oo, i // sh, j // sw], out)
            return out

        return te.compute((n, o, *out_hw_), value, name="interleave")

    return compute


def _legalize_phases(bb: Any, a: dict[str, Any], args: list, kh: int, kw: int,
                     out_size: tuple[int, int],
                     legalize_conv: Callable[[Any, Any], Any]) -> Any:
    """One stride-1 conv (``canonqnn.conv2d``, legalized by ``legalize_conv``) per output
    phase, then the phases interleaved: each output is the same integer sum as in the conv of
    the upsampled input, without multiplying the ``stride^2 - 1`` inserted zeros of every
    input."""
    x, w, bias, w_scale, w_zp = args
    (sh, sw), (pt, pl, _, _) = a["strides"], a["padding"]
    weights = _tvm.const_value(w)
    phases = []
    for ry in range(sh):
        k0y, my, fy, qy = _phase(ry, sh, pt, kh, out_size[0])
        for rx in range(sw):
            k0x, mx, fx, qx = _phase(rx, sw, pl, kw, out_size[1])
            window = bb.emit_te(_te_window((fy, fx), (qy + my - 1, qx + mx - 1), a["x_zp"]), x,
                                primfunc_name_hint="canonqnn_conv2d_transpose_window")
            taps = conv_transpose.flip_weight(weights[:, :, k0y::sh, k0x::sw], a["groups"])
            phase = conv.CONV2D.call([window, _tvm.const(taps, "int8"), bias, w_scale, w_zp],
                                     conv_transpose.conv2d_attrs(a))
            phases.append(bb.emit(legalize_conv(bb, phase)))
    return bb.emit_te(_te_interleave((sh, sw), out_size), *phases,
                      primfunc_name_hint="canonqnn_conv2d_transpose_interleave")
