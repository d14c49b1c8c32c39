"""Devices reached through TVM's RPC (``--rpc``): build here, run there.

``connect("HOST:PORT")`` opens a session with an RPC server (``tvm.rpc.connect``),
``connect("HOST:PORT:KEY")`` asks the tracker at HOST:PORT for a device of that key
(``tvm.rpc.connect_tracker(...).request``). ``canonqnn.build.device_server`` is the server to run
on a device: TVM's own, plus the functions that describe the device and run the source runtime
there (``parity --rpc``); a plain ``python -m tvm.exec.rpc_server`` runs builds too.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import shutil
import struct
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

from tvm import rpc

from .. import progress
from ..errors import CanonqnnError, first_line
from .device_server import PREFIX

FORMS = "HOST:PORT (an RPC server) or HOST:PORT:KEY (an RPC tracker and a device key)"
# the C compiler that links a shared library for an architecture this host is not, and the
# Debian packages it and the C library's start files come in
CROSS_COMPILERS = {"aarch64": ("aarch64-linux-gnu-gcc",
                               "gcc-aarch64-linux-gnu libc6-dev-arm64-cross")}
CROSS_COMPILER_VAR = "CANONQNN_CROSS_CC"


@dataclass
class Device:
    """A device, what its server says of it (``machine`` is None where a plain TVM server
    does not say), and a session with it, opened on first use (``release`` closes it)."""

    address: str
    machine: str | None
    runtimes: dict[str, str]
    features: list[str]
    uploads: int = 0  # libraries sent in this session, each under a name of its own
    _session: Any = field(default=None, repr=False)  # tvm.rpc.RPCSession

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = _open(self.address)
        return self._session

    def release(self) -> None:
        """Close the session (a server serves one at a time: MetaSchedule's runner opens its
        own), once nothing loaded through it is left; the next use opens another."""
        self._session = None
        gc.collect()  # the objects of a library loaded there, and with them the session

    def cpu(self) -> Any:
        return self.session.cpu()

    def function(self, name: str) -> Any:
        """A function of the device's server, or a clear error naming what it lacks."""
        try:
            return self.session.get_function(name)
        except Exception:  # noqa: BLE001  (TVM's RPC raises its own error types)
            raise CanonqnnError(f"the device at {self.address} has no {name}: run "
                                f"canonqnn's device server there (python -m "
                                f"canonqnn.build.device_server, docs/devices.md)") from None


def parse(address: str) -> tuple[str, int, str | None]:
    """``(host, port, key)`` of ``--rpc``'s value; key None for a server."""
    parts = address.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit() or \
            not 0 < int(parts[1]) < 65536 or (len(parts) == 3 and not parts[2]):
        raise CanonqnnError(f"--rpc {address!r}: expected {FORMS}")
    return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else None


def connect(address: str) -> Device:
    """A session with the device at ``address`` (``FORMS``), and what its server says."""
    with progress.step(f"connecting to the device at {address}"):
        session = _open(address)
    described: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # a plain TVM server: nothing said of the device
        described = json.loads(str(session.get_function(PREFIX + "describe")()))
    return Device(address, described.get("machine"), described.get("runtimes", {}),
                  described.get("features", []), _session=session)


WAIT_NOTE_SECONDS = 10.0  # a session not opened by then: say why it waits


def _open(address: str) -> Any:
    """A new RPC session with the device at ``address``. A server serves one session at a
    time and holds the next client until then, silently: after ``WAIT_NOTE_SECONDS`` a note
    (``progress.note``) says so."""
    note = threading.Timer(WAIT_NOTE_SECONDS, lambda: progress.note(
        f"waiting for the device at {address}: it serves one session at a time and another "
        "client holds it"))
    note.daemon = True
    note.start()
    try:
        return _open_now(address)
    finally:
        note.cancel()


def _open_now(address: str) -> Any:
    host, port, key = parse(address)
    try:
        if key is None:
            return rpc.connect(host, port)
        tracker = rpc.connect_tracker(host, port)
        keys = sorted(tracker.summary().get("queue_info", {}))
        if key not in keys:
            raise CanonqnnError(f"--rpc {address}: the tracker at {host}:{port} has no "
                                f"device of key {key!r} (its keys: {', '.join(keys) or 'none'})")
        return tracker.request(key, max_retry=1, session_timeout=0)
    except CanonqnnError:
        raise
    except Exception as exc:  # noqa: BLE001  (socket errors, TVM's RPC errors)
        what = "RPC server" if key is None else "RPC tracker"
        raise CanonqnnError(f"--rpc {address}: cannot reach the {what} at {host}:{port}: "
                            f"{first_line(exc)}") from None


# ---------------------------------------------------------------- tuning on the device
TUNING_SESSION_SECONDS = 600  # a candidate's session (upload, load, timing): emulation is slow


