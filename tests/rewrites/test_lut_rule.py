"""The lookup-table rule (rewrites/lut.py): which fake-quant chains fold into canonqnn.lut, the
table they get, and the reasons it gives for those it declines."""

from __future__ import annotations

import numpy as np

import canonqnn
from _canonical import lut_tables
from canonqnn import _tvm, qdq, tables
from canonqnn._tvm import relax
from canonqnn.qparams import QParams
from canonqnn.rewrites import Phase
from canonqnn.rewrites import lut as lut_rule

SHAPE = (1, 4, 8, 8)
IN_QP, OUT_QP = QParams.make(0.05, 3), QParams.make(0.02, -10)


def _fq(build, in_qp: QParams = IN_QP, out_qp: QParams = OUT_QP, inputs=("x",)):
    """main(x...) = q(build(bb, dq(x)...)); ``build`` may return (quantized root, extra
    outputs)."""
    bb = relax.BlockBuilder()
    params = [relax.Var(name, _tvm.tensor_type(SHAPE, "int8")) for name in inputs]
    with bb.function("main", params):
        with bb.dataflow():
            reals = [bb.emit(qdq.dequantize(p, in_qp)) for p in params]
            built = build(bb, *reals)
            root, extra = built if isinstance(built, tuple) else (built, [])
            q = bb.emit(qdq.quantize(root, out_qp))
            out = bb.emit_output(relax.Tuple([q, *extra]) if extra else q)
        bb.emit_func_output(out)
    return bb.get()


def _onnx_table(fn, in_qp=IN_QP, out_qp=OUT_QP) -> np.ndarray:
    return tables.build("onnx", fn, in_qp, out_qp)


def _ev(op, *args, **attrs):
    return tables.evaluate("onnx", op, list(args), attrs)


def _island_reasons(report) -> dict[str, str]:
    return {i.op: i.reason for i in report.float_islands}


# ---------------------------------------------------------------- folds
def test_single_activation_folds_into_a_table_named_after_it():
    mod, report = canonqnn.canonicalize(_fq(lambda bb, r: bb.emit(relax.op.sigmoid(r))))
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    [(table, attrs)] = lut_tables(mod)
    assert attrs["function"] == "sigmoid" and attrs["axis"] == -1
    assert (attrs["in_scale"], attrs["in_zp"], attrs["out_scale"], attrs["out_zp"]) == \
        (IN_QP.scalar_scale, 3, OUT_QP.scalar_scale, -10)
    assert np.array_equal(table, _onnx_table(lambda v: _ev("relax.sigmoid", v)))


def test_function_reading_its_input_twice_folds_into_one_table():
    """x * sigmoid(x) (SiLU) quantized once: dq(x) feeds both the sigmoid and the product."""
    def swish(bb, r):
        return bb.emit(relax.op.multiply(r, bb.emit(relax.op.sigmoid(r))))

    mod, report = canonqnn.canonicalize(_fq(swish))
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    [(table, attrs)] = lut_tables(mod)
    assert attrs["function"] == "silu"
    want = _onnx_table(lambda v: _ev("relax.multiply", v, _ev("relax.sigmoid", v)))
    assert np.array_equal(table, want)


def test_constant_along_one_axis_gives_one_table_row_per_channel():
    slopes = np.array([0.5, -1.0, 2.0, 0.25], np.float32)

    def scaled_tanh(bb, r):
        c = _tvm.const(slopes.reshape(1, 4, 1, 1))
        return bb.emit(relax.op.tanh(bb.emit(relax.op.multiply(r, c))))

    mod, report = canonqnn.canonicalize(_fq(scaled_tanh))
    assert dict(report.canonical_ops) == {"lut": 1}
    [(table, attrs)] = lut_tables(mod)
    assert attrs["axis"] == 1 and table.shape == (4, 256)
    for row, s in zip(table, slopes):
        want = _onnx_table(lambda v, s=s: _ev("relax.tanh", _ev("relax.multiply", v,
                                                                 np.float32(s))))
        assert np.array_equal(row, want)


def test_prelu_slopes_along_its_axis_give_per_channel_rows():
    slopes = np.array([0.1, -0.2, 0.3, 0.4], np.float32)
    mod, _ = canonqnn.canonicalize(_fq(lambda bb, r: bb.emit(
        relax.op.nn.prelu(r, _tvm.const(slopes), axis=1))))
    [(table, attrs)] = lut_tables(mod)
    assert attrs["axis"] == 1
    for row, s in zip(table, slopes):
        want = _onnx_table(lambda v, s=s: _ev("relax.nn.leakyrelu", v, alpha=float(s)))
        assert np.array_equal(row, want)


