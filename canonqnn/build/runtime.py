"""Running and shipping what the build compiled: TVM's VM, device tensors, shared libraries."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import numpy as np
import tvm
from tvm import relax


def virtual_machine(executable_or_module: Any, device: Any = None) -> Any:
    """The VM of a build on this host's CPU, or on ``device`` (a remote CPU, ``remote``)."""
    return relax.VirtualMachine(executable_or_module, device or tvm.cpu())


@contextlib.contextmanager
def quiet_native_log():
    """Silence TVM's C++ log lines (VM export/load prints one warning per function)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def export_library(executable: Any, path: str, fcompile: Any = None) -> None:
    with quiet_native_log():
        executable.export_library(path, fcompile=fcompile)


def load_library(path: str) -> Any:
    with quiet_native_log():
        return tvm.runtime.load_module(path)


def to_device(array: np.ndarray, device: Any = None) -> Any:
    """``array`` on this host's CPU, or on ``device`` (a remote CPU)."""
    return tvm.runtime.tensor(np.require(array, requirements="C"),
                              device or tvm.cpu())  # keeps 0-d


def call(vm: Any, name: str, args: list[Any], remote: bool) -> Any:
    """The result of the VM's function ``name`` on ``args``. ``remote``: the VM is on a
    device, where a tuple it returns reaches here as a handle that cannot be indexed: the call
    is made statefully there and its fields fetched one by one."""
    if not remote:
        return vm[name](*args)
    vm.set_input(name, *args)
    vm.invoke_stateful(name)
    return vm.get_outputs(name)


def to_numpy(value: Any) -> Any:
    """VM results (a tensor or a nested tuple of tensors) as numpy arrays."""
    if hasattr(value, "numpy"):
        return value.numpy()
    return [to_numpy(v) for v in value]
