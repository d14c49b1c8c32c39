"""Float-island ops computed as ExecuTorch computes them (profiles of runtime ``xnnpack``).

**Layer norm** (every ExecuTorch profile).
XNNPACK's partitioner has no layer-norm config, so ExecuTorch runs ``native_layer_norm`` in its
own kernel library; its Python runtime (1.5.1, the x86-64 wheel) links the optimized kernels
(``opt_native_layer_norm_out``, built for SSE2 without FMA), which pick by the normalized size
N (the product of the normalized trailing dims), in float32 throughout:

- N < 256: ``s = x0 + x1 + ...`` and ``q = x0*x0 + x1*x1 + ...`` in order, ``mean = s / N``,
  ``var = q / N - mean*mean``, ``std = sqrt(var + f32(eps))``, ``y = (x - mean) / std * w + b``;
- N >= 256: Welford moments (ATen's RowwiseMoments): 8 lanes (element ``8k + l`` goes to lane
  ``l``) each updated over chunks of 16 elements (``m1 += d * f32(1 / (j + 1))``,
  ``m2 += d * (x - m1)``), the chunks merged along a binary counter, the last ``N % 8``
  elements updated one by one (``m1 += d / count``), the lanes merged into them in order;
  ``var = m2 / N``, ``rstd = 1 / sqrt(var + f32(eps))``, ``y = (x*rstd + (-rstd*mean)) * w + b``.

Every product the kernel rounds before an addition goes through ``te_no_contract``: TVM lets
LLVM fuse a multiply into an add (FMA), ExecuTorch's SSE2 kernel does not.

**Softmax over the last axis** (profile ``xnnpack-x86-avx512``: XNNPACK's f32 softmax as it
runs on a CPU with AVX-512F). The row maximum; ``exp(x - max)`` by its
``avx512f_rr2_p5_u64_acc2`` kernel (``n`` by a magic-bias FMA, ``2^n`` by shifting ``n``'s
bits, a two-constant ln 2 reduction, a degree-5 Horner polynomial in FMAs, zero below the
cutoff -87.34); the sum in 16 lanes (two interleaved accumulators over blocks of 64, then
blocks of 16, then the masked rest) reduced by halves (8, 4, 2, 1); then
``y = e * f32(1 / sum)``; denormals flushed at every step (XNNPACK runs with DAZ and FTZ).
On AVX2 hosts XNNPACK takes another kernel (8 lanes), not reproduced: TVM's softmax there.

Both measured bit-exact against ExecuTorch 1.5.1 (``tests/frontends/torch/test_float_islands.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm

from .. import _tvm
from .._tvm import te, tirx, topi
from ..numerics import recorded
from ..ops._arithmetic import te_fma
from ..ops._requant import te_no_contract

LANES, CHUNK = 8, 16  # Vectorized<float> of the SSE2 build: 8 floats; kChunkSize
WELFORD_MIN = 256     # the kernel's switch: sequential sums below this N, Welford from it
F32 = np.float32


def legalizations(mod: Any) -> dict[str, Any]:
    """The LegalizeOps overrides for ``mod``'s float islands under the profile it records."""
    profile = recorded(mod)
    if profile is None or profile.runtime != "xnnpack":
        return {}
    found = {"relax.nn.layer_norm": _layer_norm_legalize}
    if profile.tables == "xnnpack_avx512":
        found["relax.nn.softmax"] = _softmax_legalize
    return found


def _c(value: Any) -> Any:
    return tirx.const(float(F32(value)), "float32")


def _layer_norm_legalize(bb: Any, call: Any) -> Any:
    x, gamma, beta = call.args
    attrs = _tvm.attrs_dict(call)
    shape = [int(d) for d in _tvm.shape_of(x)]
    rank = len(shape)
    axes = sorted(int(a) % rank for a in attrs["axes"])
    dtype = _tvm.dtype_of(x)
    if dtype != "float32" or axes != list(range(rank - len(axes), rank)) or \
            not bool(attrs.get("center", True)) or not bool(attrs.get("scale", True)):
        # not the kernel described above (not a torch layer norm): TVM's own legalization
        return tvm.ir.Op.get("relax.nn.layer_norm").get_attr("FLegalize")(bb, call)
    n = int(np.prod([shape[a] for a in axes]))
    rows = int(np.prod(shape[:rank - len(axes)]))
    eps = F32(float(attrs["epsilon"]))

    def compute(data: Any, g: Any, b: Any) -> Any:
        x2 = topi.reshape(data, (rows, n))
        g1, b1 = topi.reshape(g, (n,)), topi.reshape(b, (n,))
        y = (_welford if n >= WELFORD_MIN else _sequential)(x2, g1, b1, rows, n, eps)
        return topi.reshape(y, shape)

    return bb.call_te(compute, x, gamma, beta, primfunc_name_hint="executorch_layer_norm")


