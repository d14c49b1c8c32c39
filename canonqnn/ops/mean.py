"""reduce_mean: the mean over axes as each runtime computes it.

onnxruntime has no quantized kernel: it runs DequantizeLinear -> float ReduceMean ->
QuantizeLinear, and its float sum adds in an order that depends on the reduced shape (the
``summation`` attribute names the order; ``onnxruntime_summation`` picks it as onnxruntime
does). TFLite's int8 MEAN sums integers and requantizes with a Q31 multiplier (the q31
arithmetic it shares with average pooling, ``pool``); XNNPACK's (TFLite's default
interpreter) sums integers and rescales in float32 as its global mean does (``pool``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx, topi
from ..numerics.q31 import Q31_ROUNDINGS, requant_q31
from ..qparams import QParams, activation_range
from ._q31 import te_requant_q31
from ._registry import CanonicalOp, Refusal, register
from ._requant import requant_accumulator, te_no_contract, te_requant_accumulator
from .pool import (
    F32,
    ROUNDINGS,
    mean_dtypes,
    q31_count,
    q31_mean_multiplier,
    te_xnnpack_mean,
    xnnpack_mean_reference,
)

# ---------------------------------------------------------------- reduce_mean
# onnxruntime runs DequantizeLinear -> float ReduceMean -> QuantizeLinear (no quantized kernel).
# Its float sum first merges neighbouring axes that are both reduced or both kept ("fast
# shape", size-1 axes included), then adds in an order that depends on that shape: the
# ``summation`` attribute names the order, ``onnxruntime_summation`` picks it as onnxruntime does.
SUMMATIONS = ("sequential", "eigen_sse", "eigen_sse_blocks", "mlas_sgemm_m1")
SSE = 4  # floats per packet of Eigen's x86 build in onnxruntime (baseline SSE, no AVX)


def fast_shape(shape, axes) -> tuple[list[int], list[bool]]:
    """onnxruntime's merged shape: runs of reduced / kept axes collapsed into one axis each."""
    reduced = [i in axes for i in range(len(shape))]
    dims, flags = [int(shape[0])], [reduced[0]]
    for size, flag in zip(shape[1:], reduced[1:]):
        if flag == flags[-1]:
            dims[-1] *= int(size)
        else:
            dims.append(int(size))
            flags.append(flag)
    return dims, flags


def onnxruntime_summation(shape, axes, threads: int = 2) -> str:
    """The order onnxruntime 1.31's float ReduceMean adds in (x86) with ``threads`` intra-op
    threads: the sequential path for the KRK/RKR shapes whose outer or middle kept size is
    below the thread count, or below 2 (measured with 1, 2, 3, 4 and 8 threads)."""
    dims, flags = fast_shape(shape, axes)
    kind = "".join("R" if f else "K" for f in flags)
    least = max(2, int(threads))
    if kind in ("R", "KR"):
        return "eigen_sse"
    if kind == "KRK" and dims[0] >= least:
        return "mlas_sgemm_m1"
    if kind == "RKR" and dims[1] >= least:
        return "eigen_sse_blocks"
    return "sequential"


def _summation(shape, axes, summation: str) -> Refusal | None:
    kind = "".join("R" if f else "K" for f in fast_shape(shape, axes)[1])
    allowed = {"sequential": None, "eigen_sse": ("R", "KR"), "eigen_sse_blocks": ("RKR",),
               "mlas_sgemm_m1": ("KRK",)}
    if summation not in allowed:
        return Refusal(f"unknown summation {summation!r}")
    patterns = allowed[summation]
    if patterns is not None and kind not in patterns:
        return Refusal(f"summation {summation!r} needs a reduced/kept pattern "
                       f"{' or '.join(patterns)}, not {kind}")
    return None


def _eigen_layout(n: int, offset: int) -> tuple[int, int, int]:
    """Eigen's redux split of a row of ``n`` floats starting ``offset`` floats after a 16-byte
    boundary: (aligned start, aligned size, size covered by the two-packet loop)."""
    start = min((SSE - offset % SSE) % SSE, n)
    return start, (n - start) // SSE * SSE, (n - start) // (2 * SSE) * (2 * SSE)


