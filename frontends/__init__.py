"""Model frontends: each turns a source format into the fake-quant (FQ) Relax form.

    canonqnn.frontends.onnx.load("model.onnx")
    canonqnn.frontends.tflite.load("model.tflite")    # the ``tflite`` extra
    canonqnn.frontends.torch.load("model.pt2")        # the ``torch`` extra (PT2E programs)

Frontends use only the canonqnn core; they never emit canonical ops (only rewrites do). What
every frontend shares (the unsupported-op exception, the converter registry, the import driver
that names each failing node, graph cutting) is ``_base``.
"""

from __future__ import annotations

import importlib
from typing import Any

FORMATS = ("onnx", "tflite", "torch")


def __getattr__(name: str) -> Any:
    # Submodules load on first use: the TFLite and PyTorch ones need optional packages.
    if name in FORMATS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
