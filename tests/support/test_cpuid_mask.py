"""The CPUID mask (cpuid_mask.c): a masked child's ExecuTorch runs the AVX2 kernels and its
torch still computes; every SIGSEGV that is not a CPUID ends the process as it would unmasked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import pytest

from support import cpuid_mask

REASON = cpuid_mask.unavailable("x86-avx2")
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def run(code: str, cls: str | None = "x86-avx2", *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **cpuid_mask.environment(cls or "")}
    if cls is None:
        env.pop(cpuid_mask.CLASS_VAR)
    # run outside the source folder: ``python -c`` puts the working directory first on the
    # path, where the repository's canonqnn/ would shadow the installed package
    return subprocess.run([sys.executable, *flags, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tempfile.gettempdir())


STATE = """
import ctypes, os
lib = ctypes.CDLL(os.environ["LD_PRELOAD"].split()[0])
out = (ctypes.c_uint32 * 4)()
lib.canonqnn_cpuid(7, 0, out)
print(lib.canonqnn_cpuid_mask_state(), (out[1] >> 16) & 1)
"""


# float32 matmul and GELU (torch's own CPU kernels, picked from CPUID too)
COMPUTE = ("import numpy as np, torch\n"
           "x = torch.from_numpy(np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096)\n"
           "y = float(torch.nn.functional.gelu(x @ x - 8).sum())\n")


def test_a_masked_childs_executorch_runs_the_avx2_kernels_and_its_torch_computes():
    import torch

    from canonqnn.frontends.torch import runtime

    done = run(COMPUTE + "from canonqnn.frontends.torch import runtime\n"
               "print(runtime.profile().name, torch.backends.cpu.get_cpu_capability(), y)\n")
    assert done.returncode == 0, done.stderr[-2000:]
    name, capability, y = done.stdout.split()
    assert (name, capability) == ("xnnpack-x86-avx2", "AVX2")
    here: dict = {}
    exec(COMPUTE, here)  # noqa: S102
    assert float(y) == pytest.approx(here["y"], rel=1e-5)  # other kernels, the same values
    # this process is not masked: an AVX-512F host (the only one a mask is had on) probes so
    assert (runtime.profile().name, torch.backends.cpu.get_cpu_capability()) == \
        ("xnnpack-x86-avx512", "AVX512")


def test_without_a_class_the_shim_leaves_cpuid_alone():
    masked, plain = run(STATE), run(STATE, None)
    assert masked.stdout.split() == ["1", "0"]
    assert plain.stdout.split() == ["0", "1"]  # this host has AVX-512F (else unavailable)


def test_an_unknown_class_is_refused_not_ignored():
    assert run(STATE, "x86-avx9").stdout.split()[0] == str(-22)  # -EINVAL: nothing masked
    assert "no CPUID mask for 'x86-avx9'" in cpuid_mask.unavailable("x86-avx9")


@pytest.mark.parametrize("code", [
    "import ctypes; ctypes.string_at(0)",  # a page fault
    "import ctypes; ctypes.string_at(0x8000000000000000)",  # a general-protection fault
    "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",  # sent
], ids=["page-fault", "gp-fault", "kill"])
def test_other_segfaults_end_the_process_on_sigsegv(code):
    assert run(code).returncode == -signal.SIGSEGV


def test_the_programs_own_handler_still_runs_then_the_default_action():
    done = run("import ctypes; ctypes.string_at(0)", "x86-avx2", "-X", "faulthandler")
    assert done.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in done.stderr
