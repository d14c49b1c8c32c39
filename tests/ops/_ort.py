"""Test helpers: single-node ONNX models run in onnxruntime (the oracle), and single-op
canonqnn modules (numpy reference + TVM build) fed the same data.

ORT settings follow /work/scratch/ort_numerics/NOTES.md: CPUExecutionProvider,
ORT_DISABLE_ALL, ir_version 10; scales and zero points are initializers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import canonqnn
from canonqnn import _tvm
from canonqnn.ops import REGISTRY, lookup

MS = "com.microsoft"
F32 = np.float32

_ONNX_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
}

# u8 activations x s8 weights: MLAS' AVX2 (non-VNNI) u8s8 kernels saturate int16 pair sums
# (NOTES.md section 5). The session entry "session.x64quantprecision"="1" only takes effect
# through Avx2WeightS8ToU8Transformer, a level-2 graph transformer: it is ignored at
# ORT_DISABLE_ALL and ORT_ENABLE_BASIC (measured), so u8s8 oracles run at ORT_ENABLE_EXTENDED.
U8S8_EXACT = {"session.x64quantprecision": "1"}


# ---------------------------------------------------------------- onnxruntime side
def run_graph(nodes, feeds: dict, consts: dict, out_dtype, *, opset: int = 13,
              config: dict | None = None, threads: int = 2) -> np.ndarray:
    """Run ``nodes`` (output ``"Y"``) with ``feeds`` as graph inputs, ``consts`` as initializers.

    ORT_DISABLE_ALL, except with ``config=U8S8_EXACT`` (ORT_ENABLE_EXTENDED, see above), on
    ``threads`` intra-op threads (the profiles' 2 by default, whatever the host's cores: its
    float ReduceMean order depends on them).
    """
    inputs = [helper.make_tensor_value_info(k, _ONNX_TYPES[np.asarray(v).dtype], list(np.shape(v)))
              for k, v in feeds.items()]
    output = helper.make_tensor_value_info("Y", _ONNX_TYPES[np.dtype(out_dtype)], None)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    graph = helper.make_graph(nodes, "single_op", inputs, [output], inits)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
                                   if config == U8S8_EXACT else
                                   ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    (y,) = sess.run(["Y"], {k: np.asarray(v) for k, v in feeds.items()})
    assert y.dtype == np.dtype(out_dtype)
    return y


def run_node(op_type: str, input_names: list[str], feeds: dict, consts: dict, out_dtype, *,
             domain: str = "", opset: int = 13, config: dict | None = None, **attrs) -> np.ndarray:
    node = helper.make_node(op_type, input_names, ["Y"], domain=domain, **attrs)
    return run_graph([node], feeds, consts, out_dtype, opset=opset, config=config)


def scalar(value, dtype) -> np.ndarray:
    """A 0-d initializer value (scale or zero point)."""
    return np.array(value, dtype=dtype)


# ---------------------------------------------------------------- canonqnn side
class SingleOp:
    """A Relax module ``main(inputs...) = <one canonical op>``, built once, run many times."""

    def __init__(self, make: Callable[..., object], inputs: dict[str, tuple[int, ...]],
                 dtype: str = "int8"):
        bb = relax.BlockBuilder()
        params = [relax.Var(name, _tvm.tensor_type(shape, dtype)) for name, shape in inputs.items()]
        with bb.function("main", params):
            with bb.dataflow():
                self.call = make(*params)
                out = bb.emit_output(bb.emit(self.call))
            bb.emit_func_output(out)
        self.op = lookup(self.call)
        assert self.op is not None and REGISTRY[self.op.name] is self.op
        self.mod = bb.get()
        self.built = canonqnn.build(self.mod)

    def reference(self, **feeds: np.ndarray) -> np.ndarray:
        """The op's numpy reference, through ``REGISTRY[name].run_reference``."""
        args = []
        for arg in self.call.args:
            if isinstance(arg, relax.Var):
                args.append(np.asarray(feeds[_tvm.var_name(arg)]))
            else:
                args.append(_tvm.const_value(arg))
        return np.asarray(self.op.run_reference(self.call, args))

    def tvm(self, **feeds: np.ndarray) -> np.ndarray:
        if all(np.ndim(v) for v in feeds.values()):
            return self.built.run(feeds)["output_0"]
        # Built.run turns a 0-d input into shape [1] (np.ascontiguousarray in runtime.to_device),
        # which the VM rejects: feed 0-d tensors to the same executable directly.
        vm = relax.VirtualMachine(self.built.module, tvm.cpu())
        args = [tvm.runtime.tensor(np.array(feeds[info.name], dtype=info.dtype), tvm.cpu())
                for info in self.built.io.inputs]
        return vm["main"](*args).numpy()

    def both(self, **feeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.reference(**feeds), self.tvm(**feeds)


def assert_bit_exact(oracle: np.ndarray, reference: np.ndarray, built: np.ndarray,
                     what: str = "") -> None:
    """onnxruntime, the numpy reference and the TVM build agree element for element."""
    oracle, reference, built = (np.asarray(v) for v in (oracle, reference, built))
    for name, value in (("reference", reference), ("tvm", built)):
        assert value.shape == oracle.shape, f"{what}: {name} shape {value.shape} != {oracle.shape}"
        assert value.dtype == oracle.dtype, f"{what}: {name} dtype {value.dtype} != {oracle.dtype}"
    bad_ref = int(np.count_nonzero(reference != oracle))
    bad_tvm = int(np.count_nonzero(built != oracle))
    if bad_ref or bad_tvm:
        idx = np.argwhere((reference != oracle) | (built != oracle))[:5]
        samples = [(tuple(int(i) for i in ix), int(oracle[tuple(ix)]), int(reference[tuple(ix)]),
                    int(built[tuple(ix)])) for ix in idx]
        raise AssertionError(
            f"{what}: reference differs from onnxruntime on {bad_ref}/{oracle.size}, "
            f"tvm on {bad_tvm}/{oracle.size}; (index, ort, ref, tvm): {samples}")


def to_int8(u: np.ndarray) -> np.ndarray:
    """uint8 data re-expressed as the int8 tensor u - 128 (same real values)."""
    return (np.asarray(u).astype(np.int32) - 128).astype(np.int8)


NCHW = (0, 3, 1, 2)  # a TFLite NHWC array transposed to canonqnn's NCHW


def stored(x: np.ndarray) -> np.ndarray:
    """int8 storage of a TFLite tensor (uint8 is held as u - 128)."""
    return to_int8(x) if x.dtype == np.uint8 else x


def random_nhwc_cases(cases, make, rng: np.random.Generator):
    """Random full-range data per case (``case["shape"]`` NHWC, ``case["dtype"]``) and the
    ``MultiOp`` of ``make(var, case)`` over the same data stored as int8 NCHW: returns
    ``(feeds, references, built)``, feeds keyed ``x0, x1, ...``."""
    feeds = {}
    for i, case in enumerate(cases):
        info = np.iinfo(case["dtype"])
        feeds[f"x{i}"] = rng.integers(info.min, info.max + 1, case["shape"]).astype(case["dtype"])
    nchw = {k: stored(v).transpose(NCHW).copy() for k, v in feeds.items()}
    op = MultiOp(lambda *vs: [make(v, case) for v, case in zip(vs, cases)],
                 {k: (v.shape, "int8") for k, v in nchw.items()})
    return feeds, op.references(**nchw), op.tvm(**nchw)


def rand_q(rng: np.random.Generator, shape, dtype=np.int8, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def count_ties(values: np.ndarray) -> int:
    """How many float values lie exactly half-way between two integers."""
    v = np.asarray(values, np.float64)
    return int(np.count_nonzero(v - np.floor(v) == 0.5))


# ---------------------------------------------------------------- adversarial accumulators
def requant_int8(acc, mult, zp: int) -> np.ndarray:
    """MLAS requantization of int32 accumulators: clamp(RNE(f32(f32(acc) * mult))) + zp."""
    v = (np.asarray(acc).astype(F32) * np.asarray(mult, F32)).astype(F32)
    return (np.clip(np.rint(v), -128 - zp, 127 - zp) + zp).astype(np.int8)


def discriminating_accumulator(mult, alternatives, zp: int):
    """The accumulator of smallest magnitude whose int8 result with multiplier ``mult``
    differs from its result with one of the ``alternatives`` (None if there is none)."""
    bound = int(300 / float(mult)) + 1
    acc = np.arange(-bound, bound + 1, dtype=np.int64)
    y = requant_int8(acc, mult, zp)
    differs = np.zeros(acc.shape, bool)
    for alt in alternatives:
        differs |= requant_int8(acc, alt, zp) != y
    if not differs.any():
        return None
    candidates = acc[differs]
    return int(candidates[np.argmin(np.abs(candidates))])


# ---------------------------------------------------------------- several ops, one build
class MultiOp:
    """``main(inputs...) = (call_0, call_1, ...)``: several canonical op calls in one module,
    built once (inputs of any dtype: ``{name: (shape, dtype)}``)."""

    def __init__(self, make: Callable[..., list], inputs: dict[str, tuple[tuple[int, ...], str]]):
        bb = relax.BlockBuilder()
        params = [relax.Var(name, _tvm.tensor_type(shape, dtype))
                  for name, (shape, dtype) in inputs.items()]
        with bb.function("main", params):
            with bb.dataflow():
                self.calls = list(make(*params))
                outs = [bb.emit(call) for call in self.calls]
                out = bb.emit_output(relax.Tuple(outs))
            bb.emit_func_output(out)
        self.mod = bb.get()
        self.built = canonqnn.build(self.mod)

    def references(self, **feeds: np.ndarray) -> list[np.ndarray]:
        out = []
        for call in self.calls:
            args = [np.asarray(feeds[_tvm.var_name(a)]) if isinstance(a, relax.Var)
                    else _tvm.const_value(a) for a in call.args]
            out.append(np.asarray(lookup(call).run_reference(call, args)))
        return out

    def tvm(self, **feeds: np.ndarray) -> list[np.ndarray]:
        result = self.built.run(feeds)
        return [result[f"output_{i}"] for i in range(len(self.calls))]


# bool graph inputs (Where conditions)
_ONNX_TYPES.setdefault(np.dtype(np.bool_), TensorProto.BOOL)


# ---------------------------------------------------------------- Q31 requantization probes (conv)
def accumulators_telling_apart(requant_a, requant_b, reals, zp: int, limit: int = 64) -> list[int]:
    """int32 accumulators whose int8 result differs between two requantizations
    (``requant_x(acc_array) -> int8 results``), searched next to every rounding boundary
    ``(k + 0.5) / M`` of the real multipliers ``reals`` (int8 outputs with zero point ``zp``)."""
    found: list[int] = []
    for k in range(-128 - zp, 128 - zp):
        ends = [(k + 0.5) / float(m) for m in reals]
        acc = np.arange(int(np.floor(min(ends))) - 3, int(np.ceil(max(ends))) + 4)
        found.extend(acc[requant_a(acc) != requant_b(acc)].tolist())
        if len(found) >= limit:
            break
    return found[:limit]
