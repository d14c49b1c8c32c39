"""PyTorch frontend: a PT2E-quantized ``torch.export.ExportedProgram`` (or a ``.pt2`` file) into
the fake-quant Relax form. Needs the ``torch`` extra.

``archive`` (reading a ``.pt2`` file without running what it holds) imports torch only, not
TVM: parity's child processes load programs with it."""

from __future__ import annotations

from typing import Any

__all__ = ["load", "read_program"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # the importer brings TVM: loaded on first use
        from . import importer

        return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
