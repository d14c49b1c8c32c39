"""Progress of the steps that can take seconds, for whoever shows it.

Library code marks a long step with ``step("probing ...")`` (and, where it counts, advances
it), and says what the user should know while it waits with ``note``; steps are shown only
where a ``Reporter`` is installed with ``reporting``: the command line installs one that draws
on a terminal (``canonqnn.cli.console``), a program may install its own. Steps nest; a
reporter sees each begin and end in order, from the thread that runs them (a note may come
from another thread).

``verbose()``: whether other packages' messages are to be shown (``--verbose``); where it is
false, canonqnn keeps what runtimes print while they set up out of its output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Protocol


class Reporter(Protocol):
    def begin(self, what: str, total: int | None) -> None:
        """A step starts: ``what`` it does, and ``total`` units of work when it counts them."""

    def advance(self, units: int = 1) -> None:
        """The innermost step did ``units`` more of its work."""

    def end(self) -> None:
        """The innermost step ended (done, or left by an exception)."""

    def note(self, message: str) -> None:
        """Something the user should know now (why a step waits, what was chosen)."""


_reporters: list[Reporter] = []


def _ignore(units: int = 1) -> None:
    del units


@contextlib.contextmanager
def step(what: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A long step: ``what`` it does (a phrase, "building with tvm.compile"), and ``total``
    units of work where it counts them. Yields ``advance(units=1)``."""
    if not _reporters:
        yield _ignore
        return
    reporter = _reporters[-1]
    reporter.begin(what, total)
    try:
        yield reporter.advance
    finally:
        reporter.end()


def note(message: str) -> None:
    """Tell the user ``message`` (on stderr, as ``canonqnn: note: ...``, where no reporter
    is installed)."""
    if _reporters:
        _reporters[-1].note(message)
    else:
        print(f"canonqnn: note: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Show the steps run inside the block with ``reporter``."""
    _reporters.append(reporter)
    try:
        yield reporter
    finally:
        _reporters.remove(reporter)


# Set by the command line's --verbose, for the command and the processes it starts.
VERBOSE_ENV = "CANONQNN_VERBOSE"


def verbose() -> bool:
    """Whether what other packages print is to be shown (``--verbose``)."""
    return os.environ.get(VERBOSE_ENV) == "1"
