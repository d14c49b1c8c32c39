"""A case of the hostile-input corpus, and how a run of it is judged."""

from __future__ import annotations

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

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}"


FAILURES = ("crash", "hang", "traceback", "internal error", "accepted invalid",
            "refused valid")


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
    if status == 2 and re.search(r"^canonqnn( [a-z]+)?: error: ", stderr, re.M):
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
