"""The CPU loop schedule ``build`` gives kernels that MetaSchedule has not tuned.

TVM's default CPU pipeline schedules nothing: a legalized conv runs its TE loop nest as written,
``n, o, i, j`` around the reduction ``c, ky, kx``, on one thread. Each output is then a dot
product of a few taps, which LLVM cannot vectorize, and every output re-reads its input window.
``plan_block`` decides, from a block's iteration kinds and loop extents alone, a schedule that
keeps each output's arithmetic as it is (the reduction runs in the same order; only spatial
loops move), so results stay bit-exact:

- **innermost outputs**: the trailing spatial loop (output column ``j``, or the matmul's ``n``)
  moves inside the reduction, so LLVM vectorizes across neighbouring outputs; when it is shorter
  than a vector, the last two spatial loops go in together (as two nested loops: fused into
  one, their indices become ``f // n`` and ``f % n``, and LLVM 22's loop vectorizer
  miscompiles such addressing on AVX-512 targets; docs/build.md).
- **register block**: the channel loop (second spatial loop) is split so ``block`` channels
  share each loaded input row, about ``ACC_LANES`` int32 accumulators in flight.
- **parallel**: the leading spatial loops are fused until there are a few chunks per core and
  run on TVM's thread pool, for blocks with enough work to pay for a parallel launch.

``schedule_cpu`` applies the plan with TVM's schedule primitives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx

from .._tvm import copy_module, function_attr, to_python
from .targets import as_target, target_features

VECTOR_LANES = 16       # the shortest inner loop worth vectorizing (16 int8 lanes: 128 bits)
ACC_LANES = 64          # int32 accumulators kept in flight by a register block (8 AVX2 registers)
MIN_PARALLEL_WORK = 1 << 15  # iterations below which a parallel launch costs more than it saves
CHUNKS_PER_CORE = 4


@dataclass(frozen=True)
class BlockPlan:
    """How to schedule one block. Loop indices refer to the block's original loop nest."""

    inner: int = 0     # trailing spatial loops moved inside the reduction (0: order unchanged)
    block: int = 1     # split factor of loop 1 (the channel loop), 1: no register block
    parallel: int = 0  # leading spatial loops fused and run in parallel (0: serial)
    vector: int = 0    # an elementwise block's last loop vectorized in pieces of this (0: not)

    @property
    def is_noop(self) -> bool:
        return self.inner == 0 and self.block == 1 and self.parallel == 0 and self.vector == 0


