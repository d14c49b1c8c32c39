"""Converter registry and the per-import context of the TFLite frontend.

A converter is ``fn(ctx, op, inputs, outputs) -> list[Value]`` (``Converter``) registered with
``@tflite_op("CONV_2D")``; ``inputs`` holds ``Value``s (None for omitted optional inputs) and
``outputs`` the operator's output ``Tensor`` descriptions (shape, dtype, quantization).
``Value`` is every frontend's (``frontends._base``); a TFLite one always has the model's
``dtype`` and (NHWC) ``shape``.

Layout: TFLite is NHWC; canonical ops are NCHW. A 4-D activation is held in NCHW
(``Value.nchw``) from the first op that wants it so; ops whose meaning depends on the element
order (reshape, fully connected, ...) get it back in NHWC. Every layout change of a quantized
tensor is written as ``quantize(permute_dims(dequantize(x)))`` with the tensor's own parameters,
which the rewrites fold into ``canonqnn.transpose``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.qparams import QParams, uint8_to_int8

from .._base import Converter as BaseConverter
from .._base import ImportContext as BaseContext
from .._base import Registry, Source, Unsupported, Value
from .reader import Operator, Tensor

TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
# Quantized activations: int8, uint8 and int16 (the 16x8 models of the converter's
# EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8, zero point 0).
QUANTIZED_DTYPES = ("int8", "uint8", "int16")
# Quantized tensors canonqnn reads: those, and the int32 / int64 biases of the products.
SIGNED_QUANTIZED_DTYPES = ("int8", "int16", "int32", "int64")


def tensor_qparams(t: Tensor, axis: int | None = None) -> QParams | None:
    """int8-normalized parameters of a quantized tensor (``axis`` overrides the per-channel
    axis, for weights the frontend re-lays out); int16 and int32 tensors keep their type, an
    int64 bias is held as int32 (``canonqnn.qdq``, source_dtype "int64")."""
    if not t.quantized:
        return None
    zp = t.zero_point
    per_tensor = t.scale.size == 1
    if t.dtype == "uint8":
        zp = uint8_to_int8(zp).astype(np.int64)
    elif t.dtype not in SIGNED_QUANTIZED_DTYPES:
        raise Unsupported(f"tensor {t.name!r} is quantized to {t.dtype}; canonqnn imports "
                          "int8, uint8 and 16x8 (int16 activations) models")
    dtype = {"uint8": "int8", "int64": "int32"}.get(t.dtype, t.dtype)
    if per_tensor:
        return QParams.make(t.scale.reshape(()), zp.reshape(()), None, dtype)
    return QParams.make(t.scale, zp, t.quantized_dimension if axis is None else axis, dtype)


# ``fn(ctx, op, inputs, outputs) -> list[Value]``
Converter = BaseConverter["ImportContext", Operator, list[Tensor]]
REGISTRY: Registry[Converter] = Registry()
CONVERTERS: dict[str, Converter] = REGISTRY.converters
SOURCE = Source("TFLite", "tflite", "q31_double")


def tflite_op(*kinds: str) -> Callable[[Converter], Converter]:
    return REGISTRY.op(*kinds)


class ImportContext(BaseContext):
    """What converters need: the block builder, layout conversion and the Q/DQ writers."""

    def __init__(self, bb: Any) -> None:
        super().__init__(bb)
        self.op: Operator | None = None

    # -------------------------------------------------------------- values
    def expr(self, value: Value) -> Any:
        """The Relax expression of ``value``, materializing constants (uint8 shifted)."""
        if value.expr is None:
            data = value.const
            if value.dtype == "uint8" and value.quantized:
                data = uint8_to_int8(data)
            if value.nchw:
                data = np.ascontiguousarray(data.transpose(TO_NCHW))
            value.expr = _tvm.const(np.ascontiguousarray(data))
        return value.expr

    def dq(self, value: Value) -> Any:
        """The float32 real values of a quantized tensor (its ``dequantize``)."""
        if not value.quantized:
            raise Unsupported(f"input of dtype {value.dtype} is not quantized; canonqnn imports "
                              "quantized operators (float ones only at QUANTIZE/DEQUANTIZE)")
        return self.emit(qdq.dequantize(self.expr(value), value.qparams,
                                        source_dtype=qdq.source_dtype(value.dtype)))

    def dq_stored(self, value: Value, out: Tensor) -> Any:
        """``value``'s stored integers read with output ``out``'s parameters: TFLite's pooling
        and resize kernels work on stored values and ignore differing parameters."""
        qp = tensor_qparams(out)
        if qp is None or value.qparams is None or value.dtype != out.dtype:
            return self.dq(value)
        return self.emit(qdq.dequantize(self.expr(value), qp,
                                        source_dtype=qdq.source_dtype(value.dtype)))

    def quantized(self, real: Any, out: Tensor, nchw: bool = False) -> Value:
        """``real`` quantized to output tensor ``out``'s parameters. The operator being
        converted is recorded as the producer of the result: which kernel a rule reproduces,
        and which engine of the runtime computes it, depend on it."""
        qp = tensor_qparams(out)
        if qp is None or out.dtype not in QUANTIZED_DTYPES:
            raise Unsupported(f"output {out.name!r} is {out.dtype}"
                              f"{'' if qp is None else ' quantized'}; canonqnn imports int8, "
                              "uint8 and int16 operators")
        if not qp.per_tensor:
            raise Unsupported(f"output {out.name!r} is quantized per channel")
        expr = self.emit(qdq.quantize(real, qp, source_dtype=qdq.source_dtype(out.dtype),
                                      source_op=self.op.kind,
                                      source_tensor=out.name))
        value = Value(dtype=out.dtype, shape=out.shape, expr=expr, qparams=qp, nchw=nchw)
        computed = _tvm.shape_of(expr)
        if len(out.shape) != len(computed) or value.layout_shape != computed:
            raise Unsupported(f"computed shape {list(_tvm.shape_of(expr))} differs from the "
                              f"model's output shape {list(out.shape)}")
        return value

    def requantized(self, value: Value, real: Any, nchw: bool, shape) -> Value:
        """``real`` (computed from ``value``'s real values) quantized with ``value``'s own
        parameters: exact data movement."""
        expr = self.emit(qdq.quantize(real, value.qparams,
                                      source_dtype=qdq.source_dtype(value.dtype)))
        return replace(value, expr=expr, const=None, nchw=nchw, shape=tuple(shape))

    # -------------------------------------------------------------- layout
    def as_nchw(self, value: Value) -> Value:
        if value.nchw or len(value.shape) != 4:
            return value
        n, h, w, c = value.shape
        if value.const is None and (c == 1 or h * w == 1):
            return self._reshaped(value, value.shape, nchw=True)  # same element order
        return self._relayout(value, True)

    def as_rank4_nchw(self, value: Value) -> Value:
        """A tensor of rank <= 4 broadcast as TFLite does (leading unit axes), held NCHW."""
        if len(value.shape) < 4:
            shape = (1,) * (4 - len(value.shape)) + tuple(value.shape)
            if value.const is not None:
                value = replace(value, const=value.const.reshape(shape), shape=shape, expr=None)
            else:
                value = self._reshaped(value, shape, nchw=False)
        return self.as_nchw(value)

    def as_nhwc(self, value: Value) -> Value:
        """``value`` in the model's own element order (a no-op unless held NCHW)."""
        if not value.nchw:
            return value
        n, h, w, c = value.shape
        if value.const is None and (c == 1 or h * w == 1):
            # The same elements in the same order: only the shape differs.
            return self._reshaped(value, value.shape, nchw=False)
        return self._relayout(value, False)

    def _relayout(self, value: Value, nchw: bool) -> Value:
        if value.const is not None:
            return replace(value, expr=None, nchw=nchw)
        axes = TO_NCHW if nchw else TO_NHWC
        if value.quantized:
            real = self.emit(relax.op.permute_dims(self.dq(value), axes))
            return self.requantized(value, real, nchw, value.shape)
        return replace(value, expr=self.emit(relax.op.permute_dims(self.expr(value), axes)),
                       nchw=nchw)

    def _reshaped(self, value: Value, shape, nchw: bool) -> Value:
        target = tuple(shape[i] for i in TO_NCHW) if nchw else tuple(shape)
        if value.quantized:
            real = self.emit(relax.op.reshape(self.dq(value), target))
            return self.requantized(value, real, nchw, shape)
        return replace(value, expr=self.emit(relax.op.reshape(self.expr(value), target)),
                       nchw=nchw, shape=tuple(shape))

    def reshape(self, value: Value, shape) -> Value:
        """``value`` with NHWC-order ``shape`` (RESHAPE's meaning)."""
        if value.nchw and value.const is None and (value.shape[3] == 1 or
                                                   value.shape[1] * value.shape[2] == 1):
            return self._reshaped(value, shape, nchw=False)  # same element order: one reshape
        value = self.as_nhwc(value)
        if tuple(shape) == value.shape:
            return value
        if value.const is not None:
            return replace(value, const=value.const.reshape(shape), shape=tuple(shape), expr=None)
        return self._reshaped(value, shape, nchw=False)


def constant(value: Value | None, what: str) -> np.ndarray:
    if value is None or value.const is None:
        raise Unsupported(f"{what} must be a constant tensor, not computed at run time")
    return value.const


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TFLite's SAME padding along one axis: ``(before, after)``, the odd pixel after."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def padding_2d(padding: str, hw, khw, strides, dilation=(1, 1)) -> list[int]:
    """Relax ``(top, left, bottom, right)`` for TFLite padding ``SAME``/``VALID``."""
    if padding == "VALID":
        return [0, 0, 0, 0]
    if padding != "SAME":
        raise Unsupported(f"padding {padding}")
    (t, b), (left, r) = (same_padding(s, k, st, d) for s, k, st, d in
                         zip(hw, khw, strides, dilation))
    return [t, left, b, r]
