"""A case of the hostile-input corpus, and how a run of it is judged."""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .artifacts import Bases

REFUSED, ACCEPTED, EITHER = "refused", "accepted", "either"
SEED = 20261126


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    expect: str
    make: Callable[[Bases, Path], list[list[str]]]  # writes files in the dir, returns argvs
    fast: bool = False  # in the default test run
    # after the runs: what is wrong with their results or the files they left, else None
    check: Callable[[Path, list], str | None] | None = None

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}"


FAILURES = ("crash", "hang", "traceback", "internal error", "accepted invalid",
            "refused valid", "noisy refusal", "raw exception text", "code executed",
            "over budget", "wrong result")

# A refusal says what is wrong in canonqnn's words: an exception class's name in it means a
# library's message was passed through (Python's own exceptions, and those of the libraries
# canonqnn calls: TVM, onnx, protobuf, onnxruntime).
_EXCEPTION_NAMES = sorted(
    {name for name, value in vars(builtins).items()
     if isinstance(value, type) and issubclass(value, BaseException)
     and not issubclass(value, Warning)}
    | {"TVMError", "InternalError", "DecodeError", "ValidationError", "InferenceError",
       "ONNXRuntimeError", "Fail", "InvalidArgument", "InvalidGraph", "RuntimeException"})
_RAW_EXCEPTION = re.compile(r"\b(?:" + "|".join(_EXCEPTION_NAMES) + r")\b")
_ERROR_LINE = "canonqnn: error: "
# argparse's own refusals: the usage, then ``canonqnn CMD: error: ...``
_USAGE_ERROR = re.compile(r"\Ausage: canonqnn.*^canonqnn( [a-z]+)?: error: [^\n]*\n?\Z",
                          re.M | re.S)


def outcome(status: int | None, stderr: str) -> str:
    """What one run did: accepted, refused, or how it failed."""
    if status is None:
        return "hang"
    if status < 0:
        return "crash"
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    if status == 3 or "internal error" in stderr:
        return "internal error"
    if status == 2 and _USAGE_ERROR.match(stderr.strip() + "\n"):
        return "refused"
    if status == 2 and re.search(r"^canonqnn: error: ", stderr, re.M):
        lines = stderr.strip().splitlines()
        if not all(line.startswith(_ERROR_LINE) for line in lines):
            return "noisy refusal"  # a library's output, or a message's continuation lines
        if _RAW_EXCEPTION.search(stderr):
            return "raw exception text"
        return "refused"
    if status in (0, 1):
        return "accepted"
    return f"exit {status}"


def judged(expect: str, got: str) -> str:
    """``got`` against what the case expects: a failure name, or the outcome when fine."""
    if got in ("accepted", "refused"):
        if expect == REFUSED and got == "accepted":
            return "accepted invalid"
        if expect == ACCEPTED and got == "refused":
            return "refused valid"
    return got
