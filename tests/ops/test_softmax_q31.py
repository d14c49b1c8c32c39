"""canonqnn.softmax under the TFLite roundings against the TFLite interpreter's reference
kernels (BUILTIN_REF): SOFTMAX int8 and uint8, with ``beta``. TFLite output, the op's numpy
reference and its TVM build must be identical; uint8 data is compared as int8 (u - 128), 4-D
NHWC data as NCHW with the softmax along axis 1.

TFLite's reference kernel aborts the process when a row's exp sum reaches 512, so those rows are
checked reference vs build only (the op defines them: all -128). q31_single (TFLite built with
TFLITE_SINGLE_ROUNDING: another input multiplier cap and single-rounding input scaling) cannot
run on this interpreter: it is checked reference vs build only.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import canonqnn
from _ort import NCHW, MultiOp, assert_bit_exact, stored, to_int8
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.io import IO_ATTR, ModelIO
from canonqnn.ops import lookup
from canonqnn.ops import softmax as softmax_op
from canonqnn.qparams import QParams

F32 = np.float32
OUT_QP = QParams.make(1 / 256, -128)
MAX_SAFE_ROW = 511  # exps are <= 1 each: a row of 511 cannot reach TFLite's abort at 512


def f32(v: float) -> float:
    return float(F32(v))


# ---------------------------------------------------------------- oracles and cases
def tflite_softmax(x: np.ndarray, scale: float, zp: int, beta: float,
                   out_scale: float = 1 / 256, out_zp: int | None = None) -> np.ndarray:
    """TFLite SOFTMAX (last axis) of int8 or uint8 ``x``; output (1/256, -128 | 0) by default."""
    dtype = str(x.dtype)
    if out_zp is None:
        out_zp = -128 if dtype == "int8" else 0
    model = single_op("SOFTMAX", [T(x.shape, dtype, scale, zp)],
                      [T(x.shape, dtype, out_scale, out_zp)], beta=beta)
    return run_tflite(model, [x])[0]


def canonical_layout(x: np.ndarray) -> tuple[np.ndarray, int]:
    """int8 storage in canonqnn's layout, and the softmax axis there (TFLite: the last)."""
    x = stored(x)
    if x.ndim == 4:
        return x.transpose(NCHW).copy(), 1
    return x, x.ndim - 1


def case_data(rng, case) -> np.ndarray:
    """Random codes; ``kind`` adds structure: ``equal`` rows (all ties), ``near_max`` (a narrow
    range: many entries contribute), ``two_values`` (ties at the maximum and below)."""
    info = np.iinfo(case["dtype"])
    shape, kind = case["shape"], case.get("kind", "random")
    x = rng.integers(info.min, info.max + 1, shape)
    if kind == "equal":
        x = np.broadcast_to(x[..., :1], shape)
    elif kind == "near_max":
        x = rng.integers(info.max - 12, info.max + 1, shape)
    elif kind == "two_values":
        x = np.where(rng.random(shape) < 0.5, info.max - 3, info.min + 40)
    elif kind == "mixed":  # first row all equal, second near one value, the rest random
        flat = x.reshape(-1, shape[-1])
        flat[0] = flat[0, 0]
        flat[1 % len(flat)] = rng.integers(-2, 1, shape[-1]) + flat[1 % len(flat), 0] // 2
    return np.ascontiguousarray(x).astype(case["dtype"])


def softmax_call(v, case, rounding="q31_double"):
    uint8 = case["dtype"] == np.uint8
    qp = QParams.make(case["scale"], case["zp"] - 128 if uint8 else case["zp"])
    axis = 1 if len(case["shape"]) == 4 else len(case["shape"]) - 1
    return softmax_op.softmax(v, qp, OUT_QP, axis, beta=case["beta"], rounding=rounding,
                              source_dtype="uint8" if uint8 else "int8")


