"""TFLite frontend: int8/uint8 TFLite flatbuffers into the fake-quant Relax form.

    mod = canonqnn.frontends.tflite.load("model.tflite")

Needs the ``tflite`` extra (``pip install canonqnn[tflite]``).
"""
