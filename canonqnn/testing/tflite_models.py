"""Quantized TFLite networks written in code (no TensorFlow): test and example models.

    data = mobilenet_v1(alpha=0.25, size=96)          # bytes of a .tflite flatbuffer
    data = mobilenet_v2(size=96, dtype="uint8")
    data = classifier()
    data = resnet(dtype="int16")                       # a 16x8 model

Weights are seeded random (He-scaled), int8 symmetric per channel (uint8 models: per tensor,
asymmetric, as old quantized MobileNets). int16 models are TFLite's 16x8 form: int16
activations with zero point 0, int8 weights, int64 biases, ADD with general scales. Activation
scales and zero points are calibrated: the network is built, run by the TFLite interpreter
(reference kernels) on seeded inputs with every tensor kept, each activation's observed range
refitted, and the network rebuilt, a few times. Calibration needs the interpreter
(``ai-edge-litert``, in the tflite extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .tflite_writer import GraphWriter

CALIBRATION_ROUNDS = 4
FIXED_OUTPUTS = {"SOFTMAX": (1 / 256, -128), "LOGISTIC": (1 / 256, -128)}
FIXED_OUTPUTS_INT16 = {"SOFTMAX": (1 / 32768, 0)}  # 16x8: Q0.15 probabilities


class Net:
    """A network being written: activations get the calibrated parameters of their name."""

    def __init__(self, dtype: str, qparams: dict[str, tuple[float, int]], seed: int) -> None:
        self.g = GraphWriter()
        self.dtype = dtype
        self.qparams = qparams
        self.rng = np.random.default_rng(seed)
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.scales: dict[int, float] = {}
        self.activations: list[str] = []
        self.count = 0

    # -------------------------------------------------------------- tensors
    def activation(self, name: str, shape, fixed: tuple[float, int] | None = None) -> int:
        offset = 128 if self.dtype == "uint8" else 0
        scale, zp = fixed or self.qparams.get(name, (0.05, 0))
        if fixed is not None:
            zp += offset
        elif name not in self.qparams:
            zp = offset
        index = self.g.tensor(name, shape, self.dtype, scale=scale, zero_point=zp)
        self.shapes[index], self.scales[index] = tuple(shape), float(np.float32(scale))
        if fixed is None:
            self.activations.append(name)
        return index

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def _weights(self, name: str, shape, fan_in: int, axis: int, per_channel: bool = True):
        """The weight tensor and its per-output-channel scales (repeated when per tensor)."""
        w = self.rng.standard_normal(shape).astype(np.float32) * np.sqrt(2.0 / fan_in)
        if self.dtype == "uint8":
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            scale = np.float32((hi - lo) / 255)
            zp = int(np.clip(round(-lo / scale), 0, 255))
            q = np.clip(np.round(w / scale) + zp, 0, 255).astype(np.uint8)
            return self.g.tensor(name, shape, "uint8", q, scale, zp), np.full(
                shape[axis], scale, np.float32)
        moved = np.abs(np.moveaxis(w, axis, 0).reshape(shape[axis], -1))
        peaks = moved.max(axis=1) if per_channel else np.full(shape[axis], moved.max())
        scales = (peaks / 127).astype(np.float32)
        bshape = [1] * len(shape)
        bshape[axis] = -1
        q = np.clip(np.round(w / scales.reshape(bshape)), -127, 127).astype(np.int8)
        stored = scales if per_channel else scales[:1]
        return self.g.tensor(name, shape, "int8", q, stored, np.zeros(stored.size, np.int64),
                             quantized_dimension=axis), scales

    def _bias(self, name: str, x: int, w_scale: np.ndarray) -> int:
        b_scale = (np.float32(self.scales[x]) * w_scale).astype(np.float32)
        b = self.rng.standard_normal(w_scale.size).astype(np.float32) * 0.1
        bias_dtype = "int64" if self.dtype == "int16" else "int32"  # 16x8: int64 biases
        q = np.round(b / b_scale).astype(bias_dtype)
        stored = b_scale[:1] if np.all(b_scale == b_scale[0]) else b_scale  # per tensor
        return self.g.tensor(name, (w_scale.size,), bias_dtype, q, stored,
                             np.zeros(stored.size, np.int64))

    # -------------------------------------------------------------- layers
    def conv(self, x: int, cout: int, k: int = 1, stride: int = 1, act: str = "RELU6",
             depthwise: bool = False) -> int:
        n, h, w, c = self.shapes[x]
        name = self._name("dwconv" if depthwise else "conv")
        if depthwise:
            wt, ws = self._weights(name + "_w", (1, k, k, c * (cout // c)), k * k, 3)
        else:
            wt, ws = self._weights(name + "_w", (cout, k, k, c), k * k * c, 0)
        b = self._bias(name + "_b", x, ws)
        oh, ow = -(-h // stride), -(-w // stride)
        y = self.activation(name, (n, oh, ow, cout))
        options: dict[str, Any] = dict(padding="SAME", strideH=stride, strideW=stride,
                       fusedActivationFunction=act, dilationHFactor=1, dilationWFactor=1)
        if depthwise:
            options["depthMultiplier"] = cout // c
        self.g.op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, wt, b], [y], **options)
        return y

    def fully_connected(self, x: int, units: int, act: str = "NONE") -> int:
        shape = self.shapes[x]
        k = shape[-1]
        name = self._name("fc")
        # per-tensor weights, as TFLite's converter writes fully connected layers
        wt, ws = self._weights(name + "_w", (units, k), k, 0, per_channel=False)
        b = self._bias(name + "_b", x, ws)
        y = self.activation(name, (*shape[:-1], units))
        self.g.op("FULLY_CONNECTED", [x, wt, b], [y], fusedActivationFunction=act)
        return y

    def add(self, a: int, b: int, act: str = "NONE") -> int:
        y = self.activation(self._name("add"), self.shapes[a])
        # the 16x8 converter's int16 ADD rescales generally (not by powers of two)
        options: dict[str, Any] = dict(potScaleInt16=False) if self.dtype == "int16" else {}
        self.g.op("ADD", [a, b], [y], fusedActivationFunction=act, **options)
        return y

    def average_pool(self, x: int) -> int:
        n, h, w, c = self.shapes[x]
        y = self.activation(self._name("avgpool"), (n, 1, 1, c))
        self.g.op("AVERAGE_POOL_2D", [x], [y], padding="VALID", strideH=1, strideW=1,
                  filterHeight=h, filterWidth=w, fusedActivationFunction="NONE")
        return y

    def mean_hw(self, x: int) -> int:
        n, h, w, c = self.shapes[x]
        axes = self.g.tensor(self._name("axes"), (2,), "int32", np.array([1, 2], np.int32))
        y = self.activation(self._name("mean"), (n, c))
        self.g.op("MEAN", [x, axes], [y], keepDims=False)
        return y

    def reshape(self, x: int, shape, shape_subgraph: bool = False) -> int:
        """``shape_subgraph``: the target computed from the input's SHAPE, as today's converter
        writes a reshape whose batch size was dynamic in Keras (SHAPE -> STRIDED_SLICE ->
        PACK, the rest of the dimensions as REDUCE_PROD of constants)."""
        scale, zp = self.g.tensors[x].scale, self.g.tensors[x].zero_point
        name = self._name("reshape")
        if shape_subgraph:
            target = self._shape_subgraph(x, name, shape)
        else:
            target = self.g.tensor(name + "_shape", (len(shape),), "int32",
                                   np.asarray(shape, np.int32))
        y = self.g.tensor(name, shape, self.dtype, scale=scale, zero_point=zp)
        self.shapes[y], self.scales[y] = tuple(shape), self.scales[x]
        self.g.op("RESHAPE", [x, target], [y], newShape=list(shape))
        return y

    def _shape_subgraph(self, x: int, name: str, shape) -> int:
        def ints(suffix: str, values) -> int:
            values = np.asarray(values, np.int32)
            return self.g.tensor(f"{name}_{suffix}", values.shape, "int32", values)

        full = self.g.tensor(f"{name}_input_shape", (len(self.shapes[x]),), "int32")
        batch = self.g.tensor(f"{name}_batch", (), "int32")
        rest = self.g.tensor(f"{name}_rest", (), "int32")
        target = self.g.tensor(f"{name}_shape", (len(shape),), "int32")
        self.g.op("SHAPE", [x], [full], outType=2)
        self.g.op("STRIDED_SLICE", [full, ints("begin", [0]), ints("end", [1]),
                                    ints("strides", [1])], [batch],
                  beginMask=0, endMask=0, shrinkAxisMask=1)
        self.g.op("REDUCE_PROD", [ints("dims", list(shape[1:])), ints("axis", [0])], [rest],
                  keepDims=False)
        if len(shape) != 2:
            raise ValueError("the shape subgraph writes [batch, rest] targets")
        self.g.op("PACK", [batch, rest], [target], valuesCount=2, axis=0)
        return target

    def softmax(self, x: int) -> int:
        fixed = (FIXED_OUTPUTS_INT16 if self.dtype == "int16" else FIXED_OUTPUTS)["SOFTMAX"]
        y = self.activation(self._name("softmax"), self.shapes[x], fixed)
        self.g.op("SOFTMAX", [x], [y], beta=1.0)
        return y


def _calibrated(write: Callable[[Net], tuple[list[int], list[int]]], dtype: str, seed: int,
                input_shape: tuple[int, ...]) -> bytes:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    qparams: dict[str, tuple[float, int]] = {}
    rng = np.random.default_rng(seed + 1)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    feeds = [rng.integers(lo, hi + 1, input_shape).astype(dtype) for _ in range(2)]
    for _ in range(CALIBRATION_ROUNDS):
        net = Net(dtype, qparams, seed)
        inputs, outputs = write(net)
        data = net.g.finish(inputs, outputs)
        interp = Interpreter(model_content=data, experimental_preserve_all_tensors=True,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        interp.allocate_tensors()
        observed: dict[str, list[float]] = {}
        for feed in feeds:
            interp.set_tensor(interp.get_input_details()[0]["index"], feed)
            interp.invoke()
            for d in interp.get_tensor_details():
                if d["name"] not in net.activations:
                    continue
                scale, zp = d["quantization"]
                q = interp.get_tensor(d["index"]).astype(np.float64)
                real = (q - zp) * scale
                saturated = np.mean((q <= lo) | (q >= hi)) > 0.01
                span = (real.min(), real.max())
                if saturated:
                    span = (span[0] * 2, span[1] * 2)
                prev = observed.get(d["name"], [0.0, 0.0])
                observed[d["name"]] = [min(prev[0], span[0]), max(prev[1], span[1])]
        qparams = {name: _fit(lo_r, hi_r, dtype) for name, (lo_r, hi_r) in observed.items()}
    return data


def _fit(lo: float, hi: float, dtype: str) -> tuple[float, int]:
    lo, hi = min(lo, 0.0) * 1.1, max(hi, 0.0) * 1.1
    if dtype == "int16":  # symmetric, zero point 0 (TFLite 16x8)
        return float(np.float32(max(-lo, hi, 1e-3) / 32767)), 0
    scale = float(np.float32(max(hi - lo, 1e-3) / 255))
    qmin = 0 if dtype == "uint8" else -128
    zp = int(np.clip(round(qmin - lo / scale), qmin, qmin + 255))
    return scale, zp


def mobilenet_v1(alpha: float = 0.25, size: int = 96, num_classes: int = 16,
                 dtype: str = "int8", seed: int = 0, features: bool = False,
                 shape_subgraph: bool = False) -> bytes:
    """MobileNet-V1: conv 3x3/2, 13 depthwise-separable blocks, global average pool, 1x1 conv
    logits, reshape, softmax (the layout of ``mobilenet_v1_{alpha}_{size}_quant``).
    ``features`` adds the last feature map (before the pool) as a second output;
    ``shape_subgraph`` computes the reshape target as today's converter does (``Net.reshape``)."""
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
              (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]

    def write(net: Net):
        x = net.activation("input", (1, size, size, 3))
        y = net.conv(x, max(8, int(32 * alpha)), 3, 2)
        for channels, stride in blocks:
            c = net.shapes[y][3]
            y = net.conv(y, c, 3, stride, depthwise=True)
            y = net.conv(y, max(8, int(channels * alpha)), 1, 1)
        feature_map = y
        y = net.average_pool(y)
        y = net.conv(y, num_classes, 1, 1, act="NONE")
        y = net.reshape(y, (1, num_classes), shape_subgraph=shape_subgraph)
        return [x], [net.softmax(y)] + ([feature_map] if features else [])

    return _calibrated(write, dtype, seed, (1, size, size, 3))


