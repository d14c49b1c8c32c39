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

# The TFLite interpreter's op resolvers parity runs. The one the module's numerics profile
# reproduces is the specification; the others are reported beside it.
RESOLVERS = (("BUILTIN_REF", "reference kernels"),
             ("BUILTIN_WITHOUT_DEFAULT_DELEGATES", "optimized kernels"),
             ("BUILTIN", "default: optimized kernels + XNNPACK delegate"))
# The resolver each TFLite profile reproduces (canonqnn.numerics).
SPECIFIED_BY = {"tflite-reference": "BUILTIN_REF",
                "tflite-builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES",
                "tflite-xnnpack-x86": "BUILTIN"}


def resolvers(profile: Any) -> list[tuple[str, str]]:
    """``RESOLVERS``, the one ``profile`` reproduces first (the reference kernels for a profile
    of no TFLite configuration, e.g. ``exact``)."""
    first = SPECIFIED_BY.get(getattr(profile, "name", ""), "BUILTIN_REF")
    return sorted(RESOLVERS, key=lambda r: r[0] != first)


def runtimes(model: Any, io: Any, profile: Any = None) -> list[SourceRuntime]:
    """The TFLite interpreter with each of ``RESOLVERS``, each in its child process (started
    together: their imports overlap), returning the outputs of ``io`` (``ModelIO``). Its
    specification is the configuration the module's ``profile`` reproduces."""
    if importlib.util.find_spec("ai_edge_litert") is None:
        raise ParityError("parity of TFLite models needs the TFLite interpreter: pip install "
                          "'canonqnn[tflite]'")
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    m = read_model(model)
    names = [o.name for o in io.outputs]
    inner = set(names) - {m.tensors[i].name for i in m.outputs}  # a cut module's outputs
    order = resolvers(profile)
    children = [isolated.Child(f"TFLite interpreter, {what}", runtime.tflite_runner,
                               bytes(model), resolver, names, bool(inner), detection_outputs(m))
                for resolver, what in order]
    return ready(children, [f"TFLite interpreter (ai-edge-litert), {what} "
                            f"(OpResolverType.{resolver})" for resolver, what in order],
                 "the TFLite interpreter")