def test_dequantized_constant_is_a_constant_of_the_table():
    """A constant a QDQ quantizer quantized (here one int8 value per channel) is dequantized
    as the source runtime dequantizes it."""
    c_qp = QParams.make(np.array([0.01, 0.02, 0.03, 0.04], np.float32), 0, axis=1)
    c = np.array([37, -90, 127, 5], np.int8).reshape(1, 4, 1, 1)

    def gated(bb, r):
        dq_c = bb.emit(qdq.dequantize(_tvm.const(c), c_qp))
        return bb.emit(relax.op.multiply(bb.emit(relax.op.tanh(r)), dq_c))

    mod, report = canonqnn.canonicalize(_fq(gated))
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    [(table, attrs)] = lut_tables(mod)
    assert attrs["axis"] == 1 and attrs["function"] == "multiply(tanh(x), dq(c[1, 4, 1, 1]))"
    real_c = (c.reshape(-1).astype(np.float32) * c_qp.scale).astype(np.float32)
    for row, value in zip(table, real_c):
        want = _onnx_table(lambda v, value=value: _ev("relax.multiply", _ev("relax.tanh", v),
                                                      value))
        assert np.array_equal(row, want)


# ---------------------------------------------------------------- left alone
def test_relu_and_clip_chains_are_left_to_the_integer_clamp():
    for act in (lambda bb, r: bb.emit(relax.op.nn.relu(r)),
                lambda bb, r: bb.emit(_tvm.clip_float(bb.emit(relax.op.nn.relu(r)), 0.0, 2.0))):
        mod = _fq(act)
        _, only_lut = canonqnn.canonicalize(mod, (Phase("lut", lut_rule.RULES),))
        assert not only_lut.counts and not only_lut.canonical_ops
        _, report = canonqnn.canonicalize(mod)
        assert "lut" not in report.canonical_ops and not report.float_islands


def test_chain_through_a_non_elementwise_op_is_not_matched():
    def sigmoid_of_transpose(bb, r):
        return bb.emit(relax.op.sigmoid(bb.emit(relax.op.permute_dims(r, [0, 1, 3, 2]))))

    _, report = canonqnn.canonicalize(_fq(sigmoid_of_transpose))
    assert "lut" not in report.canonical_ops
    assert _island_reasons(report)["relax.sigmoid"].startswith(
        "computed in float by the model: it reads the float result of relax.permute_dims")


# ---------------------------------------------------------------- declined, with the reason
def test_intermediate_used_outside_the_chain_declines():
    def shared(bb, r):
        s = bb.emit(relax.op.sigmoid(r))
        return bb.emit(relax.op.multiply(r, s)), [s]  # s is also a float output

    _, report = canonqnn.canonicalize(_fq(shared))
    assert "lut" not in report.canonical_ops
    assert "also used outside" in _island_reasons(report)["relax.sigmoid"]


def test_constants_varying_along_two_axes_decline():
    c = _tvm.const(np.linspace(0.5, 2, 32, dtype=np.float32).reshape(1, 4, 8, 1))
    _, report = canonqnn.canonicalize(_fq(lambda bb, r: bb.emit(relax.op.multiply(
        bb.emit(relax.op.sigmoid(r)), c))))
    assert "constants vary along axes [1, 2]" in _island_reasons(report)["relax.multiply"]


def test_op_without_an_evaluator_declines_naming_it():
    _, report = canonqnn.canonicalize(_fq(lambda bb, r: bb.emit(relax.op.cos(r))))
    assert "relax.cos has no onnx table evaluator" in _island_reasons(report)["relax.cos"]


def test_chain_of_two_quantized_tensors_declines():
    def two_inputs(bb, a, b):
        return bb.emit(relax.op.multiply(bb.emit(relax.op.sigmoid(a)), b))

    _, report = canonqnn.canonicalize(_fq(two_inputs, inputs=("a", "b")))
    assert "reads 2 quantized tensors" in _island_reasons(report)["relax.multiply"]


def test_per_channel_input_declines():
    per_channel = QParams.make(np.array([0.1, 0.2, 0.3, 0.4], np.float32), 0, axis=1)
    _, report = canonqnn.canonicalize(_fq(lambda bb, r: bb.emit(relax.op.tanh(r)),
                                          in_qp=per_channel))
    assert "input is quantized per channel" in _island_reasons(report)["relax.tanh"]
