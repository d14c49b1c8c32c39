"""Float Relax elementwise ops evaluated as onnxruntime 1.31 (CPU, x86-64 AVX2 + FMA3) computes
the ONNX ops the importer expresses with them, plus its DequantizeLinear / QuantizeLinear.

Which kernel each Relax op follows (the ONNX importer emits exactly these forms, see
frontends/onnx/ops/activation.py):

    relax.sigmoid          Sigmoid, QLinearSigmoid's table    MLAS logistic (mlas.logistic)
    relax.tanh             Tanh                               MLAS tanh
    relax.erf              Erf                                MLAS erf
    relax.exp              Exp                                MLAS exp
    relax.log              Log                                Eigen log (eigen.log)
    relax.nn.softplus      Softplus                           Eigen: x > 0 ? x + log1p(exp(-x))
                                                                              : log1p(exp(x))
    relax.nn.gelu          Gelu (approximate="none")          onnxruntime Gelu kernel with MLAS erf
    relax.nn.gelu_tanh     Gelu (approximate="tanh")          onnxruntime Gelu kernel with MLAS tanh
    relax.nn.leakyrelu     LeakyRelu, QLinearLeakyRelu        x >= 0 ? x : alpha * x
    relax.nn.prelu         PRelu (slope per channel)          x > 0 ? x : slope * x
    relax.sqrt, abs, negative, nn.relu, clip, add, subtract, multiply, divide, maximum,
    minimum, where, comparisons                               IEEE float32, one rounding each

HardSigmoid, HardSwish and Elu are imported as compositions of these (onnxruntime computes
them with the same single-rounding operations in the same order, except Elu: see ``elu``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import eigen, mlas
from ._f32 import F32, f32


class NotEvaluable(ValueError):
    """The op (or these attributes) has no onnxruntime counterpart the table could follow."""


# ---------------------------------------------------------------- whole-kernel functions
_SQRT1_2 = F32(0.7071067811865476)          # M_SQRT1_2
_GELU_B = F32(0.7978845608028654)           # sqrt(2 / pi)
_GELU_C = F32(0.035677408136300125)         # 0.044715 * sqrt(2 / pi)


def gelu(x) -> np.ndarray:
    """onnxruntime's Gelu kernel (tensor/gelu.cc): t = x * M_SQRT1_2, MLAS erf on t, then
    0.5 * x * (erf + 1) evaluated left to right (compiled without FMA)."""
    x = f32(x)
    e = mlas.erf((x * _SQRT1_2).astype(F32))
    return ((F32(0.5) * x).astype(F32) * (e + F32(1.0)).astype(F32)).astype(F32)


def gelu_tanh(x) -> np.ndarray:
    """The same kernel's tanh form: t = x * (C * x * x + B), MLAS tanh on t, then
    0.5 * x * (tanh + 1)."""
    x = f32(x)
    inner = ((((_GELU_C * x).astype(F32) * x).astype(F32) + _GELU_B).astype(F32) * x)
    t = mlas.tanh(inner.astype(F32))
    return ((F32(0.5) * x).astype(F32) * (t + F32(1.0)).astype(F32)).astype(F32)


def softplus(x, beta: float = 1.0) -> np.ndarray:
    """onnxruntime's Softplus functor: Eigen select of x + log1p(exp(-x)) (x > 0) and
    log1p(exp(x)); both sides are computed for every element, as Eigen does."""
    if beta != 1.0:
        raise NotEvaluable(f"softplus with beta={beta} (ONNX Softplus has beta 1)")
    x = f32(x)
    with np.errstate(over="ignore"):
        positive = (x + eigen.log1p(eigen.exp(-x))).astype(F32)
        other = eigen.log1p(eigen.exp(x))
    return np.where(x > 0, positive, other).astype(F32)


def leaky_relu(x, alpha: float) -> np.ndarray:
    x = f32(x)
    return np.where(x >= 0, x, (F32(alpha) * x).astype(F32)).astype(F32)


def prelu(x, slope: np.ndarray, axis: int) -> np.ndarray:
    """``slope`` is 1-D along ``axis`` of ``x`` (a negative axis counts from the end)."""
    x = f32(x)
    shape = [1] * x.ndim
    shape[axis] = -1
    s = f32(slope).reshape(shape)
    return np.where(x > 0, x, (s * x).astype(F32)).astype(F32)


# ---------------------------------------------------------------- Relax op -> evaluator
def _unary(fn: Callable) -> Callable:
    return lambda args, attrs: f32(fn(f32(args[0])))


def _binary(fn: Callable) -> Callable:
    return lambda args, attrs: np.asarray(fn(_operand(args[0]), _operand(args[1])))


def _operand(value):
    value = np.asarray(value)
    return value.astype(F32) if value.dtype.kind == "f" else value


def _clip(args, attrs) -> np.ndarray:
    lo, hi = F32(args[1]), F32(args[2])
    return np.minimum(np.maximum(f32(args[0]), lo), hi).astype(F32)


def _where(args, attrs) -> np.ndarray:
    return np.where(np.asarray(args[0], bool), _operand(args[1]), _operand(args[2])).astype(F32)


def _prelu(args, attrs) -> np.ndarray:
    return prelu(args[0], args[1], int(attrs["axis"]))


def _sqrt(x):
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)


EVALUATORS: dict[str, Callable] = {
    "relax.sigmoid": _unary(mlas.logistic),
    "relax.tanh": _unary(mlas.tanh),
    "relax.erf": _unary(mlas.erf),
    "relax.exp": _unary(mlas.exp),
    "relax.log": _unary(eigen.log),
    "relax.sqrt": _unary(_sqrt),
    "relax.abs": _unary(np.abs),
    "relax.negative": _unary(np.negative),
    "relax.nn.relu": _unary(lambda x: np.maximum(x, F32(0.0))),
    "relax.nn.gelu": _unary(gelu),
    "relax.nn.gelu_tanh": _unary(gelu_tanh),
    "relax.nn.softplus": lambda args, attrs: softplus(args[0], float(attrs.get("beta", 1.0))),
    "relax.nn.leakyrelu": lambda args, attrs: leaky_relu(args[0], float(attrs["alpha"])),
    "relax.nn.prelu": _prelu,
    "relax.clip": _clip,
    "relax.add": _binary(np.add),
    "relax.subtract": _binary(np.subtract),
    "relax.multiply": _binary(np.multiply),
    "relax.divide": _binary(np.divide),
    "relax.maximum": _binary(np.maximum),
    "relax.minimum": _binary(np.minimum),
    "relax.greater": _binary(np.greater),
    "relax.greater_equal": _binary(np.greater_equal),
    "relax.less": _binary(np.less),
    "relax.less_equal": _binary(np.less_equal),
    "relax.equal": _binary(np.equal),
    "relax.not_equal": _binary(np.not_equal),
    "relax.where": _where,
}


def evaluate(op: str, args: list, attrs: dict) -> np.ndarray:
    return evaluate_with(EVALUATORS, op, args, attrs, " has no onnxruntime evaluator")


def evaluate_with(evaluators: dict[str, Callable], op: str, args: list, attrs: dict,
                  missing: str) -> np.ndarray:
    """``op`` on ``args`` by ``evaluators`` (an op missing there: ``NotEvaluable``, ``op`` then
    ``missing``), float warnings silenced (a table's inputs reach infinities and NaNs)."""
    fn = evaluators.get(op)
    if fn is None:
        raise NotEvaluable(f"{op}{missing}")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return fn(args, attrs)


# ---------------------------------------------------------------- quantization
def dequantize(codes, scale, zero_point) -> np.ndarray:
    """DequantizeLinear: ``f32(q - zp) * scale`` (scale and zero point broadcast against the
    codes); one rounding for int8 codes, whose difference is exact in float32."""
    diff = np.asarray(codes).astype(np.int64) - np.asarray(zero_point, np.int64)
    return (diff.astype(np.int32).astype(F32) * f32(scale)).astype(F32)


def quantize(values, scale: float, zero_point: int, qmin: int = -128,
             qmax: int = 127) -> np.ndarray:
    """MlasQuantizeLinear (SSE2): ``f32(v / scale)`` (a true division), clamped in float to
    ``[qmin - zp, qmax - zp]`` (a NaN becomes the lower bound: ``maxps`` returns its second
    operand), rounded half to even, plus ``zp``."""
    v = (f32(values) / F32(scale)).astype(F32)
    lo, hi = F32(qmin - zero_point), F32(qmax - zero_point)
    v = np.where(np.isnan(v), lo, np.minimum(np.maximum(v, lo), hi))
    return (np.rint(v).astype(np.int32) + int(zero_point)).astype(np.int32)
