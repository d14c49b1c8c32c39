"""Rules of rewrites/select.py on hand-written fake-quant modules: maximum/minimum (pairs,
nested trees, constants as clamp bounds or int8 constants) and where (run-time and constant
conditions, constant branches, onnxruntime's reading of a scalar branch), and their declines."""

from __future__ import annotations

import numpy as np
import pytest

from _canonical import canonical_calls
from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.qparams import QParams, quantize_value
from canonqnn.rewrites import DEFAULT_PHASES, Phase, canonicalize, select
from canonqnn.rewrites.select import ort_dummy_dq_value

A = QParams.make(0.05, 3)
B = QParams.make(0.031, -20)
OUT = QParams.make(0.04, 7)
SHAPES = {"a": ((2, 3, 4), "int8"), "b": ((3, 1), "int8"), "c": ((4,), "int8"),
          "cond": ((3, 4), "bool")}


# Only these rules: a later phase's rule may replace a decline reason in the report.
SELECT_ONLY = (Phase("select", select.RULES),)


def fake_quant(body, out_qp=OUT, qps=None, uint8=(), phases=DEFAULT_PHASES):
    """main(a, b, c, cond) = q(body(bb, dq(a), dq(b), dq(c), cond)), canonicalized; the
    quantized result is bound to ``y``; ``uint8`` names the tensors holding uint8 data."""
    qps = qps or {"a": A, "b": B, "c": B}
    params = {n: relax.Var(n, _tvm.tensor_type(s, d)) for n, (s, d) in SHAPES.items()}
    bb = relax.BlockBuilder()
    with bb.function("main", list(params.values())):
        with bb.dataflow():
            reals = [bb.emit(qdq.dequantize(params[n], qps[n], source_dtype=qdq.source_dtype(
                "uint8" if n in uint8 else "int8"))) for n in ("a", "b", "c")]
            y = bb.emit(qdq.quantize(body(bb, *reals, params["cond"]), out_qp,
                                     source_dtype=qdq.source_dtype("uint8" if "y" in uint8
                                                                   else "int8")), name_hint="y")
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return canonicalize(bb.get(), phases)


def reasons(report) -> list[str]:
    return [i.reason for i in report.float_islands]


def const(value):
    return _tvm.const(np.asarray(value, np.float32))


# ---------------------------------------------------------------- maximum / minimum
@pytest.mark.parametrize("relax_op,name", [(relax.op.maximum, "maximum"),
                                           (relax.op.minimum, "minimum")])
def test_pair_of_dequantized_operands_folds_with_both_parameter_sets(relax_op, name):
    mod, report = fake_quant(lambda bb, a, b, c, cond: bb.emit(relax_op(a, b)))
    ((op, attrs, _),) = canonical_calls(mod)
    assert op == name and not report.float_islands
    assert (attrs["a_scale"], attrs["a_zp"], attrs["b_scale"], attrs["b_zp"]) == (
        A.scalar_scale, 3, B.scalar_scale, -20)
    assert (attrs["out_scale"], attrs["out_zp"], attrs["act_min"], attrs["act_max"]) == (
        OUT.scalar_scale, 7, -128, 127)


def test_nested_maxima_flatten_into_a_chain_in_output_parameters():
    def body(bb, a, b, c, cond):  # Max(a, b, c) as the importer folds it, then relu
        inner = bb.emit(relax.op.maximum(a, b))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.maximum(inner, c))))

    mod, report = fake_quant(body)
    (first, f, _), (second, s, call) = canonical_calls(mod)
    assert (first, second) == ("maximum", "maximum") and not report.float_islands
    assert (f["out_scale"], f["act_min"]) == (OUT.scalar_scale, -128)
    assert (s["a_scale"], s["a_zp"], s["b_zp"]) == (OUT.scalar_scale, 7, -20)
    assert (s["act_min"], s["act_max"]) == (7, 127)  # the relu, on the last one only


@pytest.mark.parametrize("relax_op,value,bounds", [
    (relax.op.maximum, 0.0, (7, 127)),                     # max(x, 0) is a relu
    (relax.op.minimum, 0.5, (-128, 7 + round(0.5 / 0.04))),
    (relax.op.maximum, 1e9, (127, 127)),                   # saturating bound
])
def test_scalar_constant_operand_becomes_a_clamp_bound(relax_op, value, bounds):
    mod, _ = fake_quant(lambda bb, a, b, c, cond: bb.emit(relax_op(a, const(value))))
    ((op, attrs, _),) = canonical_calls(mod)
    assert op == "requantize" and (attrs["act_min"], attrs["act_max"]) == bounds


def test_scalar_bound_never_crosses_the_activation_clamp():
    """clip(max(x, 5), -1, 1): the bound 5 lands on the clip's upper bound."""
    def body(bb, a, b, c, cond):
        return bb.emit(relax.op.clip(bb.emit(relax.op.maximum(a, const(5.0))), -1.0, 1.0))

    mod, _ = fake_quant(body)
    ((_, attrs, _),) = canonical_calls(mod)
    top = quantize_value(1.0, OUT)
    assert (attrs["act_min"], attrs["act_max"]) == (top, top)


