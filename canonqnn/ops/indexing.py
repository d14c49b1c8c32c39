"""int8 indexing and layout ops: ``pad``, ``gather``, ``strided_slice``, ``tile``,
``broadcast_to``, ``depth_to_space``, ``space_to_depth``.

None of them does arithmetic: every output element is an input element (or, for ``pad`` in
constant mode, the int8 ``pad_value``), so input and output share one scale/zero point (carried
as ``scale``/``zp`` for pattern authors). Where a model gives the output other parameters, the
rules requantize (``canonqnn.requantize``). All shapes are static. ``pad``, ``strided_slice``
and ``gather`` also move TFLite's 16x8 int16 activations (the output has the input's dtype).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .. import _tvm
from .._tvm import te, topi
from ..qparams import QParams, activation_range
from ._dtypes import activation_dtype, input_type
from ._registry import CanonicalOp, Refusal, register

FAMILY = "indexing"


def _int8(shape) -> Any:
    return _tvm.tensor_type(shape, "int8")


def _shared(qp: QParams) -> dict[str, Any]:
    return dict(scale=qp.scalar_scale, zp=qp.scalar_zp)


# ---------------------------------------------------------------- pad
PAD_MODES: dict[str, Literal["constant", "reflect", "edge", "wrap"]] = {
    "constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}
_TOPI_PAD = {"reflect": "reflect_pad", "edge": "replicate_pad", "wrap": "circular_pad"}


def _pad_shape(shape, a: dict) -> list[int]:
    return [d + b + e for d, b, e in zip(shape, a["pad_before"], a["pad_after"])]


def _pad_reference(x, pad_before, pad_after, mode, pad_value, scale, zp):
    widths = list(zip(pad_before, pad_after))
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=x.dtype.type(pad_value))
    return np.pad(x, widths, mode=PAD_MODES[mode])


def _pad_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    if a["mode"] == "constant":
        return bb.call_te(topi.nn.pad, call.args[0], a["pad_before"], a["pad_after"],
                          pad_value=int(a["pad_value"]), primfunc_name_hint="canonqnn_pad")
    pad = getattr(topi.nn, _TOPI_PAD[a["mode"]])
    return bb.call_te(pad, call.args[0], pad_before=a["pad_before"], pad_after=a["pad_after"],
                      primfunc_name_hint="canonqnn_pad")


def pad_constraint(x_dtype: str, rounding: str | None = None, zero_points=(),
                   mode: str = "constant", x_shape=None, pad_before=(),
                   pad_after=()) -> Refusal | None:
    """x int8, or int16 (TFLite's 16x8 int16 activations, under the Q31 roundings, zero points
    0); mode constant, reflect, edge or wrap; non-negative pads; reflect pads < the axis length,
    wrap pads <= it; output shares the input's scale and zero point"""
    if mode not in PAD_MODES:
        return Refusal(f"pad mode {mode!r}")
    if any(int(p) < 0 for p in (*pad_before, *pad_after)):
        return Refusal("negative padding (cropping)")
    limit = {"reflect": 1, "wrap": 0}.get(mode)
    if limit is not None and x_shape is not None and any(
            max(int(b), int(e)) > size - limit
            for size, b, e in zip(x_shape, pad_before, pad_after)):
        return Refusal(f"{mode} padding wider than the axis allows")
    return activation_dtype(x_dtype, rounding, zero_points)


PAD = register(CanonicalOp(
    name="pad",
    summary="int8 (or int16) padding: constant (a pad value of the input's type), reflect, "
            "edge or wrap",
    args=("x",),
    attrs=("pad_before", "pad_after", "mode", "pad_value", "scale", "zp"),
    infer=lambda call: input_type(call, _pad_shape(_tvm.shape_of(call.args[0]),
                                                    _tvm.attrs_dict(call))),
    legalize=_pad_legalize,
    reference=_pad_reference,
    constraint=pad_constraint,
    family=FAMILY,
))


def pad(x: Any, qp: QParams, pad_before, pad_after, mode: str = "constant",
        pad_value: int = 0) -> Any:
    PAD.require(x_dtype=_tvm.dtype_of(x), zero_points=(qp.scalar_zp,), mode=mode,
                x_shape=_tvm.shape_of(x), pad_before=pad_before, pad_after=pad_after)
    dtype = _tvm.dtype_of(x)
    lo, hi = activation_range(dtype)
    if not lo <= int(pad_value) <= hi:
        raise ValueError(f"pad value {pad_value} is not an {dtype} value")
    return PAD.call([x], dict(pad_before=[int(p) for p in pad_before],
                              pad_after=[int(p) for p in pad_after], mode=mode,
                              pad_value=int(pad_value), **_shared(qp)))


