"""TFLite tables (canonqnn/tables/tflite.py) against the TFLite interpreter's reference kernels
run on all 256 codes: every entry equal, for random parameters, int8 and uint8."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _tflite import T, run_tflite, single_op
from canonqnn.numerics.arithmetic import c_library_function
from canonqnn.qparams import QParams, quantize_value
from canonqnn.tables import NotEvaluable, kernel_table, kernels
from canonqnn.tables import tflite as tt

F32 = np.float32
# function -> (builtin, options)
BUILTINS = {
    "sigmoid": ("LOGISTIC", {}), "tanh": ("TANH", {}),
    "gelu": ("GELU", {"approximate": False}), "gelu_tanh": ("GELU", {"approximate": True}),
    "leaky_relu": ("LEAKY_RELU", {}), "hardswish": ("HARD_SWISH", {}), "rsqrt": ("RSQRT", {}),
}


def interpreter_table(function: str, in_qp: QParams, out_qp: QParams, dtype: str = "int8",
                      alpha: float = 0.2) -> np.ndarray:
    """The reference kernel's output for input codes -128..127 (uint8: 0..255), as int8 codes.

    RSQRT fails on codes below the input zero point: those are fed the zero point instead,
    whose result (127) the table holds for them."""
    kind, options = BUILTINS[function]
    if function == "leaky_relu":
        options = {"alpha": alpha}
    shift = 128 if dtype == "uint8" else 0
    codes = np.arange(-128, 128)
    if function == "rsqrt":
        codes = np.maximum(codes, in_qp.scalar_zp)
    x = (codes + shift).astype(dtype).reshape(1, 256)
    model = single_op(kind, [T((1, 256), dtype, in_qp.scalar_scale, in_qp.scalar_zp + shift)],
                      [T((1, 256), dtype, out_qp.scalar_scale, out_qp.scalar_zp + shift)],
                      **options)
    y = run_tflite(model, [x])[0].reshape(-1).astype(np.int32) - shift
    return y.astype(np.int8)


def random_params(function: str, rng: np.random.Generator, wide: bool):
    lo, hi = (-8, 2) if wide else (-4, 0.5)
    in_qp = QParams.make(F32(10 ** rng.uniform(lo, hi)), int(rng.integers(-128, 128)))
    out_scale = 1 / 256 if function == "sigmoid" else F32(10 ** rng.uniform(lo, hi))
    out_qp = QParams.make(out_scale, int(rng.integers(-128, 128)))
    return in_qp, out_qp, float(F32(rng.uniform(-2, 2)))


def count_differences(function: str, dtype: str, n: int, seed: int, wide: bool) \
        -> tuple[int, int]:
    """(differing entries, tables compared) over ``n`` random parameter sets; parameter sets
    TFLite refuses must be refused by the builder too (and are not counted)."""
    rng = np.random.default_rng(seed)
    differing = compared = 0
    for _ in range(n):
        in_qp, out_qp, alpha = random_params(function, rng, wide)
        try:
            want = kernel_table("tflite", function, in_qp, out_qp, alpha=alpha,
                                source_dtype=dtype)
        except NotEvaluable:
            with pytest.raises(Exception):  # noqa: B017  (the interpreter's own failure)
                interpreter_table(function, in_qp, out_qp, dtype, alpha)
            continue
        got = interpreter_table(function, in_qp, out_qp, dtype, alpha)
        differing += int(np.count_nonzero(got != want))
        compared += 1
    return differing, compared


# RSQRT has no uint8 kernel (test_rsqrt_is_int8_only_and_refuses_right_shifts_past_31)
FUNCTION_DTYPES = [(f, d) for f in sorted(BUILTINS) for d in ("int8", "uint8")
                   if (f, d) != ("rsqrt", "uint8")]


@pytest.mark.parametrize("function, dtype", FUNCTION_DTYPES)
def test_table_equals_the_reference_kernel_on_random_parameters(function, dtype):
    differing, compared = count_differences(function, dtype, 16, seed=len(function), wide=False)
    assert compared >= 8
    assert differing == 0


@pytest.mark.slow
@pytest.mark.parametrize("function, dtype", FUNCTION_DTYPES)
def test_table_equals_the_reference_kernel_on_extreme_parameters_sweep(function, dtype):
    # scales 1e-8..100: overflowing LUT values, Q31 shifts >= 32, HARD_SWISH refusals
    differing, compared = count_differences(function, dtype, 400, seed=7, wide=True)
    assert compared >= 100
    assert differing == 0


def test_tanh_follows_the_c_library_tanhf_not_the_correctly_rounded_value():
    # glibc tanhf is not correctly rounded; in this table entry 0 differs between the two
    in_qp = QParams.make(6.00220519118011e-05, -85)
    out_qp = QParams.make(2.0242685422999784e-05, 24)
    if c_library_function("tanhf") is None:
        pytest.skip("no C library tanhf")
    x = float(tt.dequantize(-128, in_qp.scalar_scale, in_qp.scalar_zp))
    rounded = tt.quantize(np.array([math.tanh(x)], F32), out_qp.scalar_scale, out_qp.scalar_zp)
    want = interpreter_table("tanh", in_qp, out_qp)
    assert kernel_table("tflite", "tanh", in_qp, out_qp)[0] == want[0] != rounded[0]


def test_int8_lut_saturates_and_uint8_lut_wraps_values_beyond_int32():
    in_qp, out_qp = QParams.make(45.7, 0), QParams.make(2.66e-8, 5)
    for dtype in ("int8", "uint8"):
        table = kernel_table("tflite", "gelu", in_qp, out_qp, source_dtype=dtype)
        np.testing.assert_array_equal(table, interpreter_table("gelu", in_qp, out_qp, dtype))
    assert kernel_table("tflite", "gelu", in_qp, out_qp)[255] == 127
    assert kernel_table("tflite", "gelu", in_qp, out_qp, source_dtype="uint8")[255] == -128


def test_leaky_relu_multiplier_past_two_to_31_shifts_modulo_32_as_on_x86():
    in_qp, out_qp = QParams.make(45.73122787475586, 21), QParams.make(2.6623082405308196e-08, 126)
    table = kernel_table("tflite", "leaky_relu", in_qp, out_qp, alpha=1.306035041809082)
    np.testing.assert_array_equal(
        table, interpreter_table("leaky_relu", in_qp, out_qp, alpha=1.306035041809082))
    assert table[0] != 127  # a true 2^32 left shift would saturate


def test_hard_swish_int16_wrap_depends_on_the_stored_zero_point():
    # output exponent 0 (in / (128 out) near 1): for uint8 code 255 (zp 0) the int16 output
    # plus the stored zero point 250 passes 32767 and wraps; int8 (zp 122) does not
    in_qp, out_qp = QParams.make(1.0, -128), QParams.make(F32(1 / 127.9), 122)
    tables = {d: kernel_table("tflite", "hardswish", in_qp, out_qp, source_dtype=d)
              for d in ("int8", "uint8")}
    for dtype, table in tables.items():
        np.testing.assert_array_equal(table, interpreter_table("hardswish", in_qp, out_qp, dtype))
    assert tables["int8"][255] == 127 and tables["uint8"][255] == -128


def test_refused_parameters_and_unknown_functions_raise_not_evaluable():
    with pytest.raises(NotEvaluable, match="HARD_SWISH requires"):
        kernel_table("tflite", "hardswish", QParams.make(1.0, 0), QParams.make(0.001, 0))
    with pytest.raises(NotEvaluable, match="LOGISTIC requires output scale 1/256"):
        kernel_table("tflite", "sigmoid", QParams.make(0.1, 0), QParams.make(0.01, 0))
    with pytest.raises(NotEvaluable, match="no int8 kernel computing 'silu'"):
        kernel_table("tflite", "silu", QParams.make(0.1, 0), QParams.make(0.1, 0))
    with pytest.raises(NotEvaluable, match="not kernels"):
        kernel_table("onnx", "tanh", QParams.make(0.1, 0), QParams.make(0.1, 0))
    assert sorted(kernels("tflite")) == sorted([*BUILTINS, "elu"]) and kernels("onnx") is None


def test_rsqrt_inverse_square_root_is_tflites_newton_raphson_in_fixed_point():
    """GetInvSqrtQuantizedMultiplierExp: m * 2^(shift - 31) is 1 / sqrt(v) within 2^-19
    relative (five Newton steps from 1.0 do not fully converge), and 0 and 1 both give
    (2^31 - 1, 0)."""
    v = np.arange(0, 4096)
    m, shift = tt.inv_sqrt_quantized_multiplier_exp(v)
    assert (m[:2] == 2**31 - 1).all() and (shift[:2] == 0).all()
    approx = m[2:] * 2.0 ** (shift[2:] - 31)
    np.testing.assert_allclose(approx, 1 / np.sqrt(v[2:]), rtol=2.0**-19)
    assert (shift <= 0).all()  # a right shift, as kReverseShift asks


def test_rsqrt_is_int8_only_and_refuses_right_shifts_past_31():
    in_qp, out_qp = QParams.make(0.02, -128), QParams.make(0.04, -110)
    with pytest.raises(NotEvaluable, match="RSQRT has no uint8 kernel"):
        kernel_table("tflite", "rsqrt", in_qp, out_qp, source_dtype="uint8")
    with pytest.raises(RuntimeError, match="UINT8 is unsupported by op Rsqrt"):
        interpreter_table("rsqrt", in_qp, out_qp, "uint8")
    # sqrt(in) * out > 2^12: gemmlowp's RoundingDivideByPOT would shift by 32 or more (the
    # interpreter then answers 127 everywhere, from undefined shifts)
    with pytest.raises(NotEvaluable, match="shift right by 33 > 31"):
        kernel_table("tflite", "rsqrt", QParams.make(630.0, 40), QParams.make(350.0, -128))


def test_rsqrt_table_holds_127_at_and_below_the_zero_point():
    table = kernel_table("tflite", "rsqrt", QParams.make(0.02, -20), QParams.make(0.04, -110))
    assert (table[:128 - 20 + 1] == 127).all() and table[128 - 20 + 1] < 127


def test_table_and_bound_rounding_is_roundf_not_floor_of_a_sum():
    # TfLiteRound(float) is std::round on a float: exact. floor(|x| + 0.5f) would give 1 for
    # the largest float below 0.5, whose sum with 0.5f rounds up to 1.0f.
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    assert tt.quantize(np.array([below_half, -below_half, 0.5, -0.5], np.float32), 1.0,
                           0).tolist() == [0, 0, 1, -1]
    unit = QParams.make(1.0, 0)
    assert [quantize_value(v, unit, "q31_double") for v in (below_half, 0.5, -0.5)] == [0, 1, -1]


# ---------------------------------------------------------------- ELU (no reference kernel)
def builtin_elu_table(in_qp: QParams, out_qp: QParams, dtype: str = "int8") -> np.ndarray:
    """The built-in ELU kernel's output for codes -128..127: the reference resolver has no ELU
    (test_elu_has_no_reference_kernel_and_no_uint8_kernel), so ELU's table is this one's."""
    shift = 128 if dtype == "uint8" else 0
    model = single_op("ELU", [T((1, 256), dtype, in_qp.scalar_scale, in_qp.scalar_zp + shift)],
                      [T((1, 256), dtype, out_qp.scalar_scale, out_qp.scalar_zp + shift)])
    x = (np.arange(-128, 128) + shift).astype(dtype).reshape(1, 256)
    y = run_tflite(model, [x], reference=False)[0].reshape(-1).astype(np.int32) - shift
    return y.astype(np.int8)


def test_elu_table_equals_the_builtin_kernel_on_random_parameters():
    rng = np.random.default_rng(11)
    for _ in range(150):
        in_qp, out_qp, _ = random_params("elu", rng, wide=bool(rng.integers(2)))
        want = builtin_elu_table(in_qp, out_qp)
        np.testing.assert_array_equal(kernel_table("tflite", "elu", in_qp, out_qp), want,
                                      err_msg=f"{in_qp} {out_qp}")


# (input scale, zero point, output scale, zero point) where expf(x) - 1 in float32, or expm1
# in double rounded to float32, would give another table than expm1f (found by comparing them)
ELU_EXPM1F = [(0.0018210288835689425, -27, 2.6060357413371094e-05, 17),
              (0.004380402620881796, -109, 0.00025356182595714927, 20),
              (0.008070934563875198, -36, 0.002201454946771264, 68),
              (0.007644994650036097, -53, 0.002147460589185357, 42)]


@pytest.mark.parametrize("params", ELU_EXPM1F)
def test_elu_is_a_float_lut_of_expm1f(params):
    in_qp, out_qp = QParams.make(*params[:2]), QParams.make(*params[2:])
    table = kernel_table("tflite", "elu", in_qp, out_qp)
    np.testing.assert_array_equal(table, builtin_elu_table(in_qp, out_qp))
    exp_minus_one = tt.lut_float(
        lambda x: np.where(x < 0, (tt.expf(x) - F32(1)).astype(F32), x), in_qp, out_qp)
    double = tt.lut_float(
        lambda x: np.where(x < 0, np.expm1(x.astype(np.float64)).astype(F32), x), in_qp, out_qp)
    assert not (np.array_equal(table, exp_minus_one) and np.array_equal(table, double))


def test_elu_has_no_reference_kernel_and_no_uint8_kernel():
    in_qp, out_qp = QParams.make(0.05, 3), QParams.make(0.04, -20)
    model = single_op("ELU", [T((1, 4), "int8", 0.05, 3)], [T((1, 4), "int8", 0.04, -20)])
    with pytest.raises(ValueError, match="Didn't find op for builtin opcode 'ELU'"):
        run_tflite(model, [np.zeros((1, 4), np.int8)])
    with pytest.raises(RuntimeError, match="Only float32 and int8 is supported currently"):
        builtin_elu_table(in_qp, out_qp, "uint8")
    with pytest.raises(NotEvaluable, match="ELU kernel takes float32 and int8 only"):
        kernel_table("tflite", "elu", in_qp, out_qp, source_dtype="uint8")
