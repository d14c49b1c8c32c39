"""TFLite operator converters; importing this package registers them."""

from . import activation, elementwise, nn, pool, quant, shape  # noqa: F401