def plan_block(kinds: list[str], extents: list[int], cores: int) -> BlockPlan:
    """The plan for a block whose loops (outermost first) bind iterations of ``kinds``
    (``"S"`` spatial, ``"R"`` reduction) with static ``extents``."""
    n_spatial = next((i for i, k in enumerate(kinds) if k != "S"), len(kinds))
    if any(k != "R" for k in kinds[n_spatial:]) or n_spatial == 0:
        return BlockPlan()  # reduction loops between spatial ones, or no spatial loop
    work = 1
    for e in extents:
        work *= e
    reduction = n_spatial < len(kinds)
    inner, block = 0, 1
    if reduction and n_spatial >= 2 and extents[n_spatial - 1] >= 4:
        inner = 1 if extents[n_spatial - 1] >= VECTOR_LANES or n_spatial < 3 else 2
        lanes = 1
        for e in extents[n_spatial - inner:n_spatial]:
            lanes *= e
        if n_spatial - inner >= 2:  # a channel loop outside the inner ones
            block = max(1, ACC_LANES // lanes)
            while block > 1 and (extents[1] % block or extents[1] == block):
                block //= 2
    # Parallel over the leading spatial loops that stay outside: not the inner ones, and for an
    # elementwise block not its last loop (LLVM vectorizes that one).
    outer = n_spatial - inner if reduction else n_spatial - 1
    parallel = 0
    if work >= MIN_PARALLEL_WORK and cores > 1:
        chunks = 1
        for i in range(outer):
            chunks *= extents[i] // block if i == 1 else extents[i]
            parallel = i + 1
            if chunks >= CHUNKS_PER_CORE * cores:
                break
        if chunks < 2:
            parallel = 0
    # An elementwise block's last loop is vectorized by TVM, not left to LLVM: LLVM's loop
    # vectorizer gives up on a requantization's llvm.arithmetic.fence (the fence that keeps a
    # multiply and an add from contracting into an FMA), and the kernel ran one value at a
    # time (65,536 values of a rescaling mul: 75 us, Zen 4).
    vector = VECTOR_LANES if not reduction and extents[-1] % VECTOR_LANES == 0 else 0
    return BlockPlan(inner=inner, block=block, parallel=parallel, vector=vector)


def schedule_cpu(mod: Any, plan_block: Callable[[list[str], list[int], int], Any],
                 cores: int, target: Any = None) -> Any:
    """``mod`` with every block at the root of each unscheduled PrimFunc scheduled by
    ``plan_block(kinds, extents, cores)`` (a ``BlockPlan``), except the
    packed int8 reductions (``forms``) and the blocks scheduled with them, which
    ``dot_kernels`` schedules (tensorized where ``target``, default the host, has the
    instruction).

    Blocks whose loops do not fit the plan's model (symbolic extents, non-loop bindings) stay as
    they are; so does a block where a primitive refuses the plan.
    """
    from tvm.s_tir.schedule import ScheduleError

    from . import dot_kernels

    has_feature = target_features(as_target(target))
    out = copy_module(mod)
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, tirx.PrimFunc) or function_attr(func, "tirx.is_scheduled"):
            continue
        sch, blocks = _root_blocks(func)
        packed = [b for b in blocks if dot_kernels.is_packed(sch, b)]
        if packed:  # tensorized, its consumers moved into its tiles: the rest as planned
            done = [sch.get(b).name_hint for b in packed]
            try:
                for block in packed:
                    done += dot_kernels.schedule(sch, block, cores, has_feature)
                blocks = [b for b in sch.get_child_blocks(sch.get_sblock("root"))
                          if not sch.get(b).name_hint.startswith(tuple(done))]
            except (ScheduleError, ValueError) as exc:
                # the packed arithmetic is exact under any schedule: keep it, planned as the
                # other kernels are, and say so (a slower kernel, not a failed build)
                import warnings

                warnings.warn(f"kernel {gv.name_hint}: the tensorized schedule was refused "
                              f"({str(exc).strip().splitlines()[0]}); it gets the generic one",
                              stacklevel=2)
                sch, blocks = _root_blocks(func)
        for block in blocks:
            # on a ScheduleError the block keeps the primitives applied before the refused one
            with contextlib.suppress(ScheduleError):
                _apply_block_plan(sch, block, plan_block, cores)
        out[gv] = sch.mod["main"]
    return out


def _apply_block_plan(sch: Any, block: Any, plan_block: Callable, cores: int) -> None:
    loops = sch.get_loops(block)
    iters = sch.get(block).iter_vars
    extents = [sch.get(loop).extent for loop in loops]
    if not loops or len(iters) != len(loops) or not all(
            isinstance(e, tirx.IntImm) for e in extents):
        return
    kinds = ["S" if int(iv.iter_type) == 0 else "R" if int(iv.iter_type) == 2 else "?"
             for iv in iters]
    if _reduces_along_rows(sch.get(block), kinds):
        _schedule_row_reduction(sch, block, kinds.index("R"), cores)
        return
    plan = plan_block(kinds, [int(e.value) for e in extents], cores)
    if plan.is_noop:
        return
    n_spatial = kinds.index("R") if "R" in kinds else len(kinds)
    reduction = list(loops[n_spatial:])
    outer = list(loops[:n_spatial - plan.inner])
    inner = list(loops[n_spatial - plan.inner:n_spatial])
    blocked = []
    if plan.block > 1:
        o_out, o_in = sch.split(outer[1], [None, plan.block])
        outer[1], blocked = o_out, [o_in]
    if plan.inner or blocked:
        sch.reorder(*outer, *reduction, *blocked, *inner)
    if blocked:
        sch.unroll(blocked[0])
    if plan.parallel:
        lead = outer[:plan.parallel]
        sch.parallel(sch.fuse(*lead) if len(lead) > 1 else lead[0])
    if plan.inner and reduction:
        sch.decompose_reduction(block, reduction[0])
    if plan.vector and not reduction and _reads_points(sch.get(block)):
        last = sch.get_loops(block)[-1]
        sch.vectorize(sch.split(last, [None, plan.vector])[1])


ROW_CHAINS = 8  # rows reduced together, one independent chain of additions each


