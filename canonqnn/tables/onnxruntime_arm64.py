"""Float Relax elementwise ops evaluated as onnxruntime 1.31 computes them on AArch64 (its NEON
build), for the ops whose AArch64 kernels were measured (numerics profile
``onnxruntime-1.31-arm64``, tables ``onnxruntime_arm64``).

Measured on an emulated Neoverse N1 (tools/arm-device) against this package's x86 evaluators
(``canonqnn.tables.onnxruntime``): MLAS's logistic and tanh there give the x86 FMA3 kernels'
float32 results on 1,157,712 inputs, except that the portable logistic kernel clamps its result
at 1, which the FMA3 one does not (20 float32 inputs in [17.48, 17.99] give 1.0000001 on x86);
the tables of QLinearSigmoid, QLinearLeakyRelu and QDQ Sigmoid, Tanh and LeakyRelu equal
those of this package on every code of the scales tried, and the recordings of
tests/numerics/fixtures pin them. Its quantize and dequantize are x86's (the tables include
them). Relu, clip, maximum, minimum, abs, negation, selections and comparisons do not round.

Anything else is refused (``evaluate``), and the chain stays a named float island: functions
whose AArch64 kernels nobody here measured (erf, exp, log, gelu, softplus...), and arithmetic
(add, multiply, divide, ...), which onnxruntime computes inside one kernel for the compositions
the importer splits into Relax ops (HardSigmoid, HardSwish, ...), and which GCC contracts into
fused multiply-adds on AArch64 (as it does in MLAS's float QLinearAdd) and not on x86-64.
"""

from __future__ import annotations

import numpy as np

from ._f32 import F32
from .mlas import logistic as _x86_logistic
from .onnxruntime import EVALUATORS as X86_EVALUATORS
from .onnxruntime import NotEvaluable, _unary, dequantize, evaluate_with, quantize

__all__ = ["EVALUATORS", "NotEvaluable", "dequantize", "evaluate", "quantize"]


def logistic(x) -> np.ndarray:
    """MLAS's portable logistic (its NEON build): the FMA3 kernel's arithmetic, clamped at 1."""
    return np.minimum(_x86_logistic(x), F32(1.0))


# the measured functions, and the operations that do not round
_SAME_AS_X86 = ("relax.tanh", "relax.nn.leakyrelu", "relax.nn.relu", "relax.clip", "relax.abs",
                "relax.negative", "relax.maximum", "relax.minimum", "relax.where",
                "relax.greater", "relax.greater_equal", "relax.less", "relax.less_equal",
                "relax.equal", "relax.not_equal")
EVALUATORS = {"relax.sigmoid": _unary(logistic),
              **{op: X86_EVALUATORS[op] for op in _SAME_AS_X86}}


def evaluate(op: str, args: list, attrs: dict) -> np.ndarray:
    return evaluate_with(EVALUATORS, op, args, attrs,
                         ": onnxruntime's AArch64 kernel for it was not measured")
