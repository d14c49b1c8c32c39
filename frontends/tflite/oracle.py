"""The TFLite format's oracle, on parity's side: the TFLite interpreter with each op resolver
parity compares with, each in its child process (``runtime``)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from canonqnn.errors import ParityError
from canonqnn.oracle import isolated
from canonqnn.oracle.source import SourceRuntime, ready

from . import runtime
from .reader import detection_outputs, read_model

# The TFLite interpreter's op resolvers parity runs: the reference kernels are the
# specification canonqnn reproduces; the optimized ones are reported beside them.
RESOLVERS = (("BUILTIN_REF", "reference kernels"),
             ("BUILTIN_WITHOUT_DEFAULT_DELEGATES", "optimized kernels"),
             ("BUILTIN", "default: optimized kernels + XNNPACK delegate"))


def runtimes(model: Any, io: Any, profile: Any = None) -> list[SourceRuntime]:
    """The TFLite interpreter with each of ``RESOLVERS``, each in its child process (started
    together: their imports overlap), returning the outputs of ``io`` (``ModelIO``). Its
    numerics do not depend on the module's ``profile``."""
    if importlib.util.find_spec("ai_edge_litert") is None:
        raise ParityError("parity of TFLite models needs the TFLite interpreter: pip install "
                          "'canonqnn[tflite]'")
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    m = read_model(model)
    names = [o.name for o in io.outputs]
    inner = set(names) - {m.tensors[i].name for i in m.outputs}  # a cut module's outputs
    children = [isolated.Child(f"TFLite interpreter, {what}", runtime.tflite_runner,
                               bytes(model), resolver, names, bool(inner), detection_outputs(m))
                for resolver, what in RESOLVERS]
    return ready(children, [f"TFLite interpreter (ai-edge-litert), {what} "
                            f"(OpResolverType.{resolver})" for resolver, what in RESOLVERS],
                 "the TFLite interpreter")
