"""Runtimes canonqnn cannot check, run in a child process: a crash there is an error here.

Parity runs the user's model in its source runtime (onnxruntime, the TFLite interpreter), and
some models crash those runtimes instead of being refused: a TFLite output scale of 1e38 fails
a CHECK (SIGABRT), a TFLite_Detection_PostProcess without its options segfaults. In this
process such a crash would end canonqnn on a signal, with no message; in a child it is a
``Crashed`` error naming the runtime and the signal.

A ``Child`` is one long-lived process for one runtime: ``factory(*args)``, called there, returns
``(function, info)``; every call of the ``Child`` runs ``function`` there, arguments and results
pickled over a socket. Children are fresh interpreters started by fork + exec (safe whatever
threads TVM and onnxruntime run in this process) that import only what their factories need,
and are reused once closed (``_IDLE``). ``multiprocessing``'s "spawn" and "forkserver" would
also re-run this process's ``__main__`` in the child (a user's script calling ``parity``
unguarded by ``if __name__ == "__main__"`` would fail) and start a helper process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

from ..errors import CanonqnnError, ParityError, first_line

# Where canonqnn imports from: the folder holding the canonqnn package.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = ("import sys; sys.path.insert(0, {root!r}); "
         "from canonqnn.oracle.isolated import _serve; _serve({fd})")

# Children whose runtime was closed, kept for the next ``Child``: starting an interpreter and
# importing numpy and a runtime costs ~0.3 s of CPU, more than a small model's whole parity
# run, so a process that ran parity once starts none for the next run. At most three: TFLite
# parity runs three op resolvers at once.
_IDLE: list[tuple[Connection, subprocess.Popen]] = []
_IDLE_MAX = 3


class Crashed(ParityError):
    """The child running a runtime died (on a signal, or by exiting) instead of answering."""

    def __init__(self, name: str, how: str) -> None:
        self.how = how  # "SIGABRT", "exit status 1"
        super().__init__(f"the source runtime ({name}) crashed on this model ({how}): the "
                         "crash is in that runtime, not in canonqnn")


class Failed(ParityError):
    """The runtime raised an exception in the child: its message (the first line, or the whole
    message of a ``CanonqnnError``)."""


class Child:
    """``factory(*args)`` in a child process (module doc); ``name`` names the runtime in
    errors. ``ready()`` waits for the factory; calls wait for ``ready()`` first."""

    def __init__(self, name: str, factory: Callable[..., tuple[Callable, Any]], *args: Any):
        self.name = name
        self._args: tuple | None = args  # sent by ready(): a large model would block here
        self._info: Any = None
        self._setup_failure: Failed | None = None
        self._busy = False  # a request sent, its reply not read
        self._conn, self._process = _idle_child() or _new_child()
        self._finalizer = weakref.finalize(self, _stop, self._conn, self._process)
        # small: the child imports the factory's module while this process goes on; an
        # OSError means it died already, and ready() says how
        with contextlib.suppress(OSError):
            self._conn.send(("setup", sys.path, pickle.dumps(factory)))

    def ready(self) -> Any:
        """The ``info`` the factory returned; raises ``Failed`` or ``Crashed``."""
        if self._setup_failure is not None:
            raise self._setup_failure
        if self._args is not None:
            args, self._args = self._args, None
            try:
                self._info = self._request("args", args)
            except Failed as exc:
                self._setup_failure = exc
                raise
        return self._info

    def __call__(self, *args: Any) -> Any:
        self.ready()
        return self._request("call", args)

    def close(self) -> None:
        """Free the runtime; the process is kept for the next ``Child`` if it is sound."""
        if not self._finalizer.alive:
            return
        if not self._busy and self._process.poll() is None and len(_IDLE) < _IDLE_MAX:
            try:
                self._conn.send(("release",))
            except OSError:
                pass
            else:
                self._finalizer.detach()
                _IDLE.append((self._conn, self._process))
                return
        self._finalizer()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _request(self, kind: str, args: tuple) -> Any:
        if not self._finalizer.alive:
            raise CanonqnnError(f"the {self.name} process was closed")
        self._busy = True
        try:
            self._conn.send((kind, args))
            reply, value = self._conn.recv()
        except (EOFError, OSError):
            raise self._crashed() from None
        self._busy = False
        if reply == "raised":
            raise Failed(value)
        return value

    def _crashed(self) -> Crashed:
        self._conn.close()
        try:  # exiting: its pipe closes before its exit status is known
            how = _how(self._process.wait(5))
        except subprocess.TimeoutExpired:
            how = "closed its pipe without exiting"
        self._finalizer()
        return Crashed(self.name, how)


def _new_child() -> tuple[Connection, subprocess.Popen]:
    ours, theirs = Pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _BOOT.format(root=_ROOT, fd=theirs.fileno())],
            # what a runtime prints goes to stderr: stdout is canonqnn's (--json)
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=2)
    finally:
        theirs.close()
    return ours, process


def _idle_child() -> tuple[Connection, subprocess.Popen] | None:
    while _IDLE:
        conn, process = _IDLE.pop()
        if process.poll() is None:
            return conn, process
        _stop(conn, process)
    return None


def _stop_idle() -> None:
    while _IDLE:
        _stop(*_IDLE.pop())


atexit.register(_stop_idle)
os.register_at_fork(after_in_child=_IDLE.clear)  # a forked process's children are not its own


def _how(code: int) -> str:
    """How a process ended, from its exit code (minus the signal that ended it)."""
    if code >= 0:
        return f"exit status {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _stop(conn: Connection, process: subprocess.Popen) -> None:
    """End the child and reap it. Killed rather than left to exit: it holds nothing to save,
    and its interpreter's teardown would cost a tenth of a second."""
    conn.close()
    if process.poll() is None:
        process.kill()
    process.wait()


