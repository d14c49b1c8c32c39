"""The build's TIR lowering (``pipeline.TIR_PIPELINE``): a kernel's buffers of up to
``STACK_BUFFER_MAX_BYTES`` that hold whole vectors live on the stack instead of a workspace call
pair where they are allocated (a tile's accumulators inside a parallel loop: once per tile)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te

from canonqnn.build import pipeline, targets


def _tiled_kernel(tile_rows: int, lanes: int = 16):
    """``out = 2 * x + 1`` through an intermediate computed per tile of ``tile_rows`` rows of
    256 int32 values (``tile_rows`` KB a tile), tiles in parallel, every access in vectors
    of ``lanes`` (1: not vectorized)."""
    x = te.placeholder((256, 256), "int32", name="x")
    mid = te.compute(x.shape, lambda i, j: x[i, j] * 2, name="mid")
    out = te.compute(x.shape, lambda i, j: mid[i, j] + 1, name="out")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, out]))
    i, _ = sch.get_loops(sch.get_sblock("out"))
    tiles, _ = sch.split(i, [None, tile_rows])
    sch.parallel(tiles)
    sch.compute_at(sch.get_sblock("mid"), tiles)
    if lanes > 1:
        for name in ("mid", "out"):
            sch.vectorize(sch.split(sch.get_loops(sch.get_sblock(name))[-1], [None, lanes])[1])
    return sch.mod["main"]


def _workspace_calls(func) -> int:
    executable = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                             target=targets.host_target(), tir_pipeline=pipeline.TIR_PIPELINE)
    return executable.mod.inspect_source("asm").count("TVMBackendAllocWorkspace@")


def test_a_tile_of_vectors_up_to_the_limit_is_on_the_stack_and_others_are_not():
    assert pipeline.STACK_BUFFER_MAX_BYTES == 8 * 1024
    assert _workspace_calls(_tiled_kernel(8)) == 0  # 8 KB of vectors a tile
    assert _workspace_calls(_tiled_kernel(16)) == 1  # 16 KB: TVM's workspace
    assert _workspace_calls(_tiled_kernel(8, lanes=1)) == 1  # not vectors: 16-byte aligned


def test_kernels_with_stack_tiles_compute_the_same():
    x = np.arange(256 * 256, dtype=np.int32).reshape(256, 256) - 7000
    for rows in (8, 16):
        lib = pipeline.compile_kernel(_tiled_kernel(rows), targets.host_target())
        out = tvm.runtime.tensor(np.zeros_like(x))
        lib["main"](tvm.runtime.tensor(x), out)
        assert np.array_equal(out.numpy(), 2 * x + 1)
