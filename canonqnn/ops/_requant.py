"""Rounding arithmetic shared by the canonical ops, each as a numpy/TE pair.

The numpy function is the specification; the TE function beside it must compute the same
float32 operations in the same order (tests compare both against onnxruntime).
"""

from __future__ import annotations

import numpy as np

from .._tvm import te, tirx


# ---------------------------------------------------------------- float32 evaluation order
def te_no_contract(value, dtype: str = "float32"):
    """``value`` behind an ``llvm.arithmetic.fence``: LLVM may not fuse it into later operations.

    TVM's LLVM backend allows floating-point contraction (``AllowFPOpFusion::Fast``), so on an
    FMA target ``a * b + c`` compiles to one fused multiply-add (a single rounding). Where the
    specification rounds the product to float32 first (the numpy reference does), the product
    goes through this fence; the fence itself emits no instruction.
    """
    return tirx.call_llvm_pure_intrin(dtype, "llvm.arithmetic.fence", value)


# ---------------------------------------------------------------- accumulator -> int8 (rne_f32)
def requant_accumulator(acc, mult, zp: int, act_min: int, act_max: int) -> np.ndarray:
    """int32 accumulator to int8: ``clamp(RNE(f32(acc) * mult), act - zp) + zp``.

    ``mult`` is a float32 multiplier broadcast against ``acc``. The clamp runs in float before
    rounding, as onnxruntime's MlasRequantizeOutput does (equal to clamping after, since the
    bounds are integers and rounding is monotone).
    """
    v = np.asarray(acc).astype(np.float32) * np.asarray(mult, np.float32)
    v = np.clip(v, np.float32(act_min - zp), np.float32(act_max - zp))
    return (np.rint(v).astype(np.int32) + zp).astype(np.int8)


def te_requant_accumulator(acc, mult, zp: int, act_min: int, act_max: int):
    """TE twin of ``requant_accumulator`` for one element (``acc`` int32, ``mult`` float32)."""
    v = acc.astype("float32") * mult
    v = te.max(te.min(v, tirx.const(float(act_max - zp), "float32")),
               tirx.const(float(act_min - zp), "float32"))
    return (tirx.round(v).astype("int32") + zp).astype("int8")


# ---------------------------------------------------------------- int8 -> int8 via real value
def requant_via_real(q, in_scale: float, in_zp: int, out_scale: float, out_zp: int,
                     act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """Dequantize then quantize, in float32: ``RNE(f32(f32(q - zp_in) * s_in) / s_out) + zp_out``.

    This is ONNX DequantizeLinear followed by QuantizeLinear (true division, ties to even),
    which is what onnxruntime computes for a Q(DQ(x)) pair and builds its QLinearConcat
    tables with.
    """
    real = (np.asarray(q).astype(np.int32) - in_zp).astype(np.float32) * np.float32(in_scale)
    v = np.rint((real / np.float32(out_scale)).astype(np.float32))
    v = np.clip(v, np.float32(act_min - out_zp), np.float32(act_max - out_zp))
    return (v.astype(np.int32) + out_zp).astype(np.int8)


def te_requant_via_real(q, in_scale: float, in_zp: int, out_scale: float, out_zp: int,
                        act_min: int = -128, act_max: int = 127):
    """TE twin of ``requant_via_real`` for one int8 element."""
    real = (q.astype("int32") - in_zp).astype("float32") * tirx.const(in_scale, "float32")
    v = tirx.round(real / tirx.const(out_scale, "float32"))
    v = te.max(te.min(v, tirx.const(float(act_max - out_zp), "float32")),
               tirx.const(float(act_min - out_zp), "float32"))
    return (v.astype("int32") + out_zp).astype("int8")
