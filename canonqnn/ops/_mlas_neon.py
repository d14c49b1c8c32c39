"""Rounding ``mlas_neon`` of ``canonqnn.add`` and ``canonqnn.mul``: onnxruntime's AArch64 (NEON)
QLinearAdd and QLinearMul, as its 1.31 build computes them (measured on every pair of int8 and
uint8 inputs under emulation, docs/parity.md). Each arithmetic is here twice: numpy (the
executable spec, docs/spec.md) and its TE twin (the legalization), in the same order.

- add: a fixed-point sum, ``mlas_neon_add_multipliers`` (21-bit multipliers, one shift, ties
  away from zero); for scale ratios outside its range MLAS computes in float32 instead
  (``fma(sA, xA, f32(sB * xB))``, the product of the operand it treats as its first fused:
  GCC contracts MLAS's float helper on AArch64), divided by the output scale, clamped, the
  zero point added, rounded half to even.
- mul: ``fma(f32(p), ratio, ZC)``, one rounding where x86's kernel rounds twice.

The attributes are those of the ops (``a_zp``... on int8 storage, ``source_dtype`` for the
offset ``o`` of uint8 models): the fixed-point sum sees only differences of codes; the float
forms add the stored zero point ``out_zp + o``, as the kernel does.
"""

from __future__ import annotations

import numpy as np

from .._tvm import te, tirx
from ..numerics.arithmetic import fma_f32, rounding_divide_by_pot
from ..qparams import mlas_neon_add_multipliers
from ._arithmetic import te_fma

F32 = np.float32


def _i32(v: int):
    return tirx.const(int(v), "int32")


def _f(v) -> object:
    return tirx.const(float(v), "float32")


def _clamp_int8(y: np.ndarray, a: dict) -> np.ndarray:
    return np.clip(y, a["act_min"], a["act_max"]).astype(np.int8)


def _te_clamp_int8(y, a: dict):
    return te.max(te.min(y, _i32(a["act_max"])), _i32(a["act_min"])).astype("int8")


def _float_add_order(a: dict, a_first: bool) -> tuple[float, float, str, str]:
    """(scale of the fused product, scale of the rounded one, their operands): MLAS's first
    operand's product is fused; it swaps the operands when ``a`` is the scalar of each span."""
    if a_first:
        return a["a_scale"], a["b_scale"], "a", "b"
    return a["b_scale"], a["a_scale"], "b", "a"


def add_reference(x: np.ndarray, y: np.ndarray, a: dict, o: int, a_first: bool) -> np.ndarray:
    xa = x.astype(np.int64) - a["a_zp"]
    xb = y.astype(np.int64) - a["b_zp"]
    fixed = mlas_neon_add_multipliers(a["a_scale"], a["b_scale"], a["out_scale"])
    if fixed is not None:
        ma, mb, shift = fixed
        return _clamp_int8(rounding_divide_by_pot(xa * ma + xb * mb, shift) + a["out_zp"], a)
    fused_scale, rounded_scale, fused, rounded = _float_add_order(a, a_first)
    operand = {"a": xa.astype(F32), "b": xb.astype(F32)}
    v = fma_f32(F32(fused_scale), operand[fused],
                (F32(rounded_scale) * operand[rounded]).astype(F32))
    v = (v / F32(a["out_scale"])).astype(F32)
    v = np.clip(v, F32(a["act_min"] - a["out_zp"]), F32(a["act_max"] - a["out_zp"]))
    return (np.rint((v + F32(a["out_zp"] + o)).astype(F32)).astype(np.int64) - o).astype(np.int8)


def te_add(a: dict, o: int, a_first: bool):
    """The TE element function ``elem(x, y)`` of ``add_reference``."""
    fixed = mlas_neon_add_multipliers(a["a_scale"], a["b_scale"], a["out_scale"])
    if fixed is not None:
        ma, mb, shift = fixed

        def elem(xv, yv):
            # |acc| < 2 * 255 * 2^22 < 2^31; ties away from zero as NEON's rounding shift of
            # acc - [acc < 0], its half added in two shifts so that nothing overflows int32
            acc = ((xv.astype("int32") - _i32(a["a_zp"])) * _i32(ma)
                   + (yv.astype("int32") - _i32(a["b_zp"])) * _i32(mb))
            acc = acc - tirx.Select(acc < _i32(0), _i32(1), _i32(0))
            r = ((acc >> _i32(shift - 1)) + _i32(1)) >> _i32(1)
            return _te_clamp_int8(r + _i32(a["out_zp"]), a)

        return elem
    fused_scale, rounded_scale, fused, rounded = _float_add_order(a, a_first)

    def elem_float(xv, yv):
        operand = {"a": (xv.astype("int32") - _i32(a["a_zp"])).astype("float32"),
                   "b": (yv.astype("int32") - _i32(a["b_zp"])).astype("float32")}
        v = te_fma(_f(fused_scale), operand[fused], _f(rounded_scale) * operand[rounded])
        v = v / _f(a["out_scale"])
        v = te.max(te.min(v, _f(a["act_max"] - a["out_zp"])), _f(a["act_min"] - a["out_zp"]))
        return (tirx.round(v + _f(a["out_zp"] + o)).astype("int32") - _i32(o)).astype("int8")

    return elem_float


def mul_reference(x: np.ndarray, y: np.ndarray, a: dict, o: int, ratio: np.float32) -> np.ndarray:
    p = (x.astype(np.int32) - a["a_zp"]) * (y.astype(np.int32) - a["b_zp"])
    t = fma_f32(p.astype(F32), ratio, F32(a["out_zp"] + o))
    t = np.clip(t, F32(a["act_min"] + o), F32(a["act_max"] + o))
    return (np.rint(t).astype(np.int32) - o).astype(np.int8)


def te_mul(a: dict, o: int, ratio: np.float32):
    """The TE element function ``elem(x, y)`` of ``mul_reference``."""
    def elem(xv, yv):
        p = (xv.astype("int32") - _i32(a["a_zp"])) * (yv.astype("int32") - _i32(a["b_zp"]))
        t = te_fma(p.astype("float32"), _f(ratio), _f(a["out_zp"] + o))
        t = te.max(te.min(t, _f(a["act_max"] + o)), _f(a["act_min"] + o))
        return (tirx.round(t).astype("int32") - _i32(o)).astype("int8")

    return elem