def eigen_sse_sums(rows: np.ndarray, first_offset: int = 0) -> np.ndarray:
    """Sum each row of float32 ``rows`` [R, n] as Eigen's SSE ``redux`` does, row ``r`` starting
    ``first_offset + r * n`` floats after a 16-byte boundary: two packet accumulators over the
    aligned part, added, plus a last packet; (p0 + p2) + (p1 + p3); then the unaligned head and
    the tail one by one. Rows too short for one packet are added one by one."""
    count, n = rows.shape
    out = np.empty(count, F32)
    layouts = [_eigen_layout(n, first_offset + r * n) for r in range(count)]
    for layout in set(layouts):
        which = np.array([lay == layout for lay in layouts])
        v, (start, size, size2) = rows[which], layout
        if not size:
            out[which] = _sequential_sums(v)
            continue
        p0 = v[:, start:start + SSE]
        if size > SSE:
            p1 = v[:, start + SSE:start + 2 * SSE]
            for i in range(start + 2 * SSE, start + size2, 2 * SSE):
                p0 = (p0 + v[:, i:i + SSE]).astype(F32)
                p1 = (p1 + v[:, i + SSE:i + 2 * SSE]).astype(F32)
            p0 = (p0 + p1).astype(F32)
            if size > size2:
                p0 = (p0 + v[:, start + size2:start + size]).astype(F32)
        res = ((p0[:, 0] + p0[:, 2]).astype(F32) + (p0[:, 1] + p0[:, 3]).astype(F32)).astype(F32)
        for i in [*range(start), *range(start + size, n)]:
            res = (res + v[:, i]).astype(F32)
        out[which] = res
    return out


def _sequential_sums(columns: np.ndarray) -> np.ndarray:
    """Sum each row of [R, n] left to right (from 0, which adds exactly)."""
    acc = np.zeros(columns.shape[0], F32)
    for i in range(columns.shape[1]):
        acc = (acc + columns[:, i]).astype(F32)
    return acc


