"""A conv's input unfolded along its columns, ``u[n, c * kw + kx, y, j] = x[n, c, y, j * sw + kx
- pl]`` (the padding ``x_zp``, a real zero): the input of the same conv written with one
kernel column (``forms.conv``: a stem of 3 channels and a 7x7 kernel as 21 channels and 7x1).

Row loops, as the max pool's (``forms.pool``): each input row is copied once into a row
buffer between its padding, then each of the ``kw`` unfolded rows is read from it on whole
vectors; at stride 2 as int16 pairs (``pool.pair_reader``), so every read is contiguous (TE's
read every other byte stays scalar: the unfold of ResNet-18's stem took 240 us so, Zen 4).
"""

from __future__ import annotations

from typing import Any

from ..._tvm import te, tirx
from .pool import VECTOR_BYTES, chunked, pair_reader, row_length


def te_unfold_columns(x: Any, kw: int, sw: int, pl: int, ow: int, x_zp: int,
                      parallel: bool) -> Any:
    """The unfolded int8 ``[N, C * kw, H, ow]`` of an int8 NCHW ``x`` (module doc), for
    ``sw`` 1 or 2; its rows in parallel where ``parallel``."""
    n, c, h, w = (int(d) for d in x.shape)
    return te.extern([(n, c * kw, h, ow)], [x],
                     lambda ins, outs: _row_loops(ins[0], outs[0], kw, sw, pl, x_zp, parallel),
                     dtype="int8", name="unfold_columns")


def _row_loops(x: Any, out: Any, kw: int, sw: int, pl: int, x_zp: int, parallel: bool) -> Any:
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    n, c, h, w = (int(d) for d in x.shape)
    ow = int(out.shape[3])
    left, length = row_length(w, ow, kw, sw, pl)
    zero = tirx.const(x_zp, "int8")
    with IRBuilder() as ib:
        with (T.parallel if parallel else T.serial)(0, n * c * h) as row_index:
            nn, cc, y = row_index // (c * h), row_index // h % c, row_index % h
            row = T.alloc_local((length,), "int8")
            chunked(T, left, lambda i: T.buffer_store(row, zero, [i]))
            chunked(T, length - left - w, lambda i: T.buffer_store(row, zero, [left + w + i]))
            chunked(T, w, lambda j: T.buffer_store(row, x[nn, cc, y, j], [left + j]))
            for kx in range(kw):
                tap = kx - pl + left
                if sw == 1:
                    chunked(T, ow, lambda j, tap=tap, kx=kx: T.buffer_store(
                        out, row[j + tap], [nn, cc * kw + kx, y, j]))
                else:
                    byte = pair_reader(T, row, length)
                    chunked(T, ow, lambda j, tap=tap, kx=kx, byte=byte: T.buffer_store(
                        out, tirx.Cast("int8", byte(j, tap)), [nn, cc * kw + kx, y, j]),
                        lanes=VECTOR_BYTES // 2)
        return ib.get()
