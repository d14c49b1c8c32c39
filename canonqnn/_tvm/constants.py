"""Relax constants: made fast, read through DLPack, small ones shared within a conversion."""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi

from .caches import _CACHES
from .compat import _ALLOC, _CPU, _MAKE_CONST
from .types import tensor_type


def const_value(expr: Any) -> np.ndarray:
    """The numpy value of a constant expression (a copy: through a DLPack view, about 0.3 us
    against 5 for ``Tensor.numpy``, which a conversion calls for every parameter it reads)."""
    tensor = expr.value
    try:
        return np.from_dlpack(tensor).copy()
    except (BufferError, TypeError, ValueError, RuntimeError):  # a dtype numpy lacks
        return tensor.numpy()


def const(value: Any, dtype: str | None = None) -> Any:
    """A Relax constant of ``value``; within ``converting``, one object for every small
    constant of the same dtype, shape and bytes."""
    arr = np.asarray(value, dtype=dtype) if dtype else np.asarray(value)
    caches = _CACHES.get()
    if caches is None or arr.size > SHARED_CONST_MAX:
        return _make_const(arr)
    key = (arr.dtype.str, arr.shape, arr.tobytes())
    constant = caches.constants.get(key)
    if constant is None:
        constant = caches.constants[key] = _make_const(arr)
    return constant


def _make_const(arr: np.ndarray) -> Any:
    # The type given, so that constants of one shape and dtype share it (``tensor_type``).
    # TVM does not check it against the data: it is the tensor's own shape (a 0-d bool array
    # becomes a [1] tensor through ``tvm.runtime.tensor``).
    tensor = _tensor_of(arr)
    shape = arr.shape if arr.ndim else tuple(tensor.shape)
    return _MAKE_CONST(tensor, tensor_type(shape, arr.dtype.name), None)


SHARED_CONST_MAX = 64  # elements: scales, zero points, small biases; never weights


_DTYPES: dict[np.dtype, Any] = {}  # numpy dtype -> its tvm_ffi dtype


def _tensor_of(arr: np.ndarray) -> Any:
    """A TVM tensor holding a copy of ``arr``: allocated by TVM, filled through a numpy view
    of it. ``tvm.runtime.tensor`` costs ~15-50 us per call (a checked copy), which made
    constants the largest part of importing and canonicalizing a graph; this costs about 1 us,
    and unlike a numpy copy handed over by DLPack it keeps no numpy array alive beside the
    tensor (two array objects and a separate buffer per constant: 10 MB of a 20k-node graph)."""
    if arr.size == 0 or arr.dtype.kind not in "iuf":
        return tvm.runtime.tensor(np.ascontiguousarray(arr))  # (bool, empty: checked path)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    dtype = _DTYPES.get(arr.dtype)
    if dtype is None:
        dtype = _DTYPES[arr.dtype] = tvm_ffi.dtype(str(arr.dtype))
    tensor = _ALLOC(arr.shape, dtype, _CPU, None)
    np.from_dlpack(tensor)[...] = arr
    return tensor
