"""Errors raised by canonqnn. Every user-facing failure is a ``CanonqnnError``.

Messages name where the problem is (node, op) and why, so the CLI can print them as they are.
"""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (libraries append context and tracebacks to
    theirs), or its type's name when it has none: what a one-line error quotes."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class CanonqnnError(Exception):
    """Base class: the CLI prints the message without a traceback and exits non-zero."""


class InvalidModelError(CanonqnnError):
    """The input is not a readable model (not ONNX, truncated, fails validation)."""


class UnsupportedError(CanonqnnError):
    """The model uses something canonqnn does not implement.

    ``problems`` lists every unsupported ``(node, op, reason)`` found, not just the first.
    """

    def __init__(self, problems: list[tuple[str, str, str]], source: str = "",
                 hint: str = "") -> None:
        self.problems = list(problems)
        head = f"{source}: " if source else ""
        lines = [f"node {node!r} (op {op}): {reason}" for node, op, reason in self.problems]
        if len(lines) == 1:
            message = head + lines[0]
        else:
            message = f"{head}{len(lines)} unsupported nodes:\n  " + "\n  ".join(lines)
        super().__init__(message + (f"\n{hint}" if hint else ""))


def cut_hint(tensors: list[str]) -> str:
    """How to import a model up to unsupported nodes (post-processing at its end) reading
    ``tensors``."""
    if not tensors:
        return ""
    names = ",".join(dict.fromkeys(tensors))
    return (f"to convert the model up to them, cut it where they start: --outputs {names} "
            "(load(model, outputs=[...]))")


class InvalidQuantizationError(CanonqnnError):
    """Quantization parameters that define no valid mapping (zero, negative or NaN scales, ...)."""


class ParityError(CanonqnnError):
    """A parity run could not be set up (missing runtime, inputs of the wrong shape, ...)."""


class ResourceError(CanonqnnError):
    """A tensor or a run needs more memory than the budget allows (``canonqnn.budget``)."""


class VerificationError(CanonqnnError):
    """A build computes otherwise than the numpy reference of its canonical module."""
