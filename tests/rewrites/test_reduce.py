"""Rules of rewrites/reduce.py on hand-written fake-quant modules: max/min reductions (same or
other output parameters, activations) and argmax (first index, and the importer's form of
select_last_index)."""

from __future__ import annotations

import numpy as np
import pytest

from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.ops import lookup
from canonqnn.qparams import QParams
from canonqnn.rewrites import canonicalize

IN = QParams.make(0.05, 3)
OUT = QParams.make(0.037, -4)
SHAPE = (2, 5, 4, 7)


def build(body, qp=IN):
    """main(x int8) = body(bb, dq(x)) (the body quantizes, or returns indices)."""
    x = relax.Var("x", _tvm.tensor_type(SHAPE, "int8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(bb, bb.emit(qdq.dequantize(x, qp))))
        bb.emit_func_output(out)
    return canonicalize(bb.get())


def bindings(mod) -> list[tuple[str, dict]]:
    """(op name, attributes) of every call in ``main`` (canonical ops by their short name)."""
    out = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            op = lookup(value)
            name = op.name if op is not None else _tvm.op_name(value)
            if name is not None:
                out.append((name, _tvm.attrs_dict(value)))
    return out


def quantized(reduction, out_qp=OUT, act=None):
    def body(bb, real):
        y = bb.emit(reduction(real))
        if act is not None:
            y = bb.emit(act(y))
        return bb.emit(qdq.quantize(y, out_qp))
    return body


def test_reduce_max_in_the_input_parameters_folds_alone():
    mod, report = build(quantized(lambda r: relax.op.max(r, [-1, 1], keepdims=True), IN))
    ((name, attrs),) = bindings(mod)
    assert name == "reduce_max" and not report.float_islands
    assert (attrs["axes"], bool(attrs["keepdims"]), attrs["scale"], attrs["zp"]) == (
        [1, 3], True, IN.scalar_scale, 3)


def test_reduce_min_over_all_axes_requantizes_to_other_parameters():
    mod, _ = build(quantized(lambda r: relax.op.min(r)))
    (reduce_min, attrs), (requantize, req) = bindings(mod)
    assert (reduce_min, requantize) == ("reduce_min", "requantize")
    assert attrs["axes"] == [0, 1, 2, 3] and not attrs["keepdims"]
    assert (req["in_zp"], req["out_zp"]) == (3, -4)


def test_activation_after_a_reduction_becomes_the_requantize_clamp():
    mod, _ = build(quantized(lambda r: relax.op.max(r, [2]), IN, act=relax.op.nn.relu))
    (_, _), (requantize, req) = bindings(mod)
    assert requantize == "requantize" and (req["act_min"], req["act_max"]) == (3, 127)


def test_argmax_of_a_dequantized_tensor_reads_the_integers():
    mod, _ = build(lambda bb, real: bb.emit(relax.op.argmax(real, -1, keepdims=True)))
    ((name, attrs),) = bindings(mod)  # the dequantize is gone
    assert name == "argmax"
    assert (attrs["axis"], bool(attrs["keepdims"]), bool(attrs["select_last_index"])) == (
        3, True, False)
    assert _tvm.dtype_of(mod["main"].body.body) == "int64"


def last_index(n_minus_1: int, flip_axis: int = 1):
    """(n - 1) - argmax(flip(x)): how the ONNX importer writes select_last_index."""
    def body(bb, real):
        flipped = bb.emit(relax.op.flip(real, flip_axis))
        first = bb.emit(relax.op.argmax(flipped, 1, keepdims=False))
        return bb.emit(relax.op.subtract(_tvm.const(np.int64(n_minus_1)), first))
    return body


def test_last_index_form_folds_to_argmax_with_select_last_index():
    mod, _ = build(last_index(SHAPE[1] - 1))
    ((name, attrs),) = bindings(mod)
    assert name == "argmax" and bool(attrs["select_last_index"]) and attrs["axis"] == 1


@pytest.mark.parametrize("n_minus_1,flip_axis", [(SHAPE[1] - 2, 1), (SHAPE[1] - 1, 2)],
                         ids=["other_constant", "flip_on_another_axis"])
def test_lookalikes_of_the_last_index_form_are_left_alone(n_minus_1, flip_axis):
    mod, _ = build(last_index(n_minus_1, flip_axis))
    assert "argmax" not in [name for name, _ in bindings(mod)]
    assert "relax.flip" in [name for name, _ in bindings(mod)]


def test_argmax_of_a_per_channel_dequantize_is_not_folded():
    per_channel = QParams.make(np.linspace(0.1, 0.5, 5), np.zeros(5), axis=1)
    mod, _ = build(lambda bb, real: bb.emit(relax.op.argmax(real, 3)), per_channel)
    assert [name for name, _ in bindings(mod)] == ["relax.dequantize", "relax.argmax"]
