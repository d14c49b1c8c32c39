"""The CPU's integer dot-product instructions the int8 kernels use (docs/build.md, "Int8
kernels"): the table of ISAs, the choice of one from a target's features, and the names of
the packed plans and tensor intrinsics. Data only: ``canonqnn.build.forms`` writes the compute
forms on them, ``canonqnn.build.dot_kernels`` the tensor intrinsics and schedules.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

UINT8_SHIFT = 128
# Block annotations of the packed reductions: the tensor intrinsic, the tile the schedule uses
# and the multiply-accumulates, one key per form.
ANNOTATION = "canonqnn.dot"  # te_packed_conv, te_packed_matmul (output channels in lanes)
ROWS = "canonqnn.rows"  # te_row_conv
DEPTHWISE = "canonqnn.depthwise"  # te_depthwise_conv
CHANNELS_LAST = "canonqnn.channels_last"  # te_nhwc_pointwise (the layout pass, build.layout)
# a packed accumulator plus its bias (forms.dot.with_bias), folded into the accumulator's
# start by its schedule (dot_kernels)
ACC_BIASED = "acc_biased"
# the start of a run-time matmul's accumulator (forms.matmul), computed per tile
ACC_START = "acc_start"
CHANNELS_LAST_DEPTHWISE = "canonqnn.channels_last_depthwise"  # te_nhwc_depthwise (no intrinsic)
BLOCK_PLANS = (ANNOTATION, ROWS, DEPTHWISE, CHANNELS_LAST, CHANNELS_LAST_DEPTHWISE)
# where the layout pass runs convs channels-last: the ISAs its kernels were measured faster on
CHANNELS_LAST_ISAS = ("avx512_vnni",)


@dataclass(frozen=True)
class DotISA:
    """One integer dot-product instruction: ``lanes`` int32 outputs, each the sum of ``pair``
    products, with ``registers`` vector registers to hold an output tile in.

    ``pair2`` names the int16-pair ISA of the same CPUs (the forms that need no build-time
    correction: depthwise convs, matmuls of run-time operands). ``act_dtype`` is how a pair-4
    instruction reads activations: ``uint8`` (``vpdpbusd``: ``x + 128``) or ``int8`` (``sdot``:
    ``x`` itself). ``pairwise_add`` is set where the CPU has no int16 pair dot product (NEON):
    the pairs are then summed from two widening multiplies by that instruction."""

    name: str
    features: tuple[str, ...]  # LLVM target features the instruction needs
    lanes: int
    pair: int
    llvm_intrinsic: str
    registers: int
    pair2: str
    act_dtype: str = "int16"
    pairwise_add: str | None = None

    @property
    def intrinsic(self) -> str:
        return f"canonqnn_dot_{self.lanes}x{self.pair}_{self.name}"

    @property
    def act_shift(self) -> int:
        """What a pair-4 activation adds to ``x`` (its correction: ``_real_weights``)."""
        return UINT8_SHIFT if self.act_dtype == "uint8" else 0

    @property
    def weight_dtype(self) -> str:
        return "int8" if self.pair == 4 else "int16"


# In order of preference; the first whose features the target has is used. The AArch64 ones
# are built (cross-compiled) but never run on this project's x86 machines: their arithmetic
# is checked here through ``emulating``, their instructions in the compiled code.
ISAS = (
    DotISA("avx512_vnni", ("avx512vnni", "avx512bw"), 16, 4, "llvm.x86.avx512.vpdpbusd.512", 32,
           "avx512bw", "uint8"),
    DotISA("avx_vnni", ("avxvnni",), 8, 4, "llvm.x86.avx512.vpdpbusd.256", 16, "avx2", "uint8"),
    DotISA("avx512bw", ("avx512bw",), 16, 2, "llvm.x86.avx512.pmaddw.d.512", 32, "avx512bw"),
    DotISA("avx2", ("avx2",), 8, 2, "llvm.x86.avx2.pmadd.wd", 16, "avx2"),
    DotISA("neon_dotprod", ("neon", "dotprod"), 4, 4, "llvm.aarch64.neon.sdot.v4i32.v16i8", 32,
           "neon", "int8"),
    DotISA("neon", ("neon",), 4, 2, "llvm.aarch64.neon.smull.v4i32", 32, "neon",
           pairwise_add="llvm.aarch64.neon.addp.v4i32"),
)


_emulated: list[DotISA] = []  # set by ``emulating`` (tests)


def isa_for(has_feature) -> DotISA | None:
    """The ISA to use given ``has_feature(name) -> bool`` of the target, or None."""
    if _emulated:
        return _emulated[-1]
    return next((isa for isa in ISAS if all(has_feature(f) for f in isa.features)), None)


def isa_named(name: str) -> DotISA:
    return next(isa for isa in ISAS if isa.name == name)


@contextlib.contextmanager
def emulating(name: str):
    """Legalize as for the ISA ``name`` whatever the target has. Where the target lacks the
    instruction the schedule leaves the block untensorized, so LLVM computes the same packed
    arithmetic with the host's instructions: a host checks every ISA's data layout, shifts and
    corrections, though only its own instructions run (tests)."""
    _emulated.append(isa_named(name))
    try:
        yield
    finally:
        _emulated.pop()


def intrinsic_features(intrinsic: str) -> tuple[str, ...]:
    """The target features a tensor intrinsic of these ISAs (``DotISA.intrinsic``,
    ``row_intrinsic``) needs."""
    return next(isa.features for isa in ISAS
                if intrinsic in (isa.intrinsic, row_intrinsic(isa)))


def padded_width(out_width: int, isa: DotISA | None) -> int:
    """The accumulator row of the forms with output pixels in lanes (``te_row_conv``,
    ``te_depthwise_conv``): ``out_width`` rounded up to whole vectors (``out_width`` itself
    for any other form, ``isa`` None)."""
    return out_width if isa is None else -(-out_width // isa.lanes) * isa.lanes


def with_pair2(isa: DotISA) -> tuple[DotISA, ...]:
    """``isa``, then the int16-pair ISA of the same CPU where that is another: the ISAs a conv
    or matmul with constant weights tries in turn (a pair-4 one takes weights only where
    ``w - w_zp`` fits int8; asymmetric uint8 weights reach 255)."""
    return tuple(dict.fromkeys((isa, isa_named(isa.pair2))))


def pair2_isa(has_feature) -> DotISA | None:
    """The int16-pair ISA for the forms that need no bias correction (depthwise convs,
    matmuls of run-time operands): the ``pair2`` of the ISA ``isa_for`` picks."""
    isa = isa_for(has_feature)
    return None if isa is None else isa_named(isa.pair2)


def depthwise_isas(has_feature, out_width: int) -> list[DotISA]:
    """The ISAs a depthwise conv whose output rows are ``out_width`` long can take, best
    first: the target's ISA (``isa_for``) where it is a pair-4 one (a 3x3 kernel's row of
    taps in one accumulating instruction; it needs the weights to fit int8), then the
    int16-pair ISAs the target has, those whose vectors idle the fewest lanes on such rows
    first (7 outputs: one 8-lane vector, not a 16-lane one with 9 lanes idle), then the
    wider. Under ``emulating``: the emulated ISA and its ``pair2``."""
    if _emulated:
        return [_emulated[-1], isa_named(_emulated[-1].pair2)]
    best = isa_for(has_feature)
    pairs = [isa for isa in ISAS if isa.pair == 2 and all(has_feature(f) for f in isa.features)]
    first = [best] if best is not None and best.pair == 4 else []
    return first + sorted(pairs, key=lambda isa: (padded_width(out_width, isa), -isa.lanes))


def row_intrinsic(isa: DotISA) -> str:
    """The tensor intrinsic ``C[i] += A[i, k] * B[k]`` (``lanes`` outputs along a row, each
    the sum of ``pair`` products; the weights broadcast): ``isa``'s instruction with the
    operands' roles swapped."""
    return f"canonqnn_row_{isa.lanes}x{isa.pair}_{isa.name}"
