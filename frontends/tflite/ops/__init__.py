"""TFLite operator converters; importing this package registers them."""

from . import activation, elementwise, indexing, nn, pool, quant, select, shape  # noqa: F401
