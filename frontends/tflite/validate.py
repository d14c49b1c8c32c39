"""What a TFLite flatbuffer must satisfy before anything uses it (``reader`` calls these).

Structure is refused with ``InvalidModelError``, quantization parameters with
``InvalidQuantizationError``; messages name the tensor (name and index) or the operator (index
and builtin name). The rules are the TFLite interpreter's own (its ``InterpreterBuilder`` and
kernels refuse the same models) unless a comment says why canonqnn is stricter.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import tflite

from canonqnn.errors import InvalidModelError, InvalidQuantizationError, UnsupportedError
from canonqnn.qparams import (
    MAX_LEFT_SHIFT,
    QParams,
    check_multiplier,
    check_scale,
    quantize_multiplier,
    saturating_multiplier,
    tflite_add_multipliers,
    tflite_mul_multiplier,
)

from ._schema import OPTIONS

FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3
# TFLite's kernels count a tensor's elements in an int (RuntimeShape::FlatSize): a tensor of
# more elements cannot be run by them, whatever memory there is.
MAX_ELEMENTS = 2**31 - 1
OMITTED = -1  # an omitted optional operator input

TENSOR_TYPES = {code: name for name, code in vars(tflite.TensorType).items()
                if not name.startswith("_") and isinstance(code, int)}
OPTIONS_TABLES = {code: name for name, code in vars(tflite.BuiltinOptions).items()
                  if not name.startswith("_") and isinstance(code, int)}
# Zero points are range-checked for these (QParams's types); int64 (16x8 biases) holds any.
_ZERO_POINT_TYPES = ("int8", "uint8", "int16", "int32")
_QUANTIZED_TYPES = _ZERO_POINT_TYPES + ("int64",)

# The highest version of each operator canonqnn converts that the TFLite runtime it checks
# parity against (ai-edge-litert 2.3.0, BuiltinOpResolver) registers; versions start at 1.
# A newer version can mean semantics canonqnn does not know.
MAX_VERSIONS = {
    "ADD": 6, "ARG_MAX": 3, "AVERAGE_POOL_2D": 3, "BATCH_MATMUL": 4, "CAST": 9,
    "CONCATENATION": 7, "CONV_2D": 8, "DEPTHWISE_CONV_2D": 7, "DEQUANTIZE": 9,
    "ELU": 1, "EXPAND_DIMS": 1, "FILL": 5, "FLOOR_DIV": 3, "FULLY_CONNECTED": 14, "GATHER": 8,
    "GATHER_ND": 6, "GELU": 3, "HARD_SWISH": 1, "LEAKY_RELU": 2, "LOGISTIC": 3, "MAXIMUM": 4,
    "MAX_POOL_2D": 3, "MEAN": 3, "MINIMUM": 4, "MUL": 8, "PACK": 5, "PAD": 6, "PADV2": 6,
    "QUANTIZE": 6, "RANGE": 2, "REDUCE_MAX": 3, "REDUCE_MIN": 3, "REDUCE_PROD": 2, "RELU": 3,
    "RELU6": 3, "RELU_N1_TO_1": 1, "RESHAPE": 1, "RESIZE_BILINEAR": 4,
    "RESIZE_NEAREST_NEIGHBOR": 4, "RSQRT": 3, "SHAPE": 1, "SOFTMAX": 4, "SPLIT": 5,
    "SQUARED_DIFFERENCE": 2, "SQUEEZE": 2, "STRIDED_SLICE": 8, "SUB": 5, "SUM": 2, "SVDF": 4,
    "TANH": 3, "TILE": 3, "TRANSPOSE": 9, "TRANSPOSE_CONV": 5,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 4, "UNPACK": 6,
}
# Any other builtin: the highest version the runtime registers for any operator.
MAX_ANY_VERSION = 14

# Input positions TFLite's kernels accept omitted (-1); elsewhere in the operators canonqnn
# converts, the interpreter refuses the model ("Tensor at index N was optional but was
# expected"; for RESHAPE's shape it crashes). Other operators' are left to their converters.
OPTIONAL_INPUTS = {
    "FULLY_CONNECTED": {2}, "TRANSPOSE_CONV": {3}, "SVDF": {3}, "PADV2": {2},
    # CIFG input gate, peepholes, input gate bias, projection, layer norm coefficients
    "UNIDIRECTIONAL_SEQUENCE_LSTM": {1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23},
}


def _shape(shape) -> str:
    """A shape for a message (a damaged one can have thousands of dimensions)."""
    dims = [str(d) for d in shape]
    return f"[{', '.join(dims[:8])}{', ...' if len(dims) > 8 else ''}]"


def tensor_label(name: str, index: int) -> str:
    return f"tensor {name!r} (#{index})"


def operator_label(index: int, kind: str) -> str:
    return f"operator #{index} ({kind})"


# ---------------------------------------------------------------- the file and the model table
def check_header(data: bytes, where: str) -> None:
    """The file identifier, and a root table (and its vtable) inside the file: what the
    flatbuffers library dereferences first, unchecked."""
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise InvalidModelError(f"{where}: not a TFLite model (no TFL3 identifier)")
    root = int.from_bytes(data[:4], "little")
    if root % 4 or not 8 <= root <= len(data) - 4:
        raise InvalidModelError(f"{where}: root table offset {root} is outside the "
                                f"{len(data)}-byte file")
    vtable = root - int.from_bytes(data[root:root + 4], "little", signed=True)
    size = int.from_bytes(data[vtable:vtable + 2], "little") if vtable >= 0 else 0
    if vtable % 2 or not 0 <= vtable <= len(data) - 4 or size < 4 or vtable + size > len(data):
        raise InvalidModelError(f"{where}: the root table's vtable (at {vtable}) is outside "
                                f"the {len(data)}-byte file")


# What each error of the flatbuffers library (or of numpy viewing a vector) means in a file.
_DAMAGE = {"error": "an offset or a length leads past the end of the file",
           "IndexError": "an offset or a length leads past the end of the file",
           "TypeError": "an offset leads before the start of the file",
           "ValueError": "a vector is longer than the bytes left in the file",
           "OverflowError": "a length or an offset is too large to be one",
           "MemoryError": "a length is too large to be one"}


def damaged_flatbuffer(where: str, exc: Exception) -> InvalidModelError:
    """The refusal of a file the flatbuffers library trips over, in canonqnn's words (its own
    messages, "bad number -15944 for type uint32", say nothing of the file)."""
    reason = _DAMAGE.get(type(exc).__name__, "a field cannot be read")
    return InvalidModelError(f"{where}: cannot read the TFLite model, the flatbuffer is "
                             f"damaged: {reason}")


def check_model(m: Any, file_size: int) -> None:
    if m.Version() != SCHEMA_VERSION:
        raise InvalidModelError(f"schema version {m.Version()}: TFLite models are schema "
                                f"version {SCHEMA_VERSION}")
    count = m.SubgraphsLength()
    if count == 0:
        raise InvalidModelError("the model has no subgraph")
    if count != 1:
        raise UnsupportedError([("(model)", "subgraphs", f"{count} subgraphs; canonqnn imports "
                                 "single-subgraph models (no control flow)")], source="TFLite")
    g = m.Subgraphs(0)
    for what, length in (("operator codes", m.OperatorCodesLength()),
                         ("buffers", m.BuffersLength()), ("tensors", g.TensorsLength()),
                         ("operators", g.OperatorsLength())):
        if 4 * length > file_size:  # a vector of tables holds a 4-byte offset per entry
            raise InvalidModelError(f"{length} {what} cannot fit in the {file_size}-byte file")


def check_graph_io(inputs: list[int], outputs: list[int], tensor_count: int) -> None:
    if not outputs:
        # (the interpreter runs such a model and computes nothing: no output to write or compare)
        raise InvalidModelError("subgraph 0 has no outputs: the model computes nothing")
    for what, indices in (("input", inputs), ("output", outputs)):
        for k, index in enumerate(indices):
            if not 0 <= index < tensor_count:
                raise InvalidModelError(f"graph {what} {k} is tensor index {index}, out of range "
                                        f"({tensor_count} tensors)")


# ---------------------------------------------------------------- tensors
def check_shape(label: str, shape: tuple[int, ...], signature: tuple[int, ...] | None) -> None:
    if any(d < 0 for d in shape):
        raise InvalidModelError(f"{label}: shape {_shape(shape)} has a negative dimension (-1 "
                                "marks a dynamic one in shape_signature only)")
    if signature is not None and (len(signature) != len(shape) or any(d < -1 for d in signature)):
        raise InvalidModelError(f"{label}: shape_signature {_shape(signature)} does not describe "
                                f"shape {_shape(shape)}")
    elements = math.prod(shape)
    if elements > MAX_ELEMENTS:
        raise InvalidModelError(f"{label}: shape {_shape(shape)} has {elements} elements; TFLite "
                                f"counts a tensor's elements in an int32 (at most {MAX_ELEMENTS})")


def check_type(label: str, code: int) -> None:
    if code not in TENSOR_TYPES:
        raise InvalidModelError(f"{label}: type code {code} is not a TFLite tensor type")


_ITEM_SIZES = {name: np.dtype(name).itemsize for name in
               ("float32", "float16", "int32", "uint8", "int64", "int16", "int8", "bool")}


def check_buffer(label: str, t: Any, buffer: Any | None, buffer_count: int, dtype: str,
                 shape: tuple[int, ...], file_size: int) -> None:
    """The tensor's buffer exists, and its data (when it has some) fits its shape and dtype."""
    if buffer is None:
        raise InvalidModelError(f"{label}: buffer index {t.Buffer()} out of range "
                                f"({buffer_count} buffers)")
    size = buffer.DataLength()
    if size and t.IsVariable():
        raise InvalidModelError(f"{label}: a variable tensor with constant data (the "
                                "interpreter refuses it)")
    if size and t.Sparsity() is not None:
        raise UnsupportedError([(label, "tensor", "sparse constant")], source="TFLite")
    if size and dtype in _ITEM_SIZES and size != math.prod(shape) * _ITEM_SIZES[dtype]:
        raise InvalidModelError(f"{label}: constant data of {size} bytes; shape {_shape(shape)} of "
                                f"{dtype} needs {math.prod(shape) * _ITEM_SIZES[dtype]}")
    if not size and buffer.Offset() > 1:  # data after the flatbuffer (models over 2 GB)
        if buffer.Offset() + buffer.Size() > file_size:
            raise InvalidModelError(f"{label}: constant stored at bytes {buffer.Offset()}.."
                                    f"{buffer.Offset() + buffer.Size()}, outside the "
                                    f"{file_size}-byte file")
        raise UnsupportedError([(label, "tensor", "constant stored outside the flatbuffer "
                                 "(models over 2 GB)")], source="TFLite")