def _message(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, CanonqnnError) else first_line(exc)


def _serve(fd: int) -> None:
    """The child: runtimes one after another (setup, args, calls, release), until the pipe
    closes. The factory comes pickled apart so that one that does not import is its error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)
    factory: Any = None
    function: Any = None
    error = "no runtime was set up"
    while True:
        try:
            kind, *message = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "release":
            factory = function = None  # the runtime and what it holds
            error = "no runtime was set up"
            continue
        if kind == "setup":
            sys.path[:] = message[0]
            try:
                factory = pickle.loads(message[1])
            except Exception as exc:  # noqa: BLE001
                factory, error = None, _message(exc)
            continue
        try:
            if kind == "args":
                if factory is None:
                    raise RuntimeError(error)
                function, info = factory(*message[0])
                reply: tuple[str, Any] = ("ready", info)
            else:
                reply = ("done", function(*message[0]))
        except Exception as exc:  # noqa: BLE001  (reported to the parent as the runtime's)
            reply = ("raised", _message(exc))
        if not _reply(conn, reply):
            return


def _reply(conn: Connection, reply: tuple[str, Any]) -> bool:
    """Whether the reply was sent (the parent may have gone)."""
    try:
        conn.send(reply)  # pickled before anything is written: a failure writes nothing
    except OSError:
        return False
    except Exception as exc:  # noqa: BLE001  (a result that does not pickle)
        return _reply(conn, ("raised", _message(exc)))
    return True


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """What a runtime's native code and Python packages print while it sets up (ExecuTorch's
    CPU-detection messages, the TFLite interpreter's delegate announcement, torchao's missing
    CUDA kernels, deprecation warnings) kept out of canonqnn's output: written to a file,
    shown only if the setup fails, or as it comes with ``--verbose``."""
    import tempfile
    import warnings

    from .. import progress

    if progress.verbose():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        os.dup2(log.fileno(), 2)
        try:
            yield
        except BaseException:
            sys.stderr.flush()
            os.dup2(saved, 2)
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
