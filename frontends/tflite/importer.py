"""TFLite model -> fake-quant Relax module (see docs/fq-form.md).

The importer reads the flatbuffer, checks every operator has a converter (reporting all that do
not at once), and converts the operators in order. Quantized tensors become int8 Relax values
(uint8 ones shifted by -128, their quantize/dequantize calls saying so: ``canonqnn.qdq``); 4-D
activations are held NCHW inside the module while its interface keeps the model's NHWC shapes,
names and dtypes. 16x8 models (int16 activations, int8 weights, int64 biases) import the same
way, their int16 tensors held as int16. Operators with no quantized tensor (float pre- and
post-processing) are converted by TVM's own TFLite converters (``_generic``).
The module records ``source="tflite"`` and ``rounding="q31_double"``: TFLite's reference
kernels requantize with Q31 fixed-point multipliers and two roundings, ties away from zero.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn.errors import UnsupportedError, cut_hint
from canonqnn.io import TensorInfo
from canonqnn.qparams import QParams

from .._base import GraphImporter, Inputs, cut_at
from . import _detection, _fold, _shapes, ops  # noqa: F401  (ops registers the converters)
from ._context import CONVERTERS, SOURCE, ImportContext, Unsupported, Value, tensor_qparams
from ._generic import FloatOperators
from .reader import DETECTION_POSTPROCESS, Model, Operator, Tensor, read_model

SUPPORTED_INPUT_DTYPES = ("float32", "int8", "uint8", "int16", "int32", "int64")


def _error(problems: list[tuple[str, str, str]], hint: str = "") -> UnsupportedError:
    return SOURCE.unsupported(problems, hint)


def cut_model(model: Model, outputs: list[str]) -> Model:
    """``model`` computing the tensors named ``outputs`` only: the operators they depend on."""
    index = {t.name: t.index for t in model.tensors}
    producer = {i: op for op in model.operators for i in op.outputs}
    needed = cut_at(outputs, index, "model", producer,
                    lambda op: [i for i in op.inputs if i >= 0], key=index.__getitem__)
    return replace(model, operators=[op for op in model.operators if id(op) in needed],
                   outputs=[index[name] for name in outputs])


def _input_info(model: Model, index: int) -> TensorInfo:
    t = model.tensors[index]
    if t.dtype not in SUPPORTED_INPUT_DTYPES:
        raise _error([(t.name, "graph input", f"input dtype {t.dtype} is not supported")])
    if any(d <= 0 for d in t.shape):
        raise _error([(t.name, "graph input", f"shape {list(t.shape)} is not static")])
    return TensorInfo(t.name, t.dtype, t.shape)


class TFLiteImporter(GraphImporter[ImportContext, Operator, int]):
    """The import of one TFLite model (``frontends._base.GraphImporter``): tensors by index;
    operators with no quantized tensor go to TVM's converters (``FloatOperators``)."""

    source = SOURCE
    node_noun = "operator"

    def __init__(self, model: Model) -> None:
        super().__init__(ImportContext(_tvm.BlockBuilder()), model.operators)
        self.model = model
        self.float_ops = FloatOperators(model, self.ctx)

    def label(self, op: Operator) -> str:
        return op.label

    def kind(self, op: Operator) -> str:
        return op.kind

    def where(self, op: Operator) -> str:
        return f"operator {op.label} ({op.kind})"

    def refusal(self, op: Operator) -> tuple[str, str] | None:
        if op.kind not in CONVERTERS and op.kind not in _fold.FOLDERS and op.kind != "SHAPE" \
                and not self.float_ops.takes(op):
            return op.kind, self.float_ops.refusal(op)
        if op.kind == DETECTION_POSTPROCESS:
            reason = _detection.refusal(op, self.model.tensors)
            return None if reason is None else (op.kind, reason)
        return None

    def cut_hint(self, refused: list[Operator]) -> str:
        tensors = self.model.tensors
        return cut_hint([tensors[i].name for op in refused for i in op.inputs
                         if i >= 0 and tensors[i].data is None])

    def enter(self, op: Operator | None) -> None:
        self.ctx.op = op

    def convert(self, op: Operator) -> list[Value]:
        tensors = self.model.tensors
        inputs = self.read([i if i >= 0 else None for i in op.inputs],
                           lambda i: f"input tensor {tensors[i].name!r} is not produced before "
                                     "this operator")
        return _convert(self.ctx, op, inputs, [tensors[i] for i in op.outputs], self.float_ops)

    def output_keys(self, op: Operator) -> list[int]:
        return list(op.outputs)

    def bind_inputs(self, inputs: Sequence[TensorInfo], params: list[Any]) -> None:
        for index, info, param in zip(self.model.inputs, inputs, params):
            t = self.model.tensors[index]
            expr = param
            if info.dtype == "uint8" and t.quantized:
                expr = self.ctx.emit(qdq.uint8_to_int8(param))
            self.values[index] = Value(dtype=info.dtype, shape=info.shape, expr=expr,
                                       qparams=_qparams(t))

    def graph_outputs(self) -> list[tuple[str, int]]:
        return [(self.model.tensors[index].name, index) for index in self.model.outputs]

    def output(self, position: int, name: str, value: Value) -> tuple[Any, float | None]:
        value = self.ctx.as_nhwc(value)
        expr = self.ctx.expr(value)
        if value.dtype == "uint8" and value.quantized:
            expr = self.ctx.emit(qdq.int8_to_uint8(expr))
        return expr, 1.0 if value.quantized or value.dtype != "float32" else value.step