# ---------------------------------------------------------------- gather
def _gather_infer(call: Any) -> Any:
    shape = _tvm.shape_of(call.args[0])
    axis = _tvm.attrs_dict(call)["axis"]
    return input_type(call, (*shape[:axis], *_tvm.shape_of(call.args[1]), *shape[axis + 1:]))


def _gather_reference(x, indices, axis, scale, zp):
    return np.take(x, np.asarray(indices).astype(np.int64), axis=axis, mode="wrap")


def _gather_legalize(bb: Any, call: Any) -> Any:
    axis = _tvm.attrs_dict(call)["axis"]
    x, indices = call.args
    mode = "wrap"  # negative indices count from the end
    if _tvm.is_const(indices):
        # Normalized at rewrite time: a clamp (a no-op here) is cheaper than a modulo, and
        # topi's unchecked "fast" mode warns at every build.
        values = _tvm.const_value(indices)
        if values.size and values.min() >= 0 and values.max() < _tvm.shape_of(x)[axis]:
            mode = "clip"
    return bb.call_te(topi.take, x, indices, axis=axis, mode=mode,
                      primfunc_name_hint="canonqnn_gather")


def _int8_input(x_dtype: str) -> Refusal | None:
    return None if x_dtype == "int8" else Refusal(f"{x_dtype} input (int8)")


def gather_constraint(x_dtype: str = "int8", indices_dtype: str = "int64", indices=None,
                      axis_length: int | None = None, rounding: str | None = None,
                      zero_points=()) -> Refusal | None:
    """x int8, or int16 (TFLite's 16x8 int16 activations, under the Q31 roundings, zero points
    0); indices int32/int64 (constant or not) in [-n, n) (n: the axis length): negative ones
    count from the end, and run-time indices outside it wrap (modulo n; the frontends compute
    in-range indices: the GATHER_ND / GatherND imports clamp each index into its axis); output
    shares the input's scale and zero point"""
    if (why := activation_dtype(x_dtype, rounding, zero_points)) is not None:
        return why
    if indices_dtype not in ("int32", "int64"):
        return Refusal(f"{indices_dtype} indices (int32 or int64)")
    values = None if indices is None else np.asarray(indices)
    if values is not None and axis_length is not None and values.size and \
            (values.min() < -axis_length or values.max() >= axis_length):
        return Refusal(f"indices outside [-{axis_length}, {axis_length}) (the axis length)")
    return None


GATHER = register(CanonicalOp(
    name="gather",
    summary="int8 (or int16) gather along one axis (ONNX Gather and GatherND, TFLite GATHER "
            "and GATHER_ND); parameters unchanged",
    args=("x", "indices"),
    attrs=("axis", "scale", "zp"),
    infer=_gather_infer,
    legalize=_gather_legalize,
    reference=_gather_reference,
    constraint=gather_constraint,
    family=FAMILY,
))


def gather(x: Any, indices: Any, axis: int, qp: QParams) -> Any:
    GATHER.require(x_dtype=_tvm.dtype_of(x), indices_dtype=_tvm.dtype_of(indices),
                   indices=_tvm.const_value(indices) if _tvm.is_const(indices) else None,
                   axis_length=_tvm.shape_of(x)[int(axis)], zero_points=(qp.scalar_zp,))
    return GATHER.call([x, indices], dict(axis=int(axis), **_shared(qp)))


# ---------------------------------------------------------------- strided_slice
def _slice_shape(shape, a: dict) -> list[int]:
    out = list(shape)
    for axis, size in zip(a["axes"], a["sizes"]):
        out[axis] = size
    return out


def _slice_reference(x, axes, begin, strides, sizes, scale, zp):
    index: list[Any] = [slice(None)] * x.ndim
    for axis, b, s, n in zip(axes, begin, strides, sizes):
        index[axis] = np.arange(n) * s + b
    return x[np.ix_(*[np.arange(d) if isinstance(i, slice) else i
                      for d, i in zip(x.shape, index)])]


def _slice_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    out_shape = _slice_shape(_tvm.shape_of(call.args[0]), a)
    start = dict(zip(a["axes"], a["begin"]))
    step = dict(zip(a["axes"], a["strides"]))

    def compute(x):
        return te.compute(out_shape, lambda *i: x(*[
            start[k] + step[k] * i[k] if k in start else i[k] for k in range(len(i))]),
            name="strided_slice")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_strided_slice")


def strided_slice_constraint(x_dtype: str, rounding: str | None = None, zero_points=(),
                             x_shape=None, axes=(), begin=(), strides=(),
                             sizes=()) -> Refusal | None:
    """x int8, or int16 (TFLite's 16x8 int16 activations, under the Q31 roundings, zero points
    0); every index begin + i*stride (0 <= i < size) inside the axis; output shares the input's
    scale and zero point"""
    for axis, b, s, n in zip(axes, begin, strides, sizes) if x_shape is not None else ():
        last = b + (n - 1) * s
        if s == 0 or n < 1 or not (0 <= b < x_shape[axis] and 0 <= last < x_shape[axis]):
            return Refusal(f"slice begin {b} stride {s} size {n} leaves axis {axis} "
                           f"(length {x_shape[axis]})")
    return activation_dtype(x_dtype, rounding, zero_points)


