"""The source runtimes as parity runs them, made where they run: in a ``canonqnn.isolated``
child. Each ``*_runner`` takes the model's bytes and returns ``(run, info)``, ``run(feed)``
giving the outputs ``names`` in order.

This module imports numpy and the runtime only, never TVM, so that a child starts in a fraction
of a second.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import ParityError, first_line
from .numerics.probe import ORT_CONFIG, ort_session_options


def ort_session(model: bytes, threads: int | None = None) -> tuple[Any, str]:
    """An onnxruntime CPU session of the serialized ``model`` (IR <= 10) with the settings
    canonqnn's rounding reproduces, on ``threads`` intra-op threads (onnxruntime's default: one
    per core), and its description.

    ``session.x64quantprecision`` keeps x86 u8s8 kernels from saturating int16 pair sums;
    onnxruntime has no s8s8 kernels under it, so models it cannot load run without it.
    """
    import onnxruntime as ort

    errors = []
    for config in (ORT_CONFIG, {"session.qdqisint8allowed": "1"}):
        so = ort_session_options(config, threads)
        try:
            session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001  (onnxruntime raises its own types)
            errors.append(first_line(exc))
            continue
        settings = ", ".join(f"{k}={v}" for k, v in config.items())
        threads_text = f", {threads} intra-op threads" if threads else ""
        return session, (f"onnxruntime {ort.__version__} CPU, ORT_ENABLE_ALL, {settings}"
                         f"{threads_text}")
    raise ParityError("onnxruntime cannot run this model: " + "; ".join(errors))


def onnxruntime_runner(model: bytes, names: list[str], threads: int | None) -> tuple[Any, str]:
    """``info``: the session's description."""
    session, description = ort_session(model, threads)
    return (lambda feed: session.run(names, feed)), description


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


def _torch_program(program: bytes) -> Any:
    """The ExportedProgram saved in ``program``, read as the frontend reads a ``.pt2`` file:
    nothing in it is unpickled or run (``torch.export.load`` would)."""
    from canonqnn.frontends.torch.archive import read_program

    return read_program(program, "the program")


def _torch_inputs(feed: dict[str, np.ndarray], names: list[str]) -> list[Any]:
    import torch

    return [torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names]


def _torch_outputs(values: Any) -> list[np.ndarray]:
    values = values if isinstance(values, (list, tuple)) else [values]
    return [np.asarray(v.detach().numpy() if hasattr(v, "detach") else v) for v in values]


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """What a runtime's native code and Python packages print while it sets up (ExecuTorch's
    CPU-detection messages, torchao's missing CUDA kernels, deprecation warnings) kept out of
    canonqnn's output: written to a file, shown only if the setup fails."""
    import tempfile
    import warnings

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        os.dup2(log.fileno(), 2)
        try:
            yield
        except BaseException:
            sys.stderr.flush()
            os.dup2(saved, 2)
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def executorch_runner(program: bytes, input_names: list[str]) -> tuple[Any, str]:
    """ExecuTorch running the saved ExportedProgram ``program`` lowered to its XNNPACK
    delegate, as a user deploys a PT2E model (``to_edge_transform_and_lower`` with the
    ``XnnpackPartitioner``, then the ``.pte`` loaded by the runtime)."""
    import tempfile
    from importlib.metadata import version

    with quietly():
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner)
        from executorch.exir import to_edge_transform_and_lower
        from executorch.runtime import Runtime

        ep = _torch_program(program)
        pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]) \
            .to_executorch()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.pte")
            with open(path, "wb") as f:
                f.write(pte.buffer)
            method = Runtime.get().load_program(path).load_method("forward")

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return _torch_outputs(method.execute(_torch_inputs(feed, input_names)))

    return run, (f"ExecuTorch {version('executorch')}, XNNPACK delegate "
                 "(to_edge_transform_and_lower with the XnnpackPartitioner)")


def torch_eager_runner(program: bytes, input_names: list[str]) -> tuple[Any, str]:
    """The ExportedProgram run by PyTorch itself: float arithmetic between its quantize and
    dequantize ops."""
    import torch

    module = _torch_program(program).module()

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return _torch_outputs(module(*_torch_inputs(feed, input_names)))

    return run, f"PyTorch {torch.__version__} eager (float between quantize and dequantize)"
