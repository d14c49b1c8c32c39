"""The lookup-table rule (rewrites/lut.py) on TFLite-origin modules: each elementwise kernel's
FQ form folds into canonqnn.lut with the table of TFLite's whole kernel
(canonqnn/tables/tflite.py); any other float chain declines, named."""

from __future__ import annotations

import json

import numpy as np
import pytest

import canonqnn
from _canonical import lut_tables
from canonqnn import _tvm, qdq, tables
from canonqnn._tvm import relax
from canonqnn.io import IO_ATTR, ModelIO
from canonqnn.qparams import QParams

SHAPE = (1, 4, 8, 8)
IN_QP, OUT_QP = QParams.make(0.05, 3), QParams.make(0.02, -10)
SIGMOID_QP = QParams.make(1 / 256, -128)
TFLITE = ModelIO("tflite", [], [], rounding="q31_double")


def _scalar(value: float):
    return _tvm.const(np.float32(value))


# The reference kernels' tables (the default interpreter's are
# tests/tables/test_litert_xnnpack_tables.py's)
REFERENCE = "tflite-reference"


def _fq(build, in_qp: QParams = IN_QP, out_qp: QParams = OUT_QP, uint8: bool = False):
    """A tflite-source module main(x) = q(build(bb, dq(x)))."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(SHAPE, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            stored = "uint8" if uint8 else "int8"
            real = bb.emit(qdq.dequantize(x, in_qp, source_dtype=stored))
            q = bb.emit_output(qdq.quantize(build(bb, real), out_qp, source_dtype=stored))
        bb.emit_func_output(q)
    return bb.get().with_attr(IO_ATTR, json.dumps(TFLITE.to_json()))


def hardswish(bb, r, sixth: float = 1.0 / 6.0):
    """The form the frontends write: x * clip(x * f32(1/6) + 0.5, 0, 1)."""
    scaled = bb.emit(relax.op.multiply(r, _scalar(sixth)))
    shifted = bb.emit(relax.op.add(scaled, _scalar(0.5)))
    return bb.emit(relax.op.multiply(r, bb.emit(_tvm.clip_float(shifted, 0.0, 1.0))))


KERNELS = {  # function -> (FQ body, output qparams, kernel parameters)
    "sigmoid": (lambda bb, r: bb.emit(relax.op.sigmoid(r)), SIGMOID_QP, {}),
    "tanh": (lambda bb, r: bb.emit(relax.op.tanh(r)), OUT_QP, {}),
    "gelu": (lambda bb, r: bb.emit(relax.op.nn.gelu(r)), OUT_QP, {}),
    "gelu_tanh": (lambda bb, r: bb.emit(relax.op.nn.gelu_tanh(r)), OUT_QP, {}),
    "leaky_relu": (lambda bb, r: bb.emit(relax.op.nn.leakyrelu(r, 0.3)), OUT_QP,
                   {"alpha": float(np.float32(0.3))}),
    "hardswish": (hardswish, OUT_QP, {}),
    "rsqrt": (lambda bb, r: bb.emit(relax.op.rsqrt(r)), OUT_QP, {}),
}


@pytest.mark.parametrize("function", sorted(KERNELS))
def test_kernel_form_folds_into_the_table_of_the_whole_tflite_kernel(function):
    body, out_qp, params = KERNELS[function]
    mod, report = canonqnn.canonicalize(_fq(body, out_qp=out_qp), numerics=REFERENCE)
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    [(table, attrs)] = lut_tables(mod)
    assert attrs["function"] == function
    want = tables.kernel_table("tflite", function, IN_QP, out_qp, **params)
    np.testing.assert_array_equal(table, want)


def test_uint8_model_gets_the_uint8_kernel_table():
    # HARD_SWISH whose int16 output wraps for uint8 zero points only (tests/tables)
    in_qp, out_qp = QParams.make(1.0, -128), QParams.make(np.float32(1 / 127.9), 122)
    tables_by_dtype = {}
    for uint8 in (False, True):
        mod, _ = canonqnn.canonicalize(_fq(hardswish, in_qp, out_qp, uint8=uint8),
                                       numerics=REFERENCE)
        [(table, _)] = lut_tables(mod)
        tables_by_dtype[uint8] = table
    np.testing.assert_array_equal(
        tables_by_dtype[True],
        tables.kernel_table("tflite", "hardswish", in_qp, out_qp, source_dtype="uint8"))
    assert tables_by_dtype[False][255] == 127 and tables_by_dtype[True][255] == -128


@pytest.mark.parametrize("body, reason", [
    (lambda bb, r: bb.emit(relax.op.multiply(r, bb.emit(relax.op.sigmoid(r)))),
     "TFLite has no kernel computing multiply(x, sigmoid(x))"),
    (lambda bb, r: bb.emit(relax.op.exp(r)), "TFLite has no kernel computing exp"),
    (lambda bb, r: bb.emit(relax.op.tanh(bb.emit(relax.op.multiply(r, _scalar(2.0))))),
     "TFLite has no kernel computing tanh(multiply(x, 2))"),
    (lambda bb, r: hardswish(bb, r, sixth=0.1666), "no kernel computing multiply(x, clip("),
])
def test_chain_that_is_no_tflite_kernel_declines(body, reason):
    mod, report = canonqnn.canonicalize(_fq(body), numerics=REFERENCE)
    assert "lut" not in report.canonical_ops
    reasons = [i.reason for i in report.float_islands]
    assert any(reason in r and "(its table kernels: elu, gelu, gelu_tanh, hardswish, leaky_relu, "
               "rsqrt, sigmoid, tanh)" in r for r in reasons), reasons


def test_parameters_the_tflite_kernel_refuses_decline_with_its_reason():
    cases = [(KERNELS["sigmoid"][0], OUT_QP, "LOGISTIC requires output scale 1/256"),
             (hardswish, QParams.make(0.0001, 0), "HARD_SWISH requires")]
    for body, out_qp, reason in cases:
        mod, report = canonqnn.canonicalize(_fq(body, out_qp=out_qp), numerics=REFERENCE)
        assert "lut" not in report.canonical_ops
        assert any(reason in i.reason for i in report.float_islands)


def test_rsqrt_of_a_uint8_model_declines_tflite_has_no_such_kernel():
    mod, report = canonqnn.canonicalize(_fq(KERNELS["rsqrt"][0], uint8=True), numerics=REFERENCE)
    assert "lut" not in report.canonical_ops
    assert any("RSQRT has no uint8 kernel" in i.reason for i in report.float_islands)
