"""ONNX op converters, one module per family; importing registers them."""

from . import (activation, elementwise, indexing, nn, qoperator, quant, resize, shape,  # noqa: F401
               softmax)
