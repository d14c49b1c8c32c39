"""Which numerics profile the runtimes installed on this host follow: found by running them.

Each probe is a tiny model whose result tells two arithmetics apart; the answer is the runtime's
own, so a host class nobody here has seen is classified by what it computes, not by its CPU
flags. Probes run once per process.
"""

from __future__ import annotations

import functools
import platform

import numpy as np

from . import ORT_VERSION, PROFILES, Profile, UnsupportedNumerics

# onnxruntime session entries parity runs with (docs/parity.md): QDQ fusion for int8 too, and
# constant int8 weights of u8 x s8 products converted to uint8 on x86 without VNNI.
ORT_CONFIG = {"session.qdqisint8allowed": "1", "session.x64quantprecision": "1"}

# u8 [255, 255] x runtime s8 [127, 127]: 64770 summed exactly, 32767 when the pair sum
# saturates to int16 (MLAS vpmaddubsw, x86 without VNNI).
_PAIR = (np.array([[255, 255]], np.uint8), np.array([[127], [127]], np.int8))
PAIR_EXACT, PAIR_SATURATED = 2 * 255 * 127, 2 ** 15 - 1


def ort_session_options(config: dict[str, str], threads: int | None = None):
    """onnxruntime session options as parity runs them: all graph optimizations, ``config``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # errors only: its graph-cleanup warnings are not ours
    if threads:
        so.intra_op_num_threads = threads
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return so


def _matmul_integer_probe() -> int:
    """onnxruntime's MatMulInteger of the pair above, with B a graph input."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "probe",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [1, 2]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [2, 1])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), ort_session_options(ORT_CONFIG),
                                   providers=["CPUExecutionProvider"])
    a, b = _PAIR
    return int(session.run(["Y"], {"A": a, "B": b})[0].reshape(()))


@functools.cache
def onnxruntime_profile() -> Profile:
    """The profile of the onnxruntime installed here, by what its kernels compute."""
    import onnxruntime as ort

    if not ort.__version__.startswith(ORT_VERSION + "."):
        raise UnsupportedNumerics(f"onnxruntime {ort.__version__} is installed; the profiles "
                                  f"describe {ORT_VERSION}")
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return PROFILES[f"onnxruntime-{ORT_VERSION}-arm64"]
    if machine not in ("x86_64", "amd64"):
        raise UnsupportedNumerics(f"no onnxruntime numerics profile for {machine} hosts")
    pair_sum = _matmul_integer_probe()
    if pair_sum == PAIR_SATURATED:
        return PROFILES[f"onnxruntime-{ORT_VERSION}-x86-avx2"]
    if pair_sum == PAIR_EXACT:
        return PROFILES[f"onnxruntime-{ORT_VERSION}-x86-vnni"]
    raise UnsupportedNumerics(f"onnxruntime's u8 x s8 probe summed {pair_sum}: neither exact "
                              f"({PAIR_EXACT}) nor pair-saturated ({PAIR_SATURATED})")


# Float32 inputs on which XNNPACK's float kernels for different instruction sets differ in their
# last bits (polynomials and lookup tables of different degrees): a dense sweep of the range
# where sigmoid, tanh and erf are not yet saturated.
_XNNPACK_PROBE = np.linspace(-10.0, 10.0, 40001, dtype=np.float32)


def _xnnpack_float_kernels(x: np.ndarray) -> list[np.ndarray]:
    """sigmoid, tanh and gelu of ``x`` as ExecuTorch's XNNPACK delegate computes them in
    float32 here: the kernels XNNPACK also builds its int8 lookup tables with."""
    import io

    import torch

    from ..source_runtimes import executorch_runner, quietly

    class Functions(torch.nn.Module):
        def forward(self, x):
            return torch.sigmoid(x), torch.tanh(x), torch.nn.functional.gelu(x)

    buffer = io.BytesIO()
    with quietly():
        torch.export.save(torch.export.export(Functions(), (torch.from_numpy(x),)), buffer)
    run, _ = executorch_runner(buffer.getvalue(), ["x"])
    return run({"x": x})


@functools.cache
def xnnpack_profile() -> Profile:
    """The profile of the XNNPACK that ExecuTorch runs here. Its int8 lookup tables come from
    the float32 kernels it picks for the CPU; when those compute bit for bit what
    ``canonqnn.tables.xnnpack`` reproduces (the AVX2+FMA3 kernels), tables are built, otherwise
    (another instruction set, or no ExecuTorch installed) the profile without them applies."""
    from ..tables import xnnpack

    generic = PROFILES["xnnpack"]
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return generic
    try:
        ran = _xnnpack_float_kernels(_XNNPACK_PROBE)
    except ImportError:
        return generic
    expected = [f(_XNNPACK_PROBE) for f in (xnnpack.sigmoid, xnnpack.tanh, xnnpack.gelu)]
    same = all(np.array_equal(np.asarray(r, np.float32).view(np.uint32), e.view(np.uint32))
               for r, e in zip(ran, expected))
    return PROFILES["xnnpack-x86-avx2"] if same else generic


# The profile each source format's runtime follows wherever it runs.
HOST_INDEPENDENT = {"tflite": "tflite-reference", "relax": "exact"}


def source_profile(source: str) -> Profile:
    """The profile of the runtime a model of ``source`` ("onnx", "tflite") runs on here."""
    if source == "onnx":
        return onnxruntime_profile()
    if source == "torch":
        return xnnpack_profile()
    if source in HOST_INDEPENDENT:
        return PROFILES[HOST_INDEPENDENT[source]]
    raise UnsupportedNumerics(f"no numerics profile for models from {source!r}")
