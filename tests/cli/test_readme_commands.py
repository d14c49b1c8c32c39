"""Each command line of the README as written there runs, through the command-line process
(``_commands``); the one that parity-checks a PyTorch program runs on a pseudo-terminal with the
installed ``canonqnn``, where its progress shows."""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from _commands import command_runner, make_files, run_command
from _devices import DEVICE_SERVER
from _servers import Served, serving
from canonqnn.numerics import PROFILES

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "device:9190"  # how the README names a device: a device server run here in the tests
# README lines run under -m slow: --tune takes minutes; the served view with parity, 20 s, is
# loaded in a browser by CI's browser run (tests/view/test_browser.py)
SLOW_LINES = ("--tune", "canonqnn view model.onnx --parity")
# Run on a terminal by the installed command (``_on_a_terminal``), where its progress shows.
ON_A_TERMINAL = ("canonqnn parity model.pt2",)
# Lines that serve until interrupted: run until they answer, then stopped as Ctrl+C would.
SERVES = ("canonqnn view model.onnx --parity",)


def readme_commands() -> list[str]:
    """The ``canonqnn`` command lines of the README's shell blocks, without their comments."""
    text = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            if line.startswith("canonqnn "):
                lines.append(shlex.join(shlex.split(line, comments=True)))
    return lines


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return make_files(tmp_path_factory.mktemp("readme"), program=True)


runner = pytest.fixture(scope="module")(command_runner)


@pytest.fixture(scope="module")
def device():
    """A device server on this host: what ``device:9190`` in the README stands for."""
    with serving(DEVICE_SERVER, "--port", "19400", "--port-end", "19500") as address:
        yield address


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(argv: list[str], cwd, timeout: float = 600.0) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal: its status and all it
    drew (escape sequences removed, carriage returns as line ends)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    drawn, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    text = _ESCAPES.sub("", drawn.decode(errors="replace")).replace("\r", "\n")
    return status, text


@pytest.mark.parametrize("line", [
    pytest.param(line, marks=[pytest.mark.slow] if any(s in line for s in SLOW_LINES) else [])
    for line in readme_commands()])
def test_each_readme_command_line_runs_as_written(runner, workdir, device, line):
    argv = [device if a == DEVICE else a for a in shlex.split(line)[1:]]
    if line in ON_A_TERMINAL:
        _shows_its_steps_on_a_terminal(argv, workdir)
        return
    if line in SERVES:
        _serves_until_interrupted(argv, workdir)
        return
    run = run_command(runner, workdir, argv)
    assert run.stdout.strip(), run  # each of these prints its result


def _serves_until_interrupted(argv: list[str], workdir: Path) -> None:
    """``canonqnn ARGV`` prints the page's address once the server answers there, and stops
    on SIGINT (Ctrl+C) with its temporary files removed; the browser page itself is
    ``tests/view/test_browser.py``'s."""
    served = Served([sys.executable, "-m", "canonqnn.cli", *argv], workdir, "Model Explorer: ")
    files: list[str] = []
    try:
        url = served.line.split(": ", 1)[1].strip()
        with urllib.request.urlopen(url.split("/?")[0] + "/check_health", timeout=30) as page:
            assert page.read() == b"model_explorer_ok"
        files = re.findall(r"/[^\s\"]+\.json", urllib.parse.unquote(url))
        assert files and all(os.path.exists(f) for f in files), url
    finally:
        status = served.stop(signal.SIGINT)
    assert status == 0, served.stderr()  # stopping is how serving ends (docs/cli.md)
    assert not any(os.path.exists(f) for f in files)


def _shows_its_steps_on_a_terminal(argv: list[str], workdir: Path) -> None:
    """The installed ``canonqnn ARGV`` on a terminal draws each long step (the probe of
    ExecuTorch's XNNPACK, the build, the runs) while it runs; the result stays: the build is
    bit-exact with ExecuTorch's XNNPACK delegate, converted for its numerics here (its sigmoid a
    lookup table where canonqnn reproduces this host's class), eager PyTorch within its bound
    beside it; nothing other packages print while they set up is drawn."""
    command = shutil.which("canonqnn")
    if command is None:
        pytest.fail("the canonqnn command is not installed (pip install .)")
    status, text = _on_a_terminal([command, *argv], workdir)
    assert status == 0, text
    spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    steps = {line.strip()[1:].strip() for line in text.splitlines()
             if line.strip()[:1] and line.strip()[0] in spinner}
    for step in ("reading model.pt2", "probing the numerics of ExecuTorch's XNNPACK on this host",
                 "converting to canonical ops", "building with tvm.compile",
                 "running the build and the source runtimes on 3 inputs"):
        assert any(s.startswith(step) for s in steps), (step, steps)
    assert "PARITY: bit-exact" in text and "Traceback" not in text
    assert "cpuinfo" not in text and "_pytree" not in text, text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert any(line.startswith("reference: ExecuTorch 1.5.1, XNNPACK delegate")
               for line in lines), text
    numerics = re.search(r"^numerics: (\S+) \(this host's runtime: (\S+)\)$", text, re.M)
    assert numerics and numerics[1] == numerics[2], text
    tables_unverified = PROFILES[numerics[1]].tables == "unverified"
    assert ("float islands: none" in lines) != tables_unverified, text
    eager = lines[lines.index(next(line for line in lines if line.startswith(
        "also compared (not the specification): PyTorch 2.13.0"))) + 1]
    assert float(re.search(r"max \|diff\| (\S+) LSB", eager)[1]) <= 1 + 1e-3  # docs/parity.md


def test_the_readme_names_every_command_and_a_model_of_each_format():
    argv = [shlex.split(line)[1:] for line in readme_commands()]
    assert {a[0] for a in argv} >= {"convert", "build", "run", "inspect", "parity", "ops",
                                    "patterns"}
    assert {"model.onnx", "model.tflite", "model.pt2", "model.canonqnn.json",
            "model.so"} <= {a for args in argv for a in args}
    assert not [a for args in argv for a in args if a.startswith("xnnpack-x86")], \
        "a host-specific profile in a command line is wrong on other host classes"


