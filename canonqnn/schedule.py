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

``canonqnn._tvm.schedule_cpu`` applies the plan with TVM's schedule primitives.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def is_noop(self) -> bool:
        return self.inner == 0 and self.block == 1 and self.parallel == 0


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
    return BlockPlan(inner=inner, block=block, parallel=parallel)
