"""Read a TFLite flatbuffer (with the ``tflite`` schema package) into plain Python objects."""

from __future__ import annotations

import functools
import inspect
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import tflite
from flatbuffers import flexbuffers

from canonqnn.errors import CanonqnnError, InvalidModelError, UnsupportedError

from . import validate
from ._schema import BUILTIN_NAMES, DTYPES, OPTIONS


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None             # constant tensors only (in the model's NHWC layout)
    scale: np.ndarray | None            # None: not quantized
    zero_point: np.ndarray | None
    quantized_dimension: int = 0
    is_variable: bool = False           # a stateful operator's state (no data in the file)

    @property
    def quantized(self) -> bool:
        return self.scale is not None


@dataclass
class Operator:
    index: int
    kind: str                           # builtin name, e.g. "CONV_2D"
    inputs: list[int]                   # -1 for an omitted optional input
    outputs: list[int]
    options: Any                        # the schema's options object, or None
    # Tensors holding only quantization parameters of the operator's internal values (the
    # int8 LSTM's gate and hidden scales)
    intermediates: tuple[Tensor, ...] = ()
    # A custom operator's FlexBuffer options, decoded (the custom operators canonqnn reads:
    # ``CUSTOM_OPTIONS_READ``); None when the operator has none
    custom_options: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"#{self.index}"


@dataclass
class Model:
    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]
    schema: Any = None                  # the ``tflite.Model`` read (TVM's converters read it)


DETECTION_POSTPROCESS = "CUSTOM:TFLite_Detection_PostProcess"
# Custom operators whose options the reader decodes (the others are refused by kind)
CUSTOM_OPTIONS_READ = frozenset({DETECTION_POSTPROCESS})


def detection_outputs(model: Model) -> dict[str, str]:
    """The boxes, classes and scores outputs of each ``TFLite_Detection_PostProcess``, mapped to
    the name of its detection count: entries past the count are left undefined by TFLite's
    kernel (whatever the buffer held), so they have no value to compare."""
    found = {}
    for op in model.operators:
        if op.kind == DETECTION_POSTPROCESS and len(op.outputs) == 4:
            count = model.tensors[op.outputs[3]].name
            found.update({model.tensors[i].name: count for i in op.outputs[:3]})
    return found


def read_bytes(model: str | os.PathLike | bytes) -> tuple[bytes, str]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "model bytes"
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise InvalidModelError(f"{path}: no such file")
    with open(path, "rb") as f:
        return f.read(), path


def is_tflite(data: bytes) -> bool:
    return len(data) >= 8 and data[4:8] == validate.FILE_IDENTIFIER


# What the flatbuffers library raises reading a damaged file: offsets past its end
# (struct.error, IndexError), vectors numpy cannot view (ValueError), offsets that wrap
# below 0 (TypeError from its number checks), absurd sizes.
_DAMAGED = (struct.error, IndexError, ValueError, TypeError, OverflowError, MemoryError)


def read_model(model: str | os.PathLike | bytes) -> Model:
    """The model, validated (``validate``). Every field canonqnn's converters read later is
    read here, so that a damaged flatbuffer fails here, as an InvalidModelError (TVM's
    converters, for float operators, report what they cannot read as UnsupportedError)."""
    data, where = read_bytes(model)
    validate.check_header(data, where)
    try:
        return _read(tflite.Model.GetRootAsModel(data, 0), len(data))
    except CanonqnnError:
        raise
    except _DAMAGED as exc:
        raise validate.damaged_flatbuffer(where, exc) from None


def _read(m: Any, file_size: int) -> Model:
    validate.check_model(m, file_size)
    g = m.Subgraphs(0)
    buffers = m.BuffersLength()
    tensors = [_tensor(m, g.Tensors(i), i, buffers, file_size) for i in range(g.TensorsLength())]
    operators = [_operator(m, g.Operators(i), i, tensors) for i in range(g.OperatorsLength())]
    inputs, outputs = _ints(g.InputsAsNumpy()), _ints(g.OutputsAsNumpy())
    validate.check_graph_io(inputs, outputs, len(tensors))
    return Model(tensors, operators, inputs, outputs, m)


def _operator(m: Any, op: Any, index: int, tensors: list[Tensor]) -> Operator:
    validate.check_opcode(index, op.OpcodeIndex(), m.OperatorCodesLength())
    code = m.OperatorCodes(op.OpcodeIndex())
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    kind = BUILTIN_NAMES.get(builtin)
    validate.check_code(index, code, kind, builtin)
    if kind == "CUSTOM":
        kind = f"CUSTOM:{code.CustomCode().decode(errors='replace')}"
    inputs, outputs = _ints(op.InputsAsNumpy()), _ints(op.OutputsAsNumpy())
    intermediates = _ints(op.IntermediatesAsNumpy())
    validate.check_operator_tensors(index, kind, inputs, outputs, intermediates, len(tensors))
    operator = Operator(index, kind, inputs, outputs, _options(op, kind, index),
                        tuple(tensors[k] for k in intermediates),
                        _custom_options(op, kind, index) if kind in CUSTOM_OPTIONS_READ
                        else None)
    validate.check_requantization(operator, tensors)
    validate.check_filter_zero_points(operator, tensors)
    return operator


