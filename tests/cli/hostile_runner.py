"""Runs CLI commands as separate processes, fast: a server process imports canonqnn and its
runtimes once, then forks one child per command. A child is a process of its own — its signal,
exit status, stdout and stderr are what ``canonqnn ARGS`` would give — without paying the
imports on every run. A child that outlives its timeout is killed with its process group.

``python tests/cli/hostile_corpus.py`` uses it to print the corpus table.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 120.0  # s per command; a valid build of the corpus models takes a few seconds
# The memory budget every command runs under (canonqnn's CANONQNN_MAX_MEMORY), and what a run
# is judged against: its peak resident memory above the server's, which the child shares.
BUDGET = 2 * 2**30
MARKER = "PWNED"  # what the corpus's code payloads create in the working directory


@dataclass
class Run:
    argv: list[str]
    status: int | None  # exit status, -signal when killed by one, None on timeout
    stdout: str
    stderr: str
    peak: int = 0  # bytes of resident memory above the server's at its highest

    def verdict(self, expect: str, workdir: Path) -> str:
        """The run's judged outcome (``hostile.judged``), unless it ran a payload's code or
        went over the memory budget."""
        from hostile import judged, outcome

        if (workdir / MARKER).exists():
            return "code executed"
        if self.peak > BUDGET:
            return "over budget"
        return judged(expect, outcome(self.status, self.stderr))

    def __str__(self) -> str:
        tail = " | ".join(self.stderr.strip().splitlines()[-3:])
        return f"canonqnn {' '.join(self.argv)} -> status {self.status}: {tail}"


# ------------------------------------------------------------------ the server (child side)


def _preload() -> None:
    import onnxruntime  # noqa: F401

    import canonqnn.api  # noqa: F401
    import canonqnn.build.builder  # noqa: F401
    import canonqnn.cli  # noqa: F401
    import canonqnn.frontends.onnx  # noqa: F401
    import canonqnn.frontends.tflite  # noqa: F401
    import canonqnn.rewrites  # noqa: F401

    with contextlib.suppress(ImportError):  # the torch extra: .pt2 cases then cost no import
        import canonqnn.frontends.torch.importer  # noqa: F401


def _child(request: dict) -> None:
    """In the forked child: become ``canonqnn ARGV`` and exit as it would."""
    os.setpgid(0, 0)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        os.dup2(os.open(path, flags), fd)
    os.chdir(request["cwd"])
    try:  # the peak starts here: the server's memory, shared, is not the command's
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    Path(request["baseline"]).write_text(str(_resident()))
    code = 1
    try:
        selftest = request.get("selftest")
        if selftest == "abort":
            os.abort()
        elif selftest == "hang":
            time.sleep(3600)
        elif selftest == "raise":
            raise RuntimeError("selftest")
        elif selftest == "allocate":  # 256 MiB touched: the peak the runner must see
            bytearray(256 * 2**20)
            os._exit(0)
        from canonqnn.cli import main

        sys.argv = ["canonqnn", *request["argv"]]
        code = main(request["argv"])
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001  (what the console script would print)
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _wait(pid: int, timeout: float) -> tuple[int | None, int]:
    """The child's exit status (None on timeout) and its peak resident memory in bytes."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024
        if time.monotonic() > deadline:
            _kill_group(pid)
            _, _, usage = os.wait4(pid, 0)
            return None, usage.ru_maxrss * 1024
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _resident() -> int:
    """This process's resident memory in bytes (a forked child starts with it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def serve() -> None:
    os.environ.setdefault("CANONQNN_MAX_MEMORY", str(BUDGET))
    _preload()
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing else may write on the channel
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        status, peak = _wait(pid, request["timeout"])
        _kill_group(pid)  # whatever the command left running (runtime processes)
        try:
            baseline = int(Path(request["baseline"]).read_text())
        except (OSError, ValueError):
            baseline = peak
        channel.write(json.dumps({"status": status, "peak": max(peak - baseline, 0)}) + "\n")
        channel.flush()


# ------------------------------------------------------------------ the client


class Server:
    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="canonqnn-runs-")
        self._proc = subprocess.Popen([sys.executable, __file__, "--serve"], cwd=self._dir,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, argv: list[str], cwd: str | os.PathLike | None = None,
            timeout: float = TIMEOUT, selftest: str | None = None) -> Run:
        out, err = os.path.join(self._dir, "stdout"), os.path.join(self._dir, "stderr")
        request = {"argv": list(argv), "cwd": os.fspath(cwd or self._dir), "stdout": out,
                   "stderr": err, "timeout": timeout, "selftest": selftest,
                   "baseline": os.path.join(self._dir, "baseline")}
        Path(request["baseline"]).unlink(missing_ok=True)  # the child writes its own
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline()
        if not reply:
            raise RuntimeError("the run server exited")
        reply = json.loads(reply)
        read = lambda p: Path(p).read_text(errors="replace")  # noqa: E731
        return Run(list(argv), reply["status"], read(out), read(err), reply["peak"])

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


# ------------------------------------------------------------------ the corpus table


def run_case(case, bases, server: Server, workdir: Path) -> list[tuple[Run, str]]:
    """Every command of ``case``, each with its judged outcome."""
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for argv in case.make(bases, workdir):
        run = server.run(argv, cwd=workdir)
        results.append((run, run.verdict(case.expect, workdir)))
    wrong = case.check(workdir, [run for run, _ in results]) if case.check else None
    if wrong:
        results.append((Run(["(the case's check)"], 0, "", wrong), "wrong result"))
    return results


def main(args: list[str]) -> int:
    from hostile import FAILURES, Bases, corpus

    everything = "--all" in args
    pattern = args[args.index("-k") + 1] if "-k" in args else ""
    cases = [c for c in corpus() if (everything or c.fast) and pattern in c.id]
    server = Server()
    root = Path(tempfile.mkdtemp(prefix="canonqnn-corpus-"))
    bases = Bases(root, lambda argv: server.run(argv, cwd=root))
    table: dict[str, Counter] = defaultdict(Counter)
    peaks: Counter = Counter()
    failed = []
    started = time.monotonic()
    for k, case in enumerate(cases, 1):
        for run, got in run_case(case, bases, server, root / case.family / case.name):
            table[case.family][got] += 1
            peaks[case.family] = max(peaks[case.family], run.peak)
            if got in FAILURES or got.startswith("exit"):
                failed.append((case.id, got, run))
        print(f"\r[{k}/{len(cases)}] {case.id:<60}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    server.close()
    columns = ["accepted", "refused", *FAILURES]
    columns += sorted({o for c in table.values() for o in c} - set(columns))
    print(f"{len(cases)} cases, {sum(sum(c.values()) for c in table.values())} runs, "
          f"{time.monotonic() - started:.0f} s; memory budget {BUDGET / 2**30:g} GiB a command")
    print("| family | cases | " + " | ".join(columns) + " | peak MiB |")
    print("|---|---|" + "---|" * (len(columns) + 1))
    per_family = Counter(c.family for c in cases)
    for family in per_family:
        counts = table[family]
        print(f"| {family} | {per_family[family]} | "
              + " | ".join(str(counts[c]) for c in columns)
              + f" | {peaks[family] / 2**20:.0f} |")
    for case_id, got, run in failed:
        print(f"FAIL {case_id}: {got}: {run}")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        sys.exit(main(sys.argv[1:]))
