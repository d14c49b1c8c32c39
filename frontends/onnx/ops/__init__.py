"""ONNX op converters, one module per family; importing registers them."""

from . import (activation, dynamic, elementwise, indexing, nn, normalization, qoperator, quant,  # noqa: F401
               resize, shape, softmax)