def run_cases(cases, rng, rounding="q31_double", oracle=True):
    """Build every case into one module; compare TFLite (if ``oracle``), reference and TVM."""
    feeds = [case_data(rng, case) for case in cases]
    canon = {f"x{i}": canonical_layout(x)[0] for i, x in enumerate(feeds)}
    op = MultiOp(lambda *vs: [softmax_call(v, c, rounding) for v, c in zip(vs, cases)],
                 {k: (v.shape, "int8") for k, v in canon.items()})
    refs, built = op.references(**canon), op.tvm(**canon)
    outputs = []
    for i, (case, x) in enumerate(zip(cases, feeds)):
        if oracle:
            assert case["shape"][-1] <= MAX_SAFE_ROW
            want = canonical_layout(tflite_softmax(x, case["scale"], case["zp"],
                                                   case["beta"]))[0]
        else:
            want = refs[i]
        assert_bit_exact(want, refs[i], built[i], f"case {i} {case}")
        outputs.append(want)
    return outputs


def case(shape, scale, zp, beta=1.0, dtype=np.int8, kind="random"):
    return dict(shape=shape, scale=f32(scale), zp=zp, beta=f32(beta), dtype=dtype, kind=kind)


CASES = {
    "rows_of_10": case((6, 10), 0.1, 3),
    "beta_0_37": case((4, 40), 0.05, -20, beta=0.37, kind="mixed"),
    "beta_4_near_max": case((3, 64), 0.02, 0, beta=4.0, kind="near_max"),
    "nhwc_channels_to_nchw_axis_1": case((2, 3, 4, 12), 0.08, 5, kind="mixed"),
    "rank_3_last_axis": case((2, 5, 33), 0.3, -7),
    "row_of_one": case((5, 1), 0.1, 0),
    "all_equal_300_exponent_31": case((2, 300), 0.04, 1, kind="equal"),
    "all_equal_511": case((2, 511), 0.01, 1, kind="equal"),
    "two_values_ties": case((4, 257), 0.02, 0, kind="two_values"),
    "multiplier_at_cap": case((3, 50), 40.0, 0, beta=2.0),  # scale * beta * 2^26 > 2^31 - 1
    "tiny_scale": case((3, 50), 2e-7, 0, beta=0.5),
    "uint8_rows": case((5, 20), 0.07, 128, dtype=np.uint8, kind="mixed"),
    "uint8_beta_nhwc": case((1, 2, 3, 16), 0.2, 30, beta=1.7, dtype=np.uint8),
    "uint8_near_max": case((3, 100), 0.03, 200, dtype=np.uint8, kind="near_max"),
    "uint8_equal_400": case((2, 400), 0.05, 0, dtype=np.uint8, kind="equal"),
}


def random_case(rng, dtype, max_depth=MAX_SAFE_ROW):
    info = np.iinfo(dtype)
    depth = int(rng.integers(1, max_depth + 1))
    shape = (2, int(rng.integers(1, 4)), int(rng.integers(1, 4)), depth) \
        if rng.random() < 0.3 else (int(rng.integers(1, 5)), depth)
    beta = 1.0 if rng.random() < 0.4 else float(10 ** rng.uniform(-2, 1))
    return case(shape, 10 ** rng.uniform(-4, 1.5), int(rng.integers(info.min, info.max + 1)),
                beta=beta, dtype=dtype,
                kind=str(rng.choice(["random", "near_max", "mixed", "two_values", "equal"])))


