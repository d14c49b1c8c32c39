"""``canonqnn.conv2d`` on the CPU's int8 dot-product instructions (``forms.dot``), NCHW: output
pixels in lanes (a row, or a pointwise conv's whole plane as one row), output channels in
lanes, or a depthwise conv's own form, chosen from the conv's shape and the target's ISA
(docs/build.md, "Int8 kernels"). Channels-last convs are ``forms.channels_last``'s.

The accumulator is the exact one of ``ops.conv``'s plain loop nest (only the order of the
integer additions differs), and the bias and requantization are the op's own
(``conv.output_value``), so ``conv.reference`` specifies every form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _tvm
from ..._tvm import te
from ...ops import conv
from .. import targets
from ..isa import DotISA, depthwise_isas, isa_for, padded_width, with_pair2
from . import choice, dot, unfold


def form(bb: Any, call: Any) -> Any:
    """The conv ``call`` legalized in the packed form its shape takes on the current target
    (``_packed_weights``, else ``_depthwise_weights``), or None where none applies: the op's
    own loop nest then. A form measured faster for this conv (``choice.chosen``, ``build
    --tune``) is taken over the rules' where the conv can take it."""
    a = _tvm.attrs_dict(call)
    x, w, bias, w_scale, w_zp = call.args
    if (subsampled := _strided_pointwise(bb, call, a)) is not None:
        return subsampled
    chosen = choice.chosen_form(call)
    if chosen in (None, UNFOLD) and (unfolded := _unfolded_columns(bb, call, a)) is not None:
        return unfolded
    o = _tvm.shape_of(w)[0]
    accumulator = _tvm.dtype_of(bias)  # int32, or int64 (TFLite 16x8)
    wzp = _tvm.const_value(w_zp)
    _, _, h, wd = _tvm.shape_of(x)
    _, cg, kh, kw = _tvm.shape_of(w)
    oh, ow = conv.out_hw(h, wd, kh, kw, a)
    packed = None
    if chosen in LAYOUTS:
        packed = _packed_weights(a, call, accumulator, wzp, only=chosen)
    if packed is None:
        packed = _packed_weights(a, call, accumulator, wzp)
    found = _depthwise_weights(a, call, accumulator, wzp, ow) if packed is None else None
    if packed is None and found is None:
        return None
    kind, table = conv.requant_multipliers(a, _tvm.const_value(w_scale), o)
    mult = _tvm.const(table, str(table.dtype))
    wzp_const = _tvm.const(np.broadcast_to(wzp, (o,)).astype(np.int32), "int32")
    depthwise = found[0] if found is not None else None
    layout, flat, flat_width, flat_length = None, {}, 0, 0
    if packed is not None:  # the weights (and the bias correction of vpdpbusd) at build time
        isa, weights, corrected, layout = packed
        if layout == "channels":  # channels in lanes: the bias in whole vectors
            corrected = dot.padded_bias(corrected, isa.lanes)
        if layout == "flat":
            tile = dot.flat_tile((h, wd), (kh, kw), a["padding"], o, isa)
            assert tile is not None  # _packed_weights chose the layout by it
            flat = tile
            flat_width = wd + a["padding"][1] + a["padding"][3]
            flat_length = dot.flat_length(oh, flat_width, flat, isa)
        bias, w = _tvm.const(corrected, "int32"), _tvm.const(weights.packed, isa.weight_dtype)
    else:
        assert found is not None and depthwise is not None  # packed is None: found is not
        _, weights, corrected = found
        w = _tvm.const(weights.packed, depthwise.weight_dtype)
        if corrected is not None:
            bias = _tvm.const(corrected, "int32")

    def accumulate(x, w, bias):
        """``acc(nn, oo, i, j)``: the accumulator in the form chosen above, started from the
        bias where ``bias`` is given (``dot.with_bias``)."""
        n = int(x.shape[0])

        def biased(acc, channel):
            return acc if bias is None else dot.with_bias(acc, bias, channel)

        if packed is not None and layout == "plane":  # the whole plane as one row
            acc = biased(dot.te_plane_conv(x, w, isa, a["x_zp"], dot.row_tile(isa, o, oh * ow)),
                         lambda nn, oc, i, j: oc)
            return lambda nn, oo, i, j: acc[nn, oo, 0, i * ow + j]
        if packed is not None and layout == "flat":  # the padded plane flattened
            acc = biased(dot.te_flat_conv(x, w, isa, a["x_zp"], a["padding"], (oh, ow),
                                          flat), lambda nn, oc, i, p: oc)
            return lambda nn, oo, i, j: acc[nn, oo, 0, i * flat_width + j]
        if packed is not None and layout == "rows":  # output pixels in lanes: NCHW already
            acc = biased(dot.te_row_conv(x, w, isa, a["x_zp"], a["strides"], a["dilation"],
                                         a["padding"], (oh, ow), dot.row_tile(isa, o, ow, oh),
                                         a["groups"]), lambda nn, oc, i, j: oc)
            return lambda nn, oo, i, j: acc[nn, oo, i, j]
        if packed is not None:  # output channels in lanes
            lanes = isa.lanes
            acc = biased(dot.te_packed_conv(x, w, isa, a["x_zp"], a["strides"], a["dilation"],
                                            a["padding"], (oh, ow),
                                            {**dot.conv_tile(isa, int(w.shape[0]), ow),
                                             "macs": n * o * oh * ow * cg * kh * kw},
                                            a["groups"]),
                         lambda nn, ob, i, j, ol: ob * lanes + ol)
            return lambda nn, oo, i, j: acc[nn, oo // lanes, i, j, oo % lanes]
        assert depthwise is not None  # neither packed form: the depthwise one
        acc = biased(dot.te_depthwise_conv(x, w, depthwise, a["x_zp"], a["strides"],
                                           a["dilation"], a["padding"], (oh, ow), (kh, kw)),
                     lambda nn, cc, i, j: cc)
        return lambda nn, oo, i, j: acc[nn, oo, i, j]

    # the accumulator starts from an int32 bias (an int64 one, TFLite 16x8's, is added after)
    started = accumulator == "int32"

    def compute(x, w, bias, mult, wzp):
        acc = accumulate(x, w, bias if started else None)
        shape = (int(x.shape[0]), o, oh, ow)
        raw = a["out_dtype"] == "int32"
        name = "conv2d_acc" if raw else "requant"
        output = conv.output_value(a, kind, accumulator)

        def value(nn, oo, i, j):
            return output(acc(nn, oo, i, j), None if started else bias, mult, oo)

        if layout == "flat":
            # the flattened padded plane requantized whole (per tile: its pixels are no
            # rectangle of the output), then its outputs copied out, a row's last kw - 1 left
            row = te.compute((shape[0], o, 1, flat_length),
                             lambda nn, oo, i, p: value(nn, oo, 0, p), name=f"{name}_rows")
            return te.compute(shape, lambda nn, oo, i, j: row[nn, oo, 0, i * flat_width + j],
                              name=name)
        if packed is not None and layout == "plane":
            # each channel's plane as one row of exactly its pixels, then read as NCHW (the
            # schedule inlines the read: the row is written straight into the output). One
            # stage reading the padded accumulator at i * W + j would not do: TVM's region
            # analysis gives that stage a range of j cut short by the padding.
            row = te.compute((shape[0], o, 1, oh * ow),
                             lambda nn, oo, i, j: value(nn, oo, 0, j), name=f"{name}_rows")
            return te.compute(shape, lambda nn, oo, i, j: row[nn, oo, 0, i * ow + j],
                              name=name)
        padded = padded_width(ow, isa if packed is not None and layout == "rows"
                                      else depthwise)
        if raw or padded == ow or layout == "flat":
            return te.compute(shape, value, name=name)
        # requantized on whole vectors of the padded row, then the row's outputs copied out:
        # a row's tail read from the vector accumulator in pieces stalls on store forwarding
        whole = te.compute((*shape[:3], padded), value, name="requant_rows")
        return te.compute(shape, lambda nn, oo, i, j: whole[nn, oo, i, j], name="requant")

    return bb.call_te(compute, x, w, bias, mult, wzp_const, primfunc_name_hint="canonqnn_conv2d")


def _strided_pointwise(bb: Any, call: Any, a: dict[str, Any]) -> Any:
    """A 1x1 conv with strides and no padding as the same conv at stride 1 of the input's
    pixels it reads (a subsampling kernel, then the pointwise forms: the plane as one row),
    or None. Every output is the same sum of the same products. The row form's stride
    phases cost a strided 1x1 conv twice to three times its MAC rate at stride 1 (ResNet's
    downsampling convs, Zen 4)."""
    if not _subsamples(call, a):
        return None
    x, w = call.args[:2]
    o, cg, kh, kw = _tvm.shape_of(w)
    sh, sw = a["strides"]
    n, c, h, wd = _tvm.shape_of(x)
    oh, ow = conv.out_hw(h, wd, kh, kw, a)
    unit_attrs = {**a, "strides": (1, 1), "dilation": (1, 1)}

    def at_unit_stride(value: Any) -> Any:
        return bb.normalize(_tvm.make_call(call.op, [value, *call.args[1:]], unit_attrs))

    # only where the conv at stride 1 takes a packed form (else the op's own nest, strided)
    probe = at_unit_stride(_tvm.tensor_var("subsampled", (n, c, oh, ow), _tvm.dtype_of(x)))
    if _packed_weights(unit_attrs, probe, _tvm.dtype_of(call.args[2]),
                       _tvm.const_value(call.args[4])) is None:
        return None
    sub = bb.emit_te(lambda t: te.compute((n, c, oh, ow), lambda nn, cc, i, j: t[
        nn, cc, i * sh, j * sw], name="subsample"), x, primfunc_name_hint="canonqnn_subsample")
    return form(bb, at_unit_stride(sub))


OPAQUE = 8  # TVM's OpPatternKind kOpaque: FuseOps fuses nothing into or out of the kernel


def _unfolded_columns(bb: Any, call: Any, a: dict[str, Any]) -> Any:
    """A conv of a few input channels and a wide kernel (ResNet's stem: 3 channels, 7x7) as a
    conv of one kernel column (``kh x 1``, stride ``(sh, 1)``) of its input unfolded along
    the columns (``unfold.te_unfold_columns``, strides 1 and 2 along the row, no dilation
    there), or None (``_unfolded_call``). Every output is the same sum of the same products."""
    found = _unfolded_call(call, a)
    if found is None:
        return None
    column_attrs, args = found
    _, _, kh, kw = _tvm.shape_of(call.args[1])
    _, _, h, wd = _tvm.shape_of(call.args[0])
    ow = conv.out_hw(h, wd, kh, kw, a)[1]
    sw, pl = a["strides"][1], a["padding"][1]
    parallel = targets.cpu_cores(targets.current_llvm_target()) > 1
    # its own kernel (opaque to fusion): fused into its producer (the model's quantize),
    # that producer's value would be computed once per read, kw times
    u = bb.emit_te(lambda t: unfold.te_unfold_columns(t, kw, sw, pl, ow, a["x_zp"], parallel),
                   call.args[0], primfunc_name_hint="canonqnn_unfold_columns",
                   primfunc_attrs={"op_pattern": OPAQUE})
    return form(bb, bb.normalize(_tvm.make_call(call.op, [u, *args], column_attrs)))


def _unfolded_call(call: Any, a: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """``(attrs, arguments but the input)`` of the conv ``_unfolded_columns`` runs instead,
    or None where it does not. The dot-product forms pad the channels of each tap to whole
    pairs (3 to 4: a quarter of the lanes idle at every tap of the stem); unfolded, a row's
    ``C * kw`` values are padded once (21 to 24), so the stem's reduction takes 42
    instructions a tile instead of 49. Taken for at most 4 input channels, where that pads at
    least a tenth fewer values and the unfolded conv takes a packed form."""
    x, w = call.args[:2]
    o, _, kh, kw = _tvm.shape_of(w)
    n, c, h, wd = _tvm.shape_of(x)
    has_feature = targets.current_target_features()
    isa = isa_for(has_feature) if has_feature is not None else None
    (sh, sw), (dh, dw), (pt, _, pb, _) = a["strides"], a["dilation"], a["padding"]
    if (isa is None or targets.current_llvm_target() is None or a["groups"] != 1 or kw == 1
            or sw not in (1, 2) or dw != 1 or _tvm.dtype_of(x) != "int8"
            or not _tvm.is_const(w)):
        return None
    # (at most 4 channels: an image's first layer; with more, the unfolded copy grows with
    # them and the padding saved does not)
    pair = isa.pair
    padded, unfolded = kw * -(-c // pair) * pair, -(-(c * kw) // pair) * pair
    if c > 4 or unfolded * 10 > padded * 9:
        return None
    ow = conv.out_hw(h, wd, kh, kw, a)[1]
    weights = _tvm.const_value(w).transpose(0, 1, 3, 2).reshape(o, c * kw, kh, 1)
    column_attrs = {**a, "strides": (sh, 1), "dilation": (dh, 1), "padding": (pt, 0, pb, 0)}
    args = [_tvm.const(np.ascontiguousarray(weights), "int8"), *call.args[2:]]
    probe = _tvm.BlockBuilder().normalize(_tvm.make_call(call.op, [
        _tvm.tensor_var("unfolded", (n, c * kw, h, ow), "int8"), *args], column_attrs))
    if _packed_weights(column_attrs, probe, _tvm.dtype_of(call.args[2]),
                       _tvm.const_value(call.args[4])) is None:
        return None
    return column_attrs, args


def _subsamples(call: Any, a: dict[str, Any]) -> bool:
    """Whether the conv is a 1x1 one with strides and no padding or groups
    (``_strided_pointwise``)."""
    _, _, kh, kw = _tvm.shape_of(call.args[1])
    return ((kh, kw) == (1, 1) and tuple(a["strides"]) != (1, 1) and not any(a["padding"])
            and a["groups"] == 1)


def _depthwise_weights(a: dict[str, Any], call: Any, accumulator: str, wzp: np.ndarray,
                       out_width: int):
    """``(isa, PackedWeights, corrected bias)`` of the depthwise form
    (``dot.te_depthwise_conv``) where it applies: one output channel per input channel,
    int8, constant weights, an int32 accumulator, a target with a dot-product instruction;
    the first of ``isa.depthwise_isas`` the weights are exact on (an int16-pair one
    where the bias is not constant: it takes no correction, and the bias is None). Else None.
    ``out_width``: the output row's length."""
    x, w, bias = call.args[:3]
    has_feature = targets.current_target_features()
    if (has_feature is None or not a["groups"] == _tvm.shape_of(x)[1] == _tvm.shape_of(w)[0] > 1
            or accumulator != "int32" or _tvm.dtype_of(x) != "int8" or not _tvm.is_const(w)):
        return None
    for isa in depthwise_isas(has_feature, out_width):
        weights = dot.depthwise_weights(_tvm.const_value(w), wzp, a["x_zp"], isa)
        if weights is None:
            continue
        if not _tvm.is_const(bias):
            if not weights.bias_correction.any():
                return isa, weights, None
        elif (found := dot.with_corrected_bias(weights, _tvm.const_value(bias))) is not None:
            return isa, *found
    return None


LAYOUTS = ("plane", "flat", "rows", "channels")  # the packed forms (``_packed_weights``)
UNFOLD = "unfold"  # the input unfolded along its columns (``_unfolded_columns``)


def layouts(call: Any) -> list[str]:
    """The forms the conv ``call`` can take on the current target, the one the build's rules
    pick first (``UNFOLD`` or one of ``LAYOUTS``): the candidates a measured choice
    (``choice``, ``build --tune``) times. Empty where it takes none of them (a depthwise conv,
    an int16 one, the plain loop nest)."""
    a = _tvm.attrs_dict(call)
    isa = _packed_isa(a, call, _tvm.dtype_of(call.args[2]))
    if isa is None or _subsamples(call, a):  # (that one: its conv at stride 1's rules)
        return []
    rule, other = _layouts_on(a, call, isa)
    return ([UNFOLD] if _unfolded_call(call, a) is not None else []) + rule + other


def _packed_isa(a: dict[str, Any], call: Any, accumulator: str) -> DotISA | None:
    """The target's dot-product ISA where the conv takes a packed form (``_layouts_on``):
    int8, constant weights and bias, an int32 accumulator, not depthwise; else None."""
    x, w, bias = call.args[:3]
    if (accumulator != "int32" or _tvm.dtype_of(x) != "int8" or not _tvm.is_const(w)
            or not _tvm.is_const(bias)):
        return None
    has_feature = targets.current_target_features()
    isa = isa_for(has_feature) if has_feature is not None else None
    _, c, _, _ = _tvm.shape_of(x)
    o = _tvm.shape_of(w)[0]
    if isa is None or a["groups"] == c == o > 1:  # depthwise: its own form
        return None
    return isa


def _layouts_on(a: dict[str, Any], call: Any, isa: Any) -> tuple[list[str], list[str]]:
    _, c, h, wd = _tvm.shape_of(call.args[0])
    o, _, kh, kw = _tvm.shape_of(call.args[1])
    groups = a["groups"]
    pointwise = (kh == kw == 1 and groups == 1 and tuple(a["strides"]) == (1, 1)
                 and not any(a["padding"]))
    unit = (groups == 1 and tuple(a["strides"]) == (1, 1) and tuple(a["dilation"]) == (1, 1))
    ow = conv.out_hw(h, wd, kh, kw, a)[1]
    channels = groups == 1 or (o // groups) % isa.lanes == 0
    # on 16 registers output channels in lanes win where output pixels would idle lanes or
    # a tap moves the row (dot.channels_in_lanes_first)
    pixels = not (channels and dot.channels_in_lanes_first(isa, ow, kh * kw, c // groups))
    rule: list[str] = []
    other: list[str] = []
    if pointwise:
        (rule if dot.plane_as_row((h, wd), o, isa) else other).append("plane")
    if unit and dot.flat_tile((h, wd), (kh, kw), a["padding"], o, isa):
        (rule if pixels else other).append("flat")
    (rule if pixels and dot.rows_fit(ow, isa, kh * kw) else other).append("rows")
    if channels:
        rule.append("channels")
    return rule, other


def _packed_weights(a: dict[str, Any], call: Any, accumulator: str, wzp: np.ndarray,
                    only: str | None = None):
    """``(isa, PackedWeights, bias, layout)`` where the conv runs on the target's dot-product
    instructions (``forms.dot``): an int8 conv with constant weights and bias and an int32
    accumulator, not depthwise (``_depthwise_weights``'); else None (the plain loop nest).
    ``layout``, the first of these the rules allow (``_layouts_on``): ``"plane"``, output
    pixels in lanes with the whole plane as one row (``te_plane_conv``), for the pointwise
    convs ``dot.plane_as_row`` names; ``"flat"``, the same with the padded plane flattened
    (``te_flat_conv``), for the stride-1 convs ``dot.flat_tile`` names; ``"rows"``, output
    pixels in lanes (``te_row_conv``), where the output row fills the vectors; else
    ``"channels"``, output channels in lanes (``te_packed_conv``), where each group's output
    channels fill whole vectors. With ``only``, that layout where the conv can take it (a
    measured choice), else None."""
    isa = _packed_isa(a, call, accumulator)
    if isa is None:
        return None
    w, bias = call.args[1:3]
    for candidate in with_pair2(isa):
        rule, other = _layouts_on(a, call, candidate)
        if only is not None:
            layout = only if only in rule + other else None
        else:
            layout = rule[0] if rule else None
        if layout is None:
            continue
        found = dot.packed_weights_for(_tvm.const_value(w), wzp, a["x_zp"], candidate,
                                       _tvm.const_value(bias), rows=layout != "channels")
        if found is not None:
            return candidate, *found, layout
    return None
