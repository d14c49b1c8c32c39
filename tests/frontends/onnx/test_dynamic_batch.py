"""Models as exporters write them: the first dimension of every input dynamic ("N",
"batch_size", or no value at all). It is 1 unless a shape is given, the module's interface notes
it, the outputs and the shape subgraphs still come out static, and onnxruntime, fed the same
batch, agrees bit for bit. Any other dynamic dimension is refused, named."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.errors import InvalidModelError, UnsupportedError
from canonqnn.frontends.onnx import load
from canonqnn.io import module_io

RNG = np.random.default_rng(11)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _qdq(nodes, inits, x, name, scale, zp):
    """Q -> DQ of ``x`` with per-tensor int8 parameters, as the QDQ quantizer writes it."""
    inits += [_const(f"{name}_s", np.float32(scale)), _const(f"{name}_z", np.int8(zp))]
    nodes += [helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
              helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"],
                               [f"{name}_f"])]
    return f"{name}_f"


def _model(nodes, inits, inputs, outputs, value_info=()):
    graph = helper.make_graph(nodes, "exported", inputs, outputs, inits,
                              value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="pytorch")
    model.ir_version = 10
    return model


def _batch(shape, batch):
    """``shape`` with its first dimension ``batch``: a symbol, or None for no value at all."""
    dims = [batch, *shape[1:]]
    if batch is None:
        dims[0] = "erased"
    return dims


def _erase_unnamed(model):
    for vi in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        dim = vi.type.tensor_type.shape.dim[0]
        if dim.dim_param == "erased":
            dim.Clear()  # neither a value nor a symbol, as tf2onnx writes an unknown size
    return model


def conv_classifier(batch="N", h: str | int = 8, w: str | int = 8):
    """x[N,3,8,8] -> QDQ conv (per-channel int8 weights, int32 bias) + relu -> QDQ -> the
    torch.onnx flatten (Shape -> Gather -> Unsqueeze -> Concat [n, -1] -> Reshape) -> QDQ ->
    Gemm (int32 bias) -> QDQ -> Reshape to the constant [-1, 1, 5] -> QDQ -> logits[N,1,5]; the
    intermediate tensors are declared with the symbolic batch, as exporters write them."""
    nodes, inits = [], []
    xf = _qdq(nodes, inits, "x", "x", 0.04, 3)
    weights = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    ws = RNG.uniform(0.003, 0.01, 4).astype(np.float32)
    inits += [_const("w", weights), _const("ws", ws), _const("wz", np.zeros(4, np.int8)),
              _const("b", RNG.integers(-300, 300, 4).astype(np.int32)),
              _const("bs", (np.float32(0.04) * ws).astype(np.float32)),
              _const("bz", np.zeros(4, np.int32))]
    nodes += [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
              helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
              helper.make_node("Conv", [xf, "wf", "bf"], ["conv"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["conv"], ["relu"])]
    yf = _qdq(nodes, inits, "relu", "y", 0.03, -128)
    inits += [_const("zero", np.int64(0)), _const("axes", np.array([0], np.int64)),
              _const("minus_one", np.array([-1], np.int64)),
              _const("out_shape", np.array([-1, 1, 5], np.int64))]
    nodes += [helper.make_node("Shape", [yf], ["shape"]),
              helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
              helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
              helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
              helper.make_node("Reshape", [yf, "target"], ["flat"])]
    ff = _qdq(nodes, inits, "flat", "f", 0.03, -128)
    width = 4 * 8 * 8
    m = RNG.integers(-127, 128, (5, width)).astype(np.int8)
    inits += [_const("m", m), _const("ms", np.float32(0.004)), _const("mz", np.int8(0)),
              _const("mb", RNG.integers(-500, 500, 5).astype(np.int32)),
              _const("mbs", np.float32(0.03) * np.float32(0.004)), _const("mbz", np.int32(0))]
    nodes += [helper.make_node("DequantizeLinear", ["m", "ms", "mz"], ["mf"]),
              helper.make_node("DequantizeLinear", ["mb", "mbs", "mbz"], ["mbf"]),
              helper.make_node("Gemm", [ff, "mf", "mbf"], ["fc"], transB=1)]
    lf = _qdq(nodes, inits, "fc", "l", 0.05, 2)
    nodes.append(helper.make_node("Reshape", [lf, "out_shape"], ["reshaped"]))
    _qdq(nodes, inits, "reshaped", "logits", 0.05, 2)
    float_info = helper.make_tensor_value_info
    x = float_info("x", TensorProto.FLOAT, _batch([1, 3, h, w], batch))
    out = float_info("logits_f", TensorProto.FLOAT, _batch([1, 1, 5], batch))
    inner = [float_info("conv", TensorProto.FLOAT, _batch([1, 4, 8, 8], batch)),
             float_info("flat", TensorProto.FLOAT, _batch([1, width], batch))]
    return _erase_unnamed(_model(nodes, inits, [x], [out], inner))


def two_input_add(batch="batch_size", b_shape=(1, 4, 6)):
    """a, b [batch_size, 4, 6] -> QDQ each -> Add -> QDQ -> sum [batch_size, 4, 6]: one symbol
    on the first dimension of two inputs (and of the output)."""
    nodes, inits = [], []
    af = _qdq(nodes, inits, "a", "a", 0.05, 3)
    bf = _qdq(nodes, inits, "b", "b", 0.07, -9)
    nodes.append(helper.make_node("Add", [af, bf], ["add"]))
    _qdq(nodes, inits, "add", "sum", 0.09, 1)
    info = helper.make_tensor_value_info
    inputs = [info("a", TensorProto.FLOAT, _batch([1, 4, 6], batch)),
              info("b", TensorProto.FLOAT, _batch(list(b_shape), batch))]
    return _erase_unnamed(_model(nodes, inits, inputs,
                                 [info("sum_f", TensorProto.FLOAT, _batch([1, 4, 6], batch))]))


def _shapes(mod):
    io = module_io(mod)
    return {t.name: t.shape for t in (*io.inputs, *io.outputs)}


@pytest.mark.parametrize("batch", ["N", None], ids=["symbol", "unknown"])
def test_a_dynamic_batch_is_one_noted_and_bit_exact_with_onnxruntime(batch):
    model = conv_classifier(batch)
    mod = load(model)
    io = module_io(mod)
    assert _shapes(mod) == {"x": (1, 3, 8, 8), "logits_f": (1, 1, 5)}
    symbol = " 'N'" if batch else ""
    assert io.notes == [f"the dynamic batch dimension{symbol} of input 'x' was set to 1; for "
                        "batch B, give --shape x=Bx3x8x8 (load(..., input_shapes=...))"]
    result = canonqnn.parity(model, runs=2)
    assert result.exact, result.summary()
    assert result.float_islands == [], result.summary()
    assert result.canonical_ops.get("conv2d") == 1 and result.canonical_ops.get("matmul") == 1
    assert result.canonical_ops.get("reshape") == 2  # the flatten and the constant [-1, 1, 5]
    assert result.extra["notes"] == io.notes
    assert f"note: {io.notes[0]}" in result.summary()


def test_a_given_shape_wins_and_another_batch_is_bit_exact_too():
    model = conv_classifier()
    mod = load(model, input_shapes={"x": (2, 3, 8, 8)})
    assert _shapes(mod) == {"x": (2, 3, 8, 8), "logits_f": (2, 1, 5)}
    assert module_io(mod).notes == []
    result = canonqnn.parity(model, runs=2, input_shapes={"x": (2, 3, 8, 8)})
    assert result.exact, result.summary()
    assert "notes" not in result.extra


def test_one_batch_symbol_on_two_inputs_is_set_once_for_both():
    model = two_input_add()
    mod = load(model)
    io = module_io(mod)
    assert _shapes(mod) == {"a": (1, 4, 6), "b": (1, 4, 6), "sum_f": (1, 4, 6)}
    assert io.notes == ["the dynamic batch dimension 'batch_size' of inputs 'a', 'b' was set to "
                        "1; for batch B, give --shape a=Bx4x6 --shape b=Bx4x6 "
                        "(load(..., input_shapes=...))"]
    result = canonqnn.parity(model, runs=2)
    assert result.exact and result.float_islands == [], result.summary()


def test_a_shape_given_for_one_input_sets_its_symbol_on_the_other():
    model = two_input_add()
    mod = load(model, input_shapes={"a": (3, 4, 6)})
    assert _shapes(mod) == {"a": (3, 4, 6), "b": (3, 4, 6), "sum_f": (3, 4, 6)}
    assert module_io(mod).notes == []
    result = canonqnn.parity(model, runs=1, input_shapes={"a": (3, 4, 6)})
    assert result.exact, result.summary()


def test_two_sizes_given_for_one_symbol_are_refused():
    with pytest.raises(InvalidModelError, match="inputs 'a' and 'b' share the dimension "
                                                "'batch_size', but the shapes given set it to 2 "
                                                "and 3"):
        load(two_input_add(), input_shapes={"a": (2, 4, 6), "b": (3, 4, 6)})


def test_unknown_batches_of_two_inputs_are_each_one():
    mod = load(two_input_add(batch=None))
    assert _shapes(mod) == {"a": (1, 4, 6), "b": (1, 4, 6), "sum_f": (1, 4, 6)}
    assert module_io(mod).notes == ["the dynamic batch dimension of inputs 'a', 'b' was set to "
                                    "1; for batch B, give --shape a=Bx4x6 --shape b=Bx4x6 "
                                    "(load(..., input_shapes=...))"]


def test_another_dynamic_dimension_is_refused_naming_input_dimension_and_symbol():
    with pytest.raises(UnsupportedError) as refused:
        load(conv_classifier(h="H", w="W"))
    assert str(refused.value) == (
        "ONNX: node 'x' (op graph input): dimensions 2 ('H'), 3 ('W') are dynamic (only a "
        "dynamic batch, dimension 0, defaults to 1); give a static shape: --shape x=1x3xHxW "
        "with a size for each dynamic dimension (load(..., input_shapes=...))")
    mod = load(conv_classifier(h="H", w="W"), input_shapes={"x": (1, 3, 8, 8)})
    assert _shapes(mod) == {"x": (1, 3, 8, 8), "logits_f": (1, 1, 5)}


def test_a_dynamic_rank_one_input_is_no_batch():
    nodes, inits = [], []
    _qdq(nodes, inits, "v", "v", 0.05, 0)
    info = helper.make_tensor_value_info
    model = _model(nodes, inits, [info("v", TensorProto.FLOAT, ["len"])],
                   [info("v_f", TensorProto.FLOAT, ["len"])])
    with pytest.raises(UnsupportedError, match=r"node 'v' \(op graph input\): dimension 0 "
                                               r"\('len'\) is dynamic .* --shape v=len "):
        load(model)
