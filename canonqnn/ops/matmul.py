"""``canonqnn.matmul``: int8 (batched) matrix product with per-column weights and requantization.

    acc[..., m, n] = sum_k (a[..., m, k] - a_zp) * (b[..., k, n] - b_zp[n]) + bias[n]
    y = requant_accumulator(acc, M[n], out_zp, act_min, act_max)
    M[n] = f32(f32(f32(alpha * a_scale) * b_scale[n]) / out_scale)       (rounding rne_f32)

Batch dimensions broadcast as in numpy. A dense layer is the 2-D case with a constant ``b``;
ONNX Gemm folds into it (transposes of constant operands done at rewrite time, ``alpha`` in
the multiplier). ``out_dtype="int32"`` returns ``acc`` (ONNX MatMulInteger).

``accumulate="u8s8_pair_sat16"`` reproduces onnxruntime's x86 uint8 x int8 GEMM on CPUs without
VNNI (``vpmaddubsw``): ``a`` holds uint8 data shifted to int8, and the products of the stored
values ``A = a + 128`` and ``b`` are added in pairs along K, each pair sum saturated to int16;
the zero points are applied exactly afterwards:

    acc = sum_i sat16(A[2i] b[2i] + A[2i+1] b[2i+1]) [+ A[K-1] b[K-1] when K is odd]
          - b_zp[n] * sum_k A[k] - A_zp * sum_k b[k] + K * A_zp * b_zp[n] + bias[n]

with ``A_zp = a_zp + 128``. Where no pair sum leaves int16 this is the exact accumulator.

Q31 roundings (``q31_double``, ``q31_single``; ``alpha`` 1, ``accumulate`` exact) reproduce
TFLite's reference kernels, chosen by ``source_op`` (measured on the interpreter):

- ``batch_matmul`` (BATCH_MATMUL): ``y = clamp(MBQM(acc, m, shift) + out_zp)`` with
  ``(m, shift) = QuantizeMultiplier(f64(f32(a_scale * b_scale[n])) / f64(out_scale))``.
- ``fully_connected`` (FULLY_CONNECTED, int8 and uint8, per-tensor or per-column weights):
  ``M[n] = f64(a_scale) * f64(b_scale[n]) / f64(out_scale)`` and, under ``q31_double``,
  ``y = clamp(round_half_away(f64(acc) * M[n]) + out_zp)`` evaluated in double precision
  (the interpreter's reference kernel rounds the exact-to-double product, not a Q31 one);
  under ``q31_single``, ``MBQM_single(acc, QuantizeMultiplier(M[n]))``.

``source_op`` has no effect under ``rne_f32``.

TFLite's 16x8 FULLY_CONNECTED (Q31 roundings, ``source_op`` fully_connected): ``a`` int16,
``out_dtype="int16"``, every zero point 0. The accumulator has the bias's type: int64 (the
converter's bias, and the kernel's accumulator without one) or int32 (an int32 bias, which
wraps as the kernel's does). The requantization is the one above: ``round_half_away(f64(acc) *
M[n])`` under ``q31_double`` (measured, the same as for int8), TFLite's int64
``MultiplyByQuantizedMultiplier`` of an int64 accumulator under ``q31_single`` (``_q31``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te, tirx
from ..numerics.q31 import Q31_ROUNDINGS
from ..qparams import (
    QParams,
    accumulator_multiplier,
    check_accumulator_multipliers,
    quantize_multipliers,
)
from ._dtypes import bias_per_channel, sixteen_by_eight
from ._registry import CanonicalOp, Refusal, UnsupportedRounding, register
from ._requant import channel_multipliers, requant_channels, te_requant_channel

ATTRS = ("a_scale", "a_zp", "alpha", "out_scale", "out_zp", "act_min", "act_max", "rounding",
         "out_dtype", "accumulate", "source_op")
ACCUMULATE = ("exact", "u8s8_pair_sat16")
SOURCE_OPS = ("fully_connected", "batch_matmul")
INT16_MIN, INT16_MAX = -(2 ** 15), 2 ** 15 - 1
UINT8_SHIFT = 128  # a holds uint8 data as a - 128 in the pair-saturating mode


def out_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return (*batch, a_shape[-2], b_shape[-1])


def _infer(call: Any) -> Any:
    a, b = _tvm.items(call.args)[:2]
    return _tvm.tensor_type(out_shape(_tvm.shape_of(a), _tvm.shape_of(b)),
                            _tvm.attr(call, "out_dtype"))


def multiplier(a: dict[str, Any], b_scale: np.ndarray, n: int) -> np.ndarray:
    m = accumulator_multiplier(a["a_scale"], b_scale, a["out_scale"], a["alpha"])
    return np.broadcast_to(m, (n,)).astype(np.float32)


def q31_real_multiplier(a: dict[str, Any], b_scale: np.ndarray, n: int) -> np.ndarray:
    """TFLite's real multiplier per column, in double (see the module doc)."""
    bs = np.broadcast_to(np.asarray(b_scale, np.float32).reshape(-1), (n,))
    xs, ys = np.float32(a["a_scale"]), np.float64(np.float32(a["out_scale"]))
    if a["source_op"] == "batch_matmul":
        return (xs * bs).astype(np.float32).astype(np.float64) / ys
    return np.float64(xs) * bs.astype(np.float64) / ys