def mobilenet_v2(alpha: float = 0.35, size: int = 96, num_classes: int = 16,
                 dtype: str = "int8", seed: int = 0, features: bool = False) -> bytes:
    """A shortened MobileNet-V2: inverted residual blocks (1x1 expand + RELU6, depthwise 3x3 +
    RELU6, linear 1x1 projection, residual ADD where shapes allow), 1x1 conv, mean over H and
    W, fully connected logits, softmax."""
    blocks = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 2, 2), (6, 96, 1, 1)]

    def write(net: Net):
        x = net.activation("input", (1, size, size, 3))
        y = net.conv(x, max(8, int(32 * alpha)), 3, 2)
        for t, c, n, s in blocks:
            out_c = max(8, int(c * alpha))
            for i in range(n):
                stride = s if i == 0 else 1
                in_c = net.shapes[y][3]
                h = net.conv(y, in_c * t, 1, 1) if t != 1 else y
                h = net.conv(h, in_c * t, 3, stride, depthwise=True)
                h = net.conv(h, out_c, 1, 1, act="NONE")
                y = net.add(y, h) if stride == 1 and in_c == out_c else h
        y = net.conv(y, max(8, int(320 * alpha)), 1, 1)
        feature_map = y
        y = net.mean_hw(y)
        y = net.fully_connected(y, num_classes)
        return [x], [net.softmax(y)] + ([feature_map] if features else [])

    return _calibrated(write, dtype, seed, (1, size, size, 3))


