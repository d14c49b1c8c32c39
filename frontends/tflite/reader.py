"""Read a TFLite flatbuffer (with the ``tflite`` schema package) into plain Python objects."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import tflite

from canonqnn.errors import InvalidModelError, UnsupportedError

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
    return len(data) >= 8 and data[4:8] == b"TFL3"


def read_model(model: str | os.PathLike | bytes) -> Model:
    data, where = read_bytes(model)
    if not is_tflite(data):
        raise InvalidModelError(f"{where}: not a TFLite model (no TFL3 identifier)")
    try:
        return _read(tflite.Model.GetRootAsModel(data, 0), where)
    except (InvalidModelError, UnsupportedError):
        raise
    except Exception as exc:  # noqa: BLE001  (a corrupt flatbuffer raises anything)
        raise InvalidModelError(f"{where}: cannot read the TFLite model ({type(exc).__name__}: "
                                f"{exc})") from None


def _read(m: Any, where: str) -> Model:
    if m.SubgraphsLength() != 1:
        raise UnsupportedError([("(model)", "subgraphs", f"{m.SubgraphsLength()} subgraphs; "
                                 "canonqnn imports single-subgraph models (no control flow)")],
                               source="TFLite")
    g = m.Subgraphs(0)
    tensors = [_tensor(m, g.Tensors(i), i) for i in range(g.TensorsLength())]
    operators = []
    for i in range(g.OperatorsLength()):
        op = g.Operators(i)
        code = m.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        kind = BUILTIN_NAMES.get(builtin, f"builtin {builtin}")
        if kind == "CUSTOM":
            kind = f"CUSTOM:{(code.CustomCode() or b'').decode(errors='replace')}"
        intermediates = tuple(tensors[k] for k in _ints(op.IntermediatesAsNumpy()))
        operators.append(Operator(i, kind, _ints(op.InputsAsNumpy()),
                                  _ints(op.OutputsAsNumpy()), _options(op, kind),
                                  intermediates))
    return Model(tensors, operators, _ints(g.InputsAsNumpy()), _ints(g.OutputsAsNumpy()), m)


def _ints(values: Any) -> list[int]:
    return [] if isinstance(values, int) else [int(v) for v in values]


def _tensor(m: Any, t: Any, index: int) -> Tensor:
    name = (t.Name() or b"").decode(errors="replace") or f"tensor{index}"
    dtype = DTYPES.get(t.Type(), f"type {t.Type()}")
    shape = tuple(_ints(t.ShapeAsNumpy()))
    data = None
    buffer = m.Buffers(t.Buffer()) if t.Buffer() < m.BuffersLength() else None
    if buffer is not None and buffer.DataLength() > 0:
        if dtype not in ("float32", "int32", "uint8", "int8", "int64", "int16", "bool"):
            raise InvalidModelError(f"tensor {name!r}: constant of type {dtype}")
        raw = buffer.DataAsNumpy().tobytes()
        data = np.frombuffer(raw, np.dtype(dtype)).reshape(shape).copy()
    elif buffer is not None and buffer.Offset() > 1:
        raise UnsupportedError([(name, "tensor", "constant stored outside the flatbuffer "
                                 "(models over 2 GB)")], source="TFLite")
    scale = zero_point = None
    qdim = 0
    q = t.Quantization()
    if q is not None and q.ScaleLength() > 0:
        scale = np.asarray(q.ScaleAsNumpy(), np.float32).reshape(-1)
        zero_point = (np.asarray(q.ZeroPointAsNumpy(), np.int64).reshape(-1)
                      if q.ZeroPointLength() else np.zeros(scale.size, np.int64))
        qdim = int(q.QuantizedDimension())
    return Tensor(index, name, shape, dtype, data, scale, zero_point, qdim, bool(t.IsVariable()))


def _options(op: Any, kind: str) -> Any:
    table_name = OPTIONS.get(kind)
    table = op.BuiltinOptions()
    if table_name is None or table is None:
        return None
    options = getattr(tflite, table_name)()
    options.Init(table.Bytes, table.Pos)
    return options