# ---------------------------------------------------------------- against the interpreter
def test_softmax_q31_matches_tflite_reference_kernel():
    outputs = run_cases(list(CASES.values()), np.random.default_rng(40))
    names = list(CASES)
    # rows of n equal values give round(256 / n) - 128 for every entry
    for name, n in (("all_equal_300_exponent_31", 300), ("all_equal_511", 511),
                    ("uint8_equal_400", 400)):
        assert np.all(outputs[names.index(name)] == -128 + (1 if n <= 512 else 0))
    assert np.all(outputs[names.index("row_of_one")] == 127)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_softmax_q31_random_parameter_sweep(dtype):
    rng = np.random.default_rng(41 + (dtype == np.uint8))
    run_cases([random_case(rng, dtype, 80) for _ in range(6)], rng)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_softmax_q31_large_random_parameter_sweep(dtype):
    rng = np.random.default_rng(51 + (dtype == np.uint8))
    for _ in range(4):
        run_cases([random_case(rng, dtype) for _ in range(30)], rng)


def test_uint8_kernel_ignores_output_parameters_int8_kernel_requires_them():
    """Measured: TFLite's uint8 SOFTMAX writes (1/256, 0) codes whatever the output tensor's
    parameters; its int8 kernel refuses any but (1/256 +- 0.1%, -128). The op ignores
    out_scale / out_zp under the q31 roundings."""
    rng = np.random.default_rng(43)
    u = rng.integers(0, 256, (3, 30)).astype(np.uint8)
    plain = tflite_softmax(u, f32(0.05), 100, 1.0)
    assert np.array_equal(tflite_softmax(u, f32(0.05), 100, 1.0, out_scale=0.01, out_zp=7),
                          plain)
    with pytest.raises(RuntimeError, match="zero_point"):
        tflite_softmax(stored(u), f32(0.05), -28, 1.0, out_zp=-127)
    x = relax.Var("x", _tvm.tensor_type(u.shape, "int8"))
    qp = QParams.make(0.05, -28)
    calls = [softmax_op.softmax(x, qp, out, 1, source_dtype="uint8", rounding="q31_double")
             for out in (OUT_QP, QParams.make(0.01, 7 - 128))]
    ref = [lookup(c).run_reference(c, [stored(u), _tvm.const_value(c.args[1])]) for c in calls]
    assert np.array_equal(ref[0], to_int8(plain)) and np.array_equal(ref[1], ref[0])


# ---------------------------------------------------------------- beyond the interpreter
def test_rows_whose_exp_sum_reaches_512_give_the_lowest_code_everywhere():
    """TFLite's reference kernel aborts on these rows; the op continues the same arithmetic
    exactly: the last shift exceeds 31 bits and every output rounds to -128. 4096 and 8192
    equal values would wrap TFLite's int32 Q12 sum to 2^31 and 0."""
    rng = np.random.default_rng(44)
    cases = [case((2, 512), 0.05, 0, kind="equal"), case((1, 4096), 0.05, 0, kind="equal"),
             case((1, 8192), 0.05, 0, kind="equal"), case((3, 2000), 0.001, 0, kind="random"),
             case((2, 513), 0.02, 0, dtype=np.uint8, kind="equal")]
    outputs = run_cases(cases, rng, oracle=False)
    assert all(np.all(y == -128) for y in outputs)
    # one fewer equal value still divides: 511 gives 1/511 -> round(256/511) = 1 -> -127
    x = np.zeros((1, 511), np.int8)
    table = softmax_op.q31_exp_table(f32(0.05), 1.0, "q31_double")
    assert np.all(softmax_op._reference_q31(x, table, 1) == -127)


def test_single_rounding_softmax_reference_matches_build():
    rng = np.random.default_rng(45)
    names = ("beta_0_37", "nhwc_channels_to_nchw_axis_1", "all_equal_300_exponent_31",
             "multiplier_at_cap", "uint8_rows")
    cases = [CASES[n] for n in names] + [random_case(rng, np.int8, 100) for _ in range(2)]
    run_cases(cases, rng, rounding="q31_single", oracle=False)


