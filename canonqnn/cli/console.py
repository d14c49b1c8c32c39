"""What the command line shows besides its output: progress, notes, and other packages' logs.

stdout is the command's output (text, or one JSON document with ``--json``); stderr carries
canonqnn's notes and errors, and progress while a step runs, drawn only on a terminal (with
``rich``: a spinner, the step, a count where the step has one, the time) and never under
``--json`` or ``--quiet``. What other packages print while a command runs (native code writing
to the stderr descriptor, Python loggers and warnings: onnxruntime, the TFLite interpreter,
ExecuTorch, torch, MetaSchedule, XGBoost) goes to a temporary file and is dropped, unless
``--verbose``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any, TextIO

from .. import progress

# MetaSchedule configures its own logger (a console handler at the logger's level) when tuning
# starts: above INFO it logs neither its task tables nor XGBoost's iterations.
_QUIET_LOGGERS = ("tvm.s_tir.meta_schedule",)


class Console:
    """The stderr side of one command, and its ``progress.Reporter``: notes unless ``quiet``,
    progress on a terminal unless ``quiet`` or ``machine_output`` (``--json``)."""

    def __init__(self, quiet: bool = False, machine_output: bool = False) -> None:
        self.quiet = quiet
        self.machine_output = machine_output
        self.stream: TextIO = sys.stderr  # canonqnn's own messages (``session``)
        self._drawn: _TerminalProgress | None = None

    @contextlib.contextmanager
    def session(self, verbose: bool) -> Iterator[None]:
        """Run a command: other packages' output captured unless ``verbose``, the steps of
        the command shown on a terminal."""
        with _other_packages_output(verbose) as stream:
            self.stream = stream
            if not (self.quiet or self.machine_output) and _is_terminal(stream):
                self._drawn = _TerminalProgress(stream)
            try:
                with progress.reporting(self):
                    yield
            finally:
                if self._drawn is not None:
                    self._drawn.close()
                    self._drawn = None
                self.stream = sys.stderr

    # -- progress.Reporter
    def begin(self, what: str, total: int | None) -> None:
        if self._drawn is not None:
            self._drawn.begin(what, total)

    def advance(self, units: int = 1) -> None:
        if self._drawn is not None:
            self._drawn.advance(units)

    def end(self) -> None:
        if self._drawn is not None:
            self._drawn.end()

    def note(self, message: str) -> None:
        """A note on what canonqnn chose or why it waits (as compilers print notes)."""
        if self.quiet:
            return
        line = f"canonqnn: note: {message}"
        if self._drawn is not None:
            self._drawn.print(line)
        else:
            print(line, file=self.stream, flush=True)


def _count(done: int, total: float | None) -> str:
    """A counted step's progress, "2/3" (nothing for a step that does not count)."""
    return f"{done}/{int(total)}" if total is not None else ""


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _TerminalProgress:
    """One line per open step, drawn with ``rich`` and removed when the step ends (what stays
    on the terminal is the command's output)."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console as RichConsole
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        # (sys.stdout and sys.stderr stay as they are: what other packages write there is
        # captured, not drawn above the progress)
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                             TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                             console=RichConsole(file=stream),
                             transient=True, redirect_stdout=False, redirect_stderr=False)
        self._steps: list[Any] = []

    def begin(self, what: str, total: int | None) -> None:
        if not self._steps:
            self._bar.start()
        self._steps.append(self._bar.add_task("  " * len(self._steps) + what, total=total,
                                              count=_count(0, total)))

    def advance(self, units: int) -> None:
        if self._steps:
            task = self._bar.tasks[-1]
            done = int(task.completed) + units
            self._bar.update(self._steps[-1], completed=done, count=_count(done, task.total))

    def end(self) -> None:
        if self._steps:
            self._bar.remove_task(self._steps.pop())
        if not self._steps:
            self._bar.stop()

    def print(self, line: str) -> None:
        self._bar.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        while self._steps:
            self.end()


@contextlib.contextmanager
def _other_packages_output(verbose: bool) -> Iterator[TextIO]:
    """Yield the stream for canonqnn's own messages while other packages' output is captured
    (unless ``verbose``): the stderr descriptor, and so ``sys.stderr``, point at a temporary
    file; canonqnn writes to a copy of the original descriptor. Where ``sys.stderr`` is not
    the process's descriptor 2 (a caller capturing it), it is the stream and nothing moves."""
    if verbose:
        os.environ[progress.VERBOSE_ENV] = "1"
        root, handler = logging.getLogger(), logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield sys.stderr
        finally:
            root.removeHandler(handler)
            root.setLevel(level)
            os.environ.pop(progress.VERBOSE_ENV, None)
        return
    try:
        own = sys.stderr.fileno() == 2
    except (AttributeError, ValueError, OSError):  # a caller's capture object
        own = False
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        if not own:
            yield sys.stderr
            return
        with tempfile.TemporaryFile() as log:
            sys.stderr.flush()
            saved = os.dup(2)
            stream = os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding,
                               errors="backslashreplace")
            os.dup2(log.fileno(), 2)
            try:
                yield stream
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                stream.close()
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
