"""ONNX activations and unary math (frontends/onnx/ops/activation.py): the float Relax form each
op imports to, the float build against onnxruntime, and QLinearSigmoid / QLinearLeakyRelu
(com.microsoft) bit-exact with onnxruntime end to end. (Each quantized op's table against
onnxruntime on every code: tests/tables.)"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import _tvm
from canonqnn.errors import UnsupportedError
from canonqnn.frontends.onnx import load
from canonqnn.io import module_io

SHAPE = [1, 3, 4, 5]
F32 = np.float32
MS = "com.microsoft"


def _float_model(nodes, inits=(), opset: int = 20, outputs=("y",)):
    graph = helper.make_graph(
        nodes, "act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 10
    return proto


def _relax_ops(proto) -> list[str]:
    mod = load(proto)
    return [_tvm.op_name(b.value) for block in mod["main"].body.blocks
            for b in block.bindings if _tvm.op_name(b.value)]


# ONNX op (attributes, extra initializer inputs) -> the Relax ops it imports to, in order
FORMS = {
    "Sigmoid": ({}, {}, ["relax.sigmoid"]),
    "Tanh": ({}, {}, ["relax.tanh"]),
    "Erf": ({}, {}, ["relax.erf"]),
    "Exp": ({}, {}, ["relax.exp"]),
    "Log": ({}, {}, ["relax.log"]),
    "Sqrt": ({}, {}, ["relax.sqrt"]),
    "Abs": ({}, {}, ["relax.abs"]),
    "Neg": ({}, {}, ["relax.negative"]),
    "Softplus": ({}, {}, ["relax.nn.softplus"]),
    "Gelu": ({}, {}, ["relax.nn.gelu"]),
    "Gelu-tanh": ({"approximate": "tanh"}, {}, ["relax.nn.gelu_tanh"]),
    "LeakyRelu": ({"alpha": 0.2}, {}, ["relax.nn.leakyrelu"]),
    "PRelu-scalar": ({}, {"s": np.array([0.25], F32)}, ["relax.nn.leakyrelu"]),
    "PRelu-channel": ({}, {"s": np.array([0.1, 0.2, 0.3], F32).reshape(3, 1, 1)},
                      ["relax.nn.prelu"]),
    "PRelu-plane": ({}, {"s": np.linspace(0, 1, 12, dtype=F32).reshape(3, 4, 1)},
                    ["relax.multiply", "relax.greater", "relax.where"]),
    "HardSigmoid": ({"alpha": 0.3, "beta": 0.4}, {},
                    ["relax.multiply", "relax.add", "relax.clip"]),
    "HardSwish": ({}, {}, ["relax.multiply", "relax.add", "relax.clip", "relax.multiply"]),
    "Elu": ({"alpha": 0.7}, {}, ["relax.exp", "relax.subtract", "relax.multiply",
                                 "relax.greater_equal", "relax.where"]),
}


def _node(key: str):
    attrs, inits, _ = FORMS[key]
    return helper.make_node(key.split("-")[0], ["x", *inits], ["y"], **attrs), inits


@pytest.mark.parametrize("key", list(FORMS))
def test_op_imports_to_its_relax_form(key):
    node, inits = _node(key)
    assert _relax_ops(_float_model([node], inits)) == FORMS[key][2]


def test_float_activations_build_and_match_onnxruntime_closely():
    """The float form computed by TVM's own kernels (no table): close to onnxruntime, not
    bit-exact (different exp/erf/tanh implementations)."""
    nodes, inits, outputs = [], {}, []
    for i, key in enumerate(FORMS):
        attrs, extra, _ = FORMS[key]
        names = {k: f"{k}{i}" for k in extra}
        inits.update({names[k]: v for k, v in extra.items()})
        src = "xa" if key.split("-")[0] in ("Log", "Sqrt") else "x"
        nodes.append(helper.make_node(key.split("-")[0], [src, *names.values()], [f"y{i}"],
                                      **attrs))
        outputs.append(f"y{i}")
    proto = _float_model([helper.make_node("Abs", ["x"], ["xa"]), *nodes], inits,
                         outputs=outputs)
    x = np.random.default_rng(0).uniform(-4, 4, SHAPE).astype(F32)
    got = canonqnn.build(canonqnn.load(proto)).run({"x": x})
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, want in zip(outputs, sess.run(outputs, {"x": x})):
        np.testing.assert_allclose(got[name], want, rtol=2e-5, atol=2e-6, err_msg=name)


def test_invalid_attributes_and_inputs_are_refused_with_the_reason():
    bad_gelu = helper.make_node("Gelu", ["x"], ["y"], approximate="fast")
    with pytest.raises(UnsupportedError, match=r"approximate='fast' is not a Gelu mode"):
        load(_float_model([bad_gelu]))
    bad_slope = helper.make_node("PRelu", ["x", "s"], ["y"])
    with pytest.raises(UnsupportedError, match=r"slope of shape \[2\] does not broadcast"):
        load(_float_model([bad_slope], {"s": np.ones(2, F32)}))


# ---------------------------------------------------------------- QLinear* end to end
def _qlinear_model(op_type: str, dtype, with_output_zp: bool = True, **attrs):
    tensor_type = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    zx, zy = (3, -20) if dtype == np.int8 else (131, 100)
    inits = [numpy_helper.from_array(np.array(0.04, F32), "xs"),
             numpy_helper.from_array(np.array(zx, dtype), "xz"),
             numpy_helper.from_array(np.array(1 / 200 if op_type == "QLinearSigmoid" else 0.03,
                                              F32), "ys"),
             numpy_helper.from_array(np.array(zy, dtype), "yz")]
    ins = ["x", "xs", "xz", "ys", "yz" if with_output_zp else ""]
    node = helper.make_node(op_type, ins, ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", tensor_type,
                                                                          [2, 8, 16])],
                              [helper.make_tensor_value_info("y", tensor_type, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(MS, 1)])
    proto.ir_version = 10
    return proto


@pytest.mark.parametrize("op_type, attrs", [("QLinearSigmoid", {}),
                                            ("QLinearLeakyRelu", {"alpha": 0.15})])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_qlinear_activation_is_one_table_bit_exact_with_onnxruntime(op_type, attrs, dtype):
    proto = _qlinear_model(op_type, dtype, **attrs)
    _, report = canonqnn.canonicalize(canonqnn.load(proto))
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    result = canonqnn.parity(proto, runs=3)
    assert result.exact, result.summary()


def test_qlinear_sigmoid_without_output_zero_point_keeps_the_input_type():
    proto = _qlinear_model("QLinearSigmoid", np.int8, with_output_zp=False)
    mod = canonqnn.load(proto)
    assert module_io(mod).outputs[0].dtype == "int8"
    assert canonqnn.parity(proto, runs=2).exact


def _qdq_decomposed_gelu():
    """x * 0.5 * (1 + erf(x * 0.7071)) as an onnxruntime QDQ quantizer writes it: every
    intermediate and every constant quantized (int8, constants symmetric)."""
    scales = {"x": 0.03, "t": 0.025, "e": 1 / 127, "a": 2 / 127, "m": 0.04, "y": 0.02}
    inits = [numpy_helper.from_array(np.array(s, F32), f"{k}_s") for k, s in scales.items()]
    inits += [numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes, tensors = [], {}

    def qdq(name, src):
        nodes.extend([helper.make_node("QuantizeLinear", [src, f"{name}_s", "z"], [f"{name}_q"]),
                      helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", "z"],
                                       [f"{name}_d"])])
        return f"{name}_d"

    def const(name, value):
        q = np.array(np.round(value / (abs(value) / 127)), np.int8)
        inits.extend([numpy_helper.from_array(q, f"{name}_c"),
                      numpy_helper.from_array(np.array(abs(value) / 127, F32), f"{name}_cs")])
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_c", f"{name}_cs", "z"],
                                      [f"{name}_cd"]))
        return f"{name}_cd"

    x = qdq("x", "in")
    for op, name, args in (("Mul", "t", [x, const("r2", 0.70710678)]), ("Erf", "e", ["t_d"]),
                           ("Add", "a", ["e_d", const("one", 1.0)]), ("Mul", "m", [x, "a_d"]),
                           ("Mul", "y", ["m_d", const("half", 0.5)])):
        nodes.append(helper.make_node(op, args, [f"{name}_f"]))
        tensors[name] = qdq(name, f"{name}_f")
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info(
        "in", TensorProto.FLOAT, [1, 64])], [helper.make_tensor_value_info(
            tensors["y"], TensorProto.FLOAT, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 10
    return proto


def test_qdq_decomposed_gelu_folds_op_by_op_and_is_bit_exact():
    proto = _qdq_decomposed_gelu()
    _, report = canonqnn.canonicalize(canonqnn.load(proto))
    assert dict(report.canonical_ops) == {"mul": 3, "add": 1, "lut": 1}, report.summary()
    assert not report.float_islands
    result = canonqnn.parity(proto, runs=3)
    assert result.exact, result.summary()


@pytest.mark.parametrize("key, name", [("HardSwish", "hardswish"), ("Sigmoid", "sigmoid"),
                                       ("LeakyRelu", "leakyrelu(x, alpha=0.2)")])
def test_quantized_activation_folds_into_one_table_named_after_it(key, name):
    node, extra = _node(key)
    inits = {"s": np.array(0.05, F32), "z": np.array(-3, np.int8), **extra}
    nodes = [helper.make_node("QuantizeLinear", ["in", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["x"]), node,
             helper.make_node("QuantizeLinear", ["y", "s", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["out"])]
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info(
        "in", TensorProto.FLOAT, SHAPE)], [helper.make_tensor_value_info(
            "out", TensorProto.FLOAT, None)], [numpy_helper.from_array(v, k)
                                               for k, v in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    proto.ir_version = 10
    mod, report = canonqnn.canonicalize(canonqnn.load(proto))
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    assert f'function="{name}"' in mod.script()