def _sequential(x: Any, g: Any, b: Any, rows: int, n: int, eps: Any) -> Any:
    k = te.reduce_axis((0, n), "k")
    total = te.compute((rows,), lambda r: te.sum(x[r, k], axis=k), name="sum")
    k2 = te.reduce_axis((0, n), "k2")
    squares = te.compute((rows,), lambda r: te.sum(te_no_contract(x[r, k2] * x[r, k2]),
                                                   axis=k2), name="sum_squares")

    def stats(r: Any, which: Any) -> Any:
        mean = total[r] / _c(n)
        var = squares[r] / _c(n) - te_no_contract(mean * mean)
        return tirx.Select(which == 0, mean, tirx.sqrt(var + _c(eps)))

    ms = te.compute((rows, 2), stats, name="mean_std")
    return te.compute((rows, n), lambda r, i: te_no_contract(
        (x[r, i] - ms[r, 0]) / ms[r, 1] * g[i]) + b[i], name="layer_norm")


def _merge(m0_add: int, m0: int):
    """ATen's AddMoments of (m0_add, m1_add, m2_add) into (m0, m1, m2), as a function of the
    four float32 values; None when both counts are zero."""
    if m0 + m0_add == 0:
        return None
    c = _c(F32(m0_add) / F32(m0 + m0_add))

    def merged(m1_add: Any, m2_add: Any, m1: Any, m2: Any, which: Any) -> Any:
        delta = m1_add - m1
        return tirx.Select(which == 0, m1 + te_no_contract(c * delta),
                           m2 + (m2_add + te_no_contract(delta * delta * c * _c(m0))))

    return merged


def _welford_step(x: Any, prev: Any, j: int, vecs: int):
    """Element ``j`` of every chunk: m1 += d * f32(1 / (j + 1)), m2 += d * (x - m1)."""
    recip = _c(F32(1) / F32(j + 1))

    def step(r: Any, ci: Any, lane: Any, which: Any) -> Any:
        xv = x[r, (ci * CHUNK + j) * LANES + lane]
        m1, m2 = prev[r, ci, lane, 0], prev[r, ci, lane, 1]
        delta = xv - m1
        m1n = m1 + te_no_contract(delta * recip)
        new = tirx.Select(which == 0, m1n, m2 + te_no_contract(delta * (xv - m1n)))
        return tirx.Select(ci * CHUNK + j < vecs, new, prev[r, ci, lane, which])

    return step


def _tail_step(x: Any, prev: Any, i: int, count: int):
    """Element ``i`` past the last whole vector: m1 += d / count, m2 += d * (x - m1)."""
    def tail(r: Any, w: Any) -> Any:
        delta = x[r, i] - prev[r, 0]
        m1n = prev[r, 0] + delta / _c(count)
        return tirx.Select(w == 0, m1n, prev[r, 1] + te_no_contract(delta * (x[r, i] - m1n)))

    return tail


def _lane_step(lanes: Any, prev: Any, lane: int, fn: Any):
    return lambda r, w: fn(lanes[r, lane, 0], lanes[r, lane, 1], prev[r, 0], prev[r, 1], w)


