"""``canonqnn.matmul`` on the CPU's int8 dot-product instructions (``forms.dot``): ``b``'s
columns in lanes, a constant ``b`` packed at build time like a 1x1 conv's weights, a run-time
one inside the kernel (as bytes with row and column sums for the correction on ``vpdpbusd`` and
``sdot`` CPUs, else as int16 pairs).

The accumulator is the exact one of ``ops.matmul``'s plain loop nest (only the order of the
integer additions differs), and the bias and requantization are the op's own
(``matmul.te_output``), so ``matmul.reference`` specifies both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _tvm
from ..._tvm import te, tirx
from ...ops import matmul
from ...ops.matmul import broadcast_index
from .. import targets
from ..isa import ACC_BIASED, ACC_START, ANNOTATION, DotISA, isa_for, isa_named, with_pair2
from . import dot


def form(bb: Any, call: Any) -> Any:
    """The matmul ``call`` legalized on the current target's dot-product ISA
    (``te_packed_matmul``), or None where no packed form applies (``_packed_isa``): the op's
    own loop nest then."""
    a = _tvm.attrs_dict(call)
    a_q, b_q, bias, b_scale, b_zp = call.args
    accumulator = _tvm.dtype_of(bias)
    isa = _packed_isa(a, call, accumulator)
    if isa is None:
        return None
    a_shape, b_shape = _tvm.shape_of(a_q), _tvm.shape_of(b_q)
    shape = matmul.out_shape(a_shape, b_shape)
    n = b_shape[-1]
    bzp = _tvm.const_value(b_zp)
    kind, table = matmul.requant_multipliers(a, _tvm.const_value(b_scale), n)
    mult = _tvm.const(table, str(table.dtype))
    bzp_const = _tvm.const(np.broadcast_to(bzp, (n,)).astype(np.int32), "int32")

    constant_b = None
    for candidate in with_pair2(isa):
        if (constant_b := _constant_b(a, call, bzp, candidate)) is not None:
            isa = candidate
            break
    if constant_b is not None:  # packed at build time
        weights, corrected = constant_b
        bias, b_q = _tvm.const(corrected, "int32"), _tvm.const(weights.packed, isa.weight_dtype)
    elif isa.pair != 4 or a_shape[-1] > dot.MAX_CORRECTED_K:
        # packed inside the kernel as int16 pairs: no correction needed
        isa = isa_named(isa.pair2)
    # the accumulator starts from its int32 bias (dot.with_bias), a run-time b's on a pair-4
    # ISA minus its correction (_corrected_start)
    corrected = constant_b is None and isa.pair == 4
    started = constant_b is not None or corrected
    if started:
        bias = _tvm.const(dot.padded_bias(_tvm.const_value(bias), isa.lanes), "int32")

    def compute(x, w, bias, mult, wzp):
        lanes, batch = isa.lanes, shape[:-2]
        columns = -(-n // lanes)
        packed_acc = te_packed_matmul(
            x, w, isa, a["a_zp"], batch,
            {**dot.conv_tile(isa, columns, a_shape[-2]),
             "macs": int(np.prod(shape)) * a_shape[-1], "columns_last": 1},
            b_zp=None if constant_b is not None else wzp)
        if corrected:
            packed_acc = _corrected_start(
                packed_acc, bias, _runtime_correction(x, w, wzp, isa, a["a_zp"], batch), n)
        elif started:
            packed_acc = dot.with_bias(packed_acc, bias, lambda nb, o, i, j, ol: o * lanes + ol)

        def acc(*idx):
            flat = 0
            for i, dim in zip(idx[:-2], batch):  # (unit dims left out: TVM's region
                flat = flat * dim + i if dim > 1 else flat  # analysis then inverts the index)
            return packed_acc[flat, idx[-1] // lanes, 0, idx[-2], idx[-1] % lanes]

        return matmul.te_output(shape, acc, None if started else bias, mult, kind, a,
                                accumulator)

    return bb.call_te(compute, a_q, b_q, bias, mult, bzp_const,
                      primfunc_name_hint="canonqnn_matmul")


def _packed_isa(a: dict[str, Any], call: Any, accumulator: str):
    """The dot-product ISA the matmul runs on (``te_packed_matmul``): int8 operands, exact
    accumulation in int32, a constant bias, a target with one; else None (the plain loop
    nest)."""
    a_q, b_q, bias = call.args[:3]
    has_feature = targets.current_target_features()
    if (has_feature is None or a.get("accumulate") != "exact" or accumulator != "int32"
            or _tvm.dtype_of(a_q) != "int8" or _tvm.dtype_of(b_q) != "int8"
            or not _tvm.is_const(bias)):
        return None
    return isa_for(has_feature)


def _constant_b(a: dict[str, Any], call: Any, bzp: np.ndarray, isa: Any):
    """``(PackedWeights, bias)`` for a constant 2-D ``b`` on ``isa``, packed at build time
    like a 1x1 conv's weights; None where it is not constant or its packed form would not be
    exact (a run-time ``b`` is packed inside the kernel, on ``vpmaddwd``)."""
    b_q, bias = call.args[1], call.args[2]
    if not _tvm.is_const(b_q) or len(_tvm.shape_of(b_q)) != 2:
        return None
    as_conv = _tvm.const_value(b_q).T[:, :, None, None]  # [N, K, 1, 1]
    return dot.packed_weights_for(as_conv, bzp, a["a_zp"], isa, _tvm.const_value(bias))


def _runtime_correction(a: Any, b: Any, b_zp: Any, isa: DotISA, a_zp: int,
                        out_batch: tuple[int, ...]) -> Any:
    """``correction(batch, m, n)``: what a pair-4 instruction's sum over ``k`` of
    ``(a + shift) * b`` (``b`` as stored, a run-time operand) exceeds the exact accumulator
    ``sum((a - a_zp) * (b - b_zp))`` by: ``(shift + a_zp) * colsum(b)[n] + b_zp[n] *
    (rowsum(a)[m] - K * a_zp)``, from the row sums of ``a`` and the column sums of ``b``
    computed in the kernel (``M K + K N`` additions for ``M K N`` products)."""
    *lead, m, k = (int(d) for d in a.shape)
    *b_lead, _, n = (int(d) for d in b.shape)
    batch = int(np.prod(out_batch)) if out_batch else 1
    ka = te.reduce_axis((0, k), "ka")
    kb = te.reduce_axis((0, k), "kb")
    rows = te.compute((batch, m), lambda nb, row: te.sum(a[(*broadcast_index(
        _unravel(nb, out_batch), tuple(lead)), row, ka)].astype("int32"), axis=ka),
        name="a_row_sums")
    cols = te.compute((batch, n), lambda nb, col: te.sum(b[(*broadcast_index(
        _unravel(nb, out_batch), tuple(b_lead)), kb, col)].astype("int32"), axis=kb),
        name="b_column_sums")
    shift = isa.act_shift + a_zp

    def correction(nb: Any, row: Any, col: Any) -> Any:
        return (shift * cols[nb, col]
                + b_zp[col] * (rows[nb, row] - tirx.const(k * a_zp, "int32")))

    return correction


def _corrected_start(acc: Any, bias: Any, correction: Any, n: int) -> Any:
    """``acc`` (a packed accumulator, ``te_packed_matmul``, of a run-time ``b``) plus its
    start, the bias (padded to whole vectors) minus the ``correction`` (``_runtime_correction``)
    of each value, computed as a stage of its own (``ACC_START``): the kernel's schedule folds
    the sum into the accumulator's start (as ``dot.with_bias``'s) and computes the start per
    tile, so the requantization reads the accumulator alone and runs on each tile while it
    is in registers (``dot_kernels.schedule_packed``)."""
    lanes = int(acc.shape[-1])

    def start(nb, o, i, j, ol):
        column = tirx.min(o * lanes + ol, n - 1)  # a padding lane's value is never read
        return bias[o * lanes + ol] - correction(nb, j, column)

    begin = te.compute(acc.shape, start, name=ACC_START)
    # the start's loads first: TE then orders its stages before the accumulator's
    return te.compute(acc.shape, lambda *i: begin(*i) + acc(*i), name=ACC_BIASED)


def _unravel(flat: Any, shape: tuple[int, ...]) -> list[Any]:
    """The indices of a flat (row-major) index into ``shape``."""
    index: list[Any] = []
    for dim in reversed(shape):
        index.insert(0, flat % dim)
        flat = flat // dim
    return index


def te_packed_matmul(a: Any, b: Any, isa: DotISA, a_zp: int, out_batch: tuple[int, ...],
                     tile: dict[str, int], b_zp: Any = None) -> Any:
    """The packed accumulator of ``a`` [..., M, K] (int8) times ``b``, ``acc[batch, n // L,
    0, m, n % L]`` with the output's batch dims ``out_batch`` flattened, in the loop structure
    of ``dot.te_packed_conv`` (rows = batch x column blocks, tiles along m) so one schedule
    serves both. ``b`` is either a constant packed as a 1x1 conv's weights
    (``dot.pack_conv_weights``, 6-D), or a run-time int8 [..., K, N] with per-column zero
    points ``b_zp`` (an int32 TE tensor), packed inside the kernel: on a pair-2 ISA as int16
    ``b - b_zp`` (the products are exact, no correction), on a pair-4 one as ``b`` itself
    (``a`` shifted as ``dot.activation`` writes it; the caller subtracts
    ``_runtime_correction``)."""
    *lead, m, k = (int(d) for d in a.shape)
    a_lead = tuple(lead)
    batch = int(np.prod(out_batch)) if out_batch else 1
    lanes, pair = isa.lanes, isa.pair

    def pack(nb, row, co, ci):
        kk = co * pair + ci
        value = a[(*broadcast_index(_unravel(nb, out_batch), a_lead), row, kk)]
        return tirx.if_then_else(kk < k, dot.activation(value, a_zp, isa),
                                 dot.activation_zero(a_zp, isa))

    ap = te.compute((batch, m, -(-k // pair), pair), pack, name="a_pack")
    kb = int(ap.shape[2])
    if len(b.shape) == 6:  # constant, packed at build time
        oo = int(b.shape[0])

        def weight(nb, o, rc, ol, rk):
            return b[o, 0, 0, rc, ol, rk]
    else:
        *b_lead, _, n = (int(d) for d in b.shape)
        oo = -(-n // lanes)

        def pack_b(nb, o, g, ol, p):
            kk, col = g * pair + p, o * lanes + ol
            value = b[(*broadcast_index(_unravel(nb, out_batch), tuple(b_lead)), kk, col)]
            if pair == 4:  # as stored, corrected after the sum (_runtime_correction)
                return tirx.if_then_else(tirx.all(kk < k, col < n), value,
                                         tirx.const(0, "int8"))
            real = (value.astype("int16") - b_zp[col].astype("int16")).astype("int16")
            return tirx.if_then_else(tirx.all(kk < k, col < n), real, tirx.const(0, "int16"))

        bp = te.compute((batch, oo, kb, lanes, pair), pack_b, name="b_pack")

        def weight(nb, o, rc, ol, rk):
            return bp[nb, o, rc, ol, rk]

    ry = te.reduce_axis((0, 1), "ry")
    rx = te.reduce_axis((0, 1), "rx")
    rc = te.reduce_axis((0, kb), "rc")
    rk = te.reduce_axis((0, pair), "rk")
    return te.compute(
        (batch, oo, 1, m, lanes),
        lambda nb, o, i, j, ol: te.sum(
            ap[nb, j + i + ry + rx, rc, rk].astype("int32")
            * weight(nb, o, rc, ol, rk).astype("int32"), axis=[ry, rx, rc, rk]),
        name="acc_packed", attrs={ANNOTATION: {"intrinsic": isa.intrinsic, **tile}})
