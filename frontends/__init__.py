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
import importlib.util
from collections.abc import Callable
from typing import Any


def __getattr__(name: str) -> Any:
    # Format packages load on first use: the TFLite and PyTorch ones need optional packages.
    # Which formats exist is the registry's to say (``canonqnn.formats``); this only finds
    # the folders.
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of a format package: each name of ``exports`` (name -> the
    submodule defining it) read from its submodule at each use. Importing the package then
    imports neither TVM nor the format's own packages (parity's children import only its
    ``runtime``), and a test may replace a submodule's function."""

    def exported(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return exported
