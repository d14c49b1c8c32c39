"""ONNX frontend: QDQ and QOperator models into the fake-quant Relax form.

    mod = canonqnn.frontends.onnx.load("model.onnx")
"""

from .importer import load, read_model

__all__ = ["load", "read_model"]
