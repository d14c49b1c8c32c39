"""TVM 0.27 tensor intrinsics for ``canonqnn.ops._dot`` and the schedule that uses them.

Part of the TVM layer (``_tvm`` calls it): TVMScript and schedule primitives change between
releases. Each intrinsic's description is the packed reduction's innermost block,
``C[i] += int32(A[k]) * int32(B[i, k])`` for ``lanes x pair``; its implementation is one
instruction. TVM's own ``dot_16x4_vnni`` does not build with its bundled LLVM 22 (LLVM now
declares ``vpdpbusd``'s operands as ``<64 x i8>``, TVM passes ``<16 x i32>``), so these pass
byte vectors.
"""

from __future__ import annotations

from typing import Any

import tvm

from .ops._dot import ANNOTATION, DEPTHWISE, ISAS, DotISA

_registered: set[str] = set()


def register_intrinsics() -> None:
    """Register every ``DotISA``'s tensor intrinsic with TVM (once)."""
    from tvm.s_tir import TensorIntrin

    for isa in ISAS:
        if isa.intrinsic not in _registered:
            TensorIntrin.register(isa.intrinsic, *_intrinsic(isa), override=True)
            _registered.add(isa.intrinsic)


def _intrinsic(isa: DotISA) -> tuple[Any, Any]:
    from tvm.script import tirx as T

    lanes, pair, adt, wdt = isa.lanes, isa.pair, isa.act_dtype, isa.weight_dtype
    name = isa.llvm_intrinsic

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((pair,), adt, offset_factor=1),
             B: T.Buffer((lanes, pair), wdt, offset_factor=1),
             C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:pair], B[0:lanes, 0:pair])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, pair):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    # The ``pair`` activation values, as one int32 broadcast to every lane, then seen as the
    # instruction's operand type.
    if pair == 2:
        @T.prim_func(s_tir=True)
        def impl(A: T.Buffer((pair,), adt, offset_factor=1),
                 B: T.Buffer((lanes, pair), wdt, offset_factor=1),
                 C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
            with T.sblock("root"):
                T.reads(C[0:lanes], A[0:pair], B[0:lanes, 0:pair])
                T.writes(C[0:lanes])
                a = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "int16x2"),
                                                            dtype="int32"), lanes),
                                  dtype=f"int16x{2 * lanes}")
                C[T.ramp(T.int32(0), 1, lanes)] = C.vload([0], dtype=f"int32x{lanes}") + \
                    T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id(name), a,
                                            B.vload([0, 0], dtype=f"int16x{2 * lanes}"),
                                            dtype=f"int32x{lanes}")
    else:
        @T.prim_func(s_tir=True)
        def impl(A: T.Buffer((pair,), adt, offset_factor=1),
                 B: T.Buffer((lanes, pair), wdt, offset_factor=1),
                 C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
            with T.sblock("root"):
                T.reads(C[0:lanes], A[0:pair], B[0:lanes, 0:pair])
                T.writes(C[0:lanes])
                a = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint8x4"),
                                                            dtype="int32"), lanes),
                                  dtype=f"uint8x{4 * lanes}")
                C[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(name), C.vload([0], dtype=f"int32x{lanes}"), a,
                    B.vload([0, 0], dtype=f"int8x{4 * lanes}"), dtype=f"int32x{lanes}")

    return desc, impl


def is_packed(sch: Any, block: Any) -> bool:
    """Whether the block is a reduction ``schedule_packed`` (or ``schedule_depthwise``) owns."""
    annotations = sch.get(block).annotations
    return ANNOTATION in annotations or DEPTHWISE in annotations


def schedule(sch: Any, block: Any, cores: int) -> list[str]:
    """Schedule a block ``is_packed`` names; returns the names of the blocks moved into it."""
    if DEPTHWISE in sch.get(block).annotations:
        return schedule_depthwise(sch, block, cores)
    return schedule_packed(sch, block, cores)


