"""A QDQ ONNX graph under construction, and the finished ``GraphSpec``.

Every quantized tensor is a ``QTensor`` (int8 or uint8, per-tensor scale and zero point). Ops
are written as onnxruntime's quantizer writes them: ``DequantizeLinear`` on each input, the
float op, ``QuantizeLinear`` with the op's own output parameters; constant weights are int8
initializers under a ``DequantizeLinear``, biases int32 with scale ``x_scale * w_scale``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}
ELEM_TYPE = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int32": TensorProto.INT32,
             "int64": TensorProto.INT64}
MAX_ELEMENTS = 1024  # keeps every tensor small: TVM build time grows with loop extents


def f32(value: float) -> float:
    """The float32 value nearest ``value``, as a Python float (exact)."""
    return float(np.float32(value))


@dataclass(frozen=True)
class Tolerance:
    """A documented bound for an op that cannot be bit-exact with onnxruntime: at most
    ``max_lsb``, and only where ``exact(model, output, values)`` (``_boundaries``) puts the
    exact value within float32 error of a rounding boundary."""

    max_lsb: int
    source: str
    exact: Callable[..., Any]


@dataclass(frozen=True)
class QTensor:
    """A quantized activation: ``real = scale * (q - zp)``; ``amp`` is a rough magnitude of
    its real values (used to draw realistic output parameters downstream); a tensor with a
    ``tolerance`` comes from an op that is not bit-exact and is never consumed (its error
    would be amplified by whatever follows)."""

    name: str
    shape: tuple[int, ...]
    scale: float
    zp: int
    amp: float
    tolerance: Tolerance | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __str__(self) -> str:
        return f"{self.name}{list(self.shape)}(s={self.scale!r}, zp={self.zp})"


@dataclass(frozen=True)
class OpRecord:
    """One generated op, as printed in failure reports."""

    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        args = ", ".join(self.inputs)
        params = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{', '.join(self.outputs)} = {self.kind}({args}{'; ' + params if params else ''})"


@dataclass
class GraphSpec:
    """A generated model: the ONNX proto plus what is needed to check and to reproduce it."""

    dtype: str
    opset: int
    inputs: tuple[QTensor, ...]
    ops: tuple[OpRecord, ...]
    outputs: tuple[QTensor, ...]
    extra_outputs: tuple[str, ...]  # non-quantized outputs (ArgMax indices): exact
    data: str  # how the second run's inputs are drawn ("uniform", "extremes", "narrow")
    seed: int
    model: onnx.ModelProto = field(repr=False)

    @property
    def kinds(self) -> Counter:
        return Counter(op.kind for op in self.ops)

    def tolerance(self, output: str) -> Tolerance | None:
        return next((t.tolerance for t in self.outputs if t.name == output), None)

    def feeds(self) -> list[dict[str, np.ndarray]]:
        """Two input sets: full-range uniform, then ``data`` (uniform again with another seed,
        only the extreme codes, or a narrow band around the zero point)."""
        rng = np.random.default_rng(self.seed)
        lo, hi = INT_RANGE[self.dtype]
        runs = []
        for style in ("uniform", self.data):
            feed = {}
            for t in self.inputs:
                if style == "extremes":
                    v = rng.choice([lo, lo + 1, hi - 1, hi], t.shape)
                elif style == "narrow":
                    v = np.clip(t.zp + rng.integers(-3, 4, t.shape), lo, hi)
                else:
                    v = rng.integers(lo, hi + 1, t.shape)
                feed[t.name] = np.asarray(v).astype(self.dtype)
            runs.append(feed)
        return runs

    def describe(self) -> str:
        lines = [f"{self.dtype} graph, opset {self.opset}, inputs "
                 + ", ".join(str(t) for t in self.inputs)]
        lines += [f"  {op}" for op in self.ops]
        lines.append("  outputs: " + ", ".join(
            [t.name + (f" (within {t.tolerance.max_lsb} LSB)" if t.tolerance else "")
             for t in self.outputs] + list(self.extra_outputs)))
        lines.append(f"  second run's inputs: {self.data}, seed {self.seed}")
        return "\n".join(lines)

    __repr__ = describe  # hypothesis prints falsifying examples with repr


class Draft:
    """Builds the ONNX graph op by op; menu functions call ``dq``, ``emit``, ``quantize``."""

    def __init__(self, dtype: str, opset: int, share_dq: bool) -> None:
        self.dtype, self.opset, self.share_dq = dtype, opset, share_dq
        self.qmin, self.qmax = INT_RANGE[dtype]
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[QTensor] = []
        self.tensors: list[QTensor] = []
        self.ops: list[OpRecord] = []
        self.uses: Counter = Counter()
        self.extra_outputs: list[onnx.ValueInfoProto] = []
        self._qparams: dict[str, tuple[str, str]] = {}
        self._dq: dict[str, str] = {}
        self._count = 0

    # ---------------------------------------------------------------- names and constants
    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: Any, prefix: str = "c") -> str:
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def float_scalar(self, value: float) -> str:
        return self.const(np.float32(value), "f")

    def ints(self, values) -> str:
        return self.const(np.asarray(values, np.int64), "i")

    def usable(self) -> list[QTensor]:
        """Tensors later ops may consume (not the outputs of ops with a tolerance)."""
        return [t for t in self.tensors if t.tolerance is None]

    # ---------------------------------------------------------------- Q / DQ
    def _params_of(self, t: QTensor) -> tuple[str, str]:
        if t.name not in self._qparams:
            self._qparams[t.name] = (self.const(np.float32(t.scale), "s"),
                                     self.const(np.array(t.zp, self.dtype), "z"))
        return self._qparams[t.name]

    def add_input(self, shape: tuple[int, ...], scale: float, zp: int) -> QTensor:
        t = QTensor(f"x{len(self.inputs)}", tuple(shape), f32(scale), int(zp),
                    amp=scale * (self.qmax - self.qmin) / 2)
        self.inputs.append(t)
        self.tensors.append(t)
        return t

    def dq(self, t: QTensor) -> str:
        """The float (dequantized) value of ``t``; one DequantizeLinear per consumer unless the
        graph shares one per tensor (onnxruntime duplicates shared ones itself)."""
        self.uses[t.name] += 1
        if self.share_dq and t.name in self._dq:
            return self._dq[t.name]
        s, z = self._params_of(t)
        out = self.emit("DequantizeLinear", [t.name, s, z])
        self._dq[t.name] = out
        return out

    def quantized_const(self, q: np.ndarray, scale: float, zp: int) -> str:
        """A constant activation-typed operand (Add/Mul/... with an initializer)."""
        data = self.const(np.asarray(q).astype(self.dtype), "k")
        s = self.const(np.float32(scale), "s")
        z = self.const(np.array(zp, self.dtype), "z")
        return self.emit("DequantizeLinear", [data, s, z])

    def weight(self, w: np.ndarray, scale: np.ndarray, axis: int) -> str:
        """int8 weights, symmetric (zero point 0), per tensor or per channel along ``axis``."""
        scale = np.asarray(scale, np.float32)
        data = self.const(np.asarray(w, np.int8), "w")
        s = self.const(scale, "ws")
        z = self.const(np.zeros(scale.shape, np.int8), "wz")
        attrs = {"axis": axis} if scale.ndim else {}
        return self.emit("DequantizeLinear", [data, s, z], **attrs)

    def bias(self, b: np.ndarray, scale: np.ndarray) -> str:
        """int32 bias with scale ``x_scale * w_scale`` (per channel: axis 0), zero point 0."""
        scale = np.asarray(scale, np.float32)
        data = self.const(np.asarray(b, np.int32), "b")
        s = self.const(scale, "bs")
        z = self.const(np.zeros(scale.shape, np.int32), "bz")
        attrs = {"axis": 0} if scale.ndim else {}
        return self.emit("DequantizeLinear", [data, s, z], **attrs)

    # ---------------------------------------------------------------- nodes
    def emit(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: Any):
        outs = [self.fresh("v") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def activation(self, y: str, act: tuple) -> str:
        """A float Relu / Clip(lo, hi) after ``y``; ``act`` is ("none",), ("relu",) or
        ("clip", lo, hi)."""
        if act[0] == "relu":
            return self.emit("Relu", [y])
        if act[0] == "clip":
            return self.emit("Clip", [y, self.float_scalar(act[1]), self.float_scalar(act[2])])
        return y

    def quantize(self, y: str, kind: str, inputs: list[QTensor], params: dict,
                 shape: tuple[int, ...], scale: float, zp: int, amp: float,
                 tolerance: Tolerance | None = None, record: bool = True) -> QTensor:
        """QuantizeLinear of the float op output ``y``: the op's quantized result."""
        name = self.fresh("t")
        t = QTensor(name, tuple(int(d) for d in shape), f32(scale), int(zp),
                    max(float(amp), 1e-6), tolerance)
        s, z = self._params_of(t)
        self.nodes.append(helper.make_node("QuantizeLinear", [y, s, z], [name]))
        self.tensors.append(t)
        if record:
            self.record(kind, inputs, [t], params)
        return t

    def record(self, kind: str, inputs: list[QTensor], outputs: list, params: dict) -> None:
        names = tuple(o if isinstance(o, str) else o.name for o in outputs)
        self.ops.append(OpRecord(kind, tuple(t.name for t in inputs), names,
                                 tuple(params.items())))

    def int_output(self, name: str, shape: tuple[int, ...]) -> None:
        """A non-quantized graph output (ArgMax's int64 indices)."""
        self.extra_outputs.append(helper.make_tensor_value_info(name, TensorProto.INT64,
                                                                list(shape)))

    # ---------------------------------------------------------------- the model
    def finish(self, data: str, seed: int) -> GraphSpec:
        inputs = [t for t in self.inputs if self.uses[t.name]]
        outputs = [t for t in self.tensors if t not in self.inputs and not self.uses[t.name]]
        info = [helper.make_tensor_value_info(t.name, ELEM_TYPE[self.dtype], list(t.shape))
                for t in (*inputs, *outputs)]
        graph = helper.make_graph(self.nodes, "random_qdq", info[:len(inputs)],
                                  info[len(inputs):] + self.extra_outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="canonqnn-random-graphs")
        model.ir_version = 10
        onnx.checker.check_model(model)
        return GraphSpec(self.dtype, self.opset, tuple(inputs), tuple(self.ops), tuple(outputs),
                         tuple(v.name for v in self.extra_outputs), data, seed, model)


