"""Lookup tables of int8 elementwise functions, built the way each source runtime computes them.

A function of one int8 tensor takes only 256 values, so a 256-entry table is exact; the only
question is what the source runtime computes for each input. The table is therefore built by
evaluating the float part of the fake-quant chain on the 256 dequantized inputs with the
runtime's own float arithmetic (per Relax op: ``evaluate``), then quantizing as the runtime
quantizes (``quantize``). Sources: ``"onnx"`` = onnxruntime 1.31 on x86-64 AVX2/FMA3
(``canonqnn.tables.onnxruntime``).

Some runtimes have no float chain to follow: ``"tflite"`` (``canonqnn.tables.tflite``, the
reference kernels of TFLite) computes each elementwise builtin as one kernel, several in fixed
point; ``"torch"`` (``canonqnn.tables.xnnpack``: XNNPACK as ExecuTorch runs PT2E programs)
builds each table from one float32 kernel. Such a source lists its whole functions in
``KERNELS`` (``kernels``) and builds their tables itself (``kernel_table``); it evaluates no
single op.

Where one source's runtime computes differently on different hosts or configurations, the
numerics profile's ``tables`` choice names the module (``FAMILIES``, passed as ``family``):
``xnnpack_avx2`` and ``xnnpack_avx512`` (ExecuTorch's XNNPACK by x86 class), and
``tflite_xnnpack`` (TFLite's default interpreter, whose XNNPACK delegate takes some int8
builtins from the reference kernels: ``canonqnn.tables.litert_xnnpack``), and
``onnxruntime_arm64`` (onnxruntime's AArch64 build: ``canonqnn.tables.onnxruntime_arm64``).

Pure numpy: importing this package imports neither TVM nor any model format. Each source's
module is imported when first asked for; ``tflite``'s Q31 arithmetic still comes from
``canonqnn.ops``, which imports TVM.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from ..qparams import INT8_CODES, QParams
from .onnxruntime import NotEvaluable

# Source -> the module of this package that computes as its runtime does, imported on first
# use (a source's tables cost nothing until a model of it is converted).
RUNTIMES: dict[str, str] = {"onnx": "onnxruntime", "tflite": "tflite", "torch": "xnnpack"}
# A profile's ``tables`` choice -> (the source it applies to, the module computing it), where
# the source's runtime has more than one way of computing its tables.
FAMILIES: dict[str, tuple[str, str]] = {"xnnpack_avx2": ("torch", "xnnpack"),
                                        "xnnpack_avx512": ("torch", "xnnpack_avx512"),
                                        "tflite_xnnpack": ("tflite", "litert_xnnpack"),
                                        "tflite_builtin": ("tflite", "tflite_builtin"),
                                        "onnxruntime_arm64": ("onnx", "onnxruntime_arm64")}
CODES = INT8_CODES  # table row index i holds code i - 128


def runtime(source: str, family: str | None = None) -> ModuleType:
    """The module computing ``source``'s tables, under the profile's ``tables`` choice
    ``family`` when that is one of ``FAMILIES`` for this source (any other choice leaves the
    source's default)."""
    if source not in RUNTIMES:
        raise NotEvaluable(f"no table builder for source {source!r} (known: {sorted(RUNTIMES)})")
    name = RUNTIMES[source]
    if family in FAMILIES and FAMILIES[family][0] == source:
        name = FAMILIES[family][1]
    return importlib.import_module(f"{__name__}.{name}")


def evaluates(source: str, op: str, family: str | None = None) -> bool:
    """Whether ``source`` (under the profile's tables ``family``) has an evaluator for the
    Relax op ``op``."""
    return source in RUNTIMES and op in runtime(source, family).EVALUATORS


def evaluate(source: str, op: str, args: list, attrs: dict,
             family: str | None = None) -> np.ndarray:
    """The float32 result of Relax op ``op`` on numpy ``args`` as ``source`` computes it (under
    the profile's tables ``family``).

    Raises ``NotEvaluable`` (with the reason) for ops or attributes the source has no kernel
    for.
    """
    return runtime(source, family).evaluate(op, list(args), dict(attrs))


def input_values(source: str, qp: QParams) -> np.ndarray:
    """The 256 real values of the int8 codes -128..127 under per-tensor ``qp``, dequantized as
    ``source`` dequantizes."""
    return runtime(source).dequantize(CODES, qp.scalar_scale, qp.scalar_zp)


def dequantize(source: str, q: np.ndarray, qp: QParams) -> np.ndarray:
    """A quantized constant's real values (per tensor or along ``qp.axis``), as ``source``
    dequantizes."""
    q = np.asarray(q)
    if qp.per_tensor:
        return runtime(source).dequantize(q, qp.scalar_scale, qp.scalar_zp)
    shape = [1] * q.ndim
    assert qp.axis is not None  # per-channel parameters have their axis (QParams.make)
    shape[qp.axis] = -1
    return runtime(source).dequantize(q, qp.scale.reshape(shape), qp.zero_point.reshape(shape))


def quantize(source: str, values: np.ndarray, qp: QParams) -> np.ndarray:
    """Float values to int8 under per-tensor ``qp``, as ``source`` quantizes.

    uint8 tensors are held as int8 with zero point - 128; onnxruntime's DequantizeLinear and
    QuantizeLinear only see ``q - zp`` and the bounds ``[qmin - zp, qmax - zp]``, which the
    shift leaves unchanged, so the table of a uint8 model is the int8 table (measured).
    """
    q = runtime(source).quantize(values, qp.scalar_scale, qp.scalar_zp)
    return q.astype(np.int8)


def build(source: str, fn, in_qp: QParams, out_qp: QParams) -> np.ndarray:
    """The int8[256] table of ``fn`` (float32 array -> float32 array) between ``in_qp`` and
    ``out_qp``: entry i is the output for input code i - 128."""
    return quantize(source, fn(input_values(source, in_qp)), out_qp)


def kernels(source: str, family: str | None = None) -> dict[str, str] | None:
    """The whole functions ``source`` builds tables of (name -> its kernel), or None when the
    source evaluates float chains op by op."""
    return getattr(runtime(source, family), "KERNELS", None) if source in RUNTIMES else None


def kernel_table(source: str, function: str, in_qp: QParams, out_qp: QParams,
                 family: str | None = None, **params) -> np.ndarray:
    """The int8[256] table ``source``'s kernel for ``function`` computes (entry i: input code
    i - 128), in the profile's table ``family``; ``params`` are the kernel's (``alpha``,
    ``source_dtype``, and for ``tflite_xnnpack`` ``source_op``, the builtin's name). Raises
    ``NotEvaluable`` with the reason when the source has no such kernel or refuses the
    parameters."""
    if kernels(source, family) is None:
        raise NotEvaluable(f"source {source!r} builds tables from float chains, not kernels")
    return runtime(source, family).table(function, in_qp, out_qp, **params)


__all__ = ["CODES", "FAMILIES", "NotEvaluable", "RUNTIMES", "build", "dequantize", "evaluate",
           "evaluates", "input_values", "kernel_table", "kernels", "quantize", "runtime"]