def tuning_runner(address: str, arch: str) -> Any:
    """MetaSchedule's RPC runner measuring on the device at ``address`` (a tracker's device
    through the tracker, as it does by default; a server directly)."""
    from tvm.s_tir import meta_schedule as ms

    host, port, key = parse(address)
    # the runner's config names a tracker (its fields must be set); for a server, the session
    # is made here instead and the key is not read
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port,
                                 tracker_key=key or "(a server)",
                                 session_timeout_sec=TUNING_SESSION_SECONDS)
    create = None if key else functools.partial(_server_session, host, port)
    return ms.runner.RPCRunner(rpc_config=config, f_create_session=create, max_workers=1)


def _server_session(host: str, port: int, _config: Any) -> Any:
    return rpc.connect(host, port)


def export_candidate(arch: str, mod: Any) -> str:
    """A tuning candidate as a shared library for ``arch`` (MetaSchedule's builder exports a
    tar, which the device would have to link)."""
    path = os.path.join(tempfile.mkdtemp(prefix="canonqnn-candidate-"), "candidate.so")
    mod.export_library(path, fcompile=cross_compiler(arch))
    return path


# ELF's e_machine codes of the architectures canonqnn builds for
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def library_arch(path: str) -> str | None:
    """The architecture of a shared library's code, from its ELF header (None for another
    file: a ``.tar`` of object files)."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or not header.startswith(b"\x7fELF"):
        return None
    return ELF_MACHINES.get(struct.unpack_from("<H", header, 18)[0], "another architecture")


def load(path: str, device: Device) -> Any:
    """Upload the library at ``path`` and load it on ``device`` (a ``.tar`` is linked there,
    which needs a compiler on the device)."""
    arch = library_arch(path)
    if device.machine is not None and arch is not None and arch != device.machine:
        raise CanonqnnError(f"{path} is {arch} code and the device at {device.address} is "
                            f"{device.machine}: build it with a --target for the device (e.g. "
                            f"\"llvm -mtriple={device.machine}-linux-gnu\")")
    # a name of its own: writing over a library the session has loaded crashes it (SIGBUS)
    device.uploads += 1
    name = f"{device.uploads}-{os.path.basename(path)}"
    try:
        device.session.upload(path, name)
        return device.session.load_module(name)
    except Exception as exc:  # noqa: BLE001  (the device's loader or linker)
        raise CanonqnnError(f"{path}: the device at {device.address} cannot load it: "
                            f"{first_line(exc)}") from None


def cross_compiler(arch: str) -> Any:
    """TVM's ``fcompile`` that links a shared library for ``arch`` on this host: the compiler
    in ``$CANONQNN_CROSS_CC``, else the GNU cross compiler Debian names for it; None if there is
    none (a ``.tar`` is written instead, linked where it is loaded)."""
    from tvm.support import cc

    compiler = os.environ.get(CROSS_COMPILER_VAR) or CROSS_COMPILERS.get(arch, ("",))[0]
    if not compiler or shutil.which(compiler) is None:
        return None
    return cc.cross_compiler(compiler)


def cross_compiler_hint(arch: str) -> str:
    """What to install (or set) for ``cross_compiler(arch)``."""
    known = CROSS_COMPILERS.get(arch)
    install = f"Debian/Ubuntu: apt-get install {known[1]}, or name" if known else "name"
    return (f"a shared library of {arch} code needs a C cross compiler on this host to link "
            f"it ({install} one in ${CROSS_COMPILER_VAR})")


# Linux's names of the CPU features the kernels use (/proc/cpuinfo) -> LLVM's
LLVM_FEATURES = {
    "aarch64": {"asimd": "neon", "asimddp": "dotprod"},
    "x86_64": {"ssse3": "ssse3", "sse4_1": "sse4.1", "sse4_2": "sse4.2", "popcnt": "popcnt",
               "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi1": "bmi",
               "bmi2": "bmi2", "avx512f": "avx512f", "avx512bw": "avx512bw",
               "avx512vl": "avx512vl", "avx512dq": "avx512dq", "avx512cd": "avx512cd",
               "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni"},
}


def device_target(device: Device) -> str:
    """The LLVM target of ``device``'s CPU, from the features its server reads there (Linux's
    ``/proc/cpuinfo``): its architecture with the features the kernels use (AArch64: NEON and
    the dot product; x86: SSE to AVX-512 and VNNI), LLVM's generic CPU otherwise."""
    names = LLVM_FEATURES.get(device.machine or "")
    if names is None:
        raise CanonqnnError(f"give --target for the device at {device.address} "
                            f"({device.machine or 'its server does not say what CPU it is'})")
    features = ",".join(f"+{names[f]}" for f in sorted(set(device.features) & set(names)))
    return f"llvm -mtriple={device.machine}-linux-gnu" + (f" -mattr={features}"
                                                          if features else "")
