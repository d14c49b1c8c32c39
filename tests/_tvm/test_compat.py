"""Built kernels run on every core: canonqnn sizes TVM's thread pool to the host's cores unless
the user did (TVM's own default is half the logical CPUs of an x86 host)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from canonqnn import _tvm

PROBE = "import os, canonqnn._tvm; print(os.environ.get('TVM_NUM_THREADS', '-'))"


def _threads_seen(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS",
                                                            "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, check=True,
                         capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def test_thread_pool_is_sized_to_the_hosts_cores():
    assert _threads_seen() == str(_tvm.host_cores())


@pytest.mark.parametrize("variable", ["TVM_NUM_THREADS", "OMP_NUM_THREADS"])
def test_a_users_thread_count_is_kept(variable):
    expected = "1" if variable == "TVM_NUM_THREADS" else "-"
    assert _threads_seen(**{variable: "1"}) == expected


def test_host_cores_counts_each_core_once():
    assert 1 <= _tvm.host_cores() <= (os.cpu_count() or 1)
