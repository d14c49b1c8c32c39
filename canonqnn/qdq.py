"""The single writer (and reader) of ``dequantize`` / ``quantize`` in the fake-quant form.

Conventions fixed here, for every frontend and rule:
- scales are float32 constants, zero points int8 constants (int32 for int32 tensors such as
  a bias), both 0-d per tensor or 1-d per channel;
- the axis is explicit and non-negative (per tensor: axis 0, which Relax ignores);
- uint8 never appears inside a module: boundary conversions shift it to int8 (q - 128).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _tvm
from .errors import InvalidQuantizationError
from .qparams import QParams, check_scale

QUANTIZE = "relax.quantize"
DEQUANTIZE = "relax.dequantize"
# Function attribute: names of the int8 variables holding shifted uint8 source data. Kernels
# whose float arithmetic depends on the stored values (onnxruntime's uint8 QLinearAdd, ...)
# read it to reproduce the source runtime exactly.
UINT8_ATTR = "canonqnn.uint8_tensors"
# Function attribute: {int8 variable name: source operator} for results whose arithmetic in the
# source runtime depends on which operator produced them (TFLite's FULLY_CONNECTED rounds
# differently from its BATCH_MATMUL, while both are a matmul in the fake-quant form).
SOURCE_OPS_ATTR = "canonqnn.source_ops"


def _qparam_consts(qp: QParams) -> tuple[Any, Any]:
    if qp.dtype not in ("int8", "int32"):
        raise InvalidQuantizationError(f"{qp.dtype} tensors must be normalized to int8 first")
    scale = _tvm.const(check_scale(qp.scale, "quantization"), "float32")
    zp = _tvm.const(qp.zero_point.astype(qp.dtype), qp.dtype)
    return scale, zp


def _axis(qp: QParams, ndim: int) -> int:
    if qp.per_tensor:
        return 0
    axis = qp.axis if qp.axis is not None else 0
    if not 0 <= axis < max(ndim, 1):
        raise InvalidQuantizationError(f"quantization axis {qp.axis} out of range for rank {ndim}")
    return axis


def dequantize(q: Any, qp: QParams) -> Any:
    """``scale * (q - zp)`` as float32."""
    scale, zp = _qparam_consts(qp)
    return _tvm.dequantize(q, scale, zp, _axis(qp, len(_tvm.shape_of(q))))


def quantize(x: Any, qp: QParams) -> Any:
    """``saturate(RNE(x / scale) + zp)`` to ``qp.dtype``."""
    scale, zp = _qparam_consts(qp)
    return _tvm.quantize(x, scale, zp, _axis(qp, len(_tvm.shape_of(x))), qp.dtype)


@dataclass(frozen=True)
class QdqCall:
    """A parsed ``quantize``/``dequantize`` call: its tensor operand and its parameters."""

    operand: Any
    qparams: QParams


def _read(call: Any, op: str) -> QdqCall | None:
    if _tvm.op_name(call) != op:
        return None
    data, scale, zp = call.args
    if not (_tvm.is_const(scale) and _tvm.is_const(zp)):
        return None
    attrs = _tvm.attrs_dict(call)
    dtype = str(attrs["out_dtype"]) if op == QUANTIZE else _tvm.dtype_of(data)
    scale_v, zp_v = _tvm.const_value(scale), _tvm.const_value(zp)
    if scale_v.size == 1 and zp_v.size == 1:
        qp = QParams.make(scale_v, zp_v, None, dtype)
    else:
        axis = int(attrs["axis"]) % max(len(_tvm.shape_of(data)), 1)
        qp = QParams.make(scale_v, zp_v, axis, dtype)
    return QdqCall(data, qp)


def read_dequantize(call: Any) -> QdqCall | None:
    """The operand and parameters of a ``dequantize`` with constant parameters, else None."""
    return _read(call, DEQUANTIZE)


def read_quantize(call: Any) -> QdqCall | None:
    """The operand and parameters of a ``quantize`` with constant parameters, else None."""
    return _read(call, QUANTIZE)


# ---------------------------------------------------------------- uint8 boundary
def uint8_to_int8(x: Any) -> Any:
    """Exact uint8 -> int8 shift (q - 128) for tensors entering a module."""
    shifted = _tvm.subtract(_tvm.astype(x, "int32"), _tvm.const(np.int32(128)))
    return _tvm.astype(shifted, "int8")


def int8_to_uint8(x: Any) -> Any:
    """Exact int8 -> uint8 shift (q + 128) for tensors leaving a module."""
    shifted = _tvm.add(_tvm.astype(x, "int32"), _tvm.const(np.int32(128)))
    return _tvm.astype(shifted, "uint8")
