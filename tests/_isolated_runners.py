"""Factories run in ``canonqnn.oracle.isolated`` children by tests/oracle/test_isolated.py:
importable by the child (it gets the test process's ``sys.path``), light to import."""

from __future__ import annotations

import os
import signal

from canonqnn.frontends.onnx import runtime as onnx_runtime
from canonqnn.frontends.tflite import runtime as tflite_runtime


def doubling(offset: int):
    """Calls return ``2 * x + offset`` and the child's pid; ``info``: the child's pid."""
    return (lambda x: (2 * x + offset, os.getpid())), os.getpid()


def raising_on_negative():
    def run(x):
        if x < 0:
            raise ValueError(f"negative input {x}\nsecond line")
        return x

    return run, None


def raising_at_setup():
    raise RuntimeError("cannot set up\nsecond line")


def killed_by(signal_name: str):
    """Calls end the child with the signal ``signal_name`` (as a runtime's CHECK or bad pointer
    does); ``info``: the child's pid."""
    return (lambda: os.kill(os.getpid(), getattr(signal, signal_name))), os.getpid()


def exiting(status: int):
    return (lambda: os._exit(status)), None


def unpicklable_result():
    return (lambda: (lambda: None)), None


def tflite_crashing(model, resolver, *rest, crashing: tuple[str, ...], at: str):
    """The TFLite interpreter of ``canonqnn.frontends.tflite.runtime``, except that the op resolvers
    ``crashing`` end on SIGSEGV: at setup or at their first run (``at``)."""
    if resolver not in crashing:
        return tflite_runtime.tflite_runner(model, resolver, *rest)
    if at == "setup":
        os.kill(os.getpid(), signal.SIGSEGV)
    return (lambda feed: os.kill(os.getpid(), signal.SIGSEGV)), None


def onnxruntime_aborting(model, names, threads):
    """onnxruntime as ``canonqnn.frontends.onnx.runtime`` sets it up, aborting (SIGABRT) when
    run."""
    _, description = onnx_runtime.onnxruntime_runner(model, names, threads)
    return (lambda feed: os.abort()), description
