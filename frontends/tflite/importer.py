"""TFLite model -> fake-quant Relax module (see docs/fq-form.md).

The importer reads the flatbuffer, checks every operator has a converter (reporting all that do
not at once), and converts the operators in order. Quantized tensors become int8 Relax values
(uint8 ones shifted by -128, their quantize/dequantize calls saying so: ``canonqnn.qdq``); 4-D activations are held
NCHW inside the module while its interface keeps the model's NHWC shapes, names and dtypes.
16x8 models (int16 activations, int8 weights, int64 biases) import the same way, their int16
tensors held as int16. Operators with no quantized tensor (float pre- and post-processing)
are converted by TVM's own TFLite converters (``_generic``).
The module records ``source="tflite"`` and ``rounding="q31_double"``: TFLite's reference
kernels requantize with Q31 fixed-point multipliers and two roundings, ties away from zero.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn.errors import InvalidModelError, UnsupportedError, cut_hint
from canonqnn.io import TensorInfo

from .._base import convert_node, import_function, needed_nodes
from . import _fold, ops  # noqa: F401  (ops registers the converters)
from ._context import CONVERTERS, SOURCE, ImportContext, Unsupported, Value, tensor_qparams
from ._generic import FloatOperators
from .reader import Model, read_model

SUPPORTED_INPUT_DTYPES = ("float32", "int8", "uint8", "int16", "int32", "int64")


def _error(problems, hint: str = "") -> UnsupportedError:
    return SOURCE.unsupported(problems, hint)


def _prescan(model: Model, float_ops: FloatOperators) -> None:
    unsupported = [op for op in model.operators if op.kind not in CONVERTERS and
                   op.kind not in _fold.FOLDERS and op.kind != "SHAPE" and
                   not float_ops.takes(op)]
    if unsupported:
        inputs = [model.tensors[i].name for op in unsupported for i in op.inputs
                  if i >= 0 and model.tensors[i].data is None]
        raise _error([(op.label, op.kind, float_ops.refusal(op)) for op in unsupported],
                     cut_hint(inputs))


def cut_model(model: Model, outputs: list[str]) -> Model:
    """``model`` computing the tensors named ``outputs`` only: the operators they depend on."""
    index = {t.name: t.index for t in model.tensors}
    missing = [name for name in outputs if name not in index]
    if missing or not outputs:
        raise InvalidModelError(f"cannot cut the model at {missing or outputs}: no such tensor"
                                if missing else "no output tensor named")
    producer = {i: op for op in model.operators for i in op.outputs}
    needed = needed_nodes([index[name] for name in outputs], producer,
                          lambda op: [i for i in op.inputs if i >= 0])
    return replace(model, operators=[op for op in model.operators if id(op) in needed],
                   outputs=[index[name] for name in outputs])


def _input_info(model: Model, index: int) -> TensorInfo:
    t = model.tensors[index]
    if t.dtype not in SUPPORTED_INPUT_DTYPES:
        raise _error([(t.name, "graph input", f"input dtype {t.dtype} is not supported")])
    if any(d <= 0 for d in t.shape):
        raise _error([(t.name, "graph input", f"shape {list(t.shape)} is not static")])
    return TensorInfo(t.name, t.dtype, t.shape)


def load(model: str | os.PathLike | bytes, outputs: list[str] | None = None) -> Any:
    """Import a TFLite model (path or bytes) into the fake-quant Relax form; ``outputs`` names
    the tensors the module computes instead of the model's outputs (the graph is cut there:
    e.g. before a detector's TFLite_Detection_PostProcess)."""
    m = read_model(model)
    if outputs is not None:
        m = cut_model(m, outputs)
    bb = _tvm.BlockBuilder()
    ctx = ImportContext(bb)
    float_ops = FloatOperators(m, ctx)
    _prescan(m, float_ops)
    inputs = [_input_info(m, i) for i in m.inputs]
    values: dict[int, Value] = {}
    for t in m.tensors:
        if t.data is not None or t.is_variable:
            values[t.index] = _stored(t)

    def bind_inputs(params: list) -> None:
        for index, info, param in zip(m.inputs, inputs, params):
            t = m.tensors[index]
            expr = param
            if info.dtype == "uint8" and t.quantized:
                expr = ctx.emit(qdq.uint8_to_int8(param))
            values[index] = Value(info.dtype, info.shape, expr, qparams=_qparams(t))

    def convert() -> tuple[list, list[TensorInfo]]:
        _convert_operators(ctx, m, values, float_ops)
        return _outputs(ctx, m, values)

    return import_function(SOURCE, bb, inputs, bind_inputs, convert)


def _stored(t) -> Value:
    """A constant, or a variable tensor (a stateful operator's state) as every run starts it:
    the interpreter fills an int8 variable with its zero point and others with 0, real 0
    (the module is one run from that state). int16 ones (SVDF time weights, an LSTM's cell
    state) have no QParams: converters reading them take the parameters from ``tensor``."""
    data = t.data
    if data is None:
        fill = int(t.zero_point[0]) if t.quantized and t.dtype == "int8" else 0
        data = np.full(t.shape, fill, np.dtype(t.dtype))
    qparams = None if t.dtype == "int16" else _qparams(t)
    return Value(t.dtype, t.shape, const=data, qparams=qparams, tensor=t)


def _qparams(t):
    try:
        return tensor_qparams(t)
    except Unsupported as exc:
        raise _error([(t.name, "tensor", str(exc))]) from None


def _convert_operators(ctx: ImportContext, m: Model, values: dict[int, Value],
                       float_ops: FloatOperators) -> None:
    for op in m.operators:
        ctx.op = op

        def convert(op=op) -> list[Value]:
            inputs = []
            for index in op.inputs:
                if index >= 0 and index not in values:
                    raise InvalidModelError(f"input tensor {m.tensors[index].name!r} is not "
                                            "produced before this operator")
                inputs.append(values[index] if index >= 0 else None)
            return _convert(ctx, op, inputs, [m.tensors[i] for i in op.outputs], float_ops)

        outs = convert_node(SOURCE, op.label, op.kind, f"operator {op.label} ({op.kind})",
                            convert)
        for index, value in zip(op.outputs, outs):
            values[index] = value
    ctx.op = None


def _convert(ctx: ImportContext, op, inputs: list, outputs: list,
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


def _outputs(ctx: ImportContext, m: Model, values: dict[int, Value]):
    exprs, infos = [], []
    for index in m.outputs:
        t = m.tensors[index]
        if index not in values:
            raise InvalidModelError(f"graph output {t.name!r} is not produced by any operator")
        value = ctx.as_nhwc(values[index])
        expr = ctx.expr(value)
        if value.dtype == "uint8" and value.quantized:
            expr = ctx.emit(qdq.int8_to_uint8(expr))
        lsb = 1.0 if value.quantized or value.dtype != "float32" else value.dequantized_step
        infos.append(TensorInfo(t.name, _tvm.dtype_of(expr), _tvm.shape_of(expr), lsb))
        exprs.append(expr)
    return exprs, infos
