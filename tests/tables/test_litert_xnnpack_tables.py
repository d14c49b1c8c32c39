"""canonqnn.tables.litert_xnnpack against TFLite's default interpreter (ai-edge-litert,
OpResolverType.BUILTIN: the XNNPACK delegate applied) on every input code: single-op int8 and
uint8 models written with canonqnn.testing.tflite_writer, random parameters and parameters
chosen where XNNPACK's table differs from the reference kernels' (so a table that is merely
close, or the reference table, would fail)."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from _tflite import T, single_op
from canonqnn.qparams import QParams
from canonqnn.tables import NotEvaluable, kernel_table, litert_xnnpack, tflite

CODES = np.arange(-128, 128).astype(np.int8)
OPS = {"sigmoid": "LOGISTIC", "tanh": "TANH", "leaky_relu": "LEAKY_RELU",
       "hardswish": "HARD_SWISH", "gelu": "GELU", "gelu_tanh": "GELU", "elu": "ELU"}
FIXED_OUTPUT = {"sigmoid": (1 / 256, -128), "tanh": (1 / 128, 0)}  # TFLite requires these


def run(model: bytes, x: np.ndarray, resolver=OpResolverType.BUILTIN) -> tuple[np.ndarray, bool]:
    """The model's output on ``x`` and whether the XNNPACK delegate took its operator."""
    interp = Interpreter(model_content=model, experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    delegated = any(op["op_name"] == "DELEGATE" for op in interp._get_ops_details())
    return interp.get_tensor(interp.get_output_details()[0]["index"]).reshape(-1), delegated


def interpreter_table(function: str, in_qp: QParams, out_qp: QParams, dtype: str,
                      alpha: float | None = None, resolver=OpResolverType.BUILTIN, runner=run):
    """(the table the interpreter computes in int8 form, whether XNNPACK took the op);
    ``runner(model, x, resolver)``: where the interpreter runs (``run``: here)."""
    shift = 128 if dtype == "uint8" else 0
    options = {"alpha": alpha} if function == "leaky_relu" else \
        {"approximate": function == "gelu_tanh"} if function.startswith("gelu") else {}
    model = single_op(OPS[function],
                      [T((1, 256), dtype, in_qp.scalar_scale, in_qp.scalar_zp + shift)],
                      [T((1, 256), dtype, out_qp.scalar_scale, out_qp.scalar_zp + shift)],
                      **options)
    x = (CODES.astype(np.int32) + shift).astype(dtype).reshape(1, 256)
    y, delegated = runner(model, x, resolver)
    return (y.astype(np.int32) - shift).astype(np.int8), delegated


def ours(function, in_qp, out_qp, dtype, alpha=None):
    return kernel_table("tflite", function, in_qp, out_qp, "tflite_xnnpack", source_dtype=dtype,
                        **({"alpha": alpha} if function == "leaky_relu" else {}))


def random_params(rng, function: str, k: int) -> list[tuple[QParams, QParams, float]]:
    out = []
    for _ in range(k):
        s_in = float(np.float32(np.exp(rng.uniform(np.log(0.3 / 256), np.log(60 / 256)))))
        z_in = int(rng.integers(-128, 128))
        if function in FIXED_OUTPUT:
            s_out, z_out = FIXED_OUTPUT[function]
        else:
            s_out = float(np.float32(s_in * np.exp(rng.uniform(np.log(1 / 300), np.log(100)))))
            z_out = int(rng.integers(-128, 128))
        alpha = float(np.float32(rng.choice([0.1, 0.2, 0.01, 1.5, -0.3, 1 / 3])))
        out.append((QParams.make(s_in, z_in), QParams.make(s_out, z_out), alpha))
    return out


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("function", ["sigmoid", "tanh", "leaky_relu"])
def test_delegated_functions_equal_the_default_interpreter(function, dtype):
    rng = np.random.default_rng(["sigmoid", "tanh", "leaky_relu"].index(function))
    delegated_cases = 0
    for in_qp, out_qp, alpha in random_params(rng, function, 300):
        want, delegated = interpreter_table(function, in_qp, out_qp, dtype, alpha)
        if function == "leaky_relu":  # XNNPACK's limits decide which kernel runs
            assert delegated == litert_xnnpack.leaky_relu_delegated(in_qp, out_qp, alpha)
        else:
            assert delegated
        delegated_cases += delegated
        got = ours(function, in_qp, out_qp, dtype, alpha)
        assert np.array_equal(got, want), (in_qp, out_qp, alpha, np.sum(got != want))
    assert delegated_cases >= 200


# Parameters (input scale, zero point[, output scale, zero point, alpha]) where XNNPACK's table
# differs from the reference kernels' (found by comparing the two; checked below).
DIFFERING = {
    "sigmoid": [(0.002605247776955366, 15), (0.01689695194363594, -113),
                (0.008732272312045097, 10)],
    "tanh": [(0.06489595770835876, 114)],
    "leaky_relu": [(0.05, 3, 0.02, -5, 0.1), (0.031, -20, 0.07, 11, 1.5)],
}
CHOSEN = [(f, p) for f, ps in DIFFERING.items() for p in ps]


def _chosen(function, p):
    if function in FIXED_OUTPUT:
        return QParams.make(p[0], p[1]), QParams.make(*FIXED_OUTPUT[function]), None
    return QParams.make(p[0], p[1]), QParams.make(p[2], p[3]), p[4]


@pytest.mark.parametrize("function,params", CHOSEN)
def test_where_xnnpack_and_the_reference_kernels_differ_the_interpreter_is_xnnpack(function,
                                                                                   params):
    in_qp, out_qp, alpha = _chosen(function, params)
    reference = tflite.table(function, in_qp, out_qp, alpha=alpha)
    got = ours(function, in_qp, out_qp, "int8", alpha)
    assert np.sum(got != reference) >= 1
    want, delegated = interpreter_table(function, in_qp, out_qp, "int8", alpha)
    assert delegated and np.array_equal(got, want)
    ref_kernels, _ = interpreter_table(function, in_qp, out_qp, "int8", alpha,
                                       OpResolverType.BUILTIN_REF)
    assert np.array_equal(ref_kernels, reference)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("function", ["hardswish", "gelu", "gelu_tanh"])
def test_functions_the_delegate_leaves_are_the_reference_kernels(function, dtype):
    """HARD_SWISH and GELU run the built-in optimized kernels, which compute as the reference
    kernels do: the reference tables."""
    rng = np.random.default_rng(10 + len(function))
    checked = 0
    for in_qp, out_qp, _ in random_params(rng, function, 150):
        try:
            want, delegated = interpreter_table(function, in_qp, out_qp, dtype)
        except RuntimeError:  # parameters the kernel refuses: so does canonqnn
            with pytest.raises(NotEvaluable):
                ours(function, in_qp, out_qp, dtype)
            continue
        checked += 1
        assert not delegated
        assert np.array_equal(ours(function, in_qp, out_qp, dtype), want), (in_qp, out_qp)
        assert np.array_equal(
            interpreter_table(function, in_qp, out_qp, dtype,
                              resolver=OpResolverType.BUILTIN_REF)[0], want)
    assert checked >= 100


def test_sixteen_bit_kernels_are_not_delegated_and_keep_the_reference_tables():
    in_qp, out_qp = QParams.make(3e-4, 0, dtype="int16"), QParams.make(1 / 32768, 0,
                                                                        dtype="int16")
    model = single_op("LOGISTIC", [T((1, 8), "int16", 3e-4, 0)],
                      [T((1, 8), "int16", 1 / 32768, 0)])
    _, delegated = run(model, np.zeros((1, 8), np.int16))
    assert not delegated
    assert np.array_equal(ours("sigmoid", in_qp, out_qp, "int16"),
                          tflite.table("sigmoid", in_qp, out_qp))


CONVERTED = [("LOGISTIC", (0.002605247776955366, 15), (1 / 256, -128), {}),
             ("TANH", (0.06489595770835876, 114), (1 / 128, 0), {}),
             ("LEAKY_RELU", (0.05, 3), (0.02, -5), {"alpha": 0.1}),
             ("HARD_SWISH", (0.05, 3), (0.02, -5), {}),
             ("ELU", (0.0020076087675988674, 99), (0.001330782426521182, -45), {})]


@pytest.mark.parametrize("op,x,y,options", CONVERTED, ids=[c[0] for c in CONVERTED])
def test_a_model_converted_for_the_default_interpreter_computes_what_it_computes(op, x, y,
                                                                                  options):
    """The whole conversion under profile tflite-xnnpack-x86: XNNPACK's table for the
    operators it takes, the reference kernel's for the others."""
    import canonqnn
    from canonqnn import reference
    from canonqnn.io import interface

    model = single_op(op, [T((1, 256), "int8", *x)], [T((1, 256), "int8", *y)], **options)
    want, _ = run(model, CODES.reshape(1, 256))
    mod, report = canonqnn.canonicalize(canonqnn.load(model), numerics="tflite-xnnpack-x86")
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    io = interface(mod)
    got = reference.evaluate(mod, {io.inputs[0].name: CODES.reshape(1, 256)}) \
        .outputs[io.outputs[0].name]
    assert np.array_equal(np.asarray(got).reshape(-1), want)


# (input scale, zero point, output scale, zero point) where XNNPACK's ELU table differs from the
# built-in kernel's (rint of a float sum against roundf then the zero point; found by comparing)
ELU_DIFFERING = [(0.0020076087675988674, 99, 0.001330782426521182, -45),
                 (0.12287925183773041, 105, 0.012518529780209064, -86)]


def test_int8_elu_is_delegated_and_equals_the_default_interpreter():
    """ELU has no reference kernel: the built-in kernel's table stands for the others."""
    rng = np.random.default_rng(3)
    params = [(i, o) for i, o, _ in random_params(rng, "elu", 300)]
    params += [(QParams.make(*p[:2]), QParams.make(*p[2:])) for p in ELU_DIFFERING]
    differing = 0
    for in_qp, out_qp in params:
        want, delegated = interpreter_table("elu", in_qp, out_qp, "int8")
        assert delegated
        got = ours("elu", in_qp, out_qp, "int8")
        assert np.array_equal(got, want), (in_qp, out_qp, np.sum(got != want))
        builtin, _ = interpreter_table("elu", in_qp, out_qp, "int8",
                                       resolver=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        assert np.array_equal(tflite.table("elu", in_qp, out_qp), builtin)
        differing += not np.array_equal(got, builtin)
    assert differing >= len(ELU_DIFFERING)


def test_uint8_elu_is_refused_by_the_interpreter_and_by_the_tables():
    in_qp, out_qp = QParams.make(0.05, 3), QParams.make(0.04, -20)
    with pytest.raises(RuntimeError, match="Only float32 and int8 is supported currently"):
        interpreter_table("elu", in_qp, out_qp, "uint8")
    with pytest.raises(NotEvaluable, match="ELU kernel takes float32 and int8 only"):
        ours("elu", in_qp, out_qp, "uint8")
