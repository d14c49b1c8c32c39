"""ONNX Pad, Gather, Slice, Split, Tile, Expand, DepthToSpace, SpaceToDepth, ReduceMax,
ReduceMin, Max, Min, Where, QLinearWhere and ArgMax: import, canonicalization (no float
island) and parity with onnxruntime (canonqnn.parity: ORT_ENABLE_ALL, QDQ int8 allowed).

onnxruntime drops the Q/DQ pair around Gather, Slice, Split, Tile, DepthToSpace, ReduceMax,
ReduceMin and ArgMax when the parameters are equal (the op runs on the integers) and runs them
in float otherwise; Pad, Expand, SpaceToDepth, Max and Min always run in float, Where becomes
QLinearWhere. Every model below has branches with equal and with other output parameters, so
both onnxruntime paths meet the same canonical ops. Several ops share one model (one build).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.errors import UnsupportedError

I64 = np.int64
F32 = np.float32
TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
         np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.bool_): TensorProto.BOOL}


class Graph:
    """A small ONNX graph under construction: inputs, initializers, nodes, outputs."""

    def __init__(self):
        self.nodes, self.inputs, self.outputs, self.inits = [], [], [], {}

    def input(self, name, dtype, shape):
        self.inputs.append(helper.make_tensor_value_info(name, TYPES[np.dtype(dtype)],
                                                         list(shape)))
        return name

    def const(self, name, value):
        self.inits[name] = np.asarray(value)
        return name

    def node(self, op, inputs, outputs, **attrs):
        domain = attrs.pop("domain", "")
        self.nodes.append(helper.make_node(op, inputs, outputs, domain=domain, **attrs))
        return outputs

    def output(self, name, dtype):
        self.outputs.append(helper.make_tensor_value_info(name, TYPES[np.dtype(dtype)], None))

    def model(self, opset):
        inits = [numpy_helper.from_array(v, k) for k, v in self.inits.items()]
        graph = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, inits)
        imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
        model = helper.make_model(graph, opset_imports=imports)
        model.ir_version = 10
        return model


def params(g: Graph, tag: str, scale: float, zp: int, dtype) -> tuple[str, str]:
    return g.const(f"s_{tag}", F32(scale)), g.const(f"z_{tag}", np.array(zp, dtype))


def assert_parity(model, expected_ops: dict[str, int] | None = None, runs: int = 2):
    result = canonqnn.parity(model, runs=runs)
    assert result.exact, result.summary()
    assert not result.float_islands, result.summary()
    for op, count in (expected_ops or {}).items():
        assert result.canonical_ops.get(op, 0) == count, result.summary()
    return result


# ---------------------------------------------------------------- QDQ data movement
SHAPE = (2, 8, 4, 6)


def movement_branches(g: Graph):
    """(op, extra inputs, attributes, number of outputs) of every data-movement branch."""
    c = g.const
    return {
        "pad_constant": ("Pad", [c("pads", np.array([0, 1, 0, 3, 0, 2, 1, 0], I64)),
                                 c("pad_v", F32(0.3))], {}, 1),
        "pad_reflect": ("Pad", ["pads"], dict(mode="reflect"), 1),
        "pad_edge": ("Pad", ["pads"], dict(mode="edge"), 1),
        "pad_wrap": ("Pad", ["pads"], dict(mode="wrap"), 1),
        "pad_negative": ("Pad", [c("neg", np.array([0, -1, 0, 3, 0, 2, -1, 0], I64))], {}, 1),
        "gather": ("Gather", [c("gi", np.array([0, -1, 3, 3], I64))], dict(axis=1), 1),
        "gather_scalar": ("Gather", [c("g0", np.array(-2, I64))], dict(axis=3), 1),
        "slice": ("Slice", [c("st", np.array([7, 1, -1], I64)), c("en", np.array([0, 3, -100],
                                                                                 I64)),
                            c("ax", np.array([1, 2, 3], I64)), c("sp", np.array([-2, 1, -1], I64))],
                  {}, 1),
        "split": ("Split", [c("split", np.array([3, 5], I64))], dict(axis=1), 2),
        "split_num_outputs": ("Split", [], dict(axis=1, num_outputs=3), 3),
        "tile": ("Tile", [c("rep", np.array([1, 2, 1, 3], I64))], {}, 1),
        "expand": ("Expand", [c("shape", np.array([3, 1, 1, 1, 1], I64))], {}, 1),
        "depth_to_space_dcr": ("DepthToSpace", [], dict(blocksize=2, mode="DCR"), 1),
        "depth_to_space_crd": ("DepthToSpace", [], dict(blocksize=2, mode="CRD"), 1),
        "space_to_depth": ("SpaceToDepth", [], dict(blocksize=2), 1),
        "reduce_max": ("ReduceMax", [c("rax", np.array([1, -1], I64))], {}, 1),
        "reduce_min": ("ReduceMin", [c("rin", np.array([2], I64))], dict(keepdims=0), 1),
    }


# canonical op of each branch (Split: one per output; the negative pads add a strided_slice)
BRANCH_OPS = {"pad_constant": "pad", "pad_reflect": "pad", "pad_edge": "pad", "pad_wrap": "pad",
              "pad_negative": "pad", "gather": "gather", "gather_scalar": "gather",
              "slice": "strided_slice", "split": "strided_slice",
              "split_num_outputs": "strided_slice", "tile": "tile", "expand": "broadcast_to",
              "depth_to_space_dcr": "depth_to_space", "depth_to_space_crd": "depth_to_space",
              "space_to_depth": "space_to_depth", "reduce_max": "reduce_max",
              "reduce_min": "reduce_min"}
# uint8 data only shifts every stored value by 128, which data movement commutes with: by
# default the uint8 model keeps the branches where the shift meets arithmetic (the pad value,
# the requantization to other parameters) and ops of both onnxruntime paths (int and float).
UINT8_BRANCHES = ("pad_constant", "pad_negative", "gather", "slice", "split_num_outputs",
                  "depth_to_space_crd", "reduce_min")


def movement_model(dtype, names):
    """One QDQ model: DQ(X) -> each branch op -> Q with X's parameters ("same") and with
    other parameters ("other"); returns the model and the canonical ops it must fold to."""
    off = 0 if dtype == np.int8 else 128
    g = Graph()
    g.input("X", dtype, SHAPE)
    x_s, x_z = params(g, "x", 0.05, 3 + off, dtype)
    g.node("DequantizeLinear", ["X", x_s, x_z], ["D"])
    other = params(g, "y", 0.037, -4 + off, dtype)
    expected: dict[str, int] = {}

    def count(op, n):
        expected[op] = expected.get(op, 0) + n

    branches = movement_branches(g)
    for name in names:
        op, extra, attrs, n_out = branches[name]
        for tag, (s, z) in (("same", (x_s, x_z)), ("other", other)):
            outs = [f"{name}_{tag}{i}" for i in range(n_out)]
            floats = g.node(op, ["D", *extra], [f"{o}_f" for o in outs], **attrs)
            for f, out in zip(floats, outs):
                g.node("QuantizeLinear", [f, s, z], [out])
                g.output(out, dtype)
            count(BRANCH_OPS[name], n_out)
            count("strided_slice", int(name == "pad_negative"))
            count("requantize", n_out if tag == "other" else 0)
    return g.model(19), expected


@pytest.mark.parametrize("dtype,names", [(np.int8, tuple(BRANCH_OPS)),
                                         (np.uint8, UINT8_BRANCHES)], ids=["int8", "uint8"])
def test_qdq_data_movement_matches_onnxruntime(dtype, names):
    assert_parity(*movement_model(dtype, names))


@pytest.mark.slow
def test_qdq_data_movement_of_every_branch_on_uint8_matches_onnxruntime(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("long run: pytest -m slow tests/frontends/onnx/test_indexing.py")
    assert_parity(*movement_model(np.uint8, tuple(BRANCH_OPS)))


# ---------------------------------------------------------------- QDQ selection and argmax
# Output parameters and a scalar Where branch that onnxruntime's WhereDummyDq moves across a
# rounding boundary (found by search; see rewrites/select.py: ort_dummy_dq_value).
DUMMY_DQ = {np.int8: (0.019989898428320885, 0, 0.24987372756004333),
            np.uint8: (0.019607432186603546, 128, -1.9901543855667114)}


def selection_model(dtype):
    off = 0 if dtype == np.int8 else 128
    g = Graph()
    g.input("A", dtype, (2, 3, 4, 5))
    g.input("B", dtype, (3, 1, 5))
    g.input("C", dtype, (5,))
    a_s, a_z = params(g, "a", 0.05, 3 + off, dtype)
    b = params(g, "b", 0.031, -20 + off, dtype)
    c = params(g, "c", 0.02, off, dtype)
    y = params(g, "y", 0.04, 7 + off, dtype)
    g.node("DequantizeLinear", ["A", a_s, a_z], ["DA"])
    g.node("DequantizeLinear", ["B", *b], ["DB"])
    g.node("DequantizeLinear", ["C", *c], ["DC"])
    cond = g.const("cond", np.random.default_rng(0).integers(0, 2, (4, 1)).astype(bool))
    tensor_k = g.const("tensor_k", np.random.default_rng(1).standard_normal((4, 1)).astype(F32))
    so, zo, value = DUMMY_DQ[dtype]
    dummy = params(g, "dummy", so, zo, dtype)
    branches = {
        "max2": ("Max", ["DA", "DB"], y), "min2": ("Min", ["DA", "DB"], y),
        "max3": ("Max", ["DA", "DB", "DC"], y),
        "max_same_params": ("Max", ["DA", "DB"], (a_s, a_z)),
        "min_scalar": ("Min", ["DA", g.const("k", F32(0.1))], y),
        "max_tensor_const": ("Max", ["DA", tensor_k], y),
        "where": ("Where", [cond, "DA", "DB"], y),
        "where_scalar": ("Where", [cond, "DA", g.const("wk", F32(value))], dummy),
    }
    for name, (op, inputs, (s, z)) in branches.items():
        g.node(op, inputs, [f"{name}_f"])
        g.node("QuantizeLinear", [f"{name}_f", s, z], [name])
        g.output(name, dtype)
    g.node("Max", ["DA", "DB"], ["mr"])
    g.node("Relu", ["mr"], ["mr_relu"])
    g.node("QuantizeLinear", ["mr_relu", *y], ["max_relu"])
    g.output("max_relu", dtype)
    g.node("QLinearWhere", [cond, "A", a_s, a_z, "B", *b, *y], ["qlinear_where"],
           domain="com.microsoft")
    g.output("qlinear_where", dtype)
    for last in (0, 1):
        g.node("ArgMax", ["DA"], [f"argmax_{last}"], axis=2, keepdims=0, select_last_index=last)
        g.output(f"argmax_{last}", np.int64)
    return g.model(18)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_qdq_selection_and_argmax_match_onnxruntime(dtype):
    model = selection_model(dtype)
    result = assert_parity(model, {"maximum": 6, "minimum": 1, "where": 3, "argmax": 2},
                           runs=3)
    assert result.canonical_ops["requantize"] == 1  # Min(x, 0.1) is a clamp


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_onnxruntime_reads_a_scalar_where_branch_through_a_dummy_dequantize(dtype):
    """Why the rule emulates WhereDummyDq: the branch value differs with the optimization."""
    model = selection_model(dtype)
    feeds = canonqnn.api.random_inputs(canonqnn.api.module_io(canonqnn.load(model)))
    outs = []
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        session = ort.InferenceSession(model.SerializeToString(), so,
                                       providers=["CPUExecutionProvider"])
        outs.append(session.run(["where_scalar"], feeds)[0])
    assert (outs[0] != outs[1]).any()


# ---------------------------------------------------------------- QOperator: quantized tensors
def qoperator_model(dtype):
    """QuantizeLinear, then ops applied to the quantized tensor itself, then
    DequantizeLinear (or an int64 ArgMax)."""
    off = 0 if dtype == np.int8 else 128
    g = Graph()
    g.input("X", np.float32, SHAPE)
    s, z = params(g, "x", 0.05, 3 + off, dtype)
    g.node("QuantizeLinear", ["X", s, z], ["Q"])
    c = g.const
    ops = {
        "gather": ("Gather", ["Q", c("gi", np.array([1, -1], I64))], dict(axis=1)),
        "pad": ("Pad", ["Q", c("pads", np.array([0, 1, 0, 0, 0, 0, 2, 0], I64)),
                        c("pad_v", np.array(5 + off, dtype))], {}),
        "pad_stored_zero": ("Pad", ["Q", "pads"], {}),  # pads the integer 0, not the real 0
        "slice": ("Slice", ["Q", c("st", np.array([-1], I64)), c("en", np.array([-9], I64)),
                            c("ax", np.array([1], I64)), c("sp", np.array([-3], I64))], {}),
        "tile": ("Tile", ["Q", c("rep", np.array([2, 1, 1, 1], I64))], {}),
        "expand": ("Expand", ["Q", c("shape", np.array([2, 1, 1, 1, 1], I64))], {}),
        "depth_to_space": ("DepthToSpace", ["Q"], dict(blocksize=2, mode="CRD")),
        "space_to_depth": ("SpaceToDepth", ["Q"], dict(blocksize=2)),
        "reduce_max": ("ReduceMax", ["Q"], dict(keepdims=0)),
        "reduce_min": ("ReduceMin", ["Q", c("rax", np.array([3], I64))], {}),
        "max": ("Max", ["Q", c("floor", np.array(10 + off, dtype))], {}),
        "where": ("Where", [c("cond", np.array([True, False] * 3)), "Q",
                            c("other", np.array(off, dtype))], {}),
    }
    for name, (op, inputs, attrs) in ops.items():
        g.node(op, inputs, [f"{name}_q"], **attrs)
        g.node("DequantizeLinear", [f"{name}_q", s, z], [name])
        g.output(name, np.float32)
    g.node("Split", ["Q", c("split", np.array([3, 5], I64))], ["sp0", "sp1"], axis=1)
    for i in range(2):
        g.node("DequantizeLinear", [f"sp{i}", s, z], [f"split{i}"])
        g.output(f"split{i}", np.float32)
    g.node("ArgMax", ["Q"], ["argmax"], axis=3, select_last_index=1)
    g.output("argmax", np.int64)
    return g.model(18)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_qoperator_ops_on_quantized_tensors_match_onnxruntime(dtype):
    assert_parity(qoperator_model(dtype), {
        "gather": 1, "pad": 2, "strided_slice": 3, "tile": 1, "broadcast_to": 1,
        "depth_to_space": 1, "space_to_depth": 1, "reduce_max": 1, "reduce_min": 1,
        "maximum": 1, "where": 1, "argmax": 1})


# ---------------------------------------------------------------- attribute forms of older opsets
def older_opset_model(opset: int):
    g = Graph()
    g.input("X", np.uint8, SHAPE)
    s, z = params(g, "x", 0.05, 131, np.uint8)
    y = params(g, "y", 0.037, 124, np.uint8)
    g.node("DequantizeLinear", ["X", s, z], ["D"])
    if opset < 11:
        g.node("Pad", ["D"], ["pad_f"], pads=[0, 0, 1, 0, 0, 0, 0, 2], value=-0.4)
        g.node("Split", ["D"], ["a_f", "b_f"], axis=3, split=[2, 4])
    else:
        g.node("Pad", ["D", g.const("pads", np.array([0, 0, 1, 0, 0, 0, 0, 2], I64)),
                       g.const("pv", F32(-0.4))], ["pad_f"])
        g.node("Split", ["D", g.const("split", np.array([2, 4], I64))], ["a_f", "b_f"], axis=3)
    g.node("ReduceMax", ["D"], ["rmax_f"], axes=[0, 2], keepdims=1)
    g.node("ReduceMin", ["D"], ["rmin_f"], axes=[-1], keepdims=0)
    for name in ("pad", "a", "b", "rmax", "rmin"):
        g.node("QuantizeLinear", [f"{name}_f", *y], [name])
        g.output(name, np.uint8)
    return g.model(opset)


@pytest.mark.parametrize("opset", [10, 13])
def test_attribute_forms_of_older_opsets_match_onnxruntime(opset):
    assert_parity(older_opset_model(opset), {"pad": 1, "strided_slice": 2, "reduce_max": 1,
                                             "reduce_min": 1})


def test_constant_index_arithmetic_is_done_at_import():
    """Slice/Gather/Max/Min on int64 initializers (shape arithmetic) give constants that the
    Reshape reads; nothing of it is computed at run time."""
    g = Graph()
    g.input("X", np.float32, (2, 48))
    dims = g.const("dims", np.array([2, 6, 8, 99], I64))
    g.node("Slice", [dims, g.const("s", np.array([0], I64)), g.const("e", np.array([-1], I64))],
           ["head"])
    g.node("Gather", [g.const("ones", np.array([1, 5], I64)), g.const("i", np.array([0, 0, -2],
                                                                                    I64))],
           ["floor"])
    g.node("Max", ["head", "floor"], ["raised"])
    g.node("Min", ["raised", g.const("cap", np.array([100, 100, 100], I64))], ["shape"])
    g.node("Reshape", ["X", "shape"], ["Y"])
    g.output("Y", np.float32)
    model = g.model(13)
    text = str(canonqnn.load(model)["main"])
    assert "take" not in text and "strided_slice" not in text and "maximum" not in text
    x = np.random.default_rng(0).standard_normal((2, 48)).astype(F32)
    result = canonqnn.parity(model, inputs={"X": x})
    assert result.exact and result.outputs[0].elements == 96, result.summary()


# ---------------------------------------------------------------- refusals
def single_node(op, inputs, consts, attrs=None, dtype=np.float32, shape=SHAPE, opset=18,
                n_out=1, cond_dtype=None):
    g = Graph()
    g.input("X", dtype, shape)
    for name, value in consts.items():
        g.const(name, value)
    g.node(op, ["X" if i == "X" else i for i in inputs], [f"Y{i}" for i in range(n_out)],
           **(attrs or {}))
    for i in range(n_out):
        g.output(f"Y{i}", np.int64 if op == "ArgMax" else dtype)
    return g.model(opset)


@pytest.mark.parametrize("model,message", [
    (single_node("Gather", ["X", "i"], dict(i=np.array([8], I64)), dict(axis=1)),
     r"\(op Gather\): Gather index out of range \[-8, 8\) along axis 1"),
    (single_node("Pad", ["X", "p"], dict(p=np.array([0, 0, 4, 0, 0, 0, 0, 0], I64)),
                 dict(mode="reflect")),
     r"\(op Pad\): reflect padding by more than the axis length minus one"),
    (single_node("Slice", ["X", "s", "e"], dict(s=np.array([5], I64), e=np.array([2], I64))),
     r"\(op Slice\): Slice selects no elements along axis 0"),
    (single_node("Split", ["X"], {}, dict(axis=3, num_outputs=4), n_out=4),
     r"\(op Split\): split sizes \[2, 2, 2, 0\]: empty outputs are not supported"),
    (single_node("DepthToSpace", ["X"], {}, dict(blocksize=3)),
     r"\(op DepthToSpace\): 8 channels are not divisible by blocksize\^2 = 9"),
])
def test_unsupported_forms_are_refused_with_the_reason(model, message):
    with pytest.raises(UnsupportedError, match=message):
        canonqnn.load(model)


def test_max_of_quantized_tensors_with_different_parameters_is_refused():
    g = Graph()
    g.input("X", np.float32, (4,))
    for tag, scale in (("a", 0.1), ("b", 0.2)):
        g.node("QuantizeLinear", ["X", *params(g, tag, scale, 0, np.int8)], [f"Q{tag}"])
    g.node("Max", ["Qa", "Qb"], ["M"])
    g.output("M", np.int8)
    with pytest.raises(UnsupportedError, match=r"\(op Max\): Max of quantized tensors with "
                                               r"different parameters"):
        canonqnn.load(g.model(18))


def test_argmax_along_the_per_channel_axis_is_refused():
    g = Graph()
    g.input("X", np.float32, (2, 3))
    scale = g.const("s", np.array([0.1, 0.2, 0.3], F32))
    zero = g.const("z", np.zeros(3, np.int8))
    g.node("QuantizeLinear", ["X", scale, zero], ["Q"], axis=1)
    g.node("ArgMax", ["Q"], ["Y"], axis=1)
    g.output("Y", np.int64)
    with pytest.raises(UnsupportedError, match=r"ArgMax along the axis of per-channel"):
        canonqnn.load(g.model(18))

