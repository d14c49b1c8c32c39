"""The activation dtypes canonical ops take: int8, and int16 as TFLite's 16x8 activations.

TFLite's converter (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``) writes int16
activations with zero point 0, int8 weights and int64 biases; its interpreter runs them with
kernels of their own (docs/spec.md, "Rounding modes"). The ops that implement those kernels
accept int16 under the Q31 roundings only; these checks are what they share.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from ..numerics.q31 import ACCUMULATORS, INT64_SHIFT_LIMIT, Q31_ROUNDINGS
from ._registry import UnsupportedRounding

INT16_UNDER_Q31 = "TFLite's 16x8 int16 activations, under the Q31 roundings, zero points 0"


def input_type(call: Any, shape) -> Any:
    """Type inference of a data movement op: ``shape``, of the input's dtype (int8, or int16
    for TFLite's 16x8 activations)."""
    return _tvm.tensor_type(shape, _tvm.dtype_of(call.args[0]))


def check_activation_dtype(op: str, x: Any, rounding: str | None, zero_points=()) -> None:
    """int8 always; int16 only as TFLite's 16x8 activations (``INT16_UNDER_Q31``)."""
    dtype = _tvm.dtype_of(x)
    if dtype == "int8":
        return
    if dtype != "int16":
        raise ValueError(f"canonqnn.{op}: {dtype} input (int8 or int16)")
    if rounding is not None and rounding not in Q31_ROUNDINGS:
        raise UnsupportedRounding(f"canonqnn.{op}: int16 input is {INT16_UNDER_Q31}, not "
                                  f"{rounding}")
    if any(zero_points):
        raise ValueError(f"canonqnn.{op}: int16 input is {INT16_UNDER_Q31}")


def check_sixteen_bit(op: str, x_dtype: str, out_dtype: str, accumulator: str, rounding: str,
                      zero_points: dict[str, object], shifts=None) -> None:
    """What an op with int16 activations (or an int64 accumulator) requires: TFLite's 16x8
    kernels, which exist under the Q31 roundings only, read int16 and write int16, ignore zero
    points (all must be 0), and requantize an int64 accumulator with shifts below
    ``INT64_SHIFT_LIMIT``. Raises ``UnsupportedRounding`` (a rule's decline) or ValueError."""
    if accumulator not in ACCUMULATORS:
        raise ValueError(f"canonqnn.{op}: accumulator {accumulator!r} (int32 or int64)")
    if "int16" not in (x_dtype, out_dtype) and accumulator == "int32":
        return
    if rounding not in Q31_ROUNDINGS:
        raise UnsupportedRounding(f"canonqnn.{op}: int16 activations and int64 accumulators "
                                  f"are TFLite's 16x8 kernels (Q31 roundings), not {rounding}")
    if (x_dtype, out_dtype) != ("int16", "int16"):
        raise ValueError(f"canonqnn.{op}: {x_dtype} input and {out_dtype} output (TFLite's 16x8 "
                         "kernels read and write int16)")
    nonzero = [name for name, zp in zero_points.items() if np.any(np.asarray(zp))]
    if nonzero:
        raise ValueError(f"canonqnn.{op}: int16 activations need zero points 0 (TFLite's 16x8 "
                         f"kernels ignore them), not {', '.join(nonzero)}")
    if accumulator == "int64" and shifts is not None and \
            np.any(np.asarray(shifts) >= INT64_SHIFT_LIMIT):
        raise UnsupportedRounding(f"canonqnn.{op}: a multiplier of 2^{INT64_SHIFT_LIMIT - 1} "
                                  "or more is outside TFLite's int64 requantization")
