"""Test helpers for TFLite-origin numerics: models written in code with
``canonqnn.testing.tflite_writer`` and run by the TFLite interpreter, whose reference kernels
(``OpResolverType.BUILTIN_REF``) are the specification canonqnn's Q31 roundings reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from canonqnn.testing.tflite_writer import GraphWriter


def run_tflite(model: bytes, feeds: list[np.ndarray], *, reference: bool = True) \
        -> list[np.ndarray]:
    """Outputs of ``model`` on ``feeds`` (in input order): reference kernels, or the default
    optimized ones with ``reference=False``."""
    resolver = OpResolverType.BUILTIN_REF if reference else \
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interp = Interpreter(model_content=model, experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), feeds):
        interp.set_tensor(detail["index"], np.ascontiguousarray(value))
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


@dataclass(frozen=True)
class T:
    """A tensor of a single-op model: graph input when ``data`` is None, else a constant."""

    shape: tuple[int, ...]
    dtype: str = "int8"
    scale: float | np.ndarray | None = None
    zero_point: int | np.ndarray | None = None
    data: np.ndarray | None = None
    quantized_dimension: int = 0


def single_op(kind: str, inputs: list[T | None], outputs: list[T], **options) -> bytes:
    """A model of one ``kind`` operator; ``None`` inputs are omitted optional inputs (-1)."""
    g = GraphWriter()
    ids, graph_inputs = [], []
    for i, t in enumerate(inputs):
        if t is None:
            ids.append(-1)
            continue
        index = g.tensor(f"in{i}", t.shape, t.dtype, t.data, t.scale, t.zero_point,
                         t.quantized_dimension)
        ids.append(index)
        if t.data is None:
            graph_inputs.append(index)
    outs = [g.tensor(f"out{i}", t.shape, t.dtype, None, t.scale, t.zero_point,
                     t.quantized_dimension) for i, t in enumerate(outputs)]
    g.op(kind, ids, outs, **options)
    return g.finish(graph_inputs, outs)
