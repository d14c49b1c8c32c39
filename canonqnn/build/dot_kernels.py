"""TVM 0.27 tensor intrinsics for ``canonqnn.build.forms`` and the schedule that uses them.

Part of the build (``schedule.schedule_cpu`` calls it): TVMScript and schedule primitives
change between releases. Each intrinsic's description is the packed reduction's innermost block,
``C[i] += int32(A[k]) * int32(B[i, k])`` for ``lanes x pair``; its implementation is one
instruction (three on NEON without the dot-product extension). TVM's own ``dot_16x4_vnni``
does not build with its bundled LLVM 22 (LLVM now declares ``vpdpbusd``'s operands as
``<64 x i8>``, TVM passes ``<16 x i32>``), so these pass byte vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm

from .isa import (
    ACC_BIASED,
    ACC_START,
    ANNOTATION,
    BLOCK_PLANS,
    CHANNELS_LAST,
    CHANNELS_LAST_DEPTHWISE,
    DEPTHWISE,
    ISAS,
    ROWS,
    DotISA,
    intrinsic_features,
)

_registered: set[str] = set()


def register_intrinsics() -> None:
    """Register every ``DotISA``'s tensor intrinsics with TVM (once)."""
    from tvm.s_tir import TensorIntrin

    from .isa import row_intrinsic

    for isa in ISAS:
        for name, broadcast in ((isa.intrinsic, "A"), (row_intrinsic(isa), "B")):
            if name not in _registered:
                TensorIntrin.register(name, *_intrinsic(isa, broadcast), override=True)
                _registered.add(name)


def _vector(isa: DotISA, dtype: str, parts: int = 1) -> str:
    """The vector type of one instruction's operand of ``dtype`` (split in ``parts``)."""
    return f"{dtype}x{isa.pair * isa.lanes // parts}"


def _one(isa: DotISA, dtype: str) -> str:
    """One lane's ``pair`` values (an int32 when broadcast)."""
    return f"{dtype}x{isa.pair}"


