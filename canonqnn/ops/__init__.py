"""Canonical int8 ops ``relax.canonqnn.*``: importing this package registers all of them."""

from ._registry import REGISTRY, CanonicalOp, lookup
from .conv import conv2d

__all__ = ["REGISTRY", "CanonicalOp", "lookup", "conv2d"]
