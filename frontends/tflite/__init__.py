"""TFLite frontend: int8/uint8 TFLite flatbuffers into the fake-quant Relax form.

    mod = canonqnn.frontends.tflite.load("model.tflite")   # or the model's bytes

Needs the ``tflite`` extra (``pip install canonqnn[tflite]``).

The format's interface to the core (``canonqnn.formats.FormatModule``): ``load``, and its oracle
``runtimes`` and ``profile``, and on a device (``--rpc``) ``device_runtimes`` and
``device_profile``. Submodules load on first use: ``runtime`` runs in parity's child
processes, which import no TVM.
"""

from __future__ import annotations

from .. import lazy_exports

# name -> the submodule defining it
_EXPORTS = {"load": "importer", "is_tflite": "reader", "read_model": "reader",
            "runtimes": "oracle", "profile": "runtime", "device_runtimes": "oracle",
            "device_profile": "oracle"}
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
