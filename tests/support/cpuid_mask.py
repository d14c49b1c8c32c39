"""Child processes that see a smaller x86 class than this host's (tests/support/cpuid_mask.c):
an AVX-512 host runs ExecuTorch's XNNPACK with the AVX2 kernels an AVX2+FMA3 host picks.

``unavailable(cls)`` is why a mask cannot be had here (None when it can: Linux x86-64 with
CPUID faulting, a C compiler, a CPU with AVX-512F and a masked child whose CPUID answers lack
it); ``environment``
the variables that mask a process started with them; ``masked`` sets them in this process's
environment for the children started meanwhile (parity's ``canonqnn.oracle.isolated``
children, whose idle pool it empties before and after), leaving this process as it is.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

SOURCE = pathlib.Path(__file__).with_name("cpuid_mask.c")
CLASS_VAR = "CANONQNN_CPUID_CLASS"
CLASSES = {"x86-avx2"}  # the masks the shim knows (its MASKS)


class Unavailable(RuntimeError):
    pass


@functools.cache
def library() -> str:
    """The shim compiled with the system C compiler, cached by its source's digest."""
    source = SOURCE.read_bytes()
    folder = pathlib.Path(tempfile.gettempdir()) / \
        f"canonqnn-cpuid-mask-{hashlib.sha256(source).hexdigest()[:16]}-{os.getuid()}"
    path = folder / "cpuid_mask.so"
    if path.exists():
        return str(path)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise Unavailable("no C compiler (cc, gcc) to build the CPUID mask")
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"cpuid_mask.{os.getpid()}.so"
    done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(partial),
                           str(SOURCE), "-ldl"], capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"the CPUID mask does not compile ({compiler}, exit "
                          f"{done.returncode}): {done.stderr.strip()[:400]}")
    partial.replace(path)  # atomic: concurrent runs each write their own then rename
    return str(path)


def environment(cls: str) -> dict[str, str]:
    """The variables (to add to a child's environment) that mask it to ``cls``."""
    preload = os.environ.get("LD_PRELOAD", "")
    return {"LD_PRELOAD": f"{library()} {preload}".strip(), CLASS_VAR: cls}


# What a masked child reports: the shim's state, the AVX-512F bit of its CPUID, the number of
# CPUIDs it answered.
_CHECK = """
import ctypes
lib = ctypes.CDLL({path!r})
out = (ctypes.c_uint32 * 4)()
lib.canonqnn_cpuid(7, 0, out)
print(lib.canonqnn_cpuid_mask_state(), (out[1] >> 16) & 1, lib.canonqnn_cpuid_emulated())
"""


@functools.cache
def unavailable(cls: str = "x86-avx2") -> str | None:
    """Why no child can be masked to ``cls`` here, or None."""
    if cls not in CLASSES:
        return f"no CPUID mask for {cls!r} (known: {sorted(CLASSES)})"
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"CPUID faulting is a Linux x86-64 feature ({sys.platform}, {platform.machine()})"
    flags = set()
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "cpuid_fault" not in flags:
        return "this CPU (or its hypervisor) offers no CPUID faulting (no cpuid_fault flag)"
    try:
        path = library()
    except Unavailable as exc:
        return str(exc)
    answers = []
    for env in ({CLASS_VAR: ""}, environment(cls)):  # the shim loaded, off; then on
        done = subprocess.run([sys.executable, "-c", _CHECK.format(path=path)],
                              env={**os.environ, "LD_PRELOAD": path, **env},
                              capture_output=True, text=True)
        if done.returncode != 0:
            return (f"a process with the CPUID mask failed (exit {done.returncode}): "
                    f"{done.stderr.strip()[-400:]}")
        answers.append([int(v) for v in done.stdout.split()])
    (_, host_avx512f, _), (state, avx512f, answered) = answers
    if not host_avx512f:
        return "this CPU has no AVX-512F: there is no larger class to mask"
    if state != 1:
        return (f"the CPUID mask could not turn on CPUID faulting "
                f"(arch_prctl(ARCH_SET_CPUID): {os.strerror(-state) if state < 0 else 'off'})")
    if avx512f or answered == 0:
        return "the CPUID mask is on but a masked CPUID still reports AVX-512F"
    return None


@contextlib.contextmanager
def masked(cls: str = "x86-avx2") -> Iterator[None]:
    """Children started in this block (``subprocess``, parity's) masked to ``cls``; raises
    ``Unavailable`` with the reason when that cannot be done here."""
    from canonqnn.oracle import isolated

    reason = unavailable(cls)
    if reason is not None:
        raise Unavailable(reason)
    saved = {k: os.environ.get(k) for k in ("LD_PRELOAD", CLASS_VAR)}
    isolated._stop_idle()  # unmasked children must not serve the block
    os.environ.update(environment(cls))
    try:
        yield
    finally:
        isolated._stop_idle()  # nor masked ones what follows it
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _executorch_profile() -> tuple[object, str]:
    from canonqnn.frontends.torch import runtime

    return (lambda: None), runtime.profile().name


def parity_child_profile() -> str:
    """The XNNPACK profile ExecuTorch probes in a parity child started now (within ``masked``:
    a masked one's; the child is then kept idle, for parity's ExecuTorch)."""
    from canonqnn.oracle import isolated

    with isolated.Child("ExecuTorch", _executorch_profile) as child:
        return child.ready()