# ---------------------------------------------------------------- drawing parameters
def qparams_for_range(d: Draft, rmin: float, rmax: float) -> tuple[float, int]:
    """Asymmetric (scale, zero point) covering [rmin, rmax] (widened to include 0), as
    onnxruntime's quantizer computes them from calibrated ranges."""
    rmin, rmax = min(rmin, 0.0), max(rmax, 0.0)
    if rmax - rmin < 1e-6:
        rmax = rmin + 1e-3
    scale = f32((rmax - rmin) / (d.qmax - d.qmin))
    zp = int(np.clip(round(d.qmin - rmin / scale), d.qmin, d.qmax))
    return scale, zp


def draw_qparams(draw, d: Draft, lo: float, hi: float, *, jitter: bool = True):
    """Output parameters for real values expected in [lo, hi]: the calibrated range scaled by
    a log-uniform factor in [1/2, 2] and shifted; in one draw in four a power-of-two scale
    (exact products, many rounding ties)."""
    if jitter:
        factor = 2.0 ** draw(st.floats(-1.0, 1.0))
        shift = draw(st.floats(-0.25, 0.25)) * (hi - lo)
        lo, hi = (lo + shift) * factor, (hi + shift) * factor
    scale, zp = qparams_for_range(d, lo, hi)
    if draw(st.integers(0, 3)) == 3:
        scale = 2.0 ** round(math.log2(scale))
    return f32(scale), zp