def check_quantization(label: str, dtype: str, shape: tuple[int, ...], scale: np.ndarray,
                       zero_point: np.ndarray | None, axis: int) -> None:
    """TFLite's rules for any tensor with scales (InterpreterBuilder::ParseQuantization), and
    for integer tensors, the values QParams accepts (finite positive scales, zero points in the
    type's range)."""
    if zero_point is None:
        raise InvalidQuantizationError(f"{label}: {scale.size} scales and no zero point")
    if zero_point.size != scale.size:
        raise InvalidQuantizationError(f"{label}: {scale.size} scales and {zero_point.size} zero "
                                       "points (one per scale required)")
    rank = len(shape)
    if axis < 0 or (rank and axis >= rank):
        raise InvalidQuantizationError(f"{label}: quantized_dimension {axis} out of range for "
                                       f"shape {_shape(shape)}")
    if scale.size != 1 and (not rank or scale.size != shape[axis]):
        raise InvalidQuantizationError(f"{label}: {scale.size} scales along dimension {axis} of "
                                       f"shape {_shape(shape)} (1, or one per element of it)")
    if dtype not in _QUANTIZED_TYPES:
        return  # the interpreter ignores the parameters of float and bool tensors
    check_scale(scale, f"{label}: scale")
    if dtype in _ZERO_POINT_TYPES:
        try:
            QParams.make(scale, zero_point, None if scale.size == 1 else axis, dtype)
        except InvalidQuantizationError as exc:
            raise InvalidQuantizationError(f"{label}: {exc}") from None


