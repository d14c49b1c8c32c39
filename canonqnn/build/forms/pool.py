"""Max pooling as row loops: each output row from one vertical maximum of its input rows,
then a horizontal maximum over the window, both on whole vectors.

The op's own compute (``ops.movement``, its ``reference``'s loop nest) pads the input in one
pass and reads each window tap at ``j * stride``: at stride 2 that is a load every other byte,
which TVM does not vectorize (ResNet-18's 3x3 stride-2 pool over 64 x 112x112 ran as scalar
code, about 150 us on 2 Zen 4 threads). Here each plane of the batch runs on one thread:

1. the input rows of output row ``i`` (``i * sh + ry * dh - pt``, those inside the image)
   are reduced to one row by ``vpmaxsb`` over whole vectors, into a row buffer that keeps
   ``-128`` (the padding, which never wins) on both sides;
2. at stride 1 the window's taps are shifted contiguous reads of that row; at stride 2 the
   row is read as 16-bit pairs ``(row[2k], row[2k+1])``: tap ``2j + q`` is the low byte of
   pair ``j + q // 2`` (``(P << 8) >> 8``) or its high byte (``P >> 8``), so every tap is a
   contiguous load and the maxima are taken on 16-bit lanes, then narrowed.

Maxima of int8 values are exact in any order: this is the op's arithmetic (``reference``).
Other strides and dilated windows along the row take the op's own compute.
"""

from __future__ import annotations

from typing import Any

from ... import _tvm
from ..._tvm import te, tirx
from .. import targets

VECTOR_BYTES = 64  # the widest vector of the x86 targets (AVX-512): longer rows in chunks


def form(bb: Any, call: Any) -> Any:
    """``call`` (``canonqnn.max_pool2d``) as row loops on the current (LLVM) target, its planes
    on as many threads as the target's cores; None outside a target, or where the window is
    dilated along the row or its stride there is neither 1 nor 2."""
    target = targets.current_llvm_target()
    if target is None:
        return None
    a = _tvm.attrs_dict(call)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _) = (a["pool_size"], a["strides"],
                                                    a["dilation"], a["padding"])
    if dw != 1 or sw not in (1, 2):
        return None
    _, _, oh, ow = _tvm.shape_of(call)
    parallel = targets.cpu_cores(target) > 1

    def compute(x: Any) -> Any:
        return te.extern([(int(x.shape[0]), int(x.shape[1]), oh, ow)], [x],
                         lambda ins, outs: _row_loops(ins[0], outs[0], (kh, kw), (sh, sw), dh,
                                                      (pt, pl), parallel),
                         dtype="int8", name="max_pool")

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_max_pool2d")


def row_length(w: int, ow: int, kw: int, sw: int, pl: int) -> tuple[int, int]:
    """``(left, length)`` of the row buffer: the input row starts at ``left`` (``pl`` rounded
    up to even at stride 2, so pairs stay aligned), and ``length`` covers every tap of every
    output (even at stride 2: whole pairs)."""
    left = pl + pl % 2 if sw == 2 else pl
    length = max(left + w, sw * (ow - 1) + kw - pl + left + (1 if sw == 2 else 0))
    return left, length + length % 2 if sw == 2 else length


def _row_loops(x: Any, out: Any, kernel: tuple[int, int], strides: tuple[int, int], dh: int,
               pads: tuple[int, int], parallel: bool) -> Any:
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    n, c, h, w = (int(d) for d in x.shape)
    oh, ow = int(out.shape[2]), int(out.shape[3])
    (kh, kw), (sh, sw), (pt, pl) = kernel, strides, pads
    left, length = row_length(w, ow, kw, sw, pl)
    low = tirx.const(-128, "int8")
    with IRBuilder() as ib:
        with (T.parallel if parallel else T.serial)(0, n * c) as plane:
            nn, cc = plane // c, plane % c
            row = T.alloc_local((length,), "int8")
            chunked(T, left, lambda i: T.buffer_store(row, low, [i]))
            chunked(T, length - left - w, lambda i: T.buffer_store(row, low, [left + w + i]))
            with T.serial(0, oh) as i:
                chunked(T, w, lambda j: T.buffer_store(row, low, [left + j]))
                for ry in range(kh):
                    y = i * sh + ry * dh - pt
                    with T.If(tirx.all(y >= 0, y < h)), T.Then():
                        chunked(T, w, lambda j, y=y: T.buffer_store(
                            row, tirx.max(row[left + j], x[nn, cc, y, j]), [left + j]))
                taps = [rx - pl + left for rx in range(kw)]
                if sw == 1:
                    chunked(T, ow, lambda j: T.buffer_store(
                        out, _maximum([row[j + q] for q in taps]), [nn, cc, i, j]))
                else:
                    byte = pair_reader(T, row, length)
                    chunked(T, ow, lambda j: T.buffer_store(
                        out, tirx.Cast("int8", _maximum([byte(j, q) for q in taps])),
                        [nn, cc, i, j]), lanes=VECTOR_BYTES // 2)
        return ib.get()


def pair_reader(T: Any, row: Any, length: int) -> Any:
    """``byte(j, q)``: ``row[2 * j + q]`` of an int8 ``row`` buffer (``length`` even) read
    as int16 pairs, ``(P << 8) >> 8`` the low byte, ``P >> 8`` the high one (an int16 of
    the byte's value): every ``j`` one contiguous load, where a read every other byte is one
    TVM does not vectorize."""
    pairs = T.decl_buffer((length // 2,), "int16", data=row.data, scope="local")
    eight = tirx.const(8, "int16")

    def byte(j: Any, q: int) -> Any:
        pair = pairs[j + q // 2]
        return tirx.shift_right(tirx.shift_left(pair, eight) if q % 2 == 0 else pair, eight)

    return byte


def _maximum(values: list[Any]) -> Any:
    result = values[0]
    for value in values[1:]:
        result = tirx.max(result, value)
    return result


def chunked(T: Any, extent: int, store: Any, lanes: int = VECTOR_BYTES) -> None:
    """``store(j)`` for ``j`` in ``[0, extent)``: whole vectors of ``lanes``, then the rest
    as one shorter vector."""
    whole, rest = divmod(extent, lanes)
    if whole:
        with T.serial(0, whole) as chunk, T.vectorized(0, lanes) as lane:
            store(chunk * lanes + lane)
    if rest:
        with T.vectorized(0, rest) as lane:
            store(whole * lanes + lane)
