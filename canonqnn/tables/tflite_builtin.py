"""Tables of TFLite's built-in optimized kernels (``OpResolverType.BUILTIN_WITHOUT_DEFAULT_
DELEGATES``, and what the default interpreter runs for the operators its XNNPACK delegate does
not take, 16x8 ones among them): numerics profile ``tflite-builtin``, tables
``tflite_builtin``.

Measured on every code against the reference kernels (tests/tables/test_tflite_int16_tables.py):
they compute the same tables except int16 LOGISTIC and TANH of a power-of-two input scale,
which the optimized kernels compute in gemmlowp fixed point (``tflite_int16``).
"""

from __future__ import annotations

import numpy as np

from ..qparams import QParams
from . import tflite

RUNTIME = "TFLite (built-in optimized kernels)"  # in messages
KERNELS: dict[str, str] = dict(tflite.KERNELS)
EVALUATORS = tflite.EVALUATORS
dequantize, quantize, evaluate = tflite.dequantize, tflite.quantize, tflite.evaluate


def table(function: str, in_qp: QParams, out_qp: QParams, *, alpha: float | None = None,
          source_dtype: str = "int8") -> np.ndarray:
    """``tflite.table`` as the optimized kernels compute it."""
    return tflite.table(function, in_qp, out_qp, alpha=alpha, source_dtype=source_dtype,
                        optimized=True)
