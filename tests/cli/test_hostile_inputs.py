"""Malformed and adversarial inputs through every command end as promised: exit 2 with one
``canonqnn: error:`` line, or accepted when valid — never a signal, a hang, a traceback, an
internal error or an invalid input accepted. The corpus is ``hostile/`` (a fast
subset here by default, every case under ``-m slow``); each command runs as a process of its
own (``hostile_runner.Server``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hostile import ACCEPTED, FAILURES, REFUSED, Bases, Case, corpus, judged, outcome
from hostile_runner import BUDGET, MARKER, Run, Server, run_case

CASES = corpus()


@pytest.fixture(scope="module")
def server():
    running = Server()
    yield running
    running.close()


@pytest.fixture(scope="module")
def bases(server, tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    return Bases(root, lambda argv: server.run(argv, cwd=root))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=() if c.fast
                                               else pytest.mark.slow) for c in CASES])
def test_case_ends_as_promised(case, server, bases, tmp_path):
    failures = [f"{got}: {run}" for run, got in run_case(case, bases, server, tmp_path)
                if got in FAILURES or got.startswith("exit")]
    assert not failures, "\n".join(failures)


def test_corpus_is_large_and_covers_every_family_and_command():
    assert len(CASES) >= 300
    families = Counter(c.family for c in CASES)
    assert set(families) == {"onnx-model", "tflite-model", "onnx-bytes", "tflite-bytes",
                             "module-json", "library", "inputs", "arguments", "pt2",
                             "module-bombs", "memory-bombs", "verdicts"}
    assert all(any(c.fast for c in CASES if c.family == f) for f in families)
    assert sum(c.expect == REFUSED for c in CASES) >= 150
    assert sum(c.expect == ACCEPTED for c in CASES) >= 8


@pytest.mark.parametrize("status, stderr, expect, verdict", [
    (-6, "", REFUSED, "crash"),
    (None, "", REFUSED, "hang"),
    (1, "Traceback (most recent call last):\n  ...", REFUSED, "traceback"),
    (3, "canonqnn: internal error (a bug ...)", REFUSED, "internal error"),
    (0, "", REFUSED, "accepted invalid"),
    (2, "canonqnn: error: bad model", ACCEPTED, "refused valid"),
    (2, "canonqnn: error: bad model", REFUSED, "refused"),
    (2, "usage: canonqnn ...\ncanonqnn convert: error: bad option", REFUSED, "refused"),
    (2, "something else", REFUSED, "exit 2"),
    (2, "canonqnn: error: a: 2 unsupported nodes:\ncanonqnn: error:   node 'n' (op X): why",
     REFUSED, "refused"),
    (2, "canonqnn: error: a: 2 unsupported nodes:\n  node 'n' (op X): why", REFUSED,
     "noisy refusal"),
    (2, "2026-01-01 [W:onnxruntime] a warning\ncanonqnn: error: bad model", REFUSED,
     "noisy refusal"),
    (2, "canonqnn: error: m.onnx: ValueError: bad value", REFUSED, "raw exception text"),
    (2, "canonqnn: error: m.tflite: IndexError", REFUSED, "raw exception text"),
    (2, "canonqnn: error: m.json: TVMError: check failed", REFUSED, "raw exception text"),
    (2, "usage: canonqnn run [-h]\n    more usage\ncanonqnn run: error: bad option", REFUSED,
     "refused"),
    (2, "usage: canonqnn run [-h]\ncanonqnn run: error: bad option\nmore", REFUSED,
     "exit 2"),
])
def test_outcomes_are_judged_strictly(status, stderr, expect, verdict):
    assert judged(expect, outcome(status, stderr)) == verdict


def test_a_run_that_ran_a_payload_or_went_over_the_budget_fails_whatever_it_printed(tmp_path):
    refused = Run(["convert", "m.pt2"], 2, "", "canonqnn: error: m.pt2: refused")
    assert refused.verdict(REFUSED, tmp_path) == "refused"
    assert Run(refused.argv, 2, "", refused.stderr, BUDGET + 1).verdict(
        REFUSED, tmp_path) == "over budget"
    (tmp_path / MARKER).touch()
    assert refused.verdict(REFUSED, tmp_path) == "code executed"
    assert {"code executed", "over budget"} <= set(FAILURES)


def test_a_case_whose_check_finds_a_wrong_result_fails(server, bases, tmp_path):
    case = Case("arguments", "checked", ACCEPTED, lambda b, d: [["ops"]],
                check=lambda d, runs: None if runs[0].status else "left a wrong file")
    (*_, (run, got)) = run_case(case, bases, server, tmp_path)
    assert (got, run.stderr) == ("wrong result", "left a wrong file")
    assert "wrong result" in FAILURES


def test_the_runner_measures_a_commands_peak_memory(server, tmp_path):
    run = server.run(["--version"], cwd=tmp_path)
    assert 0 <= run.peak < 2**30
    grows = server.run([], cwd=tmp_path, selftest="allocate")
    assert grows.peak >= 200 * 2**20


@pytest.mark.parametrize("selftest, status", [("abort", -6), ("hang", None), ("raise", 1)])
def test_the_runner_sees_signals_hangs_and_tracebacks(server, tmp_path, selftest, status):
    run = server.run([], cwd=tmp_path, timeout=2.0, selftest=selftest)
    assert run.status == status
    if selftest == "raise":
        assert "Traceback (most recent call last)" in run.stderr


def test_a_forked_run_ends_as_the_installed_command_does(server, bases, tmp_path):
    """The runner's children behave as ``canonqnn`` run from a shell."""
    executable = shutil.which("canonqnn") or pytest.fail("the canonqnn command is not installed")
    garbage = tmp_path / "m.onnx"
    garbage.write_bytes(b"not a model")
    for argv in (["convert", str(bases.onnx), "-o", str(tmp_path / "m.json")],
                 ["convert", str(garbage)]):
        forked = server.run(argv, cwd=tmp_path)
        real = subprocess.run([executable, *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert (forked.status, forked.stderr.strip().splitlines()[-1:]) == \
            (real.returncode, real.stderr.strip().splitlines()[-1:])


def test_the_table_script_prints_families_and_outcomes(tmp_path):
    script = Path(__file__).with_name("hostile_corpus.py")
    result = subprocess.run([sys.executable, str(script), "-k", "arguments/runs_0"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| arguments | 1 | 0 | 1 | 0 |" in result.stdout
