"""TFLite's int16 (16x8) elementwise kernels, LEAKY_RELU, LOGISTIC and TANH
(canonqnn/tables/tflite_int16.py, tables.tflite.leaky_relu): the int16[65536] table against the
interpreter's reference kernel run on every int16 code, for random and edge parameters; the
output parameters the kernels refuse are refused. TANH / LOGISTIC's optimized variant
(tflite_int16_fixedpoint.py, gemmlowp fixed point at power-of-two input scales) against the
optimized builtin kernels, and the default resolver against those."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from _tflite import T, run_tflite, single_op
from canonqnn.qparams import QParams
from canonqnn.tables import NotEvaluable, kernel_table, tflite_int16

F32 = np.float32
CODES = np.arange(-(2**15), 2**15).astype(np.int16)
BUILTINS = {"sigmoid": "LOGISTIC", "tanh": "TANH", "leaky_relu": "LEAKY_RELU"}
Q015 = 2.0 ** -15


def q16(scale) -> QParams:
    return QParams.make(F32(scale), 0, None, "int16")


def _model(function: str, in_scale: float, out_scale: float, alpha: float = 0.2) -> bytes:
    options = {"alpha": alpha} if function == "leaky_relu" else {}
    return single_op(BUILTINS[function], [T((1, CODES.size), "int16", in_scale, 0)],
                     [T((1, CODES.size), "int16", out_scale, 0)], **options)


def interpreter_table(function: str, in_scale: float, out_scale: float, alpha: float = 0.2):
    return run_tflite(_model(function, in_scale, out_scale, alpha),
                      [CODES.reshape(1, -1)])[0].reshape(-1)


def resolver_table(function: str, in_scale: float, out_scale: float,
                   resolver: OpResolverType) -> np.ndarray:
    """The kernel's output on every int16 code under ``resolver`` (BUILTIN: the default one,
    XNNPACK delegate applied where it takes the op)."""
    interp = Interpreter(model_content=_model(function, in_scale, out_scale),
                         experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], CODES.reshape(1, -1))
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"]).reshape(-1).copy()


def _cases(rng):
    """(function, in_scale, out_scale, alpha): random scales 1e-5..1, and the edges the kernels
    branch on (power-of-two input scales, ratios that wrap the left shift, negative alpha)."""
    cases = []
    for _ in range(4):
        s_in, s_out = (float(F32(10 ** rng.uniform(-5, 0))) for _ in range(2))
        cases += [("leaky_relu", s_in, s_out, float(F32(rng.uniform(-0.5, 1.5)))),
                  ("sigmoid", s_in, Q015, None), ("tanh", s_in, Q015, None)]
    for s_in in (2.0 ** -12, 2.0 ** -11, 2.0 ** -12 * 1.0003, 6.0):
        cases += [("sigmoid", s_in, Q015, None), ("tanh", s_in, Q015, None)]
    cases += [("leaky_relu", 1.0, 1e-5, 0.1), ("leaky_relu", 0.01, 0.01, -0.3)]
    return cases


def test_int16_tables_equal_the_reference_kernels_on_every_code():
    differing = []
    for function, s_in, s_out, alpha in _cases(np.random.default_rng(0)):
        params = {"alpha": alpha} if alpha is not None else {}
        table = kernel_table("tflite", function, q16(s_in), q16(s_out), **params)
        assert table.dtype == np.int16 and table.shape == (CODES.size,)
        want = interpreter_table(function, s_in, s_out, alpha or 0.2)
        if (table != want).any():
            differing.append((function, s_in, s_out, alpha, int((table != want).sum())))
    assert not differing


@pytest.mark.parametrize("function, out_scale, zero_point, message", [
    ("sigmoid", 1 / 256, 0, "output scale 1/32768"),
    ("sigmoid", Q015 * 1.0005, 0, "output scale 1/32768"),
    ("tanh", 1 / 256, 0, "output scale 2\\^-15"),
    ("leaky_relu", 0.01, 3, "zero points 0"),
])
def test_int16_tables_refuse_parameters_the_kernels_refuse(function, out_scale, zero_point,
                                                           message):
    out_qp = QParams.make(F32(out_scale), zero_point, None, "int16")
    params = {"alpha": 0.2} if function == "leaky_relu" else {}
    with pytest.raises(NotEvaluable, match=message):
        kernel_table("tflite", function, q16(0.001), out_qp, **params)


def test_int16_tables_exist_only_for_leaky_relu_sigmoid_and_tanh():
    with pytest.raises(NotEvaluable, match="int16 tables: leaky_relu, sigmoid, tanh"):
        kernel_table("tflite", "gelu", q16(0.001), q16(0.001))
    with pytest.raises(NotEvaluable, match="read and write one type"):
        kernel_table("tflite", "tanh", q16(0.001), QParams.make(F32(1 / 128), 0))


OPTIMIZED = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
FIXED_POINT_CASES = [  # input scales the optimized kernels compute in gemmlowp fixed point
    ("tanh", 2.0 ** -12, Q015),          # input_left_shift 0
    ("tanh", 2.0 ** -11, Q015),          # input_left_shift 1: doubled, saturating
    ("tanh", 2.0 ** -11 * 0.9995, Q015 * 1.0005),  # CheckedLog2 counts both as powers of two
    ("sigmoid", 2.0 ** -12, Q015),
    ("sigmoid", 2.0 ** -12 * 1.0003, Q015),
]
REFERENCE_CASES = [  # input scales the optimized kernels compute as the reference ones
    ("tanh", 0.001, Q015), ("tanh", 2.0 ** -13, Q015), ("tanh", 2.0 ** -10, Q015),
    ("sigmoid", 3e-4, Q015), ("sigmoid", 2.0 ** -11, Q015),
]
FUNCTIONS = {"tanh": tflite_int16.tanh, "sigmoid": tflite_int16.logistic}


@pytest.mark.parametrize("function, in_scale, out_scale", FIXED_POINT_CASES)
def test_optimized_tables_equal_the_fixed_point_kernels_on_every_code(function, in_scale,
                                                                      out_scale):
    optimized = FUNCTIONS[function](q16(in_scale), q16(out_scale), optimized=True)
    reference = FUNCTIONS[function](q16(in_scale), q16(out_scale))
    want = resolver_table(function, in_scale, out_scale, OPTIMIZED)
    assert optimized.dtype == np.int16 and optimized.shape == (CODES.size,)
    assert (optimized == want).all()
    # the case is one where the variants differ (most codes, by up to 10 steps for TANH)
    assert (reference != want).mean() > 0.25


@pytest.mark.parametrize("function, in_scale, out_scale", REFERENCE_CASES)
def test_optimized_tables_equal_the_reference_ones_off_the_fixed_point_scales(
        function, in_scale, out_scale):
    optimized = FUNCTIONS[function](q16(in_scale), q16(out_scale), optimized=True)
    reference = FUNCTIONS[function](q16(in_scale), q16(out_scale))
    assert (optimized == reference).all()
    assert (optimized == resolver_table(function, in_scale, out_scale, OPTIMIZED)).all()


@pytest.mark.parametrize("function, in_scale, out_scale",
                         FIXED_POINT_CASES[:2] + FIXED_POINT_CASES[3:4] + REFERENCE_CASES[:1])
def test_default_resolver_runs_the_optimized_int16_kernels(function, in_scale, out_scale):
    default = resolver_table(function, in_scale, out_scale, OpResolverType.BUILTIN)
    assert (default == resolver_table(function, in_scale, out_scale, OPTIMIZED)).all()


def test_optimized_tables_refuse_what_the_kernels_refuse():
    with pytest.raises(NotEvaluable, match="output scale 1/32768"):
        tflite_int16.logistic(q16(2.0 ** -12), q16(1 / 256), optimized=True)
    with pytest.raises(NotEvaluable, match="zero points 0"):
        tflite_int16.tanh(q16(2.0 ** -12), QParams.make(F32(Q015), 1, None, "int16"),
                          optimized=True)
