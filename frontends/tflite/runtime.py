"""The TFLite interpreter (ai-edge-litert), the TFLite format's source runtime, as parity runs it
in a ``canonqnn.oracle.isolated`` child, and the numerics profile it follows.

This module imports numpy and the interpreter only, never TVM, so that a child starts in a
fraction of a second. The parent's side (which resolvers, reading the model) is ``oracle``.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable
from typing import Any

import numpy as np

from canonqnn.numerics import PROFILES, Profile
from canonqnn.oracle.isolated import quietly


def tflite_runner(model: bytes, resolver: str, names: list[str], preserve_all: bool,
                  detections: dict[str, str]) -> tuple[Any, None]:
    """The TFLite interpreter with the op resolver ``resolver`` (an ``OpResolverType`` name),
    run as on a device (``canonqnn.build.device_server``: ``tflite_interpreter``,
    ``tflite_invoker``, their arguments)."""
    from canonqnn.build.device_server import tflite_interpreter, tflite_invoker

    with quietly():  # the delegate's announcement, preserve_all_tensors' debugging warning
        interp = tflite_interpreter(model, resolver, preserve_all)
    return tflite_invoker(interp, names, detections), None


# The int8 operators whose kernels compute (not only move data) that the probe offers the
# interpreter one at a time: the XNNPACK delegate must take exactly the profile's
# ``delegated`` ones among them.
PROBED = ("ADD", "SUB", "MUL", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED",
          "TRANSPOSE_CONV", "BATCH_MATMUL", "MEAN", "AVERAGE_POOL_2D", "SOFTMAX", "LOGISTIC",
          "TANH", "HARD_SWISH", "LEAKY_RELU", "ELU", "GELU", "QUANTIZE", "DEQUANTIZE",
          "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SQUARED_DIFFERENCE", "RSQRT")


def probe_model(kind: str) -> bytes:
    """A model of one int8 ``kind`` operator on a [1, 4, 4, 8] tensor, its parameters in the
    ranges XNNPACK accepts."""
    from canonqnn.testing.tflite_writer import GraphWriter

    g = GraphWriter()
    x = g.tensor("x", (1, 4, 4, 8), "int8", scale=0.05, zero_point=3)

    def out(shape=(1, 4, 4, 8), dtype="int8", scale=0.07, zp=-5):
        return g.tensor("y", shape, dtype, scale=None if dtype == "float32" else scale,
                        zero_point=None if dtype == "float32" else zp)

    def constant(name, data, dtype="int8", scale=None, zp=None, axis=0):
        return g.tensor(name, data.shape, dtype, data, scale, zp, quantized_dimension=axis)

    ints = np.arange(-64, 64, dtype=np.int32)
    weights = (ints.reshape(8, 1, 4, 4)[:, :, :2, :2] % 7).reshape(8, 2, 2, 1) \
        .repeat(8, axis=3).astype(np.int8)
    scales = np.full(8, 0.01, np.float32)
    bias = constant("b", np.zeros(8, np.int32), "int32", scales * np.float32(0.05),
                    np.zeros(8, np.int64))
    w = constant("w", weights, "int8", scales, np.zeros(8, np.int64))
    conv = dict(padding="SAME", strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1,
                fusedActivationFunction="NONE")
    axes = constant("axes", np.array([1, 2], np.int32), "int32")
    size = constant("size", np.array([8, 8], np.int32), "int32")
    pool = dict(padding="SAME", strideH=1, strideW=1, filterHeight=2, filterWidth=2,
                fusedActivationFunction="NONE")
    graph = {
        "CONV_2D": ([x, w, bias], out(), conv),
        # depthwise weights are [1, kh, kw, channels], quantized along their last axis
        "DEPTHWISE_CONV_2D": ([x, constant("dw", weights.transpose(3, 1, 2, 0)[:1].copy(),
                                           "int8", scales, np.zeros(8, np.int64), axis=3),
                               bias], out(), dict(conv, depthMultiplier=1)),
        "FULLY_CONNECTED": ([x, constant("fc", weights.reshape(8, 32)[:, :8].copy(), "int8",
                                         np.float32(0.01), 0),
                             constant("fb", np.zeros(8, np.int32), "int32",
                                      np.float32(0.0005), 0)],
                            out((16, 8)), dict(fusedActivationFunction="NONE")),
        "TRANSPOSE_CONV": ([constant("shape", np.array([1, 4, 4, 8], np.int32), "int32"),
                            w, x, bias], out(), dict(padding="SAME", strideH=1, strideW=1)),
        "BATCH_MATMUL": ([x, x], out((1, 4, 4, 4)), dict(adjY=True)),
        "MEAN": ([x, axes], out((1, 8)), dict(keepDims=False)),
        "AVERAGE_POOL_2D": ([x], out(), pool),
        "SOFTMAX": ([x], out(scale=1 / 256, zp=-128), dict(beta=1.0)),
        "LOGISTIC": ([x], out(scale=1 / 256, zp=-128), {}),
        "TANH": ([x], out(scale=1 / 128, zp=0), {}),
        "LEAKY_RELU": ([x], out(), dict(alpha=0.2)),
        "GELU": ([x], out(), dict(approximate=False)),
        "DEQUANTIZE": ([x], out(dtype="float32"), {}),
        "RESIZE_BILINEAR": ([x, size], out((1, 8, 8, 8), scale=0.05, zp=3), {}),
        "RESIZE_NEAREST_NEIGHBOR": ([x, size], out((1, 8, 8, 8), scale=0.05, zp=3), {}),
        "RSQRT": ([x], out(), {}),
    }
    if kind in ("ADD", "SUB", "MUL", "SQUARED_DIFFERENCE"):
        other = g.tensor("x2", (1, 4, 4, 8), "int8", scale=0.04, zero_point=-2)
        options = {} if kind == "SQUARED_DIFFERENCE" else dict(fusedActivationFunction="NONE")
        inputs, y = [x, other], out()
        g.op(kind, inputs, [y], **options)
        return g.finish(inputs, [y])
    inputs, y, options = graph.get(kind, ([x], None, {}))
    y = out() if y is None else y
    g.op(kind, inputs, [y], **options)
    return g.finish([i for i in inputs if g.tensors[i].buffer == 0], [y])


def delegated_operators() -> frozenset[str]:
    """The operators of ``PROBED`` the installed interpreter's default configuration hands to
    its XNNPACK delegate (a DELEGATE node replaces them)."""
    from ai_edge_litert import interpreter as litert

    taken = set()
    for kind in PROBED:
        interp = litert.Interpreter(model_content=probe_model(kind))
        interp.allocate_tensors()
        if any(d["op_name"] == "DELEGATE" for d in interp._get_ops_details()):
            taken.add(kind)
    return frozenset(taken)


@functools.cache
def profile() -> Profile:
    """The profile of TFLite's interpreter as it runs by default here (``profile_of``)."""
    try:
        from ai_edge_litert import __version__ as version
    except ImportError:  # no interpreter: parity says it needs one
        return PROFILES["tflite-reference"]

    def delegated() -> frozenset[str]:
        with quietly():
            return delegated_operators()

    return profile_of(version, platform.machine(), delegated)


def profile_of(version: str, machine: str, delegated: Callable[[], frozenset[str]]) -> Profile:
    """The profile of the interpreter ``version`` on a ``machine`` (``platform.machine()``)
    whose XNNPACK delegate takes the operators ``delegated()`` of ``PROBED``: the default
    configuration's profile of that machine when it takes exactly those it was measured with,
    otherwise (another CPU, another interpreter) the reference kernels, parity's
    host-independent specification."""
    reference = PROFILES["tflite-reference"]
    default = DEFAULT_PROFILES.get(machine.lower())
    if default is None or version.split(".")[:2] != ["2", "3"]:  # the version measured
        return reference
    try:
        taken = delegated()
    except (ImportError, RuntimeError, ValueError):  # no interpreter, or one the probe cannot run
        return reference
    return PROFILES[default] if taken == PROFILES[default].delegated & frozenset(PROBED) \
        else reference


# The profile of the default configuration per machine (``platform.machine()``).
DEFAULT_PROFILES = {"x86_64": "tflite-xnnpack-x86", "amd64": "tflite-xnnpack-x86",
                    "aarch64": "tflite-xnnpack-arm64", "arm64": "tflite-xnnpack-arm64"}
