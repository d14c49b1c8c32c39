"""Shape subgraphs evaluated at import.

Today's TFLite converter writes the reshape targets of even a plain MobileNet as int32
arithmetic on ``SHAPE`` (``SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE``, ``REDUCE_PROD``). With
static shapes every such operator has constant inputs: it is evaluated here, with numpy, and its
result is a constant the next converter reads (a RESHAPE target, a GATHER index). Only
unquantized operands fold; quantized data always goes through the converters.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._base import Registry
from ._context import Unsupported, Value
from .reader import Operator, Tensor

Folder = Callable[[Operator, list[np.ndarray], list[Tensor]], list[np.ndarray]]
_FOLDS: Registry[Folder] = Registry()
FOLDERS = _FOLDS.converters
folds = _FOLDS.op  # @folds("SHAPE", ...): the folder of those operators
# A folded tensor bigger than this stays a run-time operator (FILL of a huge shape).
MAX_FOLDED_ELEMENTS = 1 << 24


def foldable(op: Operator, inputs: list[Value | None]) -> bool:
    if op.kind == "SHAPE":
        return True
    present = [v for v in inputs if v is not None]
    return op.kind in FOLDERS and bool(present) and \
        all(v.const is not None and not v.quantized for v in present)


def fold(op: Operator, inputs: list[Value | None], outputs: list[Tensor]) -> list[Value]:
    if op.kind == "SHAPE":
        arrays = [np.asarray(inputs[0].shape, dtype=outputs[0].dtype)]
    else:
        arrays = FOLDERS[op.kind](op, [None if v is None else v.const for v in inputs], outputs)
    values = []
    for array, out in zip(arrays, outputs):
        array = np.asarray(array)
        if array.size > MAX_FOLDED_ELEMENTS:
            raise Unsupported(f"a constant result of {array.size} elements is too large to fold")
        if out.shape and tuple(array.shape) != tuple(out.shape):
            raise Unsupported(f"evaluates to shape {list(array.shape)}, the model declares "
                              f"{list(out.shape)}")
        array = array.astype(out.dtype).reshape(out.shape if out.shape else array.shape)
        values.append(Value(dtype=out.dtype, shape=tuple(array.shape), const=array))
    return values


def slice_ranges(options, shape, begin, end, strides) -> tuple[list[tuple[int, int, int]], int]:
    """STRIDED_SLICE's ``(start, stop, step)`` per sliced axis and its shrink mask."""
    if options.EllipsisMask() or options.NewAxisMask():
        raise Unsupported("ellipsis and new-axis masks are not supported")
    ranges = []
    for i, dim in enumerate(shape[:len(begin)]):
        step = int(strides[i])
        if step == 0:
            raise Unsupported("stride 0")
        b = None if options.BeginMask() >> i & 1 else int(begin[i])
        e = None if options.EndMask() >> i & 1 else int(end[i])
        if options.Offset() and b is not None and e is not None:
            e = b + e
        if options.ShrinkAxisMask() >> i & 1:
            b = int(begin[i]) % dim
            e, step = b + 1, 1
        ranges.append(slice(b, e, step).indices(dim))
    return ranges, options.ShrinkAxisMask()


@folds("STRIDED_SLICE")
def _strided_slice(op, args, outputs):
    x = args[0]
    ranges, shrink = slice_ranges(op.options, x.shape, *(a.reshape(-1) for a in args[1:4]))
    y = x[tuple(slice(*r) for r in ranges)]
    return [y.reshape([d for i, d in enumerate(y.shape) if not shrink >> i & 1])]


@folds("PACK")
def _pack(op, args, outputs):
    return [np.stack(args, axis=int(op.options.Axis()) if op.options else 0)]


@folds("UNPACK")
def _unpack(op, args, outputs):
    axis = int(op.options.Axis()) if op.options else 0
    return [np.squeeze(part, axis) for part in np.split(args[0], args[0].shape[axis], axis)]


def _reducer(fn):
    def reduce(op, args, outputs):
        keep = bool(op.options.KeepDims()) if op.options else False
        return [fn(args[0], axis=tuple(int(a) for a in args[1].reshape(-1)), keepdims=keep)]
    return reduce


for _kind, _fn in (("REDUCE_PROD", np.prod), ("SUM", np.sum), ("REDUCE_MAX", np.max),
                   ("REDUCE_MIN", np.min)):
    folds(_kind)(_reducer(_fn))


@folds("CONCATENATION")
def _concat(op, args, outputs):
    return [np.concatenate(args, axis=int(op.options.Axis()))]


@folds("GATHER")
def _gather(op, args, outputs):
    axis = int(op.options.Axis()) if op.options else 0
    return [np.take(args[0], args[1].astype(np.int64), axis=axis)]


@folds("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(op, args, outputs):
    return [args[0].reshape(outputs[0].shape)]


@folds("CAST")
def _cast(op, args, outputs):
    return [args[0].astype(outputs[0].dtype)]


@folds("RANGE")
def _range(op, args, outputs):
    start, limit, delta = (a.reshape(()) for a in args[:3])
    return [np.arange(start, limit, delta)]


@folds("FILL")
def _fill(op, args, outputs):
    return [np.full(args[0].astype(np.int64).reshape(-1), args[1].reshape(()))]


def _int_binary(fn):
    def binary(op, args, outputs):
        a, b = args[0], args[1]
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            raise Unsupported("float constant arithmetic is left to the converters")
        return [fn(a, b)]
    return binary


for _kind, _fn in (("ADD", np.add), ("SUB", np.subtract), ("MUL", np.multiply),
                   ("FLOOR_DIV", np.floor_divide), ("MAXIMUM", np.maximum),
                   ("MINIMUM", np.minimum)):
    folds(_kind)(_int_binary(_fn))