# ---------------------------------------------------------------- operators
def check_opcode(index: int, opcode_index: int, count: int) -> None:
    if not 0 <= opcode_index < count:
        raise InvalidModelError(f"operator #{index}: opcode index {opcode_index} out of range "
                                f"({count} operator codes)")


def check_code(index: int, code: Any, kind: str | None, builtin: int) -> None:
    """A builtin the schema defines, and a version the runtime defines for it."""
    if kind is None or kind == "PLACEHOLDER_FOR_GREATER_OP_CODES":
        raise InvalidModelError(f"operator #{index}: builtin code {builtin} is not a TFLite "
                                "operator (of the schema canonqnn reads)")
    if kind == "CUSTOM":
        if not code.CustomCode():
            raise InvalidModelError(f"operator #{index}: a CUSTOM operator without custom_code")
        return
    highest = MAX_VERSIONS.get(kind, MAX_ANY_VERSION)
    if not 1 <= code.Version() <= highest:
        known = (f"the TFLite runtime defines {kind} versions 1..{highest}" if kind in
                 MAX_VERSIONS else f"no TFLite operator has a version above {highest}")
        raise InvalidModelError(f"{operator_label(index, kind)}: version {code.Version()}; "
                                f"{known}")


def check_options_type(index: int, kind: str, options_type: int, has_table: bool) -> None:
    """The builtin options union holds the table of ``kind`` (for the operators canonqnn reads
    options of)."""
    expected = OPTIONS.get(kind)
    if expected is None or not (has_table or options_type):
        return
    if OPTIONS_TABLES.get(options_type) != expected:
        found = OPTIONS_TABLES.get(options_type, f"options type {options_type}")
        raise InvalidModelError(f"{operator_label(index, kind)}: builtin options are {found}; "
                                f"{kind} takes {expected}")


