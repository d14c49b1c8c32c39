"""The PyTorch frontend's own converters (importing them registers them)."""

from . import nn, quant  # noqa: F401
