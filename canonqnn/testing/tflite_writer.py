"""Write TFLite flatbuffers from Python: quantized test and example models without TensorFlow.

    g = GraphWriter()
    x = g.tensor("x", (1, 8, 8, 3), "int8", scale=0.02, zero_point=-3)
    w = g.tensor("w", (4, 3, 3, 3), "int8", data=weights, scale=w_scales, quantized_dimension=0)
    ...
    g.op("CONV_2D", [x, w, b], [y], padding="SAME", strideH=1, strideW=1)
    data = g.finish(inputs=[x], outputs=[y])

Stateful operators' state tensors are ``g.tensor(..., is_variable=True)`` (no data: the
interpreter refuses variables with a buffer); operator intermediates (the int8 LSTM's internal
quantization) are ``g.op(..., intermediates=[...])``. Custom operators are
``g.custom_op("TFLite_Detection_PostProcess", inputs, outputs, {"max_detections": 10, ...})``:
the options are written as the FlexBuffer map their kernel reads (``custom_options``).

Option keyword names are the schema's field names (``strideH``, ``fusedActivationFunction``);
enum values may be given by name (``padding="SAME"``, ``fusedActivationFunction="RELU6"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
import tflite
from flatbuffers import flexbuffers

from ..frontends.tflite._schema import OPTIONS, TENSOR_TYPES

_ENUMS = {"padding": tflite.Padding, "fusedActivationFunction": tflite.ActivationFunctionType}
CUSTOM = "CUSTOM:"  # operator kinds of custom operators, as the reader names them


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    scale: np.ndarray | None
    zero_point: np.ndarray | None
    quantized_dimension: int
    is_variable: bool = False
    shape_signature: tuple[int, ...] | None = None


class GraphWriter:
    """One subgraph; tensors are referred to by the index ``tensor`` returns."""

    def __init__(self) -> None:
        self.tensors: list[_Tensor] = []
        self.buffers: list[bytes] = [b""]  # buffer 0 is the empty sentinel
        # (kind, inputs, outputs, builtin options, or a custom operator's FlexBuffer bytes)
        self.operators: list[tuple[str, list[int], list[int], dict[str, Any] | bytes]] = []
        self.intermediates: dict[int, list[int]] = {}  # operator position -> tensor indices

    def tensor(self, name: str, shape, dtype: str, data: np.ndarray | None = None,
               scale=None, zero_point=None, quantized_dimension: int = 0,
               is_variable: bool = False, shape_signature=None) -> int:
        """``shape_signature``: the shape with -1 for each dynamic dimension, as TensorFlow's
        converter writes it beside ``shape`` (where each -1 is written 1)."""
        if is_variable and data is not None:
            raise ValueError(f"GraphWriter: variable tensor {name!r} cannot hold data")
        buffer = 0
        if data is not None:
            array = np.ascontiguousarray(np.asarray(data, dtype).reshape(shape))
            self.buffers.append(array.tobytes())
            buffer = len(self.buffers) - 1
        quant = scale is not None
        if quant and zero_point is None:
            zero_point = 0
        self.tensors.append(_Tensor(
            name, tuple(int(d) for d in shape), dtype, buffer,
            np.atleast_1d(np.asarray(scale, np.float32)) if quant else None,
            np.broadcast_to(np.atleast_1d(np.asarray(zero_point, np.int64)),
                            np.atleast_1d(np.asarray(scale)).shape) if quant else None,
            quantized_dimension, is_variable,
            None if shape_signature is None else tuple(int(d) for d in shape_signature)))
        return len(self.tensors) - 1

    def op(self, kind: str, inputs: list[int], outputs: list[int],
           intermediates: list[int] | None = None, **options: Any) -> None:
        if not hasattr(tflite.BuiltinOperator, kind) or kind == "CUSTOM":
            raise ValueError(f"GraphWriter: {kind} is not a TFLite builtin operator "
                             "(custom operators: custom_op)")
        if options and not OPTIONS.get(kind):
            raise ValueError(f"GraphWriter: no options table known for {kind}")
        if intermediates:
            self.intermediates[len(self.operators)] = list(intermediates)
        self.operators.append((kind, list(inputs), list(outputs), options))

    def custom_op(self, name: str, inputs: list[int], outputs: list[int],
                  options: dict[str, Any] | bytes | None = None) -> None:
        """Kernels read their options by key, with no schema: ints, floats, bools and strings
        are written with their Python types. ``None`` writes no ``custom_options`` (an empty
        dict, an empty map: TFLite_Detection_PostProcess's kernel crashes on none); bytes are
        written as given (``converter_flexbuffer``)."""
        blob = options if isinstance(options, bytes) else \
            b"" if options is None else bytes(flexbuffers.Dumps(options))
        self.operators.append((CUSTOM + name, list(inputs), list(outputs), blob))

    def finish(self, inputs: list[int], outputs: list[int], description: str = "canonqnn") \
            -> bytes:
        b = flatbuffers.Builder(1024)
        codes = list(dict.fromkeys(kind for kind, *_ in self.operators))
        tensors = [self._write_tensor(b, t) for t in self.tensors]
        operators = [self._write_operator(b, codes.index(kind), kind, ins, outs, opts,
                                          self.intermediates.get(position))
                     for position, (kind, ins, outs, opts) in enumerate(self.operators)]
        name = b.CreateString("main")
        sub_tensors = _table_vector(b, tflite.SubGraphStartTensorsVector, tensors)
        sub_ops = _table_vector(b, tflite.SubGraphStartOperatorsVector, operators)
        sub_in = b.CreateNumpyVector(np.asarray(inputs, np.int32))
        sub_out = b.CreateNumpyVector(np.asarray(outputs, np.int32))
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, sub_tensors)
        tflite.SubGraphAddInputs(b, sub_in)
        tflite.SubGraphAddOutputs(b, sub_out)
        tflite.SubGraphAddOperators(b, sub_ops)
        tflite.SubGraphAddName(b, name)
        subgraph = tflite.SubGraphEnd(b)

        opcodes = []
        for kind in codes:
            custom = kind.startswith(CUSTOM)
            code = getattr(tflite.BuiltinOperator, "CUSTOM" if custom else kind)
            # strings before the table: flatbuffers builds no object inside another
            custom_code = b.CreateString(kind[len(CUSTOM):]) if custom else None
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            if custom_code is not None:
                tflite.OperatorCodeAddCustomCode(b, custom_code)
            tflite.OperatorCodeAddVersion(b, 1)
            opcodes.append(tflite.OperatorCodeEnd(b))
        buffers = []
        for data in self.buffers:
            vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))
        desc = b.CreateString(description)
        codes_vec = _table_vector(b, tflite.ModelStartOperatorCodesVector, opcodes)
        subs_vec = _table_vector(b, tflite.ModelStartSubgraphsVector, [subgraph])
        bufs_vec = _table_vector(b, tflite.ModelStartBuffersVector, buffers)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_vec)
        tflite.ModelAddSubgraphs(b, subs_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, bufs_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    def _write_tensor(self, b: flatbuffers.Builder, t: _Tensor) -> int:
        quant = None
        if t.scale is not None:
            scale = b.CreateNumpyVector(t.scale.astype(np.float32))
            zp = b.CreateNumpyVector(np.asarray(t.zero_point, np.int64))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, scale)
            tflite.QuantizationParametersAddZeroPoint(b, zp)
            tflite.QuantizationParametersAddQuantizedDimension(b, t.quantized_dimension)
            quant = tflite.QuantizationParametersEnd(b)
        name = b.CreateString(t.name)
        shape = b.CreateNumpyVector(np.asarray(t.shape, np.int32))
        signature = None if t.shape_signature is None else \
            b.CreateNumpyVector(np.asarray(t.shape_signature, np.int32))
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        if signature is not None:
            tflite.TensorAddShapeSignature(b, signature)
        tflite.TensorAddType(b, TENSOR_TYPES[t.dtype])
        tflite.TensorAddBuffer(b, t.buffer)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if t.is_variable:
            tflite.TensorAddIsVariable(b, True)
        return tflite.TensorEnd(b)

    def _write_operator(self, b: flatbuffers.Builder, opcode: int, kind: str, inputs, outputs,
                        options: dict[str, Any] | bytes,
                        intermediates: list[int] | None = None) -> int:
        custom = kind.startswith(CUSTOM)
        table = None if custom else OPTIONS.get(kind)
        # op() gives an options table's fields as a dict, custom_op() its payload as bytes
        opts = _write_options(b, table, options) if table and isinstance(options, dict) else None
        blob = b.CreateNumpyVector(np.frombuffer(options, np.uint8)) \
            if custom and isinstance(options, bytes) and options else None
        ins = b.CreateNumpyVector(np.asarray(inputs, np.int32))
        outs = b.CreateNumpyVector(np.asarray(outputs, np.int32))
        inter = b.CreateNumpyVector(np.asarray(intermediates, np.int32)) if intermediates \
            else None
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, opcode)
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if inter is not None:
            tflite.OperatorAddIntermediates(b, inter)
        if opts is not None and table:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, table))
            tflite.OperatorAddBuiltinOptions(b, opts)
        if blob is not None:
            tflite.OperatorAddCustomOptions(b, blob)
            tflite.OperatorAddCustomOptionsFormat(b, tflite.CustomOptionsFormat.FLEXBUFFERS)
        return tflite.OperatorEnd(b)


def converter_flexbuffer(attrs: dict[str, Any]) -> bytes:
    """Custom options as the TF1 converter (TOCO) writes a TensorFlow node's attributes (the
    object detection API's ``TFLite_Detection_PostProcess``): one FlexBuffer map, the key
    strings stored in ``attrs``' order (the NodeDef's), ints at their smallest width, floats
    as float32 (a TensorFlow float attribute), bools as bools."""
    fbb = flexbuffers.Builder()
    with fbb.Map():
        for key, value in attrs.items():
            if isinstance(value, bool):
                fbb.Bool(key, value)
            elif isinstance(value, int):
                fbb.Int(key, value)
            elif isinstance(value, float):
                fbb.Float(key, value, byte_width=4)
            else:
                raise ValueError(f"converter_flexbuffer: {key!r} is {type(value).__name__}; "
                                 "the converter writes ints, floats and bools as scalars")
    return bytes(fbb.Finish())


def _write_options(b: flatbuffers.Builder, table: str, options: dict[str, Any]) -> int:
    vectors = {k: b.CreateNumpyVector(np.asarray(v, np.int32))
               for k, v in options.items() if isinstance(v, (list, tuple))}
    getattr(tflite, table + "Start")(b)
    for key, value in options.items():
        adder = getattr(tflite, f"{table}Add{key[0].upper()}{key[1:]}", None)
        if adder is None:
            raise ValueError(f"{table} has no field {key!r}")
        if key in vectors:
            value = vectors[key]
        elif isinstance(value, str):
            value = getattr(_ENUMS[key], value)
        adder(b, value)
    return getattr(tflite, table + "End")(b)


def _table_vector(b: flatbuffers.Builder, start, offsets: list[int]) -> int:
    start(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()