# Options fields meaningless below 1; strides and pool filter sizes default to 0 in the schema,
# so the tables holding them must be written.
_POSITIVE_FIELDS = ("StrideH", "StrideW", "DilationHFactor", "DilationWFactor", "FilterHeight",
                    "FilterWidth")
_REQUIRED_OPTIONS = ("Conv2DOptions", "DepthwiseConv2DOptions", "TransposeConvOptions",
                     "Pool2DOptions")


def check_option_values(index: int, kind: str, options: Any | None) -> None:
    label = operator_label(index, kind)
    if options is None:
        if OPTIONS.get(kind) in _REQUIRED_OPTIONS:
            raise InvalidModelError(f"{label}: no {OPTIONS[kind]} (its strides have no default)")
        return
    for field in _POSITIVE_FIELDS:
        read = getattr(options, field, None)
        if read is not None and read() < 1:
            name = re.sub(r"(?<!^)(?=[A-Z])", "_", field).lower()
            raise InvalidModelError(f"{label}: {name} {read()} (at least 1)")


# How many inputs the interpreter's kernels take (their Prepare checks, measured on the
# interpreter): CONV_2D needs its bias (conv.cc "has_bias"), DEPTHWISE_CONV_2D and
# FULLY_CONNECTED take one optionally, TRANSPOSE_CONV's is its fourth input.
INPUT_COUNTS = {"CONV_2D": (3, 3), "DEPTHWISE_CONV_2D": (2, 3), "FULLY_CONNECTED": (2, 3),
                "TRANSPOSE_CONV": (3, 4), "ADD": (2, 2), "SUB": (2, 2), "MUL": (2, 2)}


def check_operator_tensors(index: int, kind: str, inputs: list[int], outputs: list[int],
                           intermediates: list[int], tensor_count: int) -> None:
    label = operator_label(index, kind)
    low, high = INPUT_COUNTS.get(kind, (0, len(inputs)))
    if not low <= len(inputs) <= high:
        takes = f"{low}" if low == high else f"{low} or {high}"
        raise InvalidModelError(f"{label}: {len(inputs)} inputs; the TFLite interpreter's {kind} "
                                f"takes {takes}")
    for what, indices in (("input", inputs), ("output", outputs),
                          ("intermediate", intermediates)):
        for k, t in enumerate(indices):
            if what == "input" and t == OMITTED:
                _check_omitted(label, kind, k)
            elif not 0 <= t < tensor_count:
                raise InvalidModelError(f"{label}: {what} {k} is tensor index {t}, out of range "
                                        f"({tensor_count} tensors)")


def _check_omitted(label: str, kind: str, position: int) -> None:
    if kind in MAX_VERSIONS and position not in OPTIONAL_INPUTS.get(kind, ()):
        raise InvalidModelError(f"{label}: input {position} is omitted (-1), and is not an "
                                f"optional input of {kind}")


# Operators whose kernels requantize ``input scale * weight scale[c] / output scale``:
# (input position, weight position).
_ACCUMULATING = {"CONV_2D": (0, 1), "DEPTHWISE_CONV_2D": (0, 1), "FULLY_CONNECTED": (0, 1),
                 "TRANSPOSE_CONV": (2, 1), "BATCH_MATMUL": (0, 1)}
