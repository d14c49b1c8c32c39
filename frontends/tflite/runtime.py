"""The TFLite interpreter (ai-edge-litert), the TFLite format's source runtime, as parity runs it
in a ``canonqnn.oracle.isolated`` child, and the numerics profile it follows.

This module imports numpy and the interpreter only, never TVM, so that a child starts in a
fraction of a second. The parent's side (which resolvers, reading the model) is ``oracle``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from canonqnn.numerics import PROFILES, Profile


def tflite_runner(model: bytes, resolver: str, names: list[str], preserve_all: bool,
                  detections: dict[str, str]) -> tuple[Any, None]:
    """The TFLite interpreter with the op resolver ``resolver`` (an ``OpResolverType`` name).
    ``preserve_all``: some ``names`` are inner tensors, which the interpreter keeps only on
    request. ``detections``: outputs of a TFLite_Detection_PostProcess -> its count output;
    TFLite leaves their entries past the count undefined (stale memory), so they are given as
    0, what the built module writes there."""
    from ai_edge_litert import interpreter as litert

    interp = litert.Interpreter(
        model_content=model, experimental_preserve_all_tensors=preserve_all,
        experimental_op_resolver_type=getattr(litert.OpResolverType, resolver))
    interp.allocate_tensors()
    inputs = {d["name"]: d["index"] for d in interp.get_input_details()}
    outputs = {d["name"]: d["index"] for d in interp.get_tensor_details()}
    outputs.update({d["name"]: d["index"] for d in interp.get_output_details()})

    def defined(name: str, value: np.ndarray) -> np.ndarray:
        if name in detections:
            count = int(np.asarray(interp.get_tensor(outputs[detections[name]])).reshape(-1)[0])
            value[:, max(count, 0):] = 0
        return value

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        # Stateful operators (LSTM, SVDF) carry their variable tensors from one invoke to the
        # next; a converted module is one run from the initial state, so every run starts there
        interp.reset_all_variables()
        for name, value in feed.items():
            interp.set_tensor(inputs[name], np.ascontiguousarray(value))
        interp.invoke()
        return [defined(name, interp.get_tensor(outputs[name]).copy()) for name in names]

    return run, None


def profile() -> Profile:
    """The reference kernels, parity's specification, compute the same on every host."""
    return PROFILES["tflite-reference"]
