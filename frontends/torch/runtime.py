"""ExecuTorch (XNNPACK delegate) and eager PyTorch, the PyTorch format's source runtimes, as
parity runs them in a ``canonqnn.oracle.isolated`` child, and the probe of XNNPACK's numerics on
this host.

This module imports numpy, torch and ExecuTorch only, and ``archive`` (which reads a program
without TVM), so that a child starts fast. The parent's side is ``oracle``.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

import numpy as np

from canonqnn.numerics import PROFILES, Profile
from canonqnn.oracle.isolated import quietly


def _torch_program(program: bytes) -> Any:
    """The ExportedProgram saved in ``program``, read as the frontend reads a ``.pt2`` file:
    nothing in it is unpickled or run (``torch.export.load`` would)."""
    from .archive import read_program

    return read_program(program, "the program")


def _torch_inputs(feed: dict[str, np.ndarray], names: list[str]) -> list[Any]:
    import torch

    return [torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names]


def _torch_outputs(values: Any) -> list[np.ndarray]:
    values = values if isinstance(values, (list, tuple)) else [values]
    return [np.asarray(v.detach().numpy() if hasattr(v, "detach") else v) for v in values]


def executorch_runner(program: bytes, input_names: list[str]) -> tuple[Any, str]:
    """ExecuTorch running the saved ExportedProgram ``program`` lowered to its XNNPACK
    delegate, as a user deploys a PT2E model (``to_edge_transform_and_lower`` with the
    ``XnnpackPartitioner``, then the ``.pte`` loaded by the runtime)."""
    import tempfile
    from importlib.metadata import version

    with quietly():
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from executorch.runtime import Runtime

        ep = _torch_program(program)
        pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]) \
            .to_executorch()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.pte")
            with open(path, "wb") as f:
                f.write(pte.buffer)
            method = Runtime.get().load_program(path).load_method("forward")

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return _torch_outputs(method.execute(_torch_inputs(feed, input_names)))

    return run, (f"ExecuTorch {version('executorch')}, XNNPACK delegate "
                 "(to_edge_transform_and_lower with the XnnpackPartitioner)")


def torch_eager_runner(program: bytes, input_names: list[str]) -> tuple[Any, str]:
    """The ExportedProgram run by PyTorch itself: float arithmetic between its quantize and
    dequantize ops."""
    import torch

    module = _torch_program(program).module()

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return _torch_outputs(module(*_torch_inputs(feed, input_names)))

    return run, f"PyTorch {torch.__version__} eager (float between quantize and dequantize)"


# Float32 inputs on which XNNPACK's float kernels for different instruction sets differ in their
# last bits (polynomials and lookup tables of different degrees): a dense sweep of the range
# where sigmoid, tanh and erf are not yet saturated.
_XNNPACK_PROBE = np.linspace(-10.0, 10.0, 40001, dtype=np.float32)


def _xnnpack_float_kernels(x: np.ndarray) -> list[np.ndarray]:
    """sigmoid, tanh and gelu of ``x`` as ExecuTorch's XNNPACK delegate computes them in
    float32 here: the kernels XNNPACK also builds its int8 lookup tables with."""
    import io

    import torch

    class Functions(torch.nn.Module):
        def forward(self, x):
            return torch.sigmoid(x), torch.tanh(x), torch.nn.functional.gelu(x)

    buffer = io.BytesIO()
    with quietly():
        torch.export.save(torch.export.export(Functions(), (torch.from_numpy(x),)), buffer)
    run, _ = executorch_runner(buffer.getvalue(), ["x"])
    return run({"x": x})


# The profiles of the x86 classes whose float kernels canonqnn reproduces. Which one a host is
# in is found by running the kernels, never from CPU flags.
_X86_PROFILES = ("xnnpack-x86-avx512", "xnnpack-x86-avx2")


def _bits(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


@functools.cache
def profile() -> Profile:
    """The profile of the XNNPACK that ExecuTorch runs here. Its int8 lookup tables come from
    the float32 kernels it picks for the CPU: when sigmoid, tanh and gelu over the probe grid
    are bit for bit those of a class ``canonqnn.tables`` reproduces (AVX-512F, or AVX2+FMA3:
    their sigmoid kernels differ on about a third of the grid), that class's profile applies;
    otherwise (another instruction set, or no ExecuTorch installed) the profile without
    tables."""
    from canonqnn import tables

    generic = PROFILES["xnnpack"]
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return generic
    try:
        ran = [_bits(r) for r in _xnnpack_float_kernels(_XNNPACK_PROBE)]
    except ImportError:
        return generic
    for name in _X86_PROFILES:
        kernels = tables.runtime("torch", PROFILES[name].tables)
        expected = [_bits(f(_XNNPACK_PROBE)) for f in (kernels.sigmoid, kernels.tanh,
                                                       kernels.gelu)]
        if all(np.array_equal(r, e) for r, e in zip(ran, expected)):
            return PROFILES[name]
    return generic
