"""Converter registry and the per-import context shared by all ONNX op converters.

A converter is ``fn(ctx, node, inputs, attrs) -> list[Value]`` (``Converter``) registered with
``@onnx_op("Conv")``; ``inputs`` holds ``None`` for omitted optional inputs and ``attrs`` the
node's attributes as Python values. Converters raise ``ctx.unsupported(reason)`` for what they
do not implement; the importer adds the node and op to the message. ``Value``, the registry,
the exception and the context's core are every frontend's (``frontends._base``). An ONNX
``Value``'s ``dtype`` is the dtype the model declares (a uint8 tensor is held as int8, shifted
by -128); ``dequantized`` the parameters of the integer tensor a float value was dequantized
from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from canonqnn import _tvm
from canonqnn.errors import UnsupportedError
from canonqnn.qparams import QParams

from .._base import Attrs, Registry, Source, Unsupported, Value
from .._base import Converter as BaseConverter
from .._base import ImportContext as BaseContext

# Domains whose ops we import. Contrib QOperator ops are also accepted in the default domain
# (some exporters put them there; the name is unambiguous).
DOMAINS = ("", "ai.onnx", "com.microsoft")

ONNX_DTYPE = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT8: "int8", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64", onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.INT16: "int16", onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.BOOL: "bool", onnx.TensorProto.DOUBLE: "float64",
}


def dtype_name(elem_type: int) -> str:
    return ONNX_DTYPE.get(elem_type) or helper.tensor_dtype_to_string(elem_type)


# ``fn(ctx, node, inputs, attrs) -> list[Value]``
Converter = BaseConverter["ImportContext", onnx.NodeProto, Attrs]
REGISTRY: Registry[Converter] = Registry()
CONVERTERS: dict[str, Converter] = REGISTRY.converters
# How a converter treats quantized integer inputs (QOperator models apply some ops to them),
# its registry property ``quantized``:
#   "consumes"    - the converter takes quantized integer operands itself (Q/DQ, QLinear*);
#   "passthrough" - the op is exact on quantized data (data movement, max): the importer wraps
#                   it as dequantize -> op -> quantize with the input tensor's own parameters.
# Any other op given a quantized tensor is refused.
QUANTIZED_HANDLING = (None, "consumes", "passthrough")


def onnx_op(*op_types: str, quantized: str | None = None) -> Callable[[Converter], Converter]:
    if quantized not in QUANTIZED_HANDLING:
        raise ValueError(f"quantized={quantized!r}")
    return REGISTRY.op(*op_types, quantized=quantized)


class ImportContext(BaseContext):
    """What converters need: the block builder, the opset, constant access and errors."""

    def __init__(self, bb: Any, opset: int) -> None:
        super().__init__(bb)
        self.opset = opset
        self.node_output = ""  # name of the ONNX tensor the current node produces

    # -------------------------------------------------------------- emitting
    def value(self, expr: Any, dtype: str = "float32", qparams: QParams | None = None) -> Value:
        return Value(expr=self.emit(expr), dtype=dtype, qparams=qparams)

    def expr(self, value: Value) -> Any:
        """The Relax expression of a value, materializing constants on first use."""
        if value.expr is None:
            value.expr = _tvm.const(value.const)
        return value.expr

    # -------------------------------------------------------------- constants and attributes
    @staticmethod
    def constant(value: Value | None, what: str) -> np.ndarray:
        if value is None or value.const is None:
            raise Unsupported(f"{what} must be a constant (initializer), not computed at run time")
        return value.const

    @staticmethod
    def shape(value: Value) -> tuple[int, ...]:
        if value.const is not None:
            return tuple(value.const.shape)
        return _tvm.shape_of(value.expr)


def tensor_to_numpy(tensor: onnx.TensorProto, base_dir: str | None = None) -> np.ndarray:
    return numpy_helper.to_array(tensor, base_dir or "")


def attributes(node: onnx.NodeProto) -> Attrs:
    out = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        out[attr.name] = value
    return out


SOURCE = Source("ONNX", "onnx", "rne_f32")


def unsupported_error(problems: list[tuple[str, str, str]], hint: str = "") -> UnsupportedError:
    return SOURCE.unsupported(problems, hint)