def _ints(values: Any) -> list[int]:
    return [] if isinstance(values, int) else [int(v) for v in values]


def _tensor(m: Any, t: Any, index: int, buffers: int, file_size: int) -> Tensor:
    name = (t.Name() or b"").decode(errors="replace") or f"tensor{index}"
    label = validate.tensor_label(name, index)
    code, is_variable = t.Type(), bool(t.IsVariable())
    validate.check_type(label, code)
    dtype = DTYPES.get(code, validate.TENSOR_TYPES[code].lower())
    shape = tuple(_ints(t.ShapeAsNumpy()))
    signature = None if t.ShapeSignatureIsNone() else tuple(_ints(t.ShapeSignatureAsNumpy()))
    validate.check_shape(label, shape, signature)
    buffer = m.Buffers(t.Buffer()) if t.Buffer() < buffers else None
    validate.check_buffer(label, t, buffer, buffers, dtype, shape, file_size)
    data = None
    if buffer.DataLength() > 0:
        if dtype not in ("float32", "int32", "uint8", "int8", "int64", "int16", "bool"):
            raise UnsupportedError([(label, "tensor", f"constant of type {dtype}")],
                                   source="TFLite")
        data = np.frombuffer(buffer.DataAsNumpy(), np.dtype(dtype)).reshape(shape).copy()
    elif is_variable and dtype not in DTYPES.values():
        raise UnsupportedError([(label, "tensor", f"variable of type {dtype}")], source="TFLite")
    scale = zero_point = None
    qdim = 0
    q = t.Quantization()
    if q is not None and q.ScaleLength() > 0:
        scale = np.asarray(q.ScaleAsNumpy(), np.float32).reshape(-1)
        zero_point = None if q.ZeroPointIsNone() else \
            np.asarray(q.ZeroPointAsNumpy(), np.int64).reshape(-1)
        qdim = int(q.QuantizedDimension())
        validate.check_quantization(label, dtype, shape, scale, zero_point, qdim)
    return Tensor(index, name, shape, dtype, data, scale, zero_point, qdim, is_variable)


def _options(op: Any, kind: str, index: int) -> Any:
    """The options table of ``kind``, every field read once now (converters read them later,
    after the reader's boundary)."""
    table = op.BuiltinOptions()
    validate.check_options_type(index, kind, op.BuiltinOptionsType(), table is not None)
    table_name = OPTIONS.get(kind)
    options = None
    if table_name is not None and table is not None:
        options = getattr(tflite, table_name)()
        options.Init(table.Bytes, table.Pos)
        for field in _fields(type(options)):
            getattr(options, field)()
    validate.check_option_values(index, kind, options)
    return options


def _custom_options(op: Any, kind: str, index: int) -> dict[str, Any] | None:
    """The FlexBuffer map of a custom operator's options, as Python values (the kernel reads
    it by key: the order its writer stored the keys in does not matter)."""
    blob = op.CustomOptionsAsNumpy()
    if isinstance(blob, int) or len(blob) == 0:
        return None
    label = validate.operator_label(index, kind)
    if op.CustomOptionsFormat() != tflite.CustomOptionsFormat.FLEXBUFFERS:
        raise InvalidModelError(f"{label}: custom options in format "
                                f"{op.CustomOptionsFormat()}, not FlexBuffers")
    try:
        options = flexbuffers.Loads(blob.tobytes())
    except _DAMAGED + (KeyError, RecursionError):
        # (the flexbuffers library's own messages name its internals, not the model)
        raise InvalidModelError(f"{label}: its custom options are damaged: an offset, width "
                                "or type in them is not a readable FlexBuffer map") from None
    if not isinstance(options, dict):
        raise InvalidModelError(f"{label}: its custom options are a FlexBuffer "
                                f"{type(options).__name__}, not the map its kernel reads")
    return options


@functools.cache
def _fields(table: type) -> tuple[str, ...]:
    """The generated accessors of an options table that take no argument (scalars, and the
    numpy view and length of each vector)."""
    return tuple(name for name, fn in vars(table).items()
                 if name[0].isupper() and callable(fn)
                 and not name.startswith(("GetRootAs", "Init"))
                 and not name.endswith("BufferHasIdentifier")
                 and list(inspect.signature(fn).parameters) == ["self"])
