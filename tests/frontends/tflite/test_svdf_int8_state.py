"""An int8 SVDF whose activation state (and time weights) are int8, as TFLite Micro's keyword
models write them: TFLite's own kernel (ai-edge-litert) has no such path. It runs the model,
reading and writing the state as int16 whatever the tensor's type, so it works on twice the
tensor's bytes: the half past the end is other memory, and the outputs change from one fresh
interpreter to the next (measured: 50 of 50 inputs, first invocation, 8 interpreters, both
resolvers). canonqnn refuses such an SVDF, saying so."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

import canonqnn
from canonqnn.errors import UnsupportedError
from canonqnn.testing.tflite_writer import GraphWriter

N_IN, UNITS, RANK, MEMORY = 16, 8, 2, 5
FILTERS = UNITS * RANK
STATE_SCALE = 2.0 ** -3


def svdf_model(state_dtype: str = "int8", time_dtype: str = "int8", seed: int = 0) -> bytes:
    """int8 [1, 16] -> SVDF (rank 2, memory 5) -> int8 [1, 8]; the state's scale is the same
    whatever its type, so the kernel's int16 arithmetic is the same."""
    rng = np.random.default_rng(seed)
    g = GraphWriter()
    x = g.tensor("input", (1, N_IN), "int8", scale=0.05, zero_point=-3)
    real = rng.normal(0.0, 0.35, (FILTERS, N_IN))
    s_wf = np.float32(np.abs(real).max() / 127)
    wf = np.round(real / s_wf).astype(np.int8)
    qmax = np.iinfo(time_dtype).max
    real_time = rng.normal(0.0, 0.5, (FILTERS, MEMORY))
    s_wt = np.float32(np.abs(real_time).max() / qmax)
    wt = np.round(real_time / s_wt).astype(time_dtype)
    b_scale = np.float32(STATE_SCALE) * s_wt
    ins = [x, g.tensor("feature_w", wf.shape, "int8", wf, s_wf, 0),
           g.tensor("time_w", wt.shape, time_dtype, wt, s_wt, 0),
           g.tensor("b", (UNITS,), "int32", np.zeros(UNITS, np.int32), b_scale, 0),
           g.tensor("state", (1, MEMORY * FILTERS), state_dtype, scale=STATE_SCALE,
                    zero_point=0, is_variable=True)]
    y = g.tensor("output", (1, UNITS), "int8", scale=0.06, zero_point=2)
    g.op("SVDF", ins, [y], rank=RANK, fusedActivationFunction="RELU")
    return g.finish([x], [y])


def _state_after_one_run(model: bytes, x: np.ndarray, resolver) -> np.ndarray:
    interp = Interpreter(model_content=model, experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    state = next(d for d in interp.get_tensor_details() if d["name"] == "state")
    return interp.get_tensor(state["index"]).copy()


@pytest.mark.parametrize("resolver", [OpResolverType.BUILTIN_REF, OpResolverType.BUILTIN],
                         ids=["reference", "default"])
def test_tflites_kernel_writes_an_int8_state_as_int16(resolver):
    """After one run from the zero state, the int8 state's bytes hold, as int16, the first
    half of what the same SVDF with an int16 state stores: the kernel's int16 layout (the
    newest activation of each filter in the last of its MEMORY columns), not int8 values."""
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.integers(-128, 128, (1, N_IN)).astype(np.int8)
        as_int16 = _state_after_one_run(svdf_model("int16", "int16"), x, resolver)
        as_int8 = _state_after_one_run(svdf_model("int8", "int16"), x, resolver)
        half = as_int16.size // 2
        assert np.count_nonzero(as_int16[0, :half]) > 0
        np.testing.assert_array_equal(as_int8.view(np.int16)[0], as_int16[0, :half])


@pytest.mark.parametrize("time_dtype", ["int8", "int16"])
def test_an_int8_state_is_refused_saying_tflite_has_no_such_kernel(time_dtype):
    with pytest.raises(UnsupportedError, match=r"node '#0' \(op SVDF\): activation state of "
                                               r"type int8: TFLite's int8 SVDF kernel reads "
                                               r"and writes its state as int16"):
        canonqnn.load(svdf_model("int8", time_dtype))


def test_int8_time_weights_with_an_int16_state_are_refused():
    with pytest.raises(UnsupportedError, match=r"time weights of type int8: TFLite's int8 "
                                               r"SVDF kernel reads them as int16"):
        canonqnn.load(svdf_model("int16", "int8"))


def test_the_int16_form_converts():
    """(the same model with TFLite's int16 state and time weights imports, as
    tests/frontends/tflite/test_recurrent.py checks against the interpreter)"""
    _, report = canonqnn.canonicalize(canonqnn.load(svdf_model("int16", "int16")))
    assert any("SVDF" in i.reason for i in report.float_islands), report.summary()
