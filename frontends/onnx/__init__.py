"""ONNX frontend: QDQ and QOperator models into the fake-quant Relax form.

    mod = canonqnn.frontends.onnx.load("model.onnx")

The format's interface to the core (``canonqnn.formats.FormatModule``): ``load``, and its oracle
``runtimes``, ``profile`` (onnxruntime's numerics here) and ``runtime_tensors``, and on a
device (``--rpc``) ``device_runtimes``, ``device_profile`` and ``device_runtime_tensors``.
Submodules load on first use: ``runtime`` runs in parity's child processes, which import no TVM.
"""

from __future__ import annotations

from .. import lazy_exports

# name -> the submodule defining it
_EXPORTS = {"load": "importer", "read_model": "importer", "runtimes": "oracle",
            "runtime_tensors": "oracle", "profile": "runtime", "device_runtimes": "oracle",
            "device_profile": "oracle", "device_runtime_tensors": "oracle"}
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