def _move_consumers(sch: Any, block: Any, loop: Any) -> list[str]:
    """The consumers of ``block`` (and theirs, transitively) computed under ``loop``; a
    consumer that cannot move stays at the root, computed after the whole producer."""
    moved, frontier = [], [block]
    while frontier:
        consumers = [c for c in sch.get_consumers(frontier.pop())
                     if sch.get(c).name_hint not in moved]
        for consumer in consumers:
            try:
                sch.reverse_compute_at(consumer, loop)
            except tvm.s_tir.schedule.ScheduleError:
                continue
            moved.append(sch.get(consumer).name_hint)
            frontier.append(consumer)
    return moved


def schedule_packed(sch: Any, block: Any, cores: int) -> list[str]:
    """Schedule a packed reduction block (``te_packed_conv``, ``te_packed_matmul``): a tile of
    ``width`` output pixels x ``blocks`` channel blocks held in registers while the whole
    reduction runs, its innermost ``lanes x pair`` one instruction, rows x channel blocks in
    parallel, and the consumers (requantize, table, ...) computed per row x channel block
    while it is in cache, along the row (the NCHW output is contiguous there, so they
    vectorize). Returns the names of the blocks moved into the tile."""
    register_intrinsics()
    plan = dict(sch.get(block).annotations[ANNOTATION])
    intrinsic, width, blocks = str(plan["intrinsic"]), int(plan["width"]), int(plan["blocks"])
    n, oo, i, j, ol, ry, rx, rc, rk = sch.get_loops(block)
    oo_out, oo_in = sch.split(oo, [None, blocks])
    j_out, j_in = sch.split(j, [None, width])
    sch.reorder(n, oo_out, i, j_out, ry, rx, rc, oo_in, j_in, ol, rk)
    row = sch.fuse(n, oo_out, i)
    if cores > 1:
        sch.parallel(row)
    moved = _move_consumers(sch, block, row)
    init = sch.decompose_reduction(block, ry)
    sch.tensorize(ol, intrinsic)
    sch.unroll(j_in)
    sch.unroll(oo_in)
    sch.vectorize(sch.get_loops(init)[-1])
    return moved


def _partition_borders(sch: Any, loop: Any, borders: Any) -> None:
    """Split the pack's column loop into left padding, interior and right padding: in the
    interior the padding test folds away and the copy vectorizes."""
    left, right = (int(b) for b in borders)
    extent = int(sch.get(loop).extent)
    factors = [f for f in (left, extent - left - right, right) if f]
    if len(factors) > 1:
        sch.loop_partition(loop, factors[:-1])  # the last part is what remains


def schedule_depthwise(sch: Any, block: Any, cores: int) -> list[str]:
    """Schedule a depthwise accumulator (``te_depthwise_conv``): channels in parallel, each
    channel's padded int16 input made just before it is read, rows vectorized ``vector``
    outputs at a time with every tap unrolled (the accumulators stay in registers), the
    consumers computed per row."""
    plan = dict(sch.get(block).annotations[DEPTHWISE])
    vector = int(plan["vector"])
    n, c, i, j, ry, rx = sch.get_loops(block)
    j_out, j_in = sch.split(j, [None, vector])
    sch.reorder(n, c, i, j_out, ry, rx, j_in)
    plane = sch.fuse(n, c)
    if cores > 1:
        sch.parallel(plane)
    moved = _move_consumers(sch, block, i)
    (pack,) = sch.get_producers(block)
    sch.compute_at(pack, plane)
    moved.append(sch.get(pack).name_hint)
    _partition_borders(sch, sch.get_loops(pack)[-1], plan["borders"])
    sch.unroll(ry)
    sch.unroll(rx)
    sch.vectorize(j_in)  # before the reduction is decomposed (after, TVM refuses it)
    sch.decompose_reduction(block, ry)
    return moved