def _welford(x: Any, g: Any, b: Any, rows: int, n: int, eps: Any) -> Any:
    vecs = n // LANES
    chunks = -(-vecs // CHUNK)
    depth = int(np.ceil(np.log2(chunks))) if chunks > 1 else 0
    # One chunk's Welford update per element, every chunk at once: [row, chunk, lane, m1|m2].
    state = te.compute((rows, chunks, LANES, 2), lambda *_: _c(0.0), name="welford0")
    for j in range(CHUNK):
        step = _welford_step(x, state, j, vecs)
        state = te.compute(state.shape, step, name=f"welford{j + 1}")

    # The chunks merged as RowwiseMomentsImpl's stack does (a binary counter).
    def chunk(i: int) -> tuple[int, Any]:
        return min(CHUNK, vecs - i * CHUNK), te.compute(
            (rows, LANES, 2), lambda r, lane, w: state[r, i, lane, w], name=f"chunk{i}")

    def add(into: tuple[int, Any], new: tuple[int, Any]) -> tuple[int, Any]:
        if new[0] == 0:  # an empty slot added: exactly no change (c = 0)
            return into
        if into[0] == 0:  # into an empty slot: exactly a copy (c = 1, m0 = 0)
            return new
        fn = _merge(new[0], into[0])
        assert fn is not None
        ia, na = into[1], new[1]
        return into[0] + new[0], te.compute((rows, LANES, 2), lambda r, lane, w: fn(
            na[r, lane, 0], na[r, lane, 1], ia[r, lane, 0], ia[r, lane, 1], w), name="merge")

    empty = (0, None)
    stack = [empty] * max(depth, 1)
    for i in range(chunks):
        stack[0] = add(stack[0], chunk(i))
        mask, j = i + 1, 1
        while j < depth and mask & 1 == 0:
            stack[j] = add(stack[j], stack[j - 1])
            stack[j - 1] = empty
            mask >>= 1
            j += 1
    for i in range(1, depth):
        stack[0] = add(stack[0], stack[i])
    lanes = stack[0][1]

    # The last n % 8 elements one by one, then the 8 lanes merged into them, in order.
    acc = te.compute((rows, 2), lambda *_: _c(0.0), name="moments0")
    count = 0
    for i in range(vecs * LANES, n):
        count += 1

        tail = _tail_step(x, acc, i, count)
        acc = te.compute((rows, 2), tail, name="moments_tail")
    for lane in range(LANES):
        fn = _merge(vecs, count)
        if fn is None:
            continue
        acc = te.compute((rows, 2), _lane_step(lanes, acc, lane, fn), name="moments_lane")
        count += vecs

    def scale_offset(r: Any, w: Any) -> Any:
        rstd = _c(1.0) / tirx.sqrt(acc[r, 1] / _c(n) + _c(eps))
        return tirx.Select(w == 0, rstd, te_no_contract(-rstd * acc[r, 0]))

    so = te.compute((rows, 2), scale_offset, name="scale_offset")
    return te.compute((rows, n), lambda r, i: te_no_contract(
        (te_no_contract(x[r, i] * so[r, 0]) + so[r, 1]) * g[i]) + b[i], name="layer_norm")



# XNNPACK's f32 exp (avx512f_rr2_p5): its constants, as float32 hex literals.
_EXP = {name: F32(float.fromhex(h)) for name, h in (
    ("log2e", "0x1.715476p+0"), ("magic_bias", "0x1.8000FEp23"),
    ("minus_ln2_hi", "-0x1.62E400p-1"), ("minus_ln2_lo", "-0x1.7F7D1Cp-20"),
    ("c5", "0x1.0F9F9Cp-7"), ("c4", "0x1.573A1Ap-5"), ("c3", "0x1.555A80p-3"),
    ("c2", "0x1.FFFDC6p-2"), ("c1", "0x1.FFFFF6p-1"), ("cutoff", "-0x1.5D589Ep6"))}
SIMD = 16  # float lanes of an AVX-512 register


def _flush(v: Any) -> Any:
    """A denormal as zero (DAZ/FTZ): the sign of such a zero never reaches a result here.
    ``v`` is bound once (a Let): nested flushes would otherwise double the expression each."""
    var = tirx.Var("ftz", "float32")
    return tirx.Let(var, v, tirx.Select(tirx.abs(var) < _c(np.finfo(F32).tiny), _c(0.0), var))


def _softmax_legalize(bb: Any, call: Any) -> Any:
    x = call.args[0]
    shape = [int(d) for d in _tvm.shape_of(x)]
    axis = int(_tvm.attrs_dict(call)["axis"]) % len(shape)
    if _tvm.dtype_of(x) != "float32" or axis != len(shape) - 1:
        return tvm.ir.Op.get("relax.nn.softmax").get_attr("FLegalize")(bb, call)
    k = shape[-1]
    rows = int(np.prod(shape[:-1]))

    def compute(data: Any) -> Any:
        flat = topi.reshape(data, (rows, k))
        x2 = te.compute((rows, k), lambda r, i: _flush(flat[r, i]), name="daz")
        j = te.reduce_axis((0, k), "j")
        top = te.compute((rows,), lambda r: te.max(x2[r, j], axis=j), name="row_max")
        e = _xnnpack_exp(x2, top, rows, k)
        total = _lane_sum(e, rows, k)
        scale = te.compute((rows,), lambda r: _flush(_c(1.0) / total[r]), name="reciprocal")
        y = te.compute((rows, k), lambda r, i: _flush(e[r, i] * scale[r]), name="softmax")
        return topi.reshape(y, shape)

    return bb.call_te(compute, x, primfunc_name_hint="xnnpack_softmax")


def _xnnpack_exp(x: Any, top: Any, rows: int, k: int) -> Any:
    """exp(x - max) as the kernel computes it, a stage per value read more than once."""
    c = {name: _c(v) for name, v in _EXP.items()}
    shape = (rows, k)
    xv = te.compute(shape, lambda r, i: _flush(x[r, i] - top[r]), name="x_minus_max")
    nb = te.compute(shape, lambda r, i: _flush(te_fma(xv[r, i], c["log2e"], c["magic_bias"])),
                    name="n_biased")
    n = te.compute(shape, lambda r, i: _flush(nb[r, i] - c["magic_bias"]), name="n")
    t = te.compute(shape, lambda r, i: _flush(te_fma(n[r, i], c["minus_ln2_lo"], _flush(
        te_fma(n[r, i], c["minus_ln2_hi"], xv[r, i])))), name="t")

    def horner(r: Any, i: Any) -> Any:
        p = _flush(te_fma(c["c5"], t[r, i], c["c4"]))
        for name in ("c3", "c2", "c1"):
            p = _flush(te_fma(p, t[r, i], c[name]))
        return p

    p = te.compute(shape, horner, name="p")

    def exp(r: Any, i: Any) -> Any:
        def scale() -> Any:  # 2^n: n's biased bits shifted into the exponent
            return tirx.reinterpret("float32", tirx.reinterpret("uint32", nb[r, i])
                                    << tirx.const(23, "uint32"))
        f = _flush(te_fma(_flush(t[r, i] * scale()), p[r, i], scale()))
        return tirx.Select(xv[r, i] < c["cutoff"], _c(0.0), f)

    return te.compute(shape, exp, name="exp")


def _lane_sum(e: Any, rows: int, k: int) -> Any:
    """The kernel's sum of a row: lane l of two accumulators takes elements 64b + l and
    64b + 32 + l (and 64b + 16 + l, 64b + 48 + l) in turn, then they are added, then each
    remaining block of 16, then the masked rest; the 16 lanes reduced by halves."""
    blocks = k // 64
    acc: list[Any] = []
    for first in (0, SIMD) if blocks else ():
        acc.append(te.compute((rows, SIMD), _accumulator(e, blocks, first), name="accumulator"))
    done = 64 * blocks

    def lanes(row: Any, lane: Any) -> Any:
        v = acc[0][row, lane] + acc[1][row, lane] if acc else _c(0.0)
        start = done
        while k - start >= SIMD:
            v = v + e[row, start + lane]
            start += SIMD
        if k > start:
            v = tirx.Select(lane < k - start,
                            v + e[row, tirx.min(start + lane, k - 1)], v)
        return v

    acc16 = te.compute((rows, SIMD), lanes, name="lanes")
    width, level = SIMD, acc16
    while width > 1:
        width //= 2
        level = te.compute((rows, width), _halves(level, width), name="halves")
    return te.compute((rows,), lambda row: level[row, 0], name="sum")


def _accumulator(e: Any, blocks: int, first: int):
    def accumulate(row: Any, lane: Any) -> Any:
        r = te.reduce_axis((0, 2 * blocks), f"b{first}")
        return te.sum(e[row, 64 * (r // 2) + 32 * (r % 2) + first + lane], axis=r)

    return accumulate


def _halves(prev: Any, width: int):
    return lambda row, lane: prev[row, lane] + prev[row, lane + width]