def mlas_m1_sums(m: np.ndarray) -> np.ndarray:
    """Column sums of ``m`` [..., K, N] as MLAS's AVX SGEMM kernel for M = 1 forms ones x m:
    rows four at a time ((r0 + r1) + r2) + r3, each group added to the running result, then a
    last pair and a last single row."""
    k, acc = m.shape[-2], np.zeros(m.shape[:-2] + m.shape[-1:], F32)
    g = 0
    for size in [SSE] * (k // SSE) + [2] * (k % SSE // 2) + [1] * (k % 2):
        part = m[..., g, :]
        for i in range(1, size):
            part = (part + m[..., g + i, :]).astype(F32)
        acc, g = (part + acc).astype(F32), g + size
    return acc


def float_mean(xf: np.ndarray, axes, summation: str) -> np.ndarray:
    """The float32 mean of ``xf`` over ``axes`` summed in the order ``summation`` names (the
    value onnxruntime's float ReduceMean computes), shaped as the kept axes merged."""
    axes = sorted(int(i) for i in axes)
    dims, flags = fast_shape(xf.shape, axes)
    REDUCE_MEAN.require(shape=xf.shape, axes=axes, summation=summation)
    xf = np.asarray(xf, F32).reshape(dims)
    if summation == "eigen_sse":
        total = eigen_sse_sums(xf.reshape(-1, dims[-1]))
    elif summation == "eigen_sse_blocks":
        blocks = eigen_sse_sums(xf.reshape(-1, dims[2])).reshape(dims[0], dims[1])
        total = _sequential_sums(blocks.T)
    elif summation == "mlas_sgemm_m1":
        total = mlas_m1_sums(xf).reshape(-1)
    else:
        red = [i for i, f in enumerate(flags) if f]
        kept = [i for i, f in enumerate(flags) if not f]
        total = _sequential_sums(np.transpose(xf, kept + red).reshape(
            int(np.prod([dims[i] for i in kept])), -1))
    count = int(np.prod([d for d, f in zip(dims, flags) if f]))
    return (total / F32(count)).astype(F32)


def _reduce_mean_reference(x, **a) -> np.ndarray:
    if a["rounding"] == "xnnpack":
        axes = tuple(int(i) for i in a["axes"])
        count = int(np.prod([x.shape[i] for i in axes]))
        y = xnnpack_mean_reference(x.astype(np.int32).sum(axis=axes), count, a)
        return y.reshape(_reduce_shape(x.shape, list(axes), a["keepdims"]))
    if a["rounding"] in Q31_ROUNDINGS:
        axes = tuple(int(i) for i in a["axes"])
        count = int(np.prod([x.shape[i] for i in axes]))
        m, shift = q31_mean_multiplier(a, count)
        total = x.astype(np.int64).sum(axis=axes)
        y = requant_q31(total - a["x_zp"] * count, m, shift, a["out_zp"], a["act_min"],
                        a["act_max"], a["rounding"], str(x.dtype))
        return y.reshape(_reduce_shape(x.shape, list(axes), a["keepdims"]))
    xf = ((x.astype(np.int32) - a["x_zp"]).astype(F32) * F32(a["x_scale"])).astype(F32)
    mean = float_mean(xf, a["axes"], a["summation"])
    # QuantizeLinear: f32(mean / out_scale), clamped, rounded half to even, + out_zp
    y = requant_accumulator((mean / F32(a["out_scale"])).astype(F32), F32(1.0), a["out_zp"],
                            a["act_min"], a["act_max"])
    return y.reshape(_reduce_shape(x.shape, [int(i) for i in a["axes"]], a["keepdims"]))


def _reduce_shape(shape, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else int(d) for i, d in enumerate(shape))
    return tuple(int(d) for i, d in enumerate(shape) if i not in axes)


def _f32c(value: float):
    return tirx.const(float(value), "float32")


def _te_eigen_sse_sums(m, rows: int, n: int):
    """TE twin of ``eigen_sse_sums`` for a tensor ``m`` [rows, n] (offsets from 0)."""
    def clamp(i):
        return tirx.max(tirx.min(i, n - 1), 0)

    def layout(r):
        start = tirx.min(tirx.floormod(SSE - tirx.floormod(r * n, SSE), SSE), n)
        size = tirx.floordiv(n - start, SSE) * SSE
        return start, size, tirx.floordiv(n - start, 2 * SSE) * (2 * SSE)

    loops = n // (2 * SSE)  # two-packet steps of the best-aligned row
    if loops:
        j = te.reduce_axis((0, loops), "j")

        def packet(r, w, lane):
            start, _, size2 = layout(r)
            take = m[r, clamp(start + 2 * SSE * j + SSE * w + lane)]
            return te.sum(tirx.if_then_else(j * 2 * SSE < size2, take, _f32c(0.0)), axis=j)

        packets = te.compute((rows, 2, SSE), packet, name="packets")

    def total(r):
        start, size, size2 = layout(r)
        lanes = []
        for lane in range(SSE):
            value = m[r, clamp(start + lane)]  # exactly one packet
            if loops:
                both = packets[r, 0, lane] + packets[r, 1, lane]
                both = tirx.Select(size > size2, both + m[r, clamp(start + size2 + lane)], both)
                value = tirx.Select(size > SSE, both, value)
            lanes.append(value)
        res = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])
        for i in range(SSE - 1):  # the unaligned head, then the tail
            res = tirx.Select(i < start, res + m[r, clamp(i)], res)
        for i in range(SSE - 1):
            res = tirx.Select(start + size + i < n, res + m[r, clamp(start + size + i)], res)
        if n < 2 * SSE - 1:  # some rows may be too short for a packet: added one by one
            one_by_one = m[r, 0]
            for i in range(1, n):
                one_by_one = one_by_one + m[r, i]
            res = tirx.Select(size == 0, one_by_one, res)
        return res

    return te.compute((rows,), total, name="eigen_sum")


