"""Float operators through TVM's own TFLite converters.

A TFLite model keeps float pre- and post-processing around its quantized layers (input
normalization before the QUANTIZE, box decoding after the last DEQUANTIZE, a detector's
``TFLite_Detection_PostProcess``). An operator none of whose tensors is quantized has nothing
for the rules to fold: it is converted by TVM's TFLite importer (``_tvm_tflite.TfliteConverters``),
whose output is plain Relax (one op, or a short chain, per operator), and the Report names it
as a float island. canonqnn's converters keep every operator that reads or writes a quantized
tensor: they write the forms the rules match.

``TFLite_Detection_PostProcess`` dequantizes quantized inputs itself in TFLite (real values
``(q - zp) * scale``, constant uint8 anchors too), so it takes them dequantized here and is
converted by TVM too, given its options as the kernel reads them (``_detection``).
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn.ops import reference
from canonqnn.qparams import uint8_to_int8

from . import _detection
from ._context import ImportContext, Unsupported, Value
from ._tvm_tflite import TfliteConverters
from .reader import DETECTION_POSTPROCESS, Model, Operator, Tensor

# Operators TVM's converter may be given quantized inputs of, as their real values.
READS_REAL_VALUES = frozenset({"DETECTION_POSTPROCESS"})


class FloatOperators:
    """TVM's converters for the float operators of one model (built on first use)."""

    def __init__(self, model: Model, ctx: ImportContext) -> None:
        self._model = model
        self._ctx = ctx
        self._converters: Any = None

    def _tvm_converters(self) -> Any:
        if self._converters is None:
            self._converters = TfliteConverters(self._model.schema, self._ctx.bb)
        return self._converters

    def kind(self, op: Operator) -> str | None:
        """TVM's name for ``op`` when TVM converts it, else None."""
        return None if self._model.schema is None else self._tvm_converters().kind(op.index)

    def takes(self, op: Operator) -> bool:
        """``op`` is TVM's to convert: it has a TVM converter and no quantized tensor (or reads
        real values: ``READS_REAL_VALUES``)."""
        tensors = self._model.tensors
        if any(tensors[i].quantized for i in op.outputs):
            return False  # (checked first: a quantized model never loads TVM's converters)
        kind = self.kind(op)
        return kind is not None and (kind in READS_REAL_VALUES or not any(
            tensors[i].quantized for i in op.inputs if i >= 0))

    def refusal(self, op: Operator) -> str:
        """Why an operator canonqnn has no converter for is not TVM's either."""
        if self.kind(op) is None:
            return "operator is not supported by canonqnn or TVM's TFLite importer"
        return ("quantized: canonqnn has no converter for it, and TVM's converts it on float "
                "tensors only")

    def convert(self, op: Operator, inputs: list[Value | None],
                outputs: list[Tensor]) -> list[Value]:
        ctx = self._ctx
        custom_options = None
        if op.kind == DETECTION_POSTPROCESS:
            reason = _detection.refusal(op, self._model.tensors)
            if reason is not None:
                raise Unsupported(reason)
            custom_options = _detection.tvm_options(op)
        exprs, constants = {}, {}
        for index, value in zip(op.inputs, inputs):
            if value is None:
                continue
            if value.const is not None:
                constants[index] = _real(value) if value.quantized else value.const
                continue
            value = ctx.as_nhwc(value)
            exprs[index] = ctx.dq(value) if value.quantized else ctx.expr(value)
        try:
            results = self._tvm_converters().convert(op.index, exprs, constants,
                                                    custom_options)
        except Exception as exc:  # noqa: BLE001  (TVM's converters assert; name the operator)
            raise Unsupported(f"TVM's TFLite converter failed: {type(exc).__name__}: "
                              f"{exc}") from None
        if len(results) < len(outputs):
            raise Unsupported(f"TVM's converter gives {len(results)} outputs, the operator has "
                              f"{len(outputs)}")
        values = []
        for expr, out in zip(results, outputs):
            shape, dtype = _tvm.shape_of(expr), _tvm.dtype_of(expr)
            if (out.shape and tuple(shape) != tuple(out.shape)) or dtype != out.dtype:
                raise Unsupported(f"TVM's converter computes {dtype}{list(shape)} for output "
                                  f"{out.name!r}, the model declares {out.dtype}"
                                  f"{list(out.shape)}")
            values.append(Value(dtype=out.dtype, shape=tuple(shape), expr=expr))
        return values


def _real(value: Value) -> Any:
    """A quantized constant's real values, as TFLite dequantizes: ``f32(q - zp) * scale``."""
    qp = value.qparams
    stored = uint8_to_int8(value.const) if value.dtype == "uint8" else value.const
    return reference.dequantize(stored, qp.scale, qp.zero_point, qp.axis or 0)