def test_single_rounding_changes_the_input_scaling():
    """TFLITE_SINGLE_ROUNDING caps the input multiplier at 2^30 - 1 (not 2^31 - 1) and scales
    the input differences with one rounding: the exp tables differ, the rest of the kernel
    (gemmlowp exp, reciprocal, output shift) is the same."""
    capped = [softmax_op.q31_input_multiplier(f32(40.0), 1.0, r)
              for r in ("q31_double", "q31_single")]
    assert capped == [(2**31 - 1, 31, 0), (2**31 - 2, 30, -1)]

    def tables(scale):
        return [softmax_op.q31_exp_table(f32(scale), 1.0, r) for r in ("q31_double", "q31_single")]

    assert not np.array_equal(*tables(20.0))  # above the single-rounding cap (2^30 / 2^26)
    assert np.array_equal(*tables(0.05))  # below it only exact ties could differ


def test_parameters_tflite_refuses_and_beta_without_q31_raise():
    x = relax.Var("x", _tvm.tensor_type((2, 8), "int8"))
    with pytest.raises(ValueError, match="2\\^26 > 1"):  # TFLite aborts (TFLITE_CHECK) on these
        softmax_op.softmax(x, QParams.make(1e-8, 0), OUT_QP, 1, rounding="q31_double")
    with pytest.raises(ValueError, match="no beta"):
        softmax_op.softmax(x, QParams.make(0.1, 0), OUT_QP, 1, beta=2.0)


# ---------------------------------------------------------------- the rule on tflite modules
TFLITE = ModelIO("tflite", [], [], rounding="q31_double")
IN_QP = QParams.make(0.06, 3)


def tflite_module(shape, axis, beta=None, out_qp=OUT_QP, uint8=False):
    """A tflite-source module in the frontend's form: q(softmax(dq x [* f32 beta], axis))."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            real = bb.emit(qdq.dequantize(x, IN_QP, source_dtype="uint8" if uint8 else "int8"))
            if beta is not None:
                real = bb.emit(relax.op.multiply(real, _tvm.const(F32(beta))))
            y = bb.emit(relax.op.nn.softmax(real, axis))
            q = bb.emit_output(qdq.quantize(y, out_qp,
                                            source_dtype="uint8" if uint8 else "int8"))
        bb.emit_func_output(q)
    mod = bb.get()
    return mod.with_attr(IO_ATTR, json.dumps(TFLITE.to_json()))


def softmax_calls(mod):
    return [b.value for blk in mod["main"].body.blocks for b in blk.bindings
            if (op := lookup(b.value)) is not None and op.name == "softmax"]


@pytest.mark.parametrize("shape, axis, beta, uint8", [
    ((2, 10), -1, None, False), ((1, 8, 3, 3), 1, 0.5, False), ((2, 3, 7), 2, 3.0, True)])
def test_tflite_softmax_folds_with_its_beta_and_the_q31_table(shape, axis, beta, uint8):
    mod, report = canonqnn.canonicalize(tflite_module(shape, axis, beta, uint8=uint8),
                                        numerics="tflite-reference")
    assert not report.float_islands
    (call,) = softmax_calls(mod)
    attrs = _tvm.attrs_dict(call)
    assert attrs["rounding"] == "q31_double" and attrs["axis"] == axis % len(shape)
    assert attrs["beta"] == f32(1.0 if beta is None else beta)
    assert attrs["source_dtype"] == ("uint8" if uint8 else "int8")
    np.testing.assert_array_equal(_tvm.const_value(call.args[1]), softmax_op.q31_exp_table(
        IN_QP.scalar_scale, attrs["beta"], "q31_double"))


@pytest.mark.parametrize("out_qp, reason", [
    (QParams.make(0.01, -128), "output scale"), (QParams.make(1 / 256, 0), "zero point")])
def test_tflite_int8_softmax_with_output_parameters_tflite_refuses_declines(out_qp, reason):
    _, report = canonqnn.canonicalize(tflite_module((2, 10), 1, out_qp=out_qp),
                                      numerics="tflite-reference")
    assert "softmax" not in report.canonical_ops
    assert any("SOFTMAX requires" in i.reason and reason in i.reason
               for i in report.float_islands), report.summary()