def _te_sums(xf, dims, flags, summation: str):
    """The float32 sums of ``xf`` (fast shape ``dims``) over its reduced axes, in the order
    ``summation`` names; shaped as the kept axes (``(1,)`` when none is kept)."""
    if summation == "eigen_sse":
        n = dims[-1]
        rows = topi.reshape(xf, (int(np.prod(dims)) // n, n))
        return _te_eigen_sse_sums(rows, int(np.prod(dims)) // n, n)
    if summation == "eigen_sse_blocks":
        d0, d1, d2 = dims
        blocks = _te_eigen_sse_sums(topi.reshape(xf, (d0 * d1, d2)), d0 * d1, d2)
        i = te.reduce_axis((0, d0), "i")
        return te.compute((d1,), lambda d: te.sum(blocks[i * d1 + d], axis=i), name="sum")
    if summation == "mlas_sgemm_m1":
        d0, k, n = dims
        groups = k // SSE
        if groups:
            j = te.reduce_axis((0, groups), "j")
            quads = te.compute((d0, n), lambda d, c: te.sum(
                ((xf[d, SSE * j, c] + xf[d, SSE * j + 1, c]) + xf[d, SSE * j + 2, c])
                + xf[d, SSE * j + 3, c], axis=j), name="quads")

        def finish(d, c):
            acc, g = (quads[d, c] if groups else None), groups * SSE
            for size in [2] * (k % SSE // 2) + [1] * (k % 2):
                part = xf[d, g, c] if size == 1 else xf[d, g, c] + xf[d, g + 1, c]
                acc, g = (part if acc is None else part + acc), g + size
            return acc

        return te.compute((d0, n), finish, name="sum")
    kept = [d for d, f in zip(dims, flags) if not f]
    raxes = [te.reduce_axis((0, d), f"r{i}") for i, (d, f) in enumerate(zip(dims, flags)) if f]

    def sequential(*k):
        ki, ri, idx = iter(k), iter(raxes), []
        for flag in flags:
            idx.append(next(ri) if flag else next(ki))
        return te.sum(xf[tuple(idx)], axis=raxes)

    if not kept:
        return te.compute((1,), lambda _: sequential(), name="sum")
    return te.compute(kept, sequential, name="sum")


def _reduce_mean_legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    shape = _tvm.shape_of(call.args[0])
    axes = [int(i) for i in a["axes"]]
    dims, flags = fast_shape(shape, axes)
    REDUCE_MEAN.require(shape=shape, axes=axes, summation=a["summation"])
    count = int(np.prod([shape[i] for i in axes]))
    out_shape = _reduce_shape(shape, axes, a["keepdims"])

    if a["rounding"] in (*Q31_ROUNDINGS, "xnnpack"):
        return bb.call_te(lambda x: _te_reduce_mean_integer(x, axes, count, out_shape, a),
                          call.args[0], primfunc_name_hint="canonqnn_reduce_mean")

    def compute(x):
        xr = topi.reshape(x, dims)
        # fenced: the product must be rounded before it is added (no FMA into the sum)
        xf = te.compute(dims, lambda *i: te_no_contract(
            (xr(*i).astype("int32") - a["x_zp"]).astype("float32") * _f32c(a["x_scale"])),
            name="dequantize")
        total = _te_sums(xf, dims, flags, a["summation"])
        y = te.compute(total.shape, lambda *i: te_requant_accumulator(
            (total(*i) / _f32c(count)) / _f32c(a["out_scale"]), _f32c(1.0), a["out_zp"],
            a["act_min"], a["act_max"]), name="reduce_mean")
        return topi.reshape(y, out_shape)

    return bb.call_te(compute, call.args[0], primfunc_name_hint="canonqnn_reduce_mean")


def _te_reduce_mean_integer(x, axes, count: int, out_shape, a: dict):
    """The integer sum over ``axes``, then TFLite's Q31 or XNNPACK's float32 rescale."""
    shape = [int(d) for d in x.shape]
    kept = [d for i, d in enumerate(shape) if i not in axes]
    raxes = [te.reduce_axis((0, shape[i]), f"r{i}") for i in axes]

    def total(*k):
        ki, ri = iter(k), iter(raxes)
        idx = [next(ri) if i in axes else next(ki) for i in range(len(shape))]
        return te.sum(x[tuple(idx)].astype("int32"), axis=raxes)

    sums = te.compute(kept or (1,), total if kept else (lambda _: total()), name="sum")
    if a["rounding"] == "xnnpack":
        y = te.compute(sums.shape, lambda *i: te_xnnpack_mean(sums(*i), count, a),
                       name="reduce_mean")
        return topi.reshape(y, out_shape)
    m, shift = q31_mean_multiplier(a, count)
    y = te.compute(sums.shape, lambda *i: te_requant_q31(
        sums(*i) - a["x_zp"] * count, tirx.const(m, "int32"), tirx.const(shift, "int32"),
        a["out_zp"], a["act_min"], a["act_max"], a["rounding"], x.dtype), name="reduce_mean")
    return topi.reshape(y, out_shape)


def _reduce_mean_infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    return _tvm.tensor_type(_reduce_shape(_tvm.shape_of(call.args[0]), [int(i) for i in a["axes"]],
                                          a["keepdims"]), _tvm.dtype_of(call.args[0]))


def reduce_mean_constraint(x_dtype: str = "int8", out_dtype: str = "int8",
                           rounding: str = "rne_f32", zero_points=(),
                           shape=None, axes=(), summation: str | None = None) -> Refusal | None:
    """x int8 per tensor, static shape, axes sorted and non-negative; output per tensor;
    summation one of sequential, eigen_sse, eigen_sse_blocks, mlas_sgemm_m1, matching the
    reduced/kept pattern of shape and axes (unused by the q31 roundings: TFLite's MEAN sums
    integers, at most 2^31 - 1 in int32); x int16 (TFLite 16x8 MEAN, Q31 roundings, zero
    points 0): int16 out"""
    if list(axes) != sorted({int(a) for a in axes}) or any(int(a) < 0 for a in axes):
        return Refusal(f"axes {list(axes)} (sorted, distinct, non-negative)")
    if shape is not None and summation is not None and \
            (why := _summation(shape, axes, summation)) is not None:
        return why
    if shape is not None and (why := q31_count(int(np.prod([shape[i] for i in axes])),
                                               rounding, x_dtype)) is not None:
        return why
    return mean_dtypes(x_dtype, out_dtype, rounding, zero_points)


REDUCE_MEAN = register(CanonicalOp(
    name="reduce_mean",
    summary="int8 mean over any axes (onnxruntime's float ReduceMean between DequantizeLinear "
            "and QuantizeLinear, its summation order reproduced)",
    args=("x",),
    attrs=("axes", "keepdims", "x_scale", "x_zp", "out_scale", "out_zp", "act_min", "act_max",
           "rounding", "summation", "source_dtype"),
    infer=_reduce_mean_infer,
    legalize=_reduce_mean_legalize,
    reference=_reduce_mean_reference,
    constraint=reduce_mean_constraint,
    family="pool",
    roundings=(*ROUNDINGS, "xnnpack"),
    absorbs_clamp=True,
))


def reduce_mean(x: Any, axes, keepdims: bool, x_qp: QParams, out_qp: QParams, *,
                act=None, summation: str | None = None, rounding: str = "rne_f32",
                source_dtype: str = "int8") -> Any:
    """Build ``canonqnn.reduce_mean``; ``summation`` defaults to onnxruntime's order, ``act``
    (the integer clamp) to the whole range of ``x``'s dtype."""
    act = activation_range(_tvm.dtype_of(x)) if act is None else act
    shape = _tvm.shape_of(x)
    axes = sorted(int(i) % len(shape) for i in axes)
    summation = summation or onnxruntime_summation(shape, axes)
    REDUCE_MEAN.require(x_dtype=_tvm.dtype_of(x), out_dtype=out_qp.dtype, rounding=rounding,
                        zero_points=(x_qp.scalar_zp, out_qp.scalar_zp), shape=shape, axes=axes,
                        summation=summation)
    return REDUCE_MEAN.call([x], dict(
        axes=axes, keepdims=bool(keepdims), x_scale=x_qp.scalar_scale, x_zp=x_qp.scalar_zp,
        out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp, act_min=int(act[0]),
        act_max=int(act[1]), rounding=rounding, summation=summation,
        source_dtype=source_dtype))
