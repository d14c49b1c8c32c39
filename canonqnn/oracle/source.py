"""A source runtime as parity holds it: made by a format's oracle
(``canonqnn.frontends.<format>.oracle``), run by the parity driver (``oracle.parity``).

Plain Python: formats' oracles import it, and nothing here imports TVM or a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ParityError, first_line
from . import isolated


@dataclass
class SourceRuntime:
    """A runtime the model's own numerics come from, in a child process (``isolated``): a
    crash there is a ``ParityError``. ``run(feed)`` gives the outputs in the order of the
    module's recorded outputs; ``None`` when the runtime cannot run the model (said in
    ``description``)."""

    description: str
    run: Any
    child: isolated.Child | None = None

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


def isolated_runtime(description: str, child: isolated.Child) -> SourceRuntime:
    """The runtime ``child`` runs: a failure on an input is a ``ParityError`` naming it."""
    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return child(feed)
        except isolated.Failed as exc:
            raise ParityError(f"the source runtime ({child.name}) failed on this input: "
                              f"{exc}") from None

    return SourceRuntime(description, run, child)


def not_compared(description: str, exc: ParityError) -> str:
    """The description of a runtime only compared beside the specification, which failed."""
    if isinstance(exc, isolated.Crashed):
        return (f"{description}: crashed on this model ({exc.how}); the crash is in that "
                "runtime, not in canonqnn")
    if isinstance(exc, isolated.Failed):  # at setup
        return f"{description}: cannot run this model: {exc}"
    return f"{description}: {exc}"


def ready(children: list[isolated.Child], descriptions: list[str],
          runtime: str) -> list[SourceRuntime]:
    """The children as runtimes once set up: the first is the specification (its failure is the
    error), the others are compared beside it (a failure is said in their description). A
    child's factory may describe itself (its ``info``)."""
    runtimes = []
    for k, (description, child) in enumerate(zip(descriptions, children)):
        try:
            info = child.ready()
        except ParityError as exc:
            child.close()
            if k > 0:
                runtimes.append(SourceRuntime(not_compared(description, exc), None))
                continue
            for other in children:
                other.close()
            if isinstance(exc, isolated.Crashed):
                raise
            raise ParityError(f"{runtime} cannot run this model: {exc}") from None
        runtimes.append(isolated_runtime(info if isinstance(info, str) else description, child))
    return runtimes


def device_runtime(device: Any, package: str, install: str) -> str:
    """The version of the runtime ``package`` (its Python package's name) installed on
    ``device``, or an error saying how to install it there (``install``: what to pip install)
    or that the device's server is not canonqnn's (it does not say what it runs)."""
    if device.machine is None:
        raise ParityError(f"the device at {device.address} does not say what it runs: start "
                          f"canonqnn's device server there (python -m "
                          f"canonqnn.build.device_server, docs/devices.md)")
    version = device.runtimes.get(package)
    if version is None:
        raise ParityError(f"the device at {device.address} has no {package}: pip install "
                          f"'{install}' there")
    return str(version)


def run_on_device(device: Any, function: str, runtime: str, model: bytes,
                  feed: dict[str, np.ndarray], names: list[str],
                  *settings: Any) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """The tensors ``names`` the device server's ``canonqnn.device.<function>``
    (``canonqnn.build.device_server``) computes on ``device`` for the serialized ``model`` and
    ``feed``, called with ``settings`` after them, and the other entries of its answer (the
    runtime's description, ...). ``runtime``: its name in errors."""
    import io
    import json

    from ..build.device_server import PREFIX

    buffer = io.BytesIO()
    inputs: dict[str, Any] = dict(feed)
    np.savez(buffer, **inputs)
    run_there = device.function(PREFIX + function)
    try:
        blob = run_there(bytearray(model), bytearray(buffer.getvalue()), json.dumps(names),
                         *settings)
    except Exception as exc:  # noqa: BLE001  (the device's error, carried by TVM's RPC)
        raise ParityError(f"{runtime} on the device at {device.address} failed: "
                          f"{_remote_error(exc)}") from None
    with np.load(io.BytesIO(bytes(blob)), allow_pickle=False) as arrays:
        outputs = [f"arr_{k}" for k in range(len(names))]
        return ([arrays[key] for key in outputs],
                {key: arrays[key] for key in arrays.files if key not in outputs})


def _remote_error(exc: Exception) -> str:
    """The device's own message in an error TVM's RPC carried back (its last line that says
    something), else the error's first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if "Error" in line and ":" in line]
    return said[-1] if said else first_line(exc)