_EIGHT_BIT = ("int8", "uint8")


def check_requantization(op: Any, tensors: list[Any]) -> None:
    """The multipliers TFLite's kernels derive from the operator's scales (qparams) are ones
    its Q31 arithmetic can mean: refused here, naming the operator, rather than when a build
    computes them. canonqnn's products (and MUL) do not follow the undefined left shifts of
    multipliers from 2^31 on: TFLite's reference and optimized kernels disagree there. An
    accumulator's multiplier must also be below ``saturating_multiplier`` (above it, every
    output says only its accumulator's sign)."""
    ins = [tensors[i] if 0 <= i < len(tensors) else None for i in op.inputs]
    out = tensors[op.outputs[0]] if op.outputs else None
    if out is None or not out.quantized or out.dtype not in ("int8", "uint8", "int16"):
        return
    y = float(out.scale[0])
    try:
        if op.kind in _ACCUMULATING:
            x, w = (ins[k] if k < len(ins) else None for k in _ACCUMULATING[op.kind])
            if x is None or w is None or not (x.quantized and w.quantized):
                return
            reals = np.float64(x.scale[0]) * w.scale.astype(np.float64) / y
            largest = float(np.max(np.abs(reals)))
            if largest > saturating_multiplier(out.dtype):
                check_multiplier(largest, out.dtype)
            shift = _largest_shift(reals)
        elif op.kind in ("ADD", "SUB", "MUL") and len(ins) == 2 and all(
                t is not None and t.quantized and t.dtype in _EIGHT_BIT for t in ins):
            a, b = float(ins[0].scale[0]), float(ins[1].scale[0])
            if op.kind != "MUL":
                tflite_add_multipliers(a, b, y)
                return
            shift = tflite_mul_multiplier(a, b, y)[1]
        else:
            return
    except InvalidQuantizationError as exc:
        raise InvalidQuantizationError(f"{operator_label(op.index, op.kind)}: {exc}") from None
    if shift > MAX_LEFT_SHIFT:
        raise InvalidQuantizationError(
            f"{operator_label(op.index, op.kind)}: the scales make a requantization multiplier "
            f"of 2^{shift - 1} or more: TFLite would shift the int32 accumulator left by {shift} "
            "bits (undefined in C)")


# Ops whose int8 filters TFLite's quantization specification makes symmetric (zero point 0).
FILTER_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")


def check_filter_zero_points(op: Any, tensors: list[Any]) -> None:
    """int8 filters of the conv family and FULLY_CONNECTED on int8 or int16 activations have
    zero point 0 (TFLite's quantization specification). CONV_2D's kernels refuse any other
    (conv.cc, every resolver); DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV accept
    one and ignore it, so the interpreter computes otherwise than the model's parameters say:
    refused too, rather than built to a result no runtime gives."""
    if op.kind not in FILTER_OPS or len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
        return
    x, w = tensors[op.inputs[0]], tensors[op.inputs[1]]
    if op.kind == "TRANSPOSE_CONV":  # its inputs: output shape, filter, activations
        if len(op.inputs) < 3 or op.inputs[2] < 0:
            return
        w, x = x, tensors[op.inputs[2]]
    if x.dtype not in ("int8", "int16") or w.dtype != "int8" or not w.quantized:
        return
    nonzero = np.flatnonzero(w.zero_point)
    if nonzero.size:
        k = int(nonzero[0])
        where = f" (channel {k})" if w.zero_point.size > 1 else ""
        how = "takes" if op.kind == "CONV_2D" else "ignores any other than"
        raise InvalidQuantizationError(
            f"{operator_label(op.index, op.kind)}: filter {tensor_label(w.name, w.index)} has "
            f"zero point {int(w.zero_point[k])}{where}; TFLite's int8 filters are symmetric "
            f"and the interpreter's {op.kind} {how} zero point 0")


def _largest_shift(reals: np.ndarray) -> int:
    """The largest shift of ``quantize_multiplier`` over ``reals``, each of them checked
    (``check_multiplier``): the extremes decide (a per-channel layer has hundreds)."""
    magnitudes = np.abs(reals).reshape(-1)
    nonzero = magnitudes[magnitudes > 0]
    if nonzero.size:
        check_multiplier(float(nonzero.min()))
    return quantize_multiplier(float(magnitudes.max()))[1]
