"""ONNX op converters, one module per family; importing registers them."""

from . import (  # noqa: F401
    activation,
    dynamic,
    elementwise,
    indexing,
    nn,
    normalization,
    qoperator,
    quant,
    resize,
    shape,
    softmax,
)