def classifier(inputs: int = 64, hidden: tuple[int, ...] = (128, 64), num_classes: int = 10,
               dtype: str = "int8", seed: int = 0, features: bool = False) -> bytes:
    """Fully connected layers with RELU, then logits and softmax (``features``: the last
    hidden layer as a second output)."""

    def write(net: Net):
        x = net.activation("input", (1, inputs))
        y = x
        for units in hidden:
            y = net.fully_connected(y, units, act="RELU")
        hidden_out = y
        y = net.fully_connected(y, num_classes)
        return [x], [net.softmax(y)] + ([hidden_out] if features else [])

    return _calibrated(write, dtype, seed, (1, inputs))


def resnet(size: int = 16, channels: int = 8, num_classes: int = 10, dtype: str = "int8",
           seed: int = 0, features: bool = False, head: str = "flatten") -> bytes:
    """A small ResNet: conv 3x3 + RELU stem, two residual blocks (conv 3x3 + RELU, conv 3x3,
    ADD + RELU) around a stride-2 conv that doubles the channels, then fully connected logits
    on the flattened map (``head="flatten"``) or, as a classifier ends, MEAN over H and W ->
    FULLY_CONNECTED -> SOFTMAX (``head="mean_softmax"``). ``dtype="int16"`` writes it as
    TFLite's 16x8 converter does (module doc); ``features``: the last feature map as a second
    output."""
    if head not in ("flatten", "mean_softmax"):
        raise ValueError(f"head {head!r}: 'flatten' or 'mean_softmax'")

    def block(net: Net, x: int) -> int:
        c = net.shapes[x][3]
        h = net.conv(x, c, 3, 1, act="RELU")
        h = net.conv(h, c, 3, 1, act="NONE")
        return net.add(x, h, act="RELU")

    def write(net: Net):
        x = net.activation("input", (1, size, size, 3))
        y = block(net, net.conv(x, channels, 3, 1, act="RELU"))
        y = block(net, net.conv(y, 2 * channels, 3, 2, act="RELU"))
        if head == "mean_softmax":
            out = net.softmax(net.fully_connected(net.mean_hw(y), num_classes))
        else:
            out = net.fully_connected(net.reshape(y, (1, int(np.prod(net.shapes[y])))),
                                      num_classes)
        return [x], [out] + ([y] if features else [])

    return _calibrated(write, dtype, seed, (1, size, size, 3))


ARCHITECTURES = {"mobilenet_v1": mobilenet_v1, "mobilenet_v2": mobilenet_v2,
                 "classifier": classifier, "resnet": resnet}
