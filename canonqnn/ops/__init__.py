"""Canonical int8 ops ``relax.canonqnn.*``: importing this package registers all of them."""

from . import conv, elementwise, matmul, movement, pool
from ._registry import PREFIX, REGISTRY, ROUNDINGS, CanonicalOp, lookup

__all__ = ["PREFIX", "REGISTRY", "ROUNDINGS", "CanonicalOp", "lookup", "conv", "elementwise",
           "matmul", "movement", "pool"]
