"""``canonqnn.matmul``: int8 (batched) matrix product with per-column weights and requantization.

    acc[..., m, n] = sum_k (a[..., m, k] - a_zp) * (b[..., k, n] - b_zp[n]) + bias[n]
    y = requant_accumulator(acc, M[n], out_zp, act_min, act_max)
    M[n] = f32(f32(f32(alpha * a_scale) * b_scale[n]) / out_scale)       (rounding rne_f32)

Batch dimensions broadcast as in numpy. A dense layer is the 2-D case with a constant ``b``;
ONNX Gemm folds into it (transposes of constant operands done at rewrite time, ``alpha`` in
the multiplier). ``out_dtype="int32"`` returns ``acc`` (ONNX MatMulInteger).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te
from ..qparams import QParams, accumulator_multiplier
from ._registry import CanonicalOp, register
from ._requant import requant_accumulator, te_requant_accumulator

ATTRS = ("a_scale", "a_zp", "alpha", "out_scale", "out_zp", "act_min", "act_max", "rounding",
         "out_dtype")


def out_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return (*batch, a_shape[-2], b_shape[-1])


def _infer(call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    shape = out_shape(_tvm.shape_of(call.args[0]), _tvm.shape_of(call.args[1]))
    return _tvm.tensor_type(shape, a["out_dtype"])


def multiplier(a: dict[str, Any], b_scale: np.ndarray, n: int) -> np.ndarray:
    m = accumulator_multiplier(a["a_scale"], b_scale, a["out_scale"], a["alpha"])
    return np.broadcast_to(m, (n,)).astype(np.float32)


def reference(a_q, b_q, bias, b_scale, b_zp, **a) -> np.ndarray:
    n = b_q.shape[-1]
    bz = np.broadcast_to(b_zp.astype(np.int64), (n,))
    acc = np.matmul(a_q.astype(np.int64) - a["a_zp"], b_q.astype(np.int64) - bz)
    acc = (acc + bias.astype(np.int64)).astype(np.int32)
    if a["out_dtype"] == "int32":
        return acc
    return requant_accumulator(acc, multiplier(a, b_scale, n), a["out_zp"], a["act_min"],
                               a["act_max"])


def _operand_index(idx: tuple, shape: tuple[int, ...], rank: int) -> list:
    """Index into a broadcast batch operand from the output's batch indices."""
    batch = shape[:-2]
    offset = rank - 2 - len(batch)
    return [0 if dim == 1 else idx[offset + i] for i, dim in enumerate(batch)]


def _legalize(bb: Any, call: Any) -> Any:
    a = _tvm.attrs_dict(call)
    a_q, b_q, bias, b_scale, b_zp = call.args
    a_shape, b_shape = _tvm.shape_of(a_q), _tvm.shape_of(b_q)
    shape = out_shape(a_shape, b_shape)
    n, k_dim, rank = b_shape[-1], a_shape[-1], len(shape)
    bzp = _tvm.const_value(b_zp)
    symmetric = not np.any(bzp)
    mult = _tvm.const(multiplier(a, _tvm.const_value(b_scale), n), "float32")
    bzp_const = _tvm.const(np.broadcast_to(bzp, (n,)).astype(np.int32), "int32")

    def compute(x, w, bias, mult, wzp):
        k = te.reduce_axis((0, k_dim), "k")

        def tap(*idx):
            m, col = idx[-2], idx[-1]
            xv = x(*_operand_index(idx, a_shape, rank), m, k).astype("int32") - a["a_zp"]
            wv = w(*_operand_index(idx, b_shape, rank), k, col).astype("int32")
            return xv * (wv if symmetric else wv - wzp[col])

        acc = te.compute(shape, lambda *idx: te.sum(tap(*idx), axis=[k]), name="acc")
        if a["out_dtype"] == "int32":
            return te.compute(shape, lambda *idx: acc(*idx) + bias[idx[-1]], name="matmul_acc")
        return te.compute(shape, lambda *idx: te_requant_accumulator(
            acc(*idx) + bias[idx[-1]], mult[idx[-1]], a["out_zp"], a["act_min"], a["act_max"]),
            name="requant")

    return bb.call_te(compute, a_q, b_q, bias, mult, bzp_const,
                      primfunc_name_hint="canonqnn_matmul")


MATMUL = register(CanonicalOp(
    name="matmul",
    summary="int8 (batched) matmul / dense / Gemm with per-column weights, int32 bias, "
            "requantized to int8 with an integer activation clamp",
    args=("a", "b", "bias", "b_scale", "b_zp"),
    attrs=ATTRS,
    infer=_infer,
    legalize=_legalize,
    reference=reference,
    constraints="a int8 [..., M, K] per tensor, b int8 [..., K, N] (constant or not), "
                "bias int32 [N], b_scale float32 [N] or [], b_zp int8 [N] or []; rank >= 2; "
                "out_dtype int8, or int32 with multiplier exactly 1 and out_zp 0",
))


def matmul(a_q: Any, b_q: Any, bias: np.ndarray | None, a_qp: QParams, b_qp: QParams,
           out_qp: QParams, *, alpha: float = 1.0, act: tuple[int, int] = (-128, 127),
           rounding: str = "rne_f32") -> Any:
    """Build ``canonqnn.matmul``; ``out_qp.dtype`` int32 means the raw accumulator."""
    n = _tvm.shape_of(b_q)[-1]
    bias = np.zeros(n, np.int32) if bias is None else np.asarray(bias, np.int32).reshape(n)
    return MATMUL.call(
        [a_q, b_q, _tvm.const(bias, "int32"), _tvm.const(b_qp.scale, "float32"),
         _tvm.const(b_qp.zero_point.astype(np.int8), "int8")],
        dict(a_scale=a_qp.scalar_scale, a_zp=a_qp.scalar_zp, alpha=float(np.float32(alpha)),
             out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp, act_min=int(act[0]),
             act_max=int(act[1]), rounding=rounding, out_dtype=out_qp.dtype),
    )
