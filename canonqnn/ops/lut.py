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
from ._registry import CanonicalOp, Refusal, register

TABLE_SIZE = 256
# the table column of code q is q + 128 (int8), q + 32768 (int16: TFLite 16x8, one entry per code)
SIZES = {"int8": TABLE_SIZE, "int16": 1 << 16}
OFFSETS = {"int8": 128, "int16": 1 << 15}


def _infer(call: Any) -> Any:
    x, table = call.args
    dtype, x_shape = _tvm.dtype_of(x), _tvm.shape_of(x)
    LUT.require(x_dtype=dtype, table_dtype=_tvm.dtype_of(table), x_shape=x_shape,
                table_shape=_tvm.shape_of(table), axis=int(_tvm.attrs_dict(call)["axis"]))
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


def lut_constraint(x_dtype: str = "int8", table_dtype: str | None = None, x_shape=None,
                   table_shape=None, axis: int = -1, x_zp: int = 0) -> Refusal | None:
    """x int8; table of x's dtype, [256] (axis -1) or [C, 256] with C = x.shape[axis]; output
    of x's dtype. x int16 (zero point 0): table [65536], axis -1"""
    if x_dtype not in SIZES:
        return Refusal(f"input must be int8 or int16, got {x_dtype}")
    if table_dtype is not None and table_dtype != x_dtype:
        return Refusal(f"table must be {x_dtype} (the input's dtype), got {table_dtype}")
    if x_dtype == "int16" and x_zp:
        return Refusal(f"an int16 input has zero point 0 (TFLite's 16x8 kernels), not {x_zp}")
    if table_shape is None:
        return None
    table_shape = tuple(table_shape)
    if x_dtype == "int16":
        if axis != -1 or table_shape != (SIZES["int16"],):
            return Refusal(f"an int16 input takes one table of shape [{SIZES['int16']}] "
                           f"(axis -1), got {list(table_shape)} with axis {axis}")
        return None
    if axis == -1:
        if table_shape != (TABLE_SIZE,):
            return Refusal(f"a table of shape {list(table_shape)} needs an axis "
                           f"(expected [{TABLE_SIZE}] for axis -1)")
        return None
    if x_shape is None:
        return None
    if not 0 <= axis < len(x_shape):
        return Refusal(f"axis {axis} out of range for an input of rank {len(x_shape)}")
    if table_shape != (x_shape[axis], TABLE_SIZE):
        return Refusal(f"table shape {list(table_shape)} does not match "
                       f"[{x_shape[axis]}, {TABLE_SIZE}] (input dimension {axis})")
    return None


LUT = register(CanonicalOp(
    name="lut",
    summary="int8 -> int8 table lookup (elementwise functions; one table or one per channel); "
            "int16 -> int16 (TFLite 16x8 elementwise kernels)",
    args=("x", "table"),
    attrs=("in_scale", "in_zp", "out_scale", "out_zp", "function", "axis"),
    infer=_infer,
    legalize=_legalize,
    reference=lut_reference,
    constraint=lut_constraint,
    family="elementwise",
))


def lut(x: Any, table: Any, in_qp: QParams, out_qp: QParams, function: str,
        axis: int = -1) -> Any:
    """Build ``canonqnn.lut``; ``table`` is an array (or constant) of ``x``'s dtype: int8 of
    shape [256] or [C, 256] (then ``axis`` is the dimension of ``x`` that selects the row), or
    int16 of shape [65536] for an int16 ``x``."""
    dtype = _tvm.dtype_of(x)
    if isinstance(table, np.ndarray):
        LUT.require(x_dtype=dtype, table_dtype=str(table.dtype), x_shape=_tvm.shape_of(x),
                    table_shape=table.shape, axis=int(axis), x_zp=in_qp.scalar_zp)
        table = _tvm.const(table, dtype)
    else:
        LUT.require(x_dtype=dtype, x_zp=in_qp.scalar_zp)
    return LUT.call([x, table], dict(in_scale=in_qp.scalar_scale, in_zp=in_qp.scalar_zp,
                                     out_scale=out_qp.scalar_scale, out_zp=out_qp.scalar_zp,
                                     function=str(function), axis=int(axis)))
