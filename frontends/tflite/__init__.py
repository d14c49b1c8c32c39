"""TFLite frontend: int8/uint8 TFLite flatbuffers into the fake-quant Relax form.

    mod = canonqnn.frontends.tflite.load("model.tflite")   # or the model's bytes

Needs the ``tflite`` extra (``pip install canonqnn[tflite]``).
"""

from .importer import load
from .reader import is_tflite, read_model

__all__ = ["is_tflite", "load", "read_model"]