def test_tensor_constant_operand_becomes_an_int8_constant_in_output_parameters():
    values = np.array([[-1.0], [0.3], [100.0]], np.float32)
    mod, _ = fake_quant(lambda bb, a, b, c, cond: bb.emit(relax.op.minimum(a, const(values))))
    ((op, attrs, call),) = canonical_calls(mod)
    assert op == "minimum" and (attrs["b_scale"], attrs["b_zp"]) == (OUT.scalar_scale, 7)
    assert _tvm.const_value(call.args[1]).tolist() == [[quantize_value(v, OUT)]
                                                       for v in (-1.0, 0.3, 100.0)]


def test_per_channel_operand_declines_with_reason():
    per_channel = QParams.make([0.1, 0.2, 0.3], [0, 0, 0], axis=0)
    mod, report = fake_quant(lambda bb, a, b, c, cond: bb.emit(relax.op.maximum(b, c)),
                             qps={"a": A, "b": per_channel, "c": B}, phases=SELECT_ONLY)
    assert not canonical_calls(mod)
    assert any("per channel" in r for r in reasons(report))


def test_operand_computed_in_float_declines_with_reason():
    mod, report = fake_quant(
        lambda bb, a, b, c, cond: bb.emit(relax.op.maximum(bb.emit(relax.op.exp(a)), b)),
        phases=SELECT_ONLY)
    assert all(name != "maximum" for name, _, _ in canonical_calls(mod))
    assert any("neither dequantized from int8 nor a constant" in r for r in reasons(report))


# ---------------------------------------------------------------- where
def test_where_with_a_runtime_condition_folds():
    mod, report = fake_quant(lambda bb, a, b, c, cond: bb.emit(relax.op.where(cond, a, b)))
    ((op, attrs, call),) = canonical_calls(mod)
    assert op == "where" and not report.float_islands
    assert _tvm.var_name(call.args[0]) == "cond"
    assert (attrs["a_zp"], attrs["b_zp"], attrs["out_zp"]) == (3, -20, 7)


def test_where_with_a_constant_condition_and_tensor_branch_constant():
    cond = _tvm.const(np.array([True, False, True, False]))
    branch = np.full((3, 4), -0.25, np.float32)
    mod, _ = fake_quant(lambda bb, a, b, c, _: bb.emit(relax.op.where(cond, const(branch), a)))
    ((op, attrs, call),) = canonical_calls(mod)
    assert op == "where" and (attrs["a_scale"], attrs["a_zp"]) == (OUT.scalar_scale, 7)
    assert (_tvm.const_value(call.args[1]) == quantize_value(-0.25, OUT)).all()


# Output parameters and a scalar branch for which onnxruntime's dummy DequantizeLinear moves
# the value across a rounding boundary (found by search; measured: 13 vs 12 at
# ORT_ENABLE_ALL vs ORT_DISABLE_ALL, tests/frontends/onnx/test_indexing.py).
ADVERSARIAL = (QParams.make(0.019989898428320885, 0), np.float32(0.24987372756004333))


def test_scalar_branch_is_read_as_onnxruntime_dummy_dq_reads_it():
    out, value = ADVERSARIAL
    assert quantize_value(float(ort_dummy_dq_value(value, "int8")), out) == 13
    assert quantize_value(float(value), out) == 12
    mod, _ = fake_quant(lambda bb, a, b, c, cond: bb.emit(relax.op.where(cond, a, const(value))),
                        out_qp=out)
    ((_, _, call),) = canonical_calls(mod)
    assert int(_tvm.const_value(call.args[2])) == 13


def test_scalar_branch_under_an_activation_is_quantized_exactly():
    """onnxruntime adds the dummy DequantizeLinear only when Where feeds QuantizeLinear."""
    out, value = ADVERSARIAL

    def body(bb, a, b, c, cond):
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.where(cond, a, const(value)))))

    mod, _ = fake_quant(body, out_qp=out)
    ((_, _, call),) = canonical_calls(mod)
    assert int(_tvm.const_value(call.args[2])) == 12


def test_dummy_dq_of_uint8_models_uses_the_uint8_layout():
    value = np.float32(-1.9901543855667114)
    assert ort_dummy_dq_value(value, "uint8") == np.float32(
        np.float32(-127) * np.float32(value / np.float32(-127)))
    assert ort_dummy_dq_value(value, "uint8") != value
    assert ort_dummy_dq_value(np.float32(0.0), "uint8") == 0.0
    out = QParams.make(0.019607432186603546, 0)
    body = lambda bb, a, b, c, cond: bb.emit(relax.op.where(cond, a, const(value)))  # noqa: E731
    mod, _ = fake_quant(body, out_qp=out, uint8=("a", "y"))
    assert int(_tvm.const_value(canonical_calls(mod)[0][2].args[2])) == quantize_value(
        float(ort_dummy_dq_value(value, "uint8")), out)
    mod, _ = fake_quant(body, out_qp=out, uint8=("a",))  # types differ: no dummy DQ
    assert int(_tvm.const_value(canonical_calls(mod)[0][2].args[2])) == quantize_value(
        float(value), out)
