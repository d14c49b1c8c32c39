"""The TFLite format's oracle, on parity's side: the TFLite interpreter with each op resolver
parity compares with, each in its child process (``runtime``), or on a device (``--rpc``)."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

import numpy as np

from canonqnn.errors import ParityError
from canonqnn.oracle import isolated
from canonqnn.oracle import source as sources
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
                "tflite-xnnpack-x86": "BUILTIN", "tflite-xnnpack-arm64": "BUILTIN"}


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
    model, names, inner, detections = _prepared(model, io)
    order = resolvers(profile)
    children = [isolated.Child(f"TFLite interpreter, {what}", runtime.tflite_runner,
                               model, resolver, names, inner, detections)
                for resolver, what in order]
    return ready(children, [f"TFLite interpreter (ai-edge-litert), {what} "
                            f"(OpResolverType.{resolver})" for resolver, what in order],
                 "the TFLite interpreter")


def _prepared(model: Any, io: Any) -> tuple[bytes, list[str], bool, dict[str, str]]:
    """``model``'s bytes, the tensors of ``io`` (``ModelIO``) to return, whether some are inner
    tensors (a cut module's outputs), and the detection outputs whose tails are undefined
    (``tflite_runner``'s arguments)."""
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    m = read_model(model)
    names = [o.name for o in io.outputs]
    inner = set(names) - {m.tensors[i].name for i in m.outputs}
    return bytes(model), names, bool(inner), detection_outputs(m)


# ------------------------------------------------------------ the interpreter on a device
def device_profile(device: Any) -> Any:
    """The numerics profile of the TFLite interpreter on ``device``
    (``canonqnn.build.remote.Device``), found as ``runtime.profile`` finds this host's: by its
    machine and by the operators its XNNPACK delegate takes there."""
    version = sources.device_runtime(device, "ai_edge_litert", "canonqnn[tflite]' or "
                                     "'ai-edge-litert==2.3.0")

    def delegated() -> frozenset[str]:
        return frozenset(kind for kind in runtime.PROBED
                         if _run_on_device(device, runtime.probe_model(kind), "BUILTIN")[2])

    return runtime.profile_of(version, device.machine, delegated)


def device_runtimes(model: Any, io: Any, profile: Any, device: Any) -> list[SourceRuntime]:
    """The TFLite interpreter on ``device`` with each of ``RESOLVERS`` (the one ``profile``
    reproduces first), run by its device server (``canonqnn.build.device_server``) as parity
    runs it here (``runtimes``)."""
    data, names, inner, detections = _prepared(model, io)
    found = []
    for resolver, what in resolvers(profile):
        source = SourceRuntime(f"TFLite interpreter (ai-edge-litert) on the device at "
                               f"{device.address}, {what} (OpResolverType.{resolver})", None)

        def run(feed: dict[str, np.ndarray], resolver: str = resolver,
                source: SourceRuntime = source) -> list[np.ndarray]:
            outputs, said, _ = _run_on_device(device, data, resolver, feed, names, inner,
                                              detections)
            source.description = f"{said} (the device at {device.address})"
            return outputs

        source.run = run
        found.append(source)
    return found


def _run_on_device(device: Any, model: bytes, resolver: str,
                   feed: dict[str, np.ndarray] | None = None, names: list[str] | None = None,
                   inner: bool = False, detections: dict[str, str] | None = None
                   ) -> tuple[list[np.ndarray], str, bool]:
    """The tensors ``names`` of the interpreter with ``resolver`` on ``device``, its
    description, and whether its delegate took operators (no ``names``: only that, the model
    is prepared, not run)."""
    from canonqnn.build.device_server import DELEGATED, DESCRIPTION

    outputs, rest = sources.run_on_device(
        device, "tflite", "the TFLite interpreter", model, feed or {}, names or [], resolver,
        inner, json.dumps(detections or {}))
    return outputs, str(rest[DESCRIPTION]), bool(rest[DELEGATED])
