"""TFLite operator converters; importing this package registers them."""

from . import activation, elementwise, indexing, nn, pool, quant, recurrent, select, shape  # noqa: F401
