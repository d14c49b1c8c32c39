"""onnxruntime, the ONNX format's source runtime: the session parity runs (in a
``canonqnn.oracle.isolated`` child) and the probe of its numerics on this host.

This module imports numpy, onnx and onnxruntime only, never TVM, so that a child starts in a
fraction of a second. The parent's side (reading the model, exposing inner tensors) is
``oracle``.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable
from typing import Any

import numpy as np

from canonqnn.errors import ParityError, first_line
from canonqnn.numerics import ORT_VERSION, PROFILES, Profile, UnsupportedNumerics

# onnxruntime session entries parity runs with (docs/parity.md): QDQ fusion for int8 too, and
# constant int8 weights of u8 x s8 products converted to uint8 on x86 without VNNI.
ORT_CONFIG = {"session.qdqisint8allowed": "1", "session.x64quantprecision": "1"}
# ... tried in this order: onnxruntime has no s8s8 kernels under x64quantprecision
ORT_CONFIGS = (ORT_CONFIG, {"session.qdqisint8allowed": "1"})

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


def session(model: bytes, threads: int | None = None) -> tuple[Any, str]:
    """An onnxruntime CPU session of the serialized ``model`` (IR <= 10) with the settings
    canonqnn's rounding reproduces, on ``threads`` intra-op threads (onnxruntime's default: one
    per core), and its description.

    ``session.x64quantprecision`` keeps x86 u8s8 kernels from saturating int16 pair sums;
    onnxruntime has no s8s8 kernels under it, so models it cannot load run without it.
    """
    import onnxruntime as ort

    errors = []
    for config in ORT_CONFIGS:
        so = ort_session_options(config, threads)
        try:
            made = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001  (onnxruntime raises its own types)
            errors.append(first_line(exc))
            continue
        settings = ", ".join(f"{k}={v}" for k, v in config.items())
        threads_text = f", {threads} intra-op threads" if threads else ""
        return made, (f"onnxruntime {ort.__version__} CPU, ORT_ENABLE_ALL, {settings}"
                      f"{threads_text}")
    raise ParityError("onnxruntime cannot run this model: " + "; ".join(errors))


def onnxruntime_runner(model: bytes, names: list[str], threads: int | None) -> tuple[Any, str]:
    """The factory of the child: ``run(feed)`` gives the outputs ``names`` in order; ``info``:
    the session's description."""
    made, description = session(model, threads)
    return (lambda feed: made.run(names, feed)), description


def probe_model() -> bytes:
    """MatMulInteger of the pair above, with B a graph input (``Y`` its result): what it sums
    tells onnxruntime's arithmetics apart."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "probe",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [1, 2]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [2, 1])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model.SerializeToString()


PROBE_FEED = {"A": _PAIR[0], "B": _PAIR[1]}


def _matmul_integer_probe() -> int:
    """onnxruntime's sum of the probe here."""
    import onnxruntime as ort

    probe = ort.InferenceSession(probe_model(), ort_session_options(ORT_CONFIG),
                                 providers=["CPUExecutionProvider"])
    return int(probe.run(["Y"], PROBE_FEED)[0].reshape(()))


@functools.cache
def profile() -> Profile:
    """The numerics profile of the onnxruntime installed here, by what its kernels compute (a
    tiny model whose result tells two arithmetics apart, run once per process): never guessed
    from CPU flags."""
    import onnxruntime as ort

    return profile_of(ort.__version__, platform.machine(), _matmul_integer_probe)


def profile_of(version: str, machine: str, pair_sum_of_probe: Callable[[], int]) -> Profile:
    """The profile of onnxruntime ``version`` on a ``machine`` (``platform.machine()``) whose
    onnxruntime sums ``probe_model`` as ``pair_sum_of_probe()`` says (asked on x86 only)."""
    if not version.startswith(ORT_VERSION + "."):
        raise UnsupportedNumerics(f"onnxruntime {version} is installed; the profiles "
                                  f"describe {ORT_VERSION}")
    machine = machine.lower()
    if machine in ("aarch64", "arm64"):
        return PROFILES[f"onnxruntime-{ORT_VERSION}-arm64"]
    if machine not in ("x86_64", "amd64"):
        raise UnsupportedNumerics(f"no onnxruntime numerics profile for {machine} hosts")
    pair_sum = pair_sum_of_probe()
    if pair_sum == PAIR_SATURATED:
        return PROFILES[f"onnxruntime-{ORT_VERSION}-x86-avx2"]
    if pair_sum == PAIR_EXACT:
        return PROFILES[f"onnxruntime-{ORT_VERSION}-x86-vnni"]
    raise UnsupportedNumerics(f"onnxruntime's u8 x s8 probe summed {pair_sum}: neither exact "
                              f"({PAIR_EXACT}) nor pair-saturated ({PAIR_SATURATED})")
