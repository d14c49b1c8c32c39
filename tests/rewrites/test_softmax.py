"""The softmax rule folds exactly the groups onnxruntime fuses into QLinearSoftmax and declines,
with the reason, those it runs as float Softmax then QuantizeLinear."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import canonqnn
from canonqnn import _tvm, qdq
from canonqnn.ops import softmax as softmax_op
from canonqnn.qparams import QParams

X_QP = QParams.make(0.05, 3)
OUT_QP = QParams.make(1 / 256, -128)


def fq_module(shape, body, *, out_qp=OUT_QP, uint8_inputs=False, uint8_output=False,
              float_output=False):
    """``main(x) = q(body(dq(x)))`` in the fake-quant form; ``uint8_*`` mark the int8 tensors
    that hold shifted uint8 data, as the ONNX importer does; ``float_output`` also returns
    ``body``'s float result."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            real = bb.emit(qdq.dequantize(x, X_QP, source_dtype=qdq.source_dtype(
                "uint8" if uint8_inputs else "int8")))
            f = body(bb, real)
            y = bb.emit(qdq.quantize(f, out_qp, source_dtype=qdq.source_dtype(
                "uint8" if uint8_output else "int8")), name_hint="y")
            out = bb.emit_output(relax.Tuple([y, f]) if float_output else y)
        bb.emit_func_output(out)
    return bb.get()


def softmax_of(axis):
    return lambda bb, v: bb.emit(relax.op.nn.softmax(v, axis=axis))


def canonical_calls(mod):
    return [b.value for blk in mod["main"].body.blocks for b in blk.bindings
            if _tvm.op_name(b.value) and _tvm.op_name(b.value).startswith("relax.canonqnn.")]


def test_quantized_softmax_folds_with_a_non_negative_axis():
    mod, report = canonqnn.canonicalize(fq_module((2, 7, 5), softmax_of(-2)))
    assert report.counts["softmax"] == 1 and not report.float_islands
    [call] = canonical_calls(mod)
    attrs = _tvm.attrs_dict(call)
    assert _tvm.op_name(call) == "relax.canonqnn.softmax"
    assert attrs["axis"] == 1 and attrs["source_dtype"] == "int8"
    assert (attrs["in_scale"], attrs["in_zp"]) == (X_QP.scalar_scale, 3)
    assert (attrs["out_scale"], attrs["out_zp"]) == (OUT_QP.scalar_scale, -128)
    np.testing.assert_array_equal(_tvm.const_value(call.args[1]),
                                  softmax_op.exp_table(X_QP.scalar_scale, 7))


def test_uint8_softmax_carries_its_source_dtype():
    mod, report = canonqnn.canonicalize(
        fq_module((4, 9), softmax_of(1), uint8_inputs=True, uint8_output=True))
    [call] = canonical_calls(mod)
    assert _tvm.attrs_dict(call)["source_dtype"] == "uint8"


def flattened(bb, v):
    """ONNX Softmax < 13 at axis 1 of [2, 3, 4]: rows of 12."""
    rows = bb.emit(relax.op.reshape(v, (2, 12)))
    y = bb.emit(relax.op.nn.softmax(rows, axis=1))
    return bb.emit(relax.op.reshape(y, (2, 3, 4)))


def test_row_flattened_softmax_folds_to_reshape_softmax_reshape():
    mod, report = canonqnn.canonicalize(fq_module((2, 3, 4), flattened))
    assert not report.float_islands
    calls = canonical_calls(mod)
    assert [_tvm.op_name(c).split(".")[-1] for c in calls] == ["reshape", "softmax", "reshape"]
    assert _tvm.attrs_dict(calls[1])["axis"] == 1
    assert _tvm.shape_of(calls[1]) == (2, 12)
    # the table is built for the flattened row length
    np.testing.assert_array_equal(_tvm.const_value(calls[1].args[1]),
                                  softmax_op.exp_table(X_QP.scalar_scale, 12))


def test_relu_made_redundant_by_the_output_quantization_folds():
    """zp = qmin: onnxruntime drops the Relu and fuses; so does the rule."""
    def body(bb, v):
        return bb.emit(relax.op.nn.relu(softmax_of(-1)(bb, v)))

    mod, report = canonqnn.canonicalize(fq_module((3, 8), body))
    assert report.counts["softmax"] == 1 and not report.float_islands


def _island_reasons(report):
    return {i.op: i.reason for i in report.float_islands}


def _relu_softmax(bb, v):
    return bb.emit(relax.op.nn.relu(softmax_of(-1)(bb, v)))


UNFUSED = {
    "relu_not_implied_by_zp": (dict(body=_relu_softmax, out_qp=QParams.make(1 / 256, -100)),
                               "a relu/clip the output quantization does not imply"),
    "uint8_input_int8_output": (dict(body=softmax_of(-1), uint8_inputs=True),
                                "uint8 input, int8 output"),
    "int8_input_uint8_output": (dict(body=softmax_of(-1), uint8_output=True),
                                "int8 input, uint8 output"),
    "float_result_also_an_output": (dict(body=softmax_of(-1), float_output=True),
                                    "the softmax result has other users"),
}


@pytest.mark.parametrize("case", list(UNFUSED))
def test_groups_onnxruntime_does_not_fuse_stay_float_with_the_reason(case):
    kwargs, why = UNFUSED[case]
    _, report = canonqnn.canonicalize(fq_module((3, 8), **kwargs))
    assert "softmax" not in report.counts
    reason = _island_reasons(report)["relax.nn.softmax"]
    assert "onnxruntime does not fuse this group into QLinearSoftmax" in reason
    assert why in reason


def test_per_channel_input_declines():
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type((3, 8), "int8"))
    per_row = QParams.make(np.full(3, 0.05, np.float32), 0, axis=0)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.softmax(bb.emit(qdq.dequantize(x, per_row)), axis=1))
            out = bb.emit_output(bb.emit(qdq.quantize(y, OUT_QP)))
        bb.emit_func_output(out)
    _, report = canonqnn.canonicalize(bb.get())
    assert "per channel" in _island_reasons(report)["relax.nn.softmax"]
