"""Build a canonical (or fake-quant) module and run it: legalization + ``tvm.compile``.

``build`` returns a ``Built`` that runs with inputs keyed by the model's input names and
returns outputs keyed by its output names, converting dtypes at the boundary exactly as the
module's recorded interface says. ``Built.export`` writes a shared library that
``tvm.runtime.load_module`` loads; ``load_built`` reads it back with its interface.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _tvm
from . import ops as _ops  # noqa: F401  (registers the canonical ops' legalizations)
from .errors import CanonqnnError
from .io import IO_FUNCTION, ModelIO, TensorInfo, module_io


def _fallback_io(mod: Any) -> ModelIO:
    """An interface read off ``main`` when no frontend recorded one."""
    func = mod["main"]
    inputs = [TensorInfo(_tvm.var_name(p), _tvm.dtype_of(p), _tvm.shape_of(p))
              for p in func.params]
    ret = func.ret_ty
    fields = list(ret.fields) if hasattr(ret, "fields") else [ret]
    outputs = [TensorInfo(f"output_{i}", str(t.dtype), tuple(int(d) for d in t.shape.values))
               for i, t in enumerate(fields)]
    return ModelIO("relax", inputs, outputs)


@dataclass
class Built:
    """A compiled module with its interface."""

    module: Any  # the VM executable (after build) or the loaded runtime module
    io: ModelIO
    target: str

    def __post_init__(self) -> None:
        self._vm = _tvm.virtual_machine(self.module)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = []
        for info in self.io.inputs:
            if info.name not in inputs:
                raise CanonqnnError(f"missing input {info.name!r} (expected {info.dtype} "
                                    f"{list(info.shape)})")
            value = np.asarray(inputs[info.name])
            if tuple(value.shape) != tuple(info.shape):
                raise CanonqnnError(f"input {info.name!r} has shape {list(value.shape)}, "
                                    f"expected {list(info.shape)}")
            args.append(_tvm.to_device(value.astype(info.dtype, copy=False)))
        unknown = set(inputs) - {i.name for i in self.io.inputs}
        if unknown:
            raise CanonqnnError(f"unknown input(s) {sorted(unknown)}; the model takes "
                                f"{[i.name for i in self.io.inputs]}")
        result = _tvm.to_numpy(self._vm["main"](*args))
        values = [result] if len(self.io.outputs) == 1 else list(result)
        return {info.name: np.asarray(v) for info, v in zip(self.io.outputs, values)}

    def export(self, path: str | os.PathLike) -> str:
        """Write a shared library (``tvm.runtime.load_module`` loads it)."""
        path = os.fspath(path)
        _tvm.export_library(self.module, path)
        return path


def build(mod: Any, target: Any = None) -> Built:
    """Legalize ``mod`` (canonical ops -> integer TIR) and compile it for ``target``.

    ``target`` defaults to the host CPU (``llvm`` with ``mcpu`` from LLVM's own detection).
    """
    io = module_io(mod) or _fallback_io(mod)
    tgt = _tvm.as_target(target)
    mod = _tvm.with_function(mod, IO_FUNCTION, _tvm.string_function(json.dumps(io.to_json())))
    executable = _tvm.compile_module(mod, tgt)
    return Built(executable, io, str(tgt))


def load_built(path: str | os.PathLike) -> Built:
    """Load a library written by ``Built.export`` (or ``canonqnn build``)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CanonqnnError(f"{path}: no such file")
    module = _tvm.load_library(path)
    vm = _tvm.virtual_machine(module)
    try:
        io = ModelIO.from_json(str(vm[IO_FUNCTION]()))
    except Exception as exc:  # noqa: BLE001  (a library not built by canonqnn)
        raise CanonqnnError(f"{path}: not a canonqnn library ({exc})") from None
    return Built(module, io, "loaded")
