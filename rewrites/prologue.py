"""Fold a zero padding into the conv that reads it.

    canonqnn.conv2d(canonqnn.pad(x, H/W only, constant x_zp), padding p)
        -> canonqnn.conv2d(x, p + pads)

PyTorch writes TF-style asymmetric padding as a pad before the conv (its quantizer shares the
pad's parameters), ONNX exporters sometimes write Pad -> Conv: the conv's own padding reads
the same integer (the input zero point, real 0), so the two are one conv with the padding ONNX
and TFLite write, whatever the rounding.
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn.ops import PREFIX

from ._engine import Context, Rule
from ._match import Refolded, build_refolded

CONV2D = PREFIX + "conv2d"


def padded_conv(ctx: Context, call: Any):
    x = call.args[0]
    pad = ctx.call(x, PREFIX + "pad")
    if pad is None or not ctx.single_use(x):
        return None
    p, c = _tvm.attrs_dict(pad), _tvm.attrs_dict(call)
    before, after = [int(v) for v in p["pad_before"]], [int(v) for v in p["pad_after"]]
    if p["mode"] != "constant" or len(before) != 4 or any(before[:2]) or any(after[:2]):
        return None
    if int(p["pad_value"]) != c["x_zp"] or (p["scale"], p["zp"]) != (c["x_scale"], c["x_zp"]):
        return None  # padding with something other than the conv's real zero
    top, left, bottom, right = (int(v) for v in c["padding"])
    padding = [top + before[2], left + before[3], bottom + after[2], right + after[3]]
    return Refolded(call, [pad.args[0], *call.args[1:]], dict(c, padding=padding))


RULES = (
    Rule("conv_pad", CONV2D, (padded_conv,), build_refolded,
         "conv2d(pad(x, zero point), padding p) -> conv2d(x, padding p + pads)", phase="epilogue"),
)
