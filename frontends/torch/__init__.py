"""PyTorch frontend: a PT2E-quantized ``torch.export.ExportedProgram`` (or a ``.pt2`` file) into
the fake-quant Relax form. Needs the ``torch`` extra.

The format's interface to the core (``canonqnn.formats.FormatModule``): ``load``, and its oracle
``runtimes`` and ``profile`` (XNNPACK's numerics here). Submodules load on first use:
``runtime`` and ``archive`` (reading a ``.pt2`` file without running what it holds) import
torch, not TVM: parity's child processes run them."""

from __future__ import annotations

from .. import lazy_exports

# name -> the submodule defining it
_EXPORTS = {"load": "importer", "read_program": "importer", "runtimes": "oracle",
            "profile": "runtime"}
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