def load(model: str | os.PathLike | bytes, outputs: list[str] | None = None) -> Any:
    """Import a TFLite model (path or bytes) into the fake-quant Relax form; ``outputs`` names
    the tensors the module computes instead of the model's outputs (the graph is cut there:
    e.g. before a detector's TFLite_Detection_PostProcess)."""
    m = read_model(model)
    if outputs is not None:
        m = cut_model(m, outputs)
    m = _shapes.resolve(m)
    importer = TFLiteImporter(m)
    importer.prescan()
    inputs = [_input_info(m, i) for i in m.inputs]
    for t in m.tensors:
        if t.data is not None or t.is_variable:
            importer.values[t.index] = _stored(t)
    return importer.build(inputs)


def _stored(t: Tensor) -> Value:
    """A constant, or a variable tensor (a stateful operator's state) as every run starts it:
    the interpreter fills an int8 variable with its zero point and others with 0, real 0
    (the module is one run from that state). int16 ones (SVDF time weights, an LSTM's cell
    state) have no QParams: converters reading them take the parameters from ``tensor``."""
    data = t.data
    if data is None:
        fill = int(t.zero_point[0]) if t.quantized and t.dtype == "int8" else 0
        data = np.full(t.shape, fill, np.dtype(t.dtype))
    qparams = None if t.dtype == "int16" else _qparams(t)
    return Value(dtype=t.dtype, shape=t.shape, const=data, qparams=qparams, tensor=t)


def _qparams(t: Tensor) -> QParams | None:
    try:
        return tensor_qparams(t)
    except Unsupported as exc:
        raise _error([(t.name, "tensor", str(exc))]) from None


def _convert(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor],
             float_ops: FloatOperators) -> list[Value]:
    if _fold.foldable(op, inputs):
        try:
            return _fold.fold(op, inputs, outputs)
        except Unsupported:
            if op.kind not in CONVERTERS and not float_ops.takes(op):
                raise
    if float_ops.takes(op):
        return float_ops.convert(op, inputs, outputs)
    if op.kind not in CONVERTERS:
        raise Unsupported("only folded here, where every input is a constant shape or index "
                          "(this one is computed at run time)")
    return CONVERTERS[op.kind](ctx, op, inputs, outputs)
