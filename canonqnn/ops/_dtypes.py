"""The activation dtypes canonical ops take: int8, and int16 as TFLite's 16x8 activations.

TFLite's converter (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``) writes int16
activations with zero point 0, int8 weights and int64 biases; its interpreter runs them with
kernels of their own (docs/spec.md, "Rounding modes"). The ops that implement those kernels
accept int16 under the Q31 roundings only; these constraints are what their constraint functions
share (each defined here only).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _tvm
from ..numerics.q31 import ACCUMULATORS, INT64_SHIFT_LIMIT, Q31_ROUNDINGS
from ._registry import Refusal, UnsupportedRounding

INT16_UNDER_Q31 = "TFLite's 16x8 int16 activations, under the Q31 roundings, zero points 0"


def input_type(call: Any, shape) -> Any:
    """Type inference of a data movement op: ``shape``, of the input's dtype (int8, or int16
    for TFLite's 16x8 activations)."""
    return _tvm.tensor_type(shape, _tvm.dtype_of(call.args[0]))


def activation_dtype(x_dtype: str, rounding: str | None = None,
                     zero_points=()) -> Refusal | None:
    """int8 always; int16 only as TFLite's 16x8 activations (``INT16_UNDER_Q31``): the
    constraint data movement, requantize, pooling and softmax ops share on their input."""
    if x_dtype == "int8":
        return None
    if x_dtype != "int16":
        return Refusal(f"{x_dtype} input (int8 or int16)")
    if rounding is not None and rounding not in Q31_ROUNDINGS:
        return Refusal(f"int16 input is {INT16_UNDER_Q31}, not {rounding}", UnsupportedRounding)
    if any(zero_points):
        return Refusal(f"int16 input is {INT16_UNDER_Q31}")
    return None


def sixteen_by_eight(x_dtype: str, out_dtype: str, accumulator: str = "int32",
                rounding: str | None = None, zero_points: dict[str, object] | None = None,
                shifts=None) -> Refusal | None:
    """TFLite's 16x8 layers, the constraint conv2d, matmul and add share: int16 activations and
    int64 accumulators (an int64 bias) are TFLite's 16x8 kernels, which read and write int16,
    exist under the Q31 roundings only, ignore zero points (all must be 0), and requantize an
    int64 accumulator with shifts below ``INT64_SHIFT_LIMIT``. ``rounding`` None: not checked
    (a frontend that sets it later)."""
    if accumulator not in ACCUMULATORS:
        return Refusal(f"accumulator {accumulator!r} (int32 or int64)")
    if "int16" not in (x_dtype, out_dtype) and accumulator == "int32":
        return None
    if "int16" not in (x_dtype, out_dtype):
        return Refusal(f"int64 bias on an int8 layer ({x_dtype} input and {out_dtype} output; "
                       "TFLite's 16x8 kernels read and write int16)")
    if (x_dtype, out_dtype) != ("int16", "int16"):
        return Refusal(f"{x_dtype} input and {out_dtype} output (TFLite's 16x8 kernels read "
                       "and write int16)")
    if rounding is not None and rounding not in Q31_ROUNDINGS:
        return Refusal("int16 activations and int64 accumulators are TFLite's 16x8 kernels "
                       f"(Q31 roundings), not {rounding}", UnsupportedRounding)
    nonzero = [name for name, zp in (zero_points or {}).items() if np.any(np.asarray(zp))]
    if nonzero:
        return Refusal(f"16x8 layer with a non-zero zero point ({', '.join(nonzero)}): TFLite's "
                       "16x8 kernels ignore zero points (zero points 0 required)")
    if accumulator == "int64" and shifts is not None and \
            np.any(np.asarray(shifts) >= INT64_SHIFT_LIMIT):
        return Refusal(f"a multiplier of 2^{INT64_SHIFT_LIMIT - 1} or more is outside TFLite's "
                       "int64 requantization", UnsupportedRounding)
    return None


def bias_per_channel(bias_shape, channels: int | None) -> Refusal | None:
    """One bias value per output channel (shape ``[channels]``): the bias rule conv2d,
    conv2d_transpose and matmul share (their legalization and reference index it by channel)."""
    shape = tuple(int(d) for d in bias_shape)
    size = int(np.prod(shape, dtype=np.int64))
    if size != channels:
        return Refusal(f"bias of {size} value{'' if size == 1 else 's'}, not one per output "
                       f"channel (the output has {channels} channel{'' if channels == 1 else 's'})")
    if shape != (channels,):
        return Refusal(f"bias of shape {list(shape)}, not [{channels}] (one value per output "
                       "channel)")
    return None
