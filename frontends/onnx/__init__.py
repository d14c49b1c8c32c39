"""ONNX frontend: QDQ and QOperator models into the fake-quant Relax form.

    mod = canonqnn.frontends.onnx.load("model.onnx")

The format's interface to the core (``canonqnn.formats.FormatModule``): ``load``, and its oracle
``runtimes``, ``profile`` (onnxruntime's numerics here) and ``runtime_tensors``. Submodules
load on first use: ``runtime`` runs in parity's child processes, which import no TVM.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the submodule defining it
_EXPORTS = {"load": "importer", "read_model": "importer", "runtimes": "oracle",
            "runtime_tensors": "oracle", "profile": "runtime"}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:  # read at each use: a test may replace the submodule's function
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
