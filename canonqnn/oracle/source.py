"""A source runtime as parity holds it: made by a format's oracle
(``canonqnn.frontends.<format>.oracle``), run by the parity driver (``oracle.parity``).

Plain Python: formats' oracles import it, and nothing here imports TVM or a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ParityError
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