STRIDED_SLICE = register(CanonicalOp(
    name="strided_slice",
    summary="int8 (or int16) strided slice: out[.., i, ..] = x[.., begin + i*stride, ..] on "
            "each listed axis (negative strides walk backwards); parameters unchanged",
    args=("x",),
    attrs=("axes", "begin", "strides", "sizes", "scale", "zp"),
    infer=lambda call: input_type(call, _slice_shape(_tvm.shape_of(call.args[0]),
                                                      _tvm.attrs_dict(call))),
    legalize=_slice_legalize,
    reference=_slice_reference,
    constraint=strided_slice_constraint,
    family=FAMILY,
))


def strided_slice(x: Any, qp: QParams, axes, begin, strides, sizes) -> Any:
    STRIDED_SLICE.require(x_dtype=_tvm.dtype_of(x), zero_points=(qp.scalar_zp,),
                          x_shape=_tvm.shape_of(x), axes=axes, begin=begin, strides=strides,
                          sizes=sizes)
    return STRIDED_SLICE.call([x], dict(axes=[int(v) for v in axes], begin=[int(v) for v in begin],
                                        strides=[int(v) for v in strides],
                                        sizes=[int(v) for v in sizes], **_shared(qp)))


# ---------------------------------------------------------------- tile
def tile_constraint(x_dtype: str = "int8", rank: int | None = None,
                    repeats=()) -> Refusal | None:
    """x int8; one repeat count (>= 1) per axis; output shares the input's scale and zero point"""
    if (why := _int8_input(x_dtype)) is not None:
        return why
    if rank is not None and len(repeats) != rank:
        return Refusal(f"{len(repeats)} repeats for a rank-{rank} input")
    if any(int(r) < 1 for r in repeats):
        return Refusal(f"repeats {list(repeats)} (each >= 1)")
    return None


TILE = register(CanonicalOp(
    name="tile",
    summary="int8 tiling (ONNX Tile); parameters unchanged",
    args=("x",),
    attrs=("repeats", "scale", "zp"),
    infer=lambda call: _int8([d * r for d, r in zip(_tvm.shape_of(call.args[0]),
                                                    _tvm.attrs_dict(call)["repeats"])]),
    # Affine loops, not topi.tile's x[i % n]: LLVM miscompiles the latter (_tvm.te_tile).
    legalize=lambda bb, call: bb.call_te(_tvm.te_tile, call.args[0],
                                         _tvm.attrs_dict(call)["repeats"],
                                         primfunc_name_hint="canonqnn_tile"),
    reference=lambda x, repeats, scale, zp: np.tile(x, repeats),
    constraint=tile_constraint,
    family=FAMILY,
))


def tile(x: Any, repeats, qp: QParams) -> Any:
    TILE.require(x_dtype=_tvm.dtype_of(x), rank=len(_tvm.shape_of(x)), repeats=repeats)
    return TILE.call([x], dict(repeats=[int(r) for r in repeats], **_shared(qp)))


# ---------------------------------------------------------------- broadcast_to
def broadcast_to_constraint(x_dtype: str = "int8", x_shape=None, shape=None) -> Refusal | None:
    """x int8, broadcastable to shape; output shares the input's scale and zero point"""
    if (why := _int8_input(x_dtype)) is not None:
        return why
    if x_shape is not None and shape is not None:
        try:
            fits = np.broadcast_shapes(tuple(x_shape), tuple(shape)) == tuple(shape)
        except ValueError:
            fits = False
        if not fits:
            return Refusal(f"shape {list(x_shape)} does not broadcast to {list(shape)}")
    return None


BROADCAST_TO = register(CanonicalOp(
    name="broadcast_to",
    summary="int8 numpy-style broadcast to a static shape (ONNX Expand); parameters unchanged",
    args=("x",),
    attrs=("shape", "scale", "zp"),
    infer=lambda call: _int8(_tvm.attrs_dict(call)["shape"]),
    legalize=lambda bb, call: bb.call_te(topi.broadcast_to, call.args[0],
                                         _tvm.attrs_dict(call)["shape"],
                                         primfunc_name_hint="canonqnn_broadcast_to"),
    reference=lambda x, shape, scale, zp: np.broadcast_to(x, shape).copy(),
    constraint=broadcast_to_constraint,
    family=FAMILY,
))