def _reduces_along_rows(block: Any, kinds: list[str]) -> bool:
    """Whether ``block`` reduces each of its float outputs over the innermost axes of its
    input (a layer norm's sums), spatial loops first: its largest reads' last index runs over
    reduction variables only."""
    if "R" not in kinds or "R" in kinds[:kinds.index("R")] or kinds.index("R") == 0 or any(
            k != "R" for k in kinds[kinds.index("R"):]):
        return False
    # only float sums: LLVM reorders an integer sum itself and vectorizes it (a global
    # average pool's 7x7 planes: 3 us so, 14 as rows); not a table read at each value
    # (softmax's exponentials: the rows' lookups interleaved ran 70 against 59 us, Zen 4)
    if not all(_region_dtype(w).startswith("float") for w in block.writes) or _gathers(block):
        return False
    reduction = {iv.var for iv, k in zip(block.iter_vars, kinds) if k == "R"}
    dims = max((len(read.region) for read in block.reads), default=0)
    # (a read of one value a row, such as the row's maximum at [..., 0], says nothing)
    last = [tirx.analysis.undefined_vars(read.region[-1].min) for read in block.reads
            if len(read.region) == dims]
    last = [used for used in last if used]
    return bool(last) and all(v in reduction for used in last for v in used)


def _schedule_row_reduction(sch: Any, block: Any, n_spatial: int, cores: int) -> None:
    """Reduce ``ROW_CHAINS`` rows at a time, each row's values in its own order: the row loop
    inside the reduction, unrolled, so the additions of different rows interleave (one
    row at a time, each addition waits for the last: 256 float additions a row, a layer
    norm's two sums took about 60 us for 128 rows, Zen 4) and each row is read in order
    (the generic plan's rows innermost read the input down its columns)."""
    loops = sch.get_loops(block)
    spatial, reduction = loops[:n_spatial], loops[n_spatial:]
    rows = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    extent = int(sch.get(rows).extent)
    chains = next(c for c in (ROW_CHAINS, 4, 2, 1) if extent % c == 0)
    outer, inner = sch.split(rows, [None, chains])
    sch.reorder(outer, *reduction, inner)
    sch.unroll(inner)
    work = extent
    for loop in reduction:
        work *= int(sch.get(loop).extent)
    if cores > 1 and work >= MIN_PARALLEL_WORK and extent // chains >= 2:
        sch.parallel(outer)
    sch.decompose_reduction(block, reduction[0])


def _reads_points(block: Any) -> bool:
    """Whether each value of ``block`` reads one point of each input (not a gather: a gather
    vectorized lane by lane ran slower than LLVM's own loop, 70 against 55 us on 131,072
    values of a GELU table, Zen 4)."""
    return not _gathers(block) and all(
        isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1
        for read in block.reads for r in read.region)


def _gathers(block: Any) -> bool:
    """Whether ``block`` reads at an index computed from data (a lookup table)."""
    iters = {iv.var for iv in block.iter_vars}
    return any(v not in iters for read in block.reads for r in read.region
               for v in tirx.analysis.undefined_vars(r.min))


def _root_blocks(func: Any) -> tuple[Any, list[Any]]:
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import ScheduleError

    sch = Schedule(tvm.IRModule({"main": func}))
    try:
        root = sch.get_sblock("root")
    except ScheduleError:  # written as loops (an extern kernel such as te_tile): nothing to plan
        return sch, []
    return sch, sch.get_child_blocks(root)


def root_block_annotations(func: Any) -> list[dict[str, Any]]:
    """The annotations of the blocks at the root of an unscheduled PrimFunc, as Python
    values (``canonqnn.build.forms`` records its plans there)."""
    sch, blocks = _root_blocks(func)
    return [{str(k): to_python(v) for k, v in sch.get(b).annotations.items()} for b in blocks]


def _region_dtype(region: Any) -> str:
    return str(region.source.dtype)  # the written buffer


def reduction_dtypes(func: Any) -> set[str]:
    """The dtypes of the buffers a PrimFunc's reduction blocks write (empty: no reduction)."""
    sch, blocks = _root_blocks(func)
    dtypes: set[str] = set()
    for block in blocks:
        node = sch.get(block)
        if any(int(iv.iter_type) == 2 for iv in node.iter_vars):
            dtypes.update(_region_dtype(region) for region in node.writes)
    return dtypes
