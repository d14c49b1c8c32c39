"""``canonqnn.lut``: an int8 -> int8 lookup table, the canonical form of every elementwise
non-linear function of one int8 tensor (sigmoid, tanh, gelu, hardswish, leaky_relu, x *
sigmoid(x), ...), and int16 -> int16 for the elementwise kernels of TFLite's 16x8 models.

    axis = -1:  y[i] = table[x[i] + 128]                table int8[256]
    axis = a:   y[i] = table[i[a], x[i] + 128]          table int8[C, 256], C = x.shape[a]
    int16 x:    y[i] = table[x[i] + 32768]              table int16[65536] (axis -1 only)

The table is materialized by the rewrite that folds the float chain (canonqnn/tables builds it
the way the source runtime computes the function), so the op itself does no arithmetic and is
exact by construction. ``in_scale``/``in_zp``/``out_scale``/``out_zp`` and ``function`` (what
the table computes, e.g. ``"sigmoid"``) document the table for pattern authors; the per-row
form carries per-channel constants such as PRelu slopes.

The legalization is a single gather (``te.compute``) named ``canonqnn_lut``: the build marks
those kernels elementwise so that TVM fuses the lookup into the kernel of the op producing x.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from .._tvm import te
from ..qparams import QParams
from ._registry import CanonicalOp, register

TABLE_SIZE = 256
# the table column of code q is q + 128 (int8), q + 32768 (int16: TFLite 16x8, one entry per code)
SIZES = {"int8": TABLE_SIZE, "int16": 1 << 16}
OFFSETS = {"int8": 128, "int16": 1 << 15}


def check_table(x_shape: tuple[int, ...], table_shape: tuple[int, ...], axis: int,
                dtype: str = "int8") -> None:
    """Raise ``ValueError`` unless the table fits ``x`` (of ``dtype``) and ``axis``."""
    if dtype == "int16":
        if axis != -1 or tuple(table_shape) != (SIZES["int16"],):
            raise ValueError(f"lut: an int16 input takes one table of shape [{SIZES['int16']}] "
                             f"(axis -1), got {list(table_shape)} with axis {axis}")
        return
    if axis == -1:
        if tuple(table_shape) != (TABLE_SIZE,):
            raise ValueError(f"lut: a table of shape {list(table_shape)} needs an axis "
                             f"(expected [{TABLE_SIZE}] for axis -1)")
        return
    if not 0 <= axis < len(x_shape):
        raise ValueError(f"lut: axis {axis} out of range for an input of rank {len(x_shape)}")
    if tuple(table_shape) != (x_shape[axis], TABLE_SIZE):
        raise ValueError(f"lut: table shape {list(table_shape)} does not match "
                         f"[{x_shape[axis]}, {TABLE_SIZE}] (input dimension {axis})")


def _infer(call: Any) -> Any:
    x, table = call.args
    dtype = _tvm.dtype_of(x)
    if dtype not in SIZES:
        raise ValueError(f"lut: input must be int8 or int16, got {dtype}")
    if _tvm.dtype_of(table) != dtype:
        raise ValueError(f"lut: the table must have the input's dtype {dtype}, got "
                         f"{_tvm.dtype_of(table)}")
    x_shape = _tvm.shape_of(x)
    check_table(x_shape, _tvm.shape_of(table), int(_tvm.attrs_dict(call)["axis"]), dtype)
    return _tvm.tensor_type(x_shape, dtype)


def lut_reference(x, table, *, axis: int = -1, **_documentary) -> np.ndarray:
    x, table = np.asarray(x), np.asarray(table)
    column = x.astype(np.int32) + OFFSETS[str(x.dtype)]
    if axis == -1:
        return table[column]
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    row = np.arange(x.shape[axis]).reshape(shape)
    return table[np.broadcast_to(row, x.shape), column]


def _legalize(bb: Any, call: Any) -> Any:
    axis = int(_tvm.attrs_dict(call)["axis"])
    offset = OFFSETS[_tvm.dtype_of(call.args[0])]

    def gather(x, table):
        if axis == -1:
            return te.compute(x.shape, lambda *i: table[x(*i).astype("int32") + offset],
                              name="lut")
        return te.compute(x.shape, lambda *i: table[i[axis], x(*i).astype("int32") + offset],
                          name="lut")

    return bb.call_te(gather, call.args[0], call.args[1], primfunc_name_hint="canonqnn_lut")


LUT = register(CanonicalOp(
    name="lut",
    summary="int8 -> int8 table lookup (elementwise functions; one table or one per channel); "
            "int16 -> int16 (TFLite 16x8 elementwise kernels)",
    args=("x", "table"),
    attrs=("in_scale", "in_zp", "out_scale", "out_zp", "function", "axis"),
    infer=_infer,
    legalize=_legalize,
    reference=lut_reference,
    constraints="x int8 (per-tensor parameters); table int8 constant [256] (axis -1) or "
                "[C, 256] with C = x.shape[axis]; output int8 per tensor. x int16 (zero point "
                "0): table int16 constant [65536], axis -1, output int16",
    family="elementwise",
))


def lut(x: Any, table: Any, in_qp: QParams, out_qp: QParams, function: str,
        axis: int = -1) -> Any:
    """Build ``canonqnn.lut``; ``table`` is an array (or constant) of ``x``'s dtype: int8 of
    shape [256] or [C, 256] (then ``axis`` is the dimension of ``x`` that selects the row), or
    int16 of shape [65536] for an int16 ``x``."""
    if isinstance(table, np.ndarray):
        dtype = _tvm.dtype_of(x)
        if str(table.dtype) != dtype:
            raise ValueError(f"lut: table must be {dtype} (the input's dtype), got {table.dtype}")
        check_table(_tvm.shape_of(x), table.shape, axis, dtype)
        table = _tvm.const(table, dtype)
    return LUT.call([x, table], dict(in_scale=in_qp.scalar_scale, in_zp=in_qp.scalar_zp,
                                     out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp,
                                     function=str(function), axis=int(axis)))
