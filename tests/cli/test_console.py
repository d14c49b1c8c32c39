"""The command's stderr: canonqnn's notes reach the user; what other packages print (native
writes to descriptor 2, Python warnings and log records) is kept out unless --verbose."""

from __future__ import annotations

import subprocess
import sys

import pytest

SNIPPET = """
import logging, os, sys, warnings
from canonqnn import progress
from canonqnn.cli.console import Console
console = Console()
with console.session(verbose={verbose}):
    os.write(2, b"native runtime log\\n")
    print("python print to stderr", file=sys.stderr)
    warnings.warn("a deprecation")
    logging.getLogger("onnxruntime").warning("a logger's warning")
    progress.note("what canonqnn says")
    with progress.step("a step"):
        pass
print("after", file=sys.stderr)
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_other_packages_output_shows_only_when_verbose(verbose):
    done = subprocess.run([sys.executable, "-c", SNIPPET.format(verbose=verbose)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "canonqnn: note: what canonqnn says" in lines
    assert lines[-1] == "after"  # the descriptor is back where it was
    others = ["native runtime log", "python print to stderr", "a deprecation",
              "a logger's warning"]
    shown = [text for text in others if text in done.stderr]
    assert shown == (others if verbose else []), done.stderr
    assert not done.stdout


def test_quiet_drops_notes():
    snippet = ("from canonqnn import progress\nfrom canonqnn.cli.console import Console\n"
               "with Console(quiet=True).session(verbose=False):\n"
               "    progress.note('a note')\n")
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
