"""The first diverging layer: where a build, its numpy reference and the source runtime part.

For one input, every canonical op's output is compared in graph order with

- its numpy reference (``canonqnn.ops.reference``; float islands run on TVM alone), by
  building the op alone on the reference's values of its inputs (only when the build's outputs
  differ from the reference's: otherwise the build computes the spec), and
- the source runtime's value of the same tensor (the tensor the frontend recorded on the
  quantize the op replaced, ``qdq.source_tensor``), for formats whose oracle can read inner
  tensors (``runtime_tensors`` of ``canonqnn.formats.FormatModule``: ONNX exposes them as extra
  graph outputs).

The first op with a difference is the first diverging layer: a build-vs-reference difference is
a compiler fault, a reference-vs-runtime difference is arithmetic the profile does not
reproduce there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import _tvm, qdq
from ..ops import lookup, reference
from ..qparams import uint8_to_int8


@dataclass
class Divergence:
    op: str                         # canonical op name
    var: str                        # the variable it is bound to in the canonical module
    tensor: str | None              # the source model's tensor it computes, if recorded
    elements: int
    build_vs_reference: int | None  # differing values; None: not compared (build == spec)
    reference_vs_runtime: int | None  # None: the runtime's value is not available

    def summary(self) -> str:
        where = f"canonqnn.{self.op} ({self.var}" + \
            (f", tensor {self.tensor!r})" if self.tensor else ")")
        parts = []
        if self.build_vs_reference:
            parts.append(f"the build differs from the numpy reference in "
                         f"{self.build_vs_reference} of {self.elements} values (a compiler fault)")
        if self.reference_vs_runtime:
            parts.append(f"the numpy reference differs from the source runtime in "
                         f"{self.reference_vs_runtime} of {self.elements} values")
        return f"first diverging layer: {where}: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LayerDifference:
    """One canonical op's result (its numpy reference) against the source runtime's value of
    the same tensor: how many values differ, and by how much at most, in units of the tensor's
    quantization step (both are the op's integers)."""

    op: str
    var: str
    tensor: str
    elements: int
    differing: int
    max_lsb: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Evaluation:
    """What a comparison on one input reads: the numpy reference run on it
    (``reference.evaluate``: every binding's value, the outputs), the canonical ops as
    ``(var, call, op, source tensor)``, and the source runtime's values of those tensors it
    exposes."""

    by_reference: Any
    ops: list[tuple[Any, Any, Any, str | None]]
    runtime: dict[str, Any]


def evaluate(mod: Any, feed: dict[str, np.ndarray], build_one: Any,
             runtime_tensors: Any = None) -> Evaluation:
    """``Evaluation`` of ``mod`` on ``feed``; ``runtime_tensors(names, feed)``: the source
    runtime's values of named tensors."""
    with np.errstate(all="ignore"):  # NaN or infinity given as input: compared, not warned of
        by_reference = reference.evaluate(mod, feed, reference.tvm_island(build_one))
    ops = [(var, call, op, qdq.source_tensor(call))
           for var, call in _tvm.function_bindings(mod["main"])
           if (op := lookup(call)) is not None]
    names = [name for *_, name in ops if name]
    return Evaluation(by_reference, ops,
                      runtime_tensors(names, feed) if runtime_tensors else {})


def first_divergence(mod: Any, built: Any, feed: dict[str, np.ndarray], build_one: Any,
                     runtime_tensors: Any = None,
                     evaluated: Evaluation | None = None) -> Divergence | None:
    """The first canonical op of ``mod`` whose output differs on ``feed`` (module doc).
    ``runtime_tensors(names, feed)``: the source runtime's values of named tensors;
    ``evaluated``: ``evaluate`` of the same, where already made."""
    evaluated = evaluated or evaluate(mod, feed, build_one, runtime_tensors)
    evaluation, ops, runtime = evaluated.by_reference, evaluated.ops, evaluated.runtime
    got = built.run(feed)
    build_differs = any(not np.array_equal(got[k], v) for k, v in evaluation.outputs.items())
    for var, call, op, name in ops:
        want = np.asarray(evaluation.values[var])
        kernel = _kernel_difference(call, evaluation, build_one, want) if build_differs \
            else None
        compared = _runtime_difference(want, runtime.get(name)) if name else None
        against = compared[0] if compared else None
        if kernel or against:
            return Divergence(op.name, _tvm.var_name(var), name, int(want.size),
                              kernel, against)
    return None


def layer_differences(evaluated: Evaluation) -> list[LayerDifference]:
    """Every canonical op whose tensor the source runtime exposes, in graph order, compared
    with the runtime's value on the input ``evaluated`` was made on (``LayerDifference``)."""
    layers = []
    for var, _call, op, name in evaluated.ops:
        if name is None:
            continue
        want = np.asarray(evaluated.by_reference.values[var])
        against = _runtime_difference(want, evaluated.runtime.get(name))
        if against is not None:
            layers.append(LayerDifference(op.name, _tvm.var_name(var), name, int(want.size),
                                          *against))
    return layers


def _kernel_difference(call: Any, evaluation: Any, build_one: Any, want: np.ndarray) -> int:
    got = reference.build_alone(call, build_one)(evaluation.values.__getitem__)
    return int(np.count_nonzero(got != want))


def _runtime_difference(want: np.ndarray, value: Any) -> tuple[int, int] | None:
    """Differing values between the op's integer result and the runtime's tensor (uint8
    tensors compared with the int8 shift the module holds them in), and the largest difference;
    None when not comparable."""
    if value is None:
        return None
    value = np.asarray(value)
    if value.dtype == np.uint8:
        value = uint8_to_int8(value)
    if value.shape != want.shape or value.dtype != want.dtype:
        return None
    differing = value != want
    if not differing.any():
        return 0, 0
    gap = np.abs(value.astype(np.int64) - want.astype(np.int64))
    return int(np.count_nonzero(differing)), int(gap.max())