def broadcast_to(x: Any, shape, qp: QParams) -> Any:
    BROADCAST_TO.require(x_dtype=_tvm.dtype_of(x), x_shape=_tvm.shape_of(x),
                         shape=[int(d) for d in shape])
    return BROADCAST_TO.call([x], dict(shape=[int(d) for d in shape], **_shared(qp)))


# ---------------------------------------------------------------- depth_to_space / space_to_depth
def _depth_to_space_reference(x, block_size, mode, scale, zp):
    n, c, h, w = x.shape
    b = block_size
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_reference(x, block_size, scale, zp):
    n, c, h, w = x.shape
    b = block_size
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _d2s_infer(call: Any) -> Any:
    n, c, h, w = _tvm.shape_of(call.args[0])
    b = _tvm.attrs_dict(call)["block_size"]
    return _int8((n, c // (b * b), h * b, w * b))


def _s2d_infer(call: Any) -> Any:
    n, c, h, w = _tvm.shape_of(call.args[0])
    b = _tvm.attrs_dict(call)["block_size"]
    return _int8((n, c * b * b, h // b, w // b))


def _block_input(x_dtype: str, x_shape, block_size: int) -> Refusal | None:
    if (why := _int8_input(x_dtype)) is not None:
        return why
    if x_shape is not None and len(x_shape) != 4:
        return Refusal(f"rank-{len(x_shape)} input (NCHW)")
    if int(block_size) < 1:
        return Refusal(f"block_size {block_size} (>= 1)")
    return None


def depth_to_space_constraint(x_dtype: str = "int8", x_shape=None, block_size: int = 1,
                              mode: str = "DCR") -> Refusal | None:
    """x int8 NCHW, C divisible by block_size^2; mode DCR or CRD; output shares the input's
    scale and zero point"""
    if mode not in ("DCR", "CRD"):
        return Refusal(f"depth_to_space mode {mode!r}")
    if (why := _block_input(x_dtype, x_shape, block_size)) is not None:
        return why
    if x_shape is not None and x_shape[1] % (block_size * block_size):
        return Refusal(f"{x_shape[1]} channels, not divisible by block_size^2 "
                       f"({block_size * block_size})")
    return None


DEPTH_TO_SPACE = register(CanonicalOp(
    name="depth_to_space",
    layout="NCHW",
    summary="int8 NCHW depth to space (ONNX DepthToSpace, DCR or CRD); parameters unchanged",
    args=("x",),
    attrs=("block_size", "mode", "scale", "zp"),
    infer=_d2s_infer,
    legalize=lambda bb, call: bb.call_te(
        topi.nn.depth_to_space, call.args[0], _tvm.attrs_dict(call)["block_size"], "NCHW",
        _tvm.attrs_dict(call)["mode"], primfunc_name_hint="canonqnn_depth_to_space"),
    reference=_depth_to_space_reference,
    constraint=depth_to_space_constraint,
    family=FAMILY,
))


def space_to_depth_constraint(x_dtype: str = "int8", x_shape=None,
                              block_size: int = 1) -> Refusal | None:
    """x int8 NCHW, H and W divisible by block_size; output shares the input's scale and zero
    point"""
    if (why := _block_input(x_dtype, x_shape, block_size)) is not None:
        return why
    if x_shape is not None and (x_shape[2] % block_size or x_shape[3] % block_size):
        return Refusal(f"H {x_shape[2]} and W {x_shape[3]}, not both divisible by block_size "
                       f"{block_size}")
    return None


SPACE_TO_DEPTH = register(CanonicalOp(
    name="space_to_depth",
    layout="NCHW",
    summary="int8 NCHW space to depth (ONNX SpaceToDepth); parameters unchanged",
    args=("x",),
    attrs=("block_size", "scale", "zp"),
    infer=_s2d_infer,
    legalize=lambda bb, call: bb.call_te(
        topi.nn.space_to_depth, call.args[0], _tvm.attrs_dict(call)["block_size"], "NCHW",
        primfunc_name_hint="canonqnn_space_to_depth"),
    reference=_space_to_depth_reference,
    constraint=space_to_depth_constraint,
    family=FAMILY,
))


def depth_to_space(x: Any, block_size: int, mode: str, qp: QParams) -> Any:
    DEPTH_TO_SPACE.require(x_dtype=_tvm.dtype_of(x), x_shape=_tvm.shape_of(x),
                           block_size=int(block_size), mode=mode)
    return DEPTH_TO_SPACE.call([x], dict(block_size=int(block_size), mode=mode, **_shared(qp)))


def space_to_depth(x: Any, block_size: int, qp: QParams) -> Any:
    SPACE_TO_DEPTH.require(x_dtype=_tvm.dtype_of(x), x_shape=_tvm.shape_of(x),
                           block_size=int(block_size))
    return SPACE_TO_DEPTH.call([x], dict(block_size=int(block_size), **_shared(qp)))
