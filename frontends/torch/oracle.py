"""The PyTorch format's oracle, on parity's side: ExecuTorch's XNNPACK delegate is the
specification; eager PyTorch (float between quantize and dequantize) is reported beside it, its
distance bounded in docs/parity.md. Each runs in its child process (``runtime``)."""

from __future__ import annotations

import importlib.util
import io as bytes_io
from typing import Any

from canonqnn.errors import ParityError
from canonqnn.oracle import isolated
from canonqnn.oracle.source import SourceRuntime, ready

from . import runtime
from .importer import read_program

RUNNERS = (("ExecuTorch (XNNPACK)", "executorch_runner"),
           ("PyTorch eager", "torch_eager_runner"))


def runtimes(model: Any, io: Any, profile: Any = None) -> list[SourceRuntime]:
    """ExecuTorch and eager PyTorch on the program, each in its child process, given the
    inputs of ``io`` (``ModelIO``) in order. Their numerics do not depend on ``profile``."""
    if importlib.util.find_spec("executorch") is None:
        raise ParityError("parity of PyTorch programs needs ExecuTorch: pip install "
                          "'canonqnn[torch]'")
    program = read_program(model)
    import torch

    buffer = bytes_io.BytesIO()
    torch.export.save(program, buffer)
    names = [i.name for i in io.inputs]
    children = [isolated.Child(what, getattr(runtime, runner), buffer.getvalue(), names)
                for what, runner in RUNNERS]
    return ready(children, [what for what, _ in RUNNERS], "ExecuTorch")
