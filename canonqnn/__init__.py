"""canonqnn: quantized models to one canonical int8 form for Apache TVM Relax.

    import canonqnn
    mod = canonqnn.frontends.onnx.load("model.onnx")   # fake-quant (FQ) Relax form
    mod, report = canonqnn.canonicalize(mod)            # relax.canonqnn.* ops + Report
    built = canonqnn.build(mod)                         # integer TIR, tvm.compile (host CPU)
    print(built.kernels.summary())                      # fused kernels, int8 between them
    outputs = built.run({"input": x})
    result = canonqnn.parity("model.onnx")              # onnxruntime vs the TVM build

Numerics profiles (``canonqnn.numerics``) name how each source runtime computes on each class of
host; a module records the one it was converted for, and ``canonqnn.reference``
(``canonqnn.ops.reference``) runs a module's numpy specification.

The core (``canonqnn.qparams``, ``qdq``, ``ops``, ``build``, ``io``) knows no model format and
no rule: it reaches formats only through ``canonqnn.formats``; ``canonqnn.frontends`` and
``canonqnn.rewrites`` build on it; this module, ``canonqnn.api``, ``canonqnn.oracle`` and
``canonqnn.cli`` tie them together.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    CanonqnnError,
    InvalidModelError,
    InvalidQuantizationError,
    ParityError,
    UnsupportedError,
)
from .qparams import QParams

__version__ = "0.1.0"

_LAZY = {
    "canonicalize": ("canonqnn.rewrites", "canonicalize"),
    "Report": ("canonqnn.rewrites", "Report"),
    "build": ("canonqnn.build", "build"),
    "load_built": ("canonqnn.build", "load_built"),
    "parity": ("canonqnn.oracle.parity", "parity"),
    "load": ("canonqnn.api", "load"),
    "inspect_built": ("canonqnn.api", "inspect_built"),
    "frontends": ("canonqnn.frontends", None),
    "rewrites": ("canonqnn.rewrites", None),
    "ops": ("canonqnn.ops", None),
    "numerics": ("canonqnn.numerics", None),
    "reference": ("canonqnn.ops.reference", None),
}


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the core never imports frontends or rewrites.
    if name not in _LAZY:
        raise AttributeError(f"module 'canonqnn' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    if attr is None:
        if name == "frontends":
            importlib.import_module("canonqnn.frontends.onnx")
        return module
    return getattr(module, attr)


__all__ = ["CanonqnnError", "InvalidModelError", "InvalidQuantizationError", "ParityError",
           "QParams", "UnsupportedError", "__version__", *_LAZY]
