"""onnxruntime as the oracle of lookup tables.

One ONNX model holds K quantized copies of an activation, DequantizeLinear -> op ->
QuantizeLinear, each with its own parameters, all reading the tensor of all 256 codes; one
session run gives K tables. canonqnn imports the same model and folds each copy into a
``canonqnn.lut``, whose table constant is compared entry by entry (a lookup does no arithmetic,
so the table is the op's result on every code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import _tvm
from canonqnn.ops import lookup

F32 = np.float32
MS = "com.microsoft"
ONNX_TYPE = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


@dataclass(frozen=True)
class Activation:
    op_type: str
    attrs: dict = field(default_factory=dict)
    opset: int = 13
    real: object = None             # numpy approximation, only to choose output scales
    slope: np.ndarray | None = None  # PRelu: one slope per row of the input


def _gelu(v):
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


SLOPES = np.array([0.1, -0.25, 0.3, 1.5], F32)
ACTIVATIONS = {
    "sigmoid": Activation("Sigmoid", real=lambda v: 1 / (1 + np.exp(-v))),
    "tanh": Activation("Tanh", real=np.tanh),
    "hardswish": Activation("HardSwish", opset=14,
                            real=lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
    "hardsigmoid": Activation("HardSigmoid", {"alpha": 0.3, "beta": 0.45},
                              real=lambda v: np.clip(0.3 * v + 0.45, 0, 1)),
    "leaky_relu": Activation("LeakyRelu", {"alpha": 0.1},
                             real=lambda v: np.where(v >= 0, v, v / 10)),
    "prelu": Activation("PRelu", slope=SLOPES,
                        real=lambda v: np.where(v > 0, v, v * SLOPES.reshape(-1, 1))),
    "gelu": Activation("Gelu", opset=20, real=_gelu),
    "gelu_tanh": Activation("Gelu", {"approximate": "tanh"}, opset=20, real=_gelu),
    "erf": Activation("Erf", real=np.vectorize(math.erf)),
    "exp": Activation("Exp", real=np.exp),
    "log": Activation("Log", real=lambda v: np.log(np.maximum(v, 1e-3))),
    "sqrt": Activation("Sqrt", real=lambda v: np.sqrt(np.maximum(v, 0))),
    "softplus": Activation("Softplus", real=lambda v: np.log1p(np.exp(v))),
    "elu": Activation("Elu", {"alpha": 0.8}, real=lambda v: np.where(v >= 0, v, 0.8 * np.expm1(v))),
    "abs": Activation("Abs", real=np.abs),
    "neg": Activation("Neg", real=np.negative),
}


def codes(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype)


def rows(act: Activation) -> int:
    return 1 if act.slope is None else act.slope.size


def random_qparams(rng: np.random.Generator, act: Activation, dtype, k: int) -> list[tuple]:
    """``k`` sets (in_scale, in_zp, out_scale, out_zp) in the stored ``dtype``: input spans
    of 0.5 to 40, output scales fitted to the range the function reaches (more or less
    tightly, so that outputs saturate sometimes), one set in four with power-of-two scales
    (exact products and ties)."""
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    out = []
    for i in range(k):
        span = math.exp(rng.uniform(math.log(0.5), math.log(40.0)))
        s_in = F32(span / 256)
        z_in = int(rng.integers(lo, hi + 1))
        real = np.asarray(act.real((codes(dtype).astype(np.float64) - z_in) * float(s_in)))
        real = real[np.isfinite(real)]
        r_min, r_max = (float(real.min()), float(real.max())) if real.size else (0.0, 1.0)
        width = max(r_max - r_min, 1e-3) * math.exp(rng.uniform(-0.5, 0.4))
        s_out = F32(width / 255)
        if i % 4 == 3:
            s_in, s_out = F32(2.0 ** round(math.log2(s_in))), F32(2.0 ** round(math.log2(s_out)))
        z_out = int(np.clip(round(lo - r_min / float(s_out)) + int(rng.integers(-12, 13)), lo, hi))
        out.append((s_in, z_in, s_out, z_out))
    return out


def model(act: Activation, params: list[tuple], dtype) -> object:
    """K branches DQ -> act -> Q on the input ``x`` of shape [rows, 256] (all codes per row)."""
    dtype = np.dtype(dtype)
    shape = [rows(act), 256]
    nodes, inits, outputs = [], [], []
    if act.slope is not None:
        inits.append(numpy_helper.from_array(act.slope.reshape(-1, 1), "slope"))
    for k, (s_in, z_in, s_out, z_out) in enumerate(params):
        inits += [numpy_helper.from_array(np.array(s_in, F32), f"si{k}"),
                  numpy_helper.from_array(np.array(z_in, dtype), f"zi{k}"),
                  numpy_helper.from_array(np.array(s_out, F32), f"so{k}"),
                  numpy_helper.from_array(np.array(z_out, dtype), f"zo{k}")]
        extra = ["slope"] if act.slope is not None else []
        nodes += [helper.make_node("DequantizeLinear", ["x", f"si{k}", f"zi{k}"], [f"r{k}"]),
                  helper.make_node(act.op_type, [f"r{k}", *extra], [f"f{k}"], **act.attrs),
                  helper.make_node("QuantizeLinear", [f"f{k}", f"so{k}", f"zo{k}"], [f"y{k}"])]
        outputs.append(helper.make_tensor_value_info(f"y{k}", ONNX_TYPE[dtype], shape))
    graph = helper.make_graph(nodes, "tables",
                              [helper.make_tensor_value_info("x", ONNX_TYPE[dtype], shape)],
                              outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", act.opset),
                                                    helper.make_opsetid(MS, 1)])
    proto.ir_version = 10
    return proto


def qlinear_model(op_type: str, params: list[tuple], dtype, attrs: dict | None = None):
    """K com.microsoft QLinearSigmoid / QLinearLeakyRelu nodes on the codes [1, 256]."""
    dtype = np.dtype(dtype)
    nodes, inits, outputs = [], [], []
    for k, (s_in, z_in, s_out, z_out) in enumerate(params):
        inits += [numpy_helper.from_array(np.array(s_in, F32), f"si{k}"),
                  numpy_helper.from_array(np.array(z_in, dtype), f"zi{k}"),
                  numpy_helper.from_array(np.array(s_out, F32), f"so{k}"),
                  numpy_helper.from_array(np.array(z_out, dtype), f"zo{k}")]
        nodes.append(helper.make_node(op_type, ["x", f"si{k}", f"zi{k}", f"so{k}", f"zo{k}"],
                                      [f"y{k}"], domain=MS, **(attrs or {})))
        outputs.append(helper.make_tensor_value_info(f"y{k}", ONNX_TYPE[dtype], [1, 256]))
    graph = helper.make_graph(nodes, "qlinear",
                              [helper.make_tensor_value_info("x", ONNX_TYPE[dtype], [1, 256])],
                              outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(MS, 1)])
    proto.ir_version = 10
    return proto


def session(proto, optimized: bool) -> ort.InferenceSession:
    """One thread (Eigen-based kernels compute a few elements differently at the boundaries
    of thread partitions; docs/spec.md ``## lut``). ``optimized``: ORT_ENABLE_ALL with the
    settings canonqnn.parity uses, where DQ -> Sigmoid|LeakyRelu -> Q fuse into QLinear ops."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if optimized:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
        so.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def held(values: np.ndarray) -> np.ndarray:
    """Stored int8/uint8 values as canonqnn holds them (uint8 shifted by -128)."""
    values = np.asarray(values)
    return values if values.dtype == np.int8 else (values.astype(np.int32) - 128).astype(np.int8)


def ort_tables(proto, dtype, optimized: bool) -> list[np.ndarray]:
    """onnxruntime's result on every code, per branch: int8[rows, 256] (uint8 shifted)."""
    sess = session(proto, optimized)
    x = np.broadcast_to(codes(dtype), (sess.get_inputs()[0].shape[0], 256)).copy()
    return [held(y) for y in sess.run(None, {"x": x})]


def canonqnn_tables(proto) -> tuple[list[np.ndarray], list[dict], object]:
    """The table of every ``canonqnn.lut`` of the canonicalized model, in graph order, as
    int8[rows, 256]; their attributes; the Report."""
    mod, report = canonqnn.canonicalize(canonqnn.load(proto))
    found, attrs = [], []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = lookup(binding.value)
            if op is not None and op.name == "lut":
                found.append(np.atleast_2d(_tvm.const_value(binding.value.args[1])))
                attrs.append(_tvm.attrs_dict(binding.value))
    return found, attrs, report


def compare(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[int, int, int]:
    """(differing entries, entries compared, max |difference|) over all branches."""
    bad = total = worst = 0
    for g, w in zip(got, want):
        g = np.broadcast_to(g, w.shape).astype(np.int32)
        diff = np.abs(g - w.astype(np.int32))
        bad += int(np.count_nonzero(diff))
        total += diff.size
        worst = max(worst, int(diff.max()))
    return bad, total, worst