def _broadcast(T: Any, buffer: Any, isa: DotISA, dtype: str, parts: int) -> Any:
    """One lane's ``pair`` values broadcast to every lane of a ``parts``-th of the vector."""
    return T.reinterpret(T.broadcast(T.reinterpret(buffer.vload([0], _one(isa, dtype)),
                                                   dtype="int32"), isa.lanes // parts),
                         dtype=_vector(isa, dtype, parts))


def _rows(buffer: Any, isa: DotISA, dtype: str, parts: int, part: int) -> Any:
    """The ``part``-th of ``parts`` pieces of a ``[lanes, pair]`` operand, as it lies."""
    return buffer.vload([part * isa.lanes // parts, 0], dtype=_vector(isa, dtype, parts))


def _accumulate(T: Any, isa: DotISA, acc: Any, activations: Any, weights: Any) -> Any:
    """``acc`` plus the instruction's lane sums; ``activations(parts, part)`` and
    ``weights(parts, part)`` give a piece of each operand. ``vpdpbusd`` and ``sdot``
    accumulate themselves (activations first); ``vpmaddwd`` returns the sums to add; NEON
    multiplies each half widening (``smull``: the products of lanes 0-1, then of 2-3) and
    adds neighbouring products pairwise (``addp``), which leaves lane ``i``'s pair sum in
    lane ``i``."""
    call = T.llvm_lookup_intrinsic_id(isa.llvm_intrinsic)
    dtype = f"int32x{isa.lanes}"
    if isa.pair == 4:
        return T.call_llvm_pure_intrin(call, acc, activations(1, 0), weights(1, 0), dtype=dtype)
    if isa.pairwise_add is None:
        return acc + T.call_llvm_pure_intrin(call, activations(1, 0), weights(1, 0),
                                             dtype=dtype)
    halves = [T.call_llvm_pure_intrin(call, activations(2, h), weights(2, h), dtype=dtype)
              for h in (0, 1)]
    return acc + T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id(isa.pairwise_add),
                                         *halves, dtype=dtype)


def _intrinsic(isa: DotISA, broadcast: str) -> tuple[Any, Any]:
    """``(desc, impl)`` of ``C[i] += A[., k] * B[., k]`` (``lanes`` x ``pair``), where
    ``broadcast`` names the operand one lane's ``pair`` values of which every lane reads:

    - ``"A"``: ``C[i] += A[k] * B[i, k]``, output channels in lanes, the activations
      broadcast (``DotISA.intrinsic``);
    - ``"B"``: ``C[i] += A[i, k] * B[k]``, output pixels of a row in lanes, the weights
      broadcast (``row_intrinsic``)."""
    from tvm.script import tirx as T

    lanes, pair, adt, wdt = isa.lanes, isa.pair, isa.act_dtype, isa.weight_dtype
    a_shape = (pair,) if broadcast == "A" else (lanes, pair)
    b_shape = (pair,) if broadcast == "B" else (lanes, pair)

    def at(buffer: Any, vi: Any, vk: Any) -> Any:
        return buffer[vk] if len(buffer.shape) == 1 else buffer[vi, vk]

    def whole(buffer: Any) -> Any:
        return buffer[0:pair] if len(buffer.shape) == 1 else buffer[0:lanes, 0:pair]

    def operand(buffer: Any, dtype: str) -> Any:
        if len(buffer.shape) == 1:
            return lambda parts, _: _broadcast(T, buffer, isa, dtype, parts)
        return lambda parts, part: _rows(buffer, isa, dtype, parts, part)

    # TVMScript reads its buffer declarations from the annotations: calls mypy cannot type
    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer(a_shape, adt, offset_factor=1),  # type: ignore[valid-type]
             B: T.Buffer(b_shape, wdt, offset_factor=1),  # type: ignore[valid-type]
             C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:  # type: ignore[valid-type]
        with T.sblock("root"):
            T.reads(C[0:lanes], whole(A), whole(B))
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, pair):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(at(A, vi, vk), "int32") * T.cast(
                            at(B, vi, vk), "int32")

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer(a_shape, adt, offset_factor=1),  # type: ignore[valid-type]
             B: T.Buffer(b_shape, wdt, offset_factor=1),  # type: ignore[valid-type]
             C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:  # type: ignore[valid-type]
        with T.sblock("root"):
            T.reads(C[0:lanes], whole(A), whole(B))
            T.writes(C[0:lanes])
            C[T.ramp(T.int32(0), 1, lanes)] = _accumulate(
                T, isa, C.vload([0], dtype=f"int32x{lanes}"), operand(A, adt), operand(B, wdt))

    return desc, impl


def is_packed(sch: Any, block: Any) -> bool:
    """Whether the block is a reduction ``schedule_packed`` (or ``schedule_depthwise``) owns."""
    annotations = sch.get(block).annotations
    return any(key in annotations for key in BLOCK_PLANS)


def schedule(sch: Any, block: Any, cores: int, has_feature: Callable[[str], bool]) -> list[str]:
    """Schedule a block ``is_packed`` names for a target with ``has_feature``; returns the
    names of the blocks moved into it. Where the target lacks the block's instruction
    (``isa.emulating``) its innermost loops are left to LLVM, untensorized."""
    annotations = sch.get(block).annotations
    if CHANNELS_LAST_DEPTHWISE in annotations:  # no tensor intrinsic: LLVM vectorizes it
        return schedule_channels_last_depthwise(sch, block, cores)
    plan = next(dict(annotations[k]) for k in BLOCK_PLANS if k in annotations)
    intrinsic: str | None = str(plan["intrinsic"])
    if not all(has_feature(f) for f in intrinsic_features(str(plan["intrinsic"]))):
        intrinsic = None
    if DEPTHWISE in annotations:
        return schedule_depthwise(sch, block, cores, intrinsic)
    if ROWS in annotations:
        return schedule_rows(sch, block, cores, intrinsic)
    if CHANNELS_LAST in annotations:
        return schedule_channels_last(sch, block, cores, intrinsic)
    return schedule_packed(sch, block, cores, intrinsic)


def _move_consumers(sch: Any, block: Any, loop: Any, transitive: bool = True) -> list[str]:
    """The consumers of ``block`` (and theirs, ``transitive``) computed under ``loop``; a
    consumer that cannot move stays at the root, computed after the whole producer."""
    moved: list[str] = []
    frontier = [block]
    while frontier and (transitive or not moved):
        consumers = [c for c in sch.get_consumers(frontier.pop())
                     if sch.get(c).name_hint not in moved]
        for consumer in consumers:
            try:
                sch.reverse_compute_at(consumer, loop)
            except (tvm.s_tir.schedule.ScheduleError, ValueError):
                # refused; ValueError: TVM's region analysis cannot invert the flattened batch
                # index of a batched matmul's reads (that kernel stays exact:
                # tests/build/forms/test_dot.py, "batched")
                continue
            moved.append(sch.get(consumer).name_hint)
            frontier.append(consumer)
    return moved


def _start_from_bias(sch: Any, block: Any) -> list[Any]:
    """Fold the accumulator's bias stage (``forms.dot.with_bias``), where it has one, into its
    start: the block then writes that stage's buffer, starting from the bias. Returns the bias
    buffers (for ``_decompose``)."""
    consumers = sch.get_consumers(block)
    if len(consumers) != 1 or sch.get(consumers[0]).name_hint != ACC_BIASED:
        return []
    accumulator = sch.get(block).writes[0].source
    bias = [read.source for read in sch.get(consumers[0]).reads
            if not read.source.same_as(accumulator)]
    sch.fuse_reduction_epilogue(block, consumers[0])
    return bias


def _decompose(sch: Any, block: Any, loop: Any, bias: list[Any]) -> Any:
    """``decompose_reduction`` at ``loop``; the update then no longer reads the ``bias`` its
    start reads (TVM keeps it among the update's reads, which the tensor intrinsic's
    description does not have)."""
    init = sch.decompose_reduction(block, loop)
    if bias:
        sch.unsafe_hide_buffer_access(block, "read", [
            i for i, read in enumerate(sch.get(block).reads)
            if any(read.source.same_as(b) for b in bias)])
    return init


def schedule_packed(sch: Any, block: Any, cores: int, intrinsic: str | None) -> list[str]:
    """Schedule a packed reduction block with output channels in lanes (``te_packed_conv``,
    ``te_packed_matmul``): a tile of ``width`` output pixels (matmul rows) x ``blocks``
    channel blocks held in registers while the whole reduction runs, its innermost
    ``lanes x pair`` one instruction, rows x channel blocks in parallel, and the consumers
    (requantize, table, ...) computed per row x channel block while it is in cache (a
    matmul's per tile). Returns the names of the blocks moved."""
    register_intrinsics()
    plan = dict(sch.get(block).annotations[ANNOTATION])
    width, blocks = int(plan["width"]), int(plan["blocks"])
    bias = _start_from_bias(sch, block)
    n, oo, i, j, ol, ry, rx, rc, rk = sch.get_loops(block)
    oo_out, oo_in = sch.split(oo, [None, blocks])
    j_out, j_in = sch.split(j, [None, width])
    sch.reorder(n, oo_out, i, j_out, ry, rx, rc, oo_in, j_in, ol, rk)
    row = sch.fuse(n, oo_out, i)
    if cores > 1:
        sch.parallel(row)
    # a matmul's consumers per tile, on the accumulators still in registers (the transformer
    # of benchmarks/runtime.py, Zen 4, one thread: its matmuls 7 to 14 % faster than per row
    # of tiles, whose int32 accumulators, 16 KB a row at 128 rows, left the L1 cache)
    columns_last = bool(int(plan.get("columns_last", 0)))
    tile = j_out if columns_last else row
    moved = _move_consumers(sch, block, tile)
    started = _start_per_tile(sch, tile)
    init = _decompose(sch, block, ry, bias)
    lanes = int(sch.get(ol).extent)
    if intrinsic is not None:
        sch.tensorize(ol, intrinsic)
    sch.unroll(j_in)
    sch.unroll(oo_in)
    sch.vectorize(sch.get_loops(init)[-1])
    if columns_last:  # a matmul's output rows: columns in whole vectors
        _vectorize_requant(sch, moved, lanes)
    return moved + started + _schedule_runtime_operand(sch, cores)


def _start_per_tile(sch: Any, tile: Any) -> list[str]:
    """The accumulator's start stage (``forms.matmul``'s ``ACC_START``), where the kernel has
    one, computed under ``tile`` (each tile's starts, in vectors of its lanes) instead of a
    whole int32 tensor before the tiles. Returns its name, if moved."""
    try:
        start = sch.get_sblock(ACC_START)
    except (tvm.s_tir.schedule.ScheduleError, ValueError):
        return []
    sch.compute_at(start, tile)
    sch.vectorize(sch.get_loops(start)[-1])
    return [ACC_START]


def _schedule_runtime_operand(sch: Any, cores: int) -> list[str]:
    """The stages of a matmul's run-time ``b`` (``forms.matmul``), where the kernel has
    them: ``b``'s pack with its values of ``k`` unrolled (LLVM reads a row's columns as
    vectors and interleaves them; left to the generic plan, byte by byte), ``a``'s pack one
    vectorized copy a row, ``a``'s row sums with each row's sum innermost (the generic plan
    put the rows inside, reading ``a`` down its columns) and ``b``'s column sums with the
    columns innermost, each in parallel. On the transformer of ``benchmarks/runtime.py``
    (Zen 4, one thread) its attention's ``Q K^T`` and ``P V`` took 33 and 27 us, against 71
    and 55 on int16 pairs with the generic plan for these stages.
    Returns the names of the blocks scheduled."""
    names: list[str] = []
    for name in ("b_pack", "a_pack", "a_row_sums", "b_column_sums"):
        try:
            block = sch.get_sblock(name)
        except (tvm.s_tir.schedule.ScheduleError, ValueError):
            continue
        if not names and name != "b_pack":
            return names  # a constant b: the generic plan's
        names.append(name)
        loops = sch.get_loops(block)
        if name == "b_pack":
            sch.unroll(loops[-1])
        elif name == "a_pack":  # (nb, row, k / 4, 4): each row one contiguous copy
            values = sch.fuse(loops[-2], loops[-1])
            if int(sch.get(values).extent) % 16 == 0:
                sch.vectorize(sch.split(values, [None, 16])[1])
        elif name == "b_column_sums":  # (nb, col, k): the columns innermost, in vectors
            sch.reorder(loops[2], loops[1])
        if cores > 1:
            sch.parallel(loops[0])
    return names


def _partition(sch: Any, loop: Any, lengths: list[int]) -> None:
    """Split ``loop`` into parts of ``lengths`` and the rest (empty parts left out): where
    each part's range decides a padding test, TVM folds it and the part vectorizes."""
    extent, bounds, start = int(sch.get(loop).extent), [], 0
    for length in lengths:
        start = min(start + length, extent)
        bounds.append(start)
    factors = [b - a for a, b in zip([0, *bounds], bounds) if b > a]
    if sum(factors) < extent and factors:
        sch.loop_partition(loop, factors)


def schedule_depthwise(sch: Any, block: Any, cores: int, intrinsic: str | None) -> list[str]:
    """Schedule a depthwise accumulator (``te_depthwise_conv``): channels in parallel, each
    channel's packed input made just before it is read, rows in tiles of up to 4 vectors of
    ``lanes`` outputs held in registers while every tap pair is one ``vpmaddwd``
    (tensorized), the consumers computed per row. Returns the names of the blocks moved."""
    register_intrinsics()
    plan = dict(sch.get(block).annotations[DEPTHWISE])
    lanes = int(plan["lanes"])
    bias = _start_from_bias(sch, block)
    n, c, i, j, ry, rx, rk = sch.get_loops(block)
    vectors = int(sch.get(j).extent) // lanes
    unroll = max(u for u in (1, 2, 3, 4) if vectors % u == 0)
    j_out, j_tile, j_in = sch.split(j, [None, unroll, lanes])
    sch.reorder(n, c, i, j_out, ry, rx, j_tile, j_in, rk)
    plane = sch.fuse(n, c)
    if cores > 1:
        sch.parallel(plane)
    moved = _move_consumers(sch, block, i)
    (pack,) = sch.get_producers(block)
    (pad,) = sch.get_producers(pack)
    sch.compute_at(pack, plane)
    sch.compute_at(pad, plane)
    moved += [sch.get(pack).name_hint, sch.get(pad).name_hint]
    if int(plan.get("phases", 1)) > 1:
        # a strided conv's pack, its phases innermost with the row pair: LLVM then reads each
        # column's phases and rows as vectors and interleaves them (phases outermost, value by
        # value: 28x28 planes at stride 2 ran 2.2 times slower on Zen 3, docs/build.md)
        phase, column, pair = sch.get_loops(pack)[-3:]
        sch.reorder(column, phase)
        sch.unroll(phase)
        sch.unroll(pair)
    left, width = (int(b) for b in plan["borders"])
    _partition(sch, sch.get_loops(pad)[-1], [left, width])
    _decompose(sch, block, ry, bias)
    if intrinsic is not None:
        sch.tensorize(j_in, intrinsic)
    sch.unroll(j_tile)
    _vectorize_requant(sch, moved, lanes)
    return moved


def _vectorize_requant(sch: Any, names: list[str], lanes: int, tail: bool = False) -> None:
    """Vectorize the requantization of a row-form accumulator in vectors of the ISA's
    ``lanes`` where its row is whole vectors (``requant_rows``, on padded rows, or
    ``requant``), or, with ``tail``, on the whole vectors of the row with the rest split off
    (a plane's row, ``te_plane_conv``): LLVM's own loop vectorizer takes half-width vectors on
    AVX-512 CPUs, and a padded row's tail read back in pieces stalls on store forwarding. The
    channels-last forms' requantization (``requant_pixels``, ``requant``) runs along the
    output channels, in vectors of them."""
    for name in names:
        if not name.startswith("requant"):
            continue
        loop = sch.get_loops(sch.get_sblock(name))[-1]
        extent = int(sch.get(loop).extent)
        if tail and extent % lanes and extent > lanes:
            loop = sch.loop_partition(loop, [extent - extent % lanes])[0]
            extent -= extent % lanes
        if extent % lanes == 0:
            sch.vectorize(sch.split(loop, [None, lanes])[1])


def _schedule_plane_pack(sch: Any, pack: Any, cores: int, plane: int, lanes: int) -> None:
    """A ``plane_pack`` of a ``plane``-pixel plane: channel groups in parallel, each reading
    its channels' planes in order, the vectors past the plane's whole ones split off (their
    padding test folds in the others, which LLVM vectorizes)."""
    n, vectors, groups, _, _ = sch.get_loops(pack)
    sch.reorder(groups, vectors)
    if cores > 1:
        sch.parallel(sch.fuse(n, groups))
    _partition(sch, vectors, [plane // lanes])


def _schedule_input_stages(sch: Any, block: Any, cores: int, plan: dict) -> list[str]:
    """The pad and pack stages of a row-form input (``te_row_conv``), whole before the
    reduction: channel planes in parallel, the column loop split at the borders so its
    interior vectorizes. Where the plan says ``pad_in_pack``, the pad is computed inside the
    pack (one pass over the input instead of two). A plane's pack (``te_plane_conv``, no pad
    stage) runs its pixel vectors in parallel where the reduction runs its tiles outermost
    (``tiles_outer``: each core packs the pixels its tiles read); else channel groups, each
    reading its channels' planes in order, the last vector (past the plane's end) split
    off."""
    (pack,) = sch.get_producers(block)
    names = [sch.get(pack).name_hint]  # before a partition replaces the block
    if int(plan.get("flat", 0)):  # te_flat_conv: the padded plane's rows, borders split off
        n, groups, flat, _ = sch.get_loops(pack)
        if cores > 1:
            sch.parallel(sch.fuse(n, groups))
        rows, columns = sch.split(flat, [None, int(plan["flat"])])
        left, width = (int(b) for b in plan["borders"])
        top, height = (int(b) for b in plan["rows_inside"])
        _partition(sch, columns, [left, width])
        _partition(sch, rows, [top, height])
        return names
    if int(plan.get("plane", 0)):
        n, vectors, groups, _, _ = sch.get_loops(pack)
        if int(plan["tiles_outer"]):  # each core packs the pixels its tiles read
            if cores > 1:
                sch.parallel(vectors)
            return names
        _schedule_plane_pack(sch, pack, cores, int(plan["borders"][1]), int(plan["lanes"]))
        return names
    (pad,) = sch.get_producers(pack)
    inline = int(plan.get("pad_in_pack", 0))
    if inline:
        sch.compute_inline(pad)
    else:
        names.append(sch.get(pad).name_hint)
    for stage in (pack,) if inline else (pad, pack):
        loops = sch.get_loops(stage)
        if cores > 1:
            sch.parallel(sch.fuse(loops[0], loops[1]))
    left, width = (int(b) for b in plan["borders"])
    # the pack's columns are the input's where the stride is 1 (the only case inlined)
    _partition(sch, sch.get_loops(pack)[-2] if inline else sch.get_loops(pad)[-1],
               [left, width])
    return names


def schedule_rows(sch: Any, block: Any, cores: int, intrinsic: str | None) -> list[str]:
    """Schedule a row-form accumulator (``te_row_conv``, ``te_plane_conv``): a tile of
    ``blocks`` output channels x ``vectors`` vectors of ``lanes`` outputs along a row held in
    registers while the whole reduction runs, each channel group and tap one instruction
    (tensorized), rows (a plane's tiles) x channel blocks in parallel, the consumers computed
    per row x channel block. Returns the names of the blocks scheduled with it."""
    register_intrinsics()
    plan = dict(sch.get(block).annotations[ROWS])
    lanes = int(plan["lanes"])
    blocks, vectors = int(plan["blocks"]), int(plan["vectors"])
    rows, plane = int(plan.get("rows", 1)), int(plan.get("plane", 0))
    tiles_outer = plane and int(plan["tiles_outer"])
    bias = _start_from_bias(sch, block)
    names = _schedule_input_stages(sch, block, cores, plan)
    if plane and not int(plan.get("flat", 0)):  # te_plane_conv's row writes the NCHW output
        (row_stage,) = sch.get_consumers(block)
        (copy,) = sch.get_consumers(row_stage)
        sch.reverse_compute_inline(copy)
    n, o, i, j, ry, rx, rc, rk = sch.get_loops(block)
    o_out, o_in = sch.split(o, [None, blocks])
    i_out, i_in = sch.split(i, [None, rows])
    j_out, j_vec, j_in = sch.split(j, [None, vectors, lanes])
    # every channel block of a row in turn (the row's input stays in cache), or every row of
    # a channel block (its weights do) where the weights are the larger
    outer: tuple[Any, ...] = (i_out, o_out) if int(plan["rows_outer"]) else (o_out, i_out)
    if tiles_outer:
        # a plane of whole tiles: tiles outermost, so each core reads the pixels it packed and
        # a tile's input stays in cache for every channel block (56x56 planes at 2 threads:
        # 0.84 to 0.91 times the rows form's time; channel blocks outermost, 1.05 to 1.08)
        outer = (j_out, *outer)
        sch.reorder(n, *outer, ry, rx, rc, o_in, i_in, j_vec, j_in, rk)
    else:
        sch.reorder(n, *outer, j_out, ry, rx, rc, o_in, i_in, j_vec, j_in, rk)
    row = sch.fuse(n, *outer)
    if cores > 1:
        sch.parallel(row)
    # a tile of a plane is no rectangle of the NCHW output: only the plane's row stage, which
    # writes it pixel by pixel, runs per tile; the consumers that read the output by rows and
    # columns (fused into the kernel) run after it (computed per tile, TVM's region analysis
    # would have them read whole rows, part of them not written yet)
    names += _move_consumers(sch, block, row, transitive=not tiles_outer)
    init = _decompose(sch, block, ry, bias)
    if intrinsic is not None:
        sch.tensorize(j_in, intrinsic)
    # the tile's zeros written in whole vectors, unrolled: LLVM then starts the accumulators
    # in registers (a zero fill stored in half vectors and read back whole stalls on store
    # forwarding: a 1x1 conv of 32 to 64 channels at 112x112 ran 18 % faster without it)
    *tile_loops, lanes_loop = sch.get_loops(init)[-4:]
    sch.vectorize(lanes_loop)
    for loop in (*tile_loops, j_vec, i_in, o_in):
        sch.unroll(loop)
    _vectorize_requant(sch, names, lanes, tail=bool(plane))
    return names


def schedule_channels_last(sch: Any, block: Any, cores: int, intrinsic: str | None) -> list[str]:
    """Schedule a channels-last 1x1 conv (``te_nhwc_pointwise``): a tile of ``pixels`` pixels
    x ``blocks`` vectors of output channels in registers while the whole reduction runs, each
    4 input channels one instruction per accumulator (the activations broadcast), tiles in
    parallel, each requantized as it finishes (its pixels written straight into the NHWC
    output); the input's ``x + 128`` copy one vectorized pass before. Returns the names of the
    blocks scheduled with it."""
    register_intrinsics()
    plan = dict(sch.get(block).annotations[CHANNELS_LAST])
    lanes, pixels, blocks = int(plan["lanes"]), int(plan["pixels"]), int(plan["blocks"])
    (pack,) = sch.get_producers(block)
    names = [sch.get(pack).name_hint]
    bias = _start_from_bias(sch, block)
    (pixel_stage,) = sch.get_consumers(block)
    (copy,) = sch.get_consumers(pixel_stage)
    sch.reverse_compute_inline(copy)
    n, p, ob, ol, rc, rk = sch.get_loops(block)
    p_out, p_in = sch.split(p, [None, pixels])
    ob_out, ob_in = sch.split(ob, [None, blocks])
    sch.reorder(n, p_out, ob_out, rc, p_in, ob_in, ol, rk)
    tiles = sch.fuse(n, p_out, ob_out)
    if cores > 1:
        sch.parallel(tiles)
    # only the pixels' requantization runs per tile (a tile of the flattened plane is no
    # rectangle of the NHWC output; ops fused after the conv run once it is done)
    names += _move_consumers(sch, block, tiles, transitive=False)
    init = _decompose(sch, block, rc, bias)
    if intrinsic is not None:
        sch.tensorize(ol, intrinsic)
    *tile_loops, lanes_loop = sch.get_loops(init)[-3:]
    sch.vectorize(lanes_loop)
    for loop in (*tile_loops, p_in, ob_in):
        sch.unroll(loop)
    loops = sch.get_loops(pack)
    if len(loops) == 5:  # from NCHW: the plane form's pack
        _schedule_plane_pack(sch, pack, cores, int(plan["plane"]), lanes)
    else:  # from NHWC: pixels in parallel, each pixel's channels one vectorized copy
        if cores > 1:
            sch.parallel(sch.fuse(loops[0], loops[1]))
        values = int(sch.get(loops[2]).extent) * int(sch.get(loops[3]).extent)
        whole = sch.fuse(loops[2], loops[3])
        if values % 64 == 0:
            sch.vectorize(sch.split(whole, [None, 64])[1])
    _vectorize_requant(sch, names, lanes)  # in vectors of the output channels' lanes
    return names


def schedule_channels_last_depthwise(sch: Any, block: Any, cores: int) -> list[str]:
    """Schedule a channels-last depthwise accumulator (``te_nhwc_depthwise``): output rows x
    vectors of channels in parallel (a 7x7 plane still splits evenly over the cores), a tile
    of ``pixels`` outputs of a row x one vector of channels held in registers while every tap
    runs (LLVM vectorizes the widening multiply-add over the channels; an input column is
    loaded once for the taps of the tile that read it); the requantization computed per row
    and vector of channels; the pad one pass before, rows in parallel. Returns the names of
    the blocks scheduled with it."""
    plan = dict(sch.get(block).annotations[CHANNELS_LAST_DEPTHWISE])
    lanes, pixels = int(plan["lanes"]), int(plan["pixels"])
    (pad,) = sch.get_producers(block)
    names = [sch.get(pad).name_hint]
    n, i, j, c, ry, rx = sch.get_loops(block)
    j_out, j_in = sch.split(j, [None, pixels])
    c_out, c_in = sch.split(c, [None, lanes])
    sch.reorder(n, i, c_out, j_out, ry, rx, j_in, c_in)
    row = sch.fuse(n, i, c_out)
    if cores > 1:
        sch.parallel(row)
    names += _move_consumers(sch, block, row, transitive=False)
    # vectorized and unrolled before the init is split off (TVM's vectorize needs the whole
    # reduction block)
    sch.vectorize(c_in)
    for loop in (j_in, rx, ry):
        sch.unroll(loop)
    init = sch.decompose_reduction(block, ry)
    *_, tile_loop, lanes_loop = sch.get_loops(init)
    sch.vectorize(lanes_loop)
    sch.unroll(tile_loop)
    # the pad, rows in parallel: its columns split at the borders (the interior's test
    # folds), a column's channels vectorized
    n, y, xx, ch = sch.get_loops(pad)
    if cores > 1:
        sch.parallel(sch.fuse(n, y))
    sch.vectorize(sch.split(ch, [None, lanes])[1])
    left, width = (int(b) for b in plan["borders"])
    _partition(sch, xx, [left, width])
    _vectorize_requant(sch, names, lanes)  # a vector of channels at a time
    return names
