"""ONNX op converters, one module per family; importing registers them."""

from . import elementwise, nn, qoperator, quant, shape  # noqa: F401
