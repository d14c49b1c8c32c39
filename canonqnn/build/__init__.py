"""Everything from a canonical module to a built library: ``build``, ``fuse``,
``inspect_kernels``, ``load_built``, ``Built``, ``KernelReport``.

- ``builder``: the build and its result (``Built``: run, export, load)
- ``pipeline``: TVM's CPU passes as the build runs them (legalize, fuse, compile)
- ``targets``: the LLVM CPUs built for; ``isa``: their dot-product instructions
- ``layout``: the layout pass (convs channels-last); ``forms``: the kernel forms
- ``schedule``: the CPU schedule; ``dot_kernels``: the tensorized int8 kernels
- ``tuning``: MetaSchedule; ``report``: the kernel report; ``runtime``: the VM, libraries
- ``integrity``: the record a library is checked against before it is loaded

The names above are attributes made on first use, so that a module of the package read on
its own (``isa``, ``integrity``) does not import the builder and, through it, TVM and the ops.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_EXPORTS = {
    "build": "builder", "fuse": "builder", "inspect_kernels": "builder",
    "load_built": "builder", "Built": "builder", "KernelReport": "report",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


class _CallableModule(types.ModuleType):
    """``canonqnn.build(mod)`` is the public build function, reached through the root's lazy
    attribute; once this package is imported, Python binds ``canonqnn.build`` to the package
    itself, so calling the package builds."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .builder import build

        return build(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Built", "KernelReport", "build", "fuse", "inspect_kernels", "load_built"]
