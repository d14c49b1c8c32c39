"""Kernels written as explicit TIR loops where TE's compute form miscompiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tvm import te, tirx


def te_tile(x: Any, repeats: Sequence[int]) -> Any:
    """``x`` tiled ``repeats`` times per axis, as a TE tensor computed by explicit loops.

    Written as loops over (repeat, index) pairs per axis, so every load and store address is an
    affine function of the loop variables. ``topi.tile`` reads ``x[i % n]`` instead, and LLVM
    22's loop vectorizer miscompiles some such copies (it loads a contiguous run where the
    modulo wraps): for [1, 5, 8, 3] by [1, 2, 2, 1], 240 of 480 elements were wrong for int8 on
    every x86 CPU tried, and for int32/float32 too on znver4/znver5.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    dims = [int(d) for d in x.shape]
    reps = [int(r) for r in repeats]
    out_shape = [d * r for d, r in zip(dims, reps)]

    def body(ins: Any, outs: Any) -> Any:
        with IRBuilder() as ib:
            _tile_loops(T, ins[0], outs[0], dims, reps, [], [])
            return ib.get()

    return te.extern([out_shape], [x], body, dtype=str(x.dtype), name="tile")


def _tile_loops(T: Any, src: Any, dst: Any, dims: list[int], reps: list[int],
                src_index: list[Any], dst_index: list[Any]) -> None:
    """Loops over ``(repeat, index)`` of the next axis and the axes after it."""
    axis = len(src_index)
    if axis == len(dims):
        T.buffer_store(dst, tirx.BufferLoad(src, src_index), dst_index)
        return
    with T.serial(0, reps[axis]) as r, T.serial(0, dims[axis]) as i:
        _tile_loops(T, src, dst, dims, reps, [*src_index, i], [*dst_index, r * dims[axis] + i])