def draw_range(draw, amp: float, *, signed: bool = True) -> tuple[float, float]:
    """A calibrated-looking real range for values of magnitude ``amp``."""
    neg = draw(st.floats(0.0, 1.0)) if signed else 0.0
    return -neg * amp, max(amp * (1.0 - neg), amp * 0.1)


def draw_seed(draw) -> np.random.Generator:
    """Bulk data (weights, constants) comes from a drawn seed, not from hypothesis itself."""
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


def clip_is_redundant(lo: float, hi: float, scale: float, zp: int, d: Draft) -> bool:
    """onnxruntime drops a Clip before a QuantizeLinear that saturates at least as much
    (``IsClipMadeRedundantByQ``): RNE(lo / s) + zp <= qmin and RNE(hi / s) + zp >= qmax."""
    s = np.float32(scale)
    q_lo = np.rint(np.float32(np.float32(lo) / s)) + zp
    q_hi = np.rint(np.float32(np.float32(hi) / s)) + zp
    return bool(q_lo <= d.qmin and q_hi >= d.qmax)


def folded_activation(draw, d: Draft, lo: float, hi: float, *, allow: bool = True):
    """``(act, scale, zp)`` for a compute op's output in [lo, hi]: no activation, or a Relu /
    Clip that the output quantization makes redundant (zero point at qmin; Clip bounds at the
    ends of the range), which onnxruntime removes before fusing the op into its integer
    kernel (otherwise it computes the op in float)."""
    kind = draw(st.sampled_from(["none", "relu", "clip"])) if allow else "none"
    if kind == "none":
        return ("none",), *draw_qparams(draw, d, lo, hi)
    if kind == "relu":
        scale, _ = draw_qparams(draw, d, 0.0, max(hi, 1e-3))
        return ("relu",), scale, d.qmin
    c_lo = -f32(draw(st.sampled_from([0.0, 0.0, 1.0])) * max(-lo, 1e-3)) + 0.0  # no -0.0
    c_hi = f32(max(hi, 1e-3) * 2.0 ** draw(st.floats(-1.0, 0.5)))
    scale = f32((c_hi - c_lo) / (d.qmax - d.qmin) * draw(st.floats(0.6, 0.99)))
    zp = min(d.qmin + int(np.rint(np.float32(-c_lo) / np.float32(scale))), d.qmax)
    if not clip_is_redundant(c_lo, c_hi, scale, zp, d):  # lo far below 0, hi close to it
        return ("none",), *draw_qparams(draw, d, lo, hi)
    return ("clip", c_lo, c_hi), scale, zp
