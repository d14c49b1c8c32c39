"""Canonical int8 ops ``relax.canonqnn.*``: importing this package registers all of them."""

from ..numerics.q31 import Q31_ROUNDINGS
from . import (
               conv,
               conv_transpose,
               dynamic,
               elementwise,
               indexing,
               lut,
               matmul,
               mean,
               movement,
               pool,
               reduce,
               resize,
               select,
               softmax,
)
from ._registry import (
               PREFIX,
               REGISTRY,
               ROUNDINGS,
               CanonicalOp,
               UnsupportedRounding,
               absorbing,
               lookup,
)

__all__ = ["PREFIX", "Q31_ROUNDINGS", "REGISTRY", "ROUNDINGS", "CanonicalOp",
           "UnsupportedRounding", "absorbing", "lookup", "conv", "conv_transpose", "dynamic",
           "elementwise", "indexing", "lut", "matmul", "mean", "movement", "pool", "reduce",
           "resize", "select", "softmax"]
