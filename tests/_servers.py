"""Servers the tests start and stop: canonqnn's device server and TVM's RPC processes
(tests/build/, tests/cli/), the viewer and Model Explorer (tests/view/, tests/cli/)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

STARTUP_SECONDS = 300


@contextlib.contextmanager
def serving(*command: str) -> Iterator[str]:
    """A server started by ``python COMMAND``, as the HOST:PORT its first line names; stopped
    when the block ends."""
    proc = subprocess.Popen([sys.executable, *command], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("serving on "), line
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(30)


class Served:
    """A server process and the first line of its stdout that holds ``says`` (read without
    blocking the test past ``STARTUP_SECONDS``; a process that ends first fails at once, with
    its stderr)."""

    def __init__(self, argv: list[str], cwd: Path, says: str) -> None:
        # (unbuffered: Model Explorer's command prints its address without flushing it)
        self.process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in self.process.stdout or []:
                lines.put(line)
            lines.put(None)  # the end of its output

        threading.Thread(target=read, daemon=True).start()
        self.line = ""
        try:
            while says not in self.line:
                line = lines.get(timeout=STARTUP_SECONDS)
                if line is None:
                    raise queue.Empty
                self.line = line
        except queue.Empty:
            self.stop()
            raise AssertionError(f"{argv} said nothing with {says!r}: "
                                 f"{self.stderr()}") from None

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Stop it with ``signum``: its exit status."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.process.kill()

    def stderr(self) -> str:
        return self.process.stderr.read() if self.process.stderr else ""