def _rounds_in_double(a: dict[str, Any]) -> bool:
    """FULLY_CONNECTED under q31_double: round_half_away(f64(acc) * M), no Q31 multiplier."""
    return a["rounding"] == "q31_double" and a["source_op"] == "fully_connected"


def requant_multipliers(a: dict[str, Any], b_scale: np.ndarray,
                        n: int) -> tuple[str, np.ndarray]:
    """``(kind, table)`` of the requantization (``_requant.channel_multipliers``)."""
    return channel_multipliers(a["rounding"], lambda: multiplier(a, b_scale, n),
                               lambda: q31_real_multiplier(a, b_scale, n), _rounds_in_double(a))


def _pair_saturated_products(a_q, b_q) -> np.ndarray:
    """``sum_i sat16(A[2i] b[2i] + A[2i+1] b[2i+1])`` (+ the odd last product), ``A = a + 128``."""
    big_a, big_b = a_q.astype(np.int64) + UINT8_SHIFT, b_q.astype(np.int64)
    k = big_a.shape[-1]
    even = 2 * (k // 2)
    pairs = (big_a[..., :, 0:even:2, None] * big_b[..., None, 0:even:2, :]
             + big_a[..., :, 1:even:2, None] * big_b[..., None, 1:even:2, :])
    total = np.clip(pairs, INT16_MIN, INT16_MAX).sum(axis=-2)
    if k % 2:  # the unpaired last product fits int16 (255 * 128 < 2^15)
        total = total + big_a[..., :, k - 1:k] * big_b[..., k - 1:k, :]
    return total


def _accumulator(a_q, b_q, bz: np.ndarray, a_zp: int, accumulate: str) -> np.ndarray:
    if accumulate == "exact":
        return np.matmul(a_q.astype(np.int64) - a_zp, b_q.astype(np.int64) - bz)
    big_zp, k = a_zp + UINT8_SHIFT, a_q.shape[-1]
    row_sums = (a_q.astype(np.int64) + UINT8_SHIFT).sum(axis=-1)[..., :, None]
    col_sums = b_q.astype(np.int64).sum(axis=-2)[..., None, :]
    return (_pair_saturated_products(a_q, b_q) - bz * row_sums - big_zp * col_sums
            + k * big_zp * bz)


def reference(a_q, b_q, bias, b_scale, b_zp, **a) -> np.ndarray:
    n = b_q.shape[-1]
    bz = np.broadcast_to(b_zp.astype(np.int64), (n,))
    acc = _accumulator(a_q, b_q, bz, a["a_zp"], a.get("accumulate", "exact"))
    accumulator = str(np.asarray(bias).dtype)  # int32, or int64 (TFLite 16x8)
    acc = (acc + bias.astype(np.int64)).astype(accumulator)
    if a["out_dtype"] == "int32":
        return acc
    return requant_channels(acc, *requant_multipliers(a, b_scale, n), a, accumulator,
                            axis=acc.ndim - 1)


def broadcast_index(index: Any, shape: tuple[int, ...]) -> list[Any]:
    """A matmul operand's batch indices from the output's batch indices ``index``, for an
    operand of batch shape ``shape`` (numpy broadcasting: leading dims dropped, dims of 1 read
    at 0)."""
    index = list(index)[len(index) - len(shape):] if shape else []
    return [0 if dim == 1 else i for i, dim in zip(index, shape)]


def _operand_index(idx: tuple, shape: tuple[int, ...]) -> list:
    """Index into a broadcast batch operand of ``shape`` from the output's index ``idx``."""
    return broadcast_index(idx[:-2], shape[:-2])


def _exact_accumulator(x, w, wzp, a_zp: int, symmetric: bool, shape, a_shape, b_shape,
                       accumulator: str = "int32"):
    k_dim = a_shape[-1]
    k = te.reduce_axis((0, k_dim), "k")

    def tap(*idx):
        m, col = idx[-2], idx[-1]
        xv = x(*_operand_index(idx, a_shape), m, k).astype(accumulator) - a_zp
        wv = w(*_operand_index(idx, b_shape), k, col).astype(accumulator)
        return xv * (wv if symmetric else wv - wzp[col])

    return te.compute(shape, lambda *idx: te.sum(tap(*idx), axis=[k]), name="acc")


def _pair_saturated_accumulator(x, w, wzp, a_zp: int, symmetric: bool, shape, a_shape,
                                b_shape, accumulator: str = "int32"):
    """TE twin of the ``u8s8_pair_sat16`` accumulator in ``_accumulator``."""
    k_dim = a_shape[-1]
    big_zp = a_zp + UINT8_SHIFT

    def big_a(idx, m, kk):
        return x(*_operand_index(idx, a_shape), m, kk).astype("int32") + UINT8_SHIFT

    def big_b(idx, kk, col):
        return w(*_operand_index(idx, b_shape), kk, col).astype("int32")

    def pair(p, *idx):
        m, col = idx[-2], idx[-1]
        v = (big_a(idx, m, 2 * p) * big_b(idx, 2 * p, col)
             + big_a(idx, m, 2 * p + 1) * big_b(idx, 2 * p + 1, col))
        return te.max(te.min(v, INT16_MAX), INT16_MIN)

    if k_dim >= 2:
        p = te.reduce_axis((0, k_dim // 2), "p")
        pairs = te.compute(shape, lambda *idx: te.sum(pair(p, *idx), axis=[p]), name="pair_sums")
    else:
        pairs = te.compute(shape, lambda *idx: tirx.const(0, "int32"), name="pair_sums")
    ka = te.reduce_axis((0, k_dim), "ka")
    row_sums = te.compute(a_shape[:-1], lambda *i: te.sum(
        x(*i, ka).astype("int32") + UINT8_SHIFT, axis=[ka]), name="row_sums")
    kb = te.reduce_axis((0, k_dim), "kb")
    col_sums = te.compute((*b_shape[:-2], b_shape[-1]), lambda *i: te.sum(
        w(*i[:-1], kb, i[-1]).astype("int32"), axis=[kb]), name="col_sums")

    def combine(*idx):
        m, col = idx[-2], idx[-1]
        v = pairs(*idx) - big_zp * col_sums(*_operand_index(idx, b_shape), col)
        if k_dim % 2:
            v = v + big_a(idx, m, k_dim - 1) * big_b(idx, k_dim - 1, col)
        if not symmetric:
            zb = wzp[col]
            v = v - zb * row_sums(*_operand_index(idx, a_shape), m) + k_dim * big_zp * zb
        return v

    return te.compute(shape, combine, name="acc")


def _legalize(bb: Any, call: Any) -> Any:
    """The op's own compute, what any target gets: the definition's loop nest (on CPUs with
    int8 dot products the build runs a faster form of it, ``canonqnn.build.forms``)."""
    a = _tvm.attrs_dict(call)
    a_q, b_q, bias, b_scale, b_zp = call.args
    a_shape, b_shape = _tvm.shape_of(a_q), _tvm.shape_of(b_q)
    shape = out_shape(a_shape, b_shape)
    n = b_shape[-1]
    accumulator = _tvm.dtype_of(bias)  # int32, or int64 (TFLite 16x8)
    bzp = _tvm.const_value(b_zp)
    symmetric = not np.any(bzp)
    kind, table = requant_multipliers(a, _tvm.const_value(b_scale), n)
    mult = _tvm.const(table, str(table.dtype))
    bzp_const = _tvm.const(np.broadcast_to(bzp, (n,)).astype(np.int32), "int32")
    accumulate = (_pair_saturated_accumulator if a.get("accumulate") == "u8s8_pair_sat16"
                  else _exact_accumulator)

    def compute(x, w, bias, mult, wzp):
        acc = accumulate(x, w, wzp, a["a_zp"], symmetric, shape, a_shape, b_shape, accumulator)
        return te_output(shape, acc, bias, mult, kind, a, accumulator)

    return bb.call_te(compute, a_q, b_q, bias, mult, bzp_const,
                      primfunc_name_hint="canonqnn_matmul")


def te_output(shape: tuple[int, ...], acc: Any, bias: Any, mult: Any, kind: str,
              a: dict[str, Any], accumulator: str) -> Any:
    """The matmul's output of shape ``shape`` from its accumulator ``acc(*index)``: the biased
    accumulator itself (``out_dtype`` int32) or it requantized by ``requant_multipliers``'
    ``(kind, mult)`` (every kernel form's output stage, ``canonqnn.build.forms``); ``bias``
    None where the accumulator already holds it."""
    def biased(*idx: Any) -> Any:
        return acc(*idx) if bias is None else acc(*idx) + bias[idx[-1]]

    if a["out_dtype"] == "int32":
        return te.compute(shape, biased, name="matmul_acc")
    return te.compute(shape, lambda *idx: te_requant_channel(
        biased(*idx), kind, mult, idx[-1], a, accumulator), name="requant")


def matmul_constraint(a_dtype: str = "int8", out_dtype: str = "int8",
                      accumulator: str = "int32", rounding: str | None = None,
                      zero_points: dict[str, object] | None = None, shifts=None,
                      alpha: float = 1.0, accumulate: str = "exact",
                      source_op: str = "fully_connected", bias_shape=None,
                      channels: int | None = None) -> Refusal | None:
    """a int8 [..., M, K] per tensor, b int8 [..., K, N] (constant or not), bias int32 [N],
    b_scale float32 [N] or [], b_zp int8 [N] or []; rank >= 2; out_dtype int8, or int32 with
    multiplier exactly 1 and out_zp 0; accumulate exact, or u8s8_pair_sat16 (a holds uint8 data
    as a - 128); Q31 roundings: alpha 1, accumulate exact, source_op fully_connected or
    batch_matmul (the TFLite kernel reproduced); a int16 (fully_connected only) with out_dtype
    int16 and zero points 0, bias int32 or int64 (the accumulator's type)"""
    if accumulate not in ACCUMULATE:
        return Refusal(f"unknown accumulate {accumulate!r}")
    if source_op not in SOURCE_OPS:
        return Refusal(f"unknown source_op {source_op!r}")
    if bias_shape is not None and (why := bias_per_channel(bias_shape, channels)) is not None:
        return why
    if rounding in Q31_ROUNDINGS and (float(np.float32(alpha)) != 1.0 or accumulate != "exact"):
        return Refusal(f"rounding {rounding} needs alpha 1 and exact accumulation (TFLite has "
                       "neither)", UnsupportedRounding)
    why = sixteen_by_eight(a_dtype, out_dtype, accumulator, rounding, zero_points, shifts)
    if why is not None:
        return why
    if a_dtype == "int16" and source_op != "fully_connected":
        return Refusal(f"int16 {source_op} (only TFLite's 16x8 FULLY_CONNECTED is implemented)",
                       UnsupportedRounding)
    return None


MATMUL = register(CanonicalOp(
    name="matmul",
    weight_layout="KN",
    summary="int8 (batched) matmul / dense / Gemm with per-column weights, int32 bias, "
            "requantized to int8 with an integer activation clamp; TFLite 16x8 fully "
            "connected: int16 in and out, int64 bias",
    args=("a", "b", "bias", "b_scale", "b_zp"),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=reference,
    constraint=matmul_constraint,
    roundings=("rne_f32", "xnnpack", *Q31_ROUNDINGS),
    absorbs_clamp=True,
    absorbs_table=True,
))


def matmul(a_q: Any, b_q: Any, bias: np.ndarray | None, a_qp: QParams, b_qp: QParams,
           out_qp: QParams, *, alpha: float = 1.0, act: tuple[int, int] = (-128, 127),
           rounding: str = "rne_f32", accumulate: str = "exact",
           source_op: str = "fully_connected", accumulator: str = "int32") -> Any:
    """Build ``canonqnn.matmul``; ``out_qp.dtype`` int32 means the raw accumulator.

    ``source_op`` names the TFLite kernel a Q31 rounding reproduces; ``accumulator="int64"``:
    the bias is int64 (TFLite 16x8, module doc)."""
    a_dtype, n = _tvm.dtype_of(a_q), _tvm.shape_of(b_q)[-1]
    params = dict(a_dtype=a_dtype, out_dtype=out_qp.dtype, accumulator=accumulator,
                  rounding=rounding, alpha=alpha, accumulate=accumulate, source_op=source_op,
                  bias_shape=None if bias is None else (np.size(bias),), channels=n,
                  zero_points=dict(a_zp=a_qp.scalar_zp, b_zp=b_qp.zero_point,
                                   out_zp=out_qp.scalar_zp))
    MATMUL.require(**params)
    check_accumulator_multipliers(a_qp.scalar_scale, b_qp.scale, out_qp, alpha)
    attrs = dict(a_scale=a_qp.scalar_scale, a_zp=a_qp.scalar_zp, alpha=float(np.float32(alpha)),
                 out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp, act_min=int(act[0]),
                 act_max=int(act[1]), rounding=rounding, out_dtype=out_qp.dtype,
                 accumulate=accumulate, source_op=source_op)
    int64_requantization = accumulator == "int64" and rounding in Q31_ROUNDINGS and \
        not _rounds_in_double(attrs)
    if int64_requantization:
        MATMUL.require(**params, shifts=quantize_multipliers(
            q31_real_multiplier(attrs, b_qp.scale, n), single_rounding=True)[1])
    bias = np.zeros(n, accumulator) if bias is None else np.asarray(bias, accumulator).reshape(n)
    return MATMUL.call(
        [a_q, b_q, _tvm.const(bias, accumulator), _tvm.const(b_qp.scale, "float32"),
         _tvm.const(b_qp.zero_point.astype(np.int8), "int8")],
        attrs)
