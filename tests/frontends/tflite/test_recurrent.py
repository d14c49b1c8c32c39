"""int8 UNIDIRECTIONAL_SEQUENCE_LSTM and SVDF: named float islands within a measured bound of
the TFLite interpreter's reference kernels (docs/parity.md, "Recurrent layers").

The models are written as TensorFlow's converter writes full-integer ones: int8 per-tensor
symmetric weights, int32 biases at their accumulators' scales, variable state tensors (int8
hidden state at the output's parameters, int16 cell state and SVDF memory with power-of-two
scales) and the LSTM's five intermediate tensors. The bound asserted is the measured one:
``pytest -m slow tests/frontends/tflite/test_recurrent.py -s`` prints it over 5,000 inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from _tflite import run_tflite
from canonqnn.errors import UnsupportedError
from canonqnn.testing.tflite_writer import GraphWriter

STEPS, FEATURES, UNITS, CLASSES = 8, 6, 8, 4
LSTM_REASON = "TFLite's int8 LSTM keeps its gates, cell and hidden state in int16"
SVDF_REASON = "TFLite's int8 SVDF stores its feature activations as int16"
# Per output: (max |diff| in LSB, fraction of values differing) asserted; measured over 5,000
# inputs per model by test_measured_bound (docs/parity.md). The recurrent layers' outputs and
# the logits after them differ by one step at most; softmax turns logits one step (0.08) off
# each way into probabilities at most p(1 - p) * 2 * 0.08 <= 0.04 apart, 10.24 steps of 1/256.
BOUNDS = {"lstm_sequence": (1, 0.025), "logits": (1, 0.015), "probabilities": (11, 0.035),
          "svdf_1": (1, 0.01)}


def _weights(rng, shape, spread=0.35):
    """Symmetric per-tensor int8 weights and their scale, as the converter quantizes them."""
    real = rng.normal(0.0, spread, shape)
    scale = np.float32(np.abs(real).max() / 127)
    return np.clip(np.round(real / scale), -127, 127).astype(np.int8), scale


def _bias(rng, real_spread, scale, n, mean=0.0):
    return np.round(rng.normal(mean, real_spread, n) / scale).astype(np.int32)


def lstm_model(layer_norm=False, cifg=False, time_major=False, cell_exponent=-11,
               cell_clip=0.0, seed=0, extra=None, input_dtype="int8") -> bytes:
    """int8 [1, STEPS, FEATURES] -> UNIDIRECTIONAL_SEQUENCE_LSTM -> last step
    (STRIDED_SLICE) -> FULLY_CONNECTED -> SOFTMAX; outputs the probabilities, the logits and
    the LSTM's sequence. ``extra``: {LSTM input index: (shape, dtype, data, scale)}, constant
    inputs the converter refuses (peephole, projection)."""
    rng = np.random.default_rng(seed)
    g = GraphWriter()
    s_in, zp_in = 0.05, -3
    s_h, zp_h = 2.0 / 255, -2  # the hidden state: output, output state, intermediate 4
    seq_shape = (STEPS, 1, UNITS) if time_major else (1, STEPS, UNITS)
    quantized = input_dtype == "int8"
    x = g.tensor("input", (STEPS, 1, FEATURES) if time_major else (1, STEPS, FEATURES),
                 input_dtype, scale=s_in if quantized else None, zero_point=zp_in)
    gates = ("input", "forget", "cell", "output")
    present = [k for k in gates if not (cifg and k == "input")]
    ins = {0: x}
    w_scales, ln_scales = {}, {}
    for k, gate in enumerate(gates):
        for base, what, cols in ((1, "w", FEATURES), (5, "r", UNITS)):
            if gate in present:
                q, s = _weights(rng, (UNITS, cols))
                w_scales[gate, what] = s
                ins[base + k] = g.tensor(f"{gate}_{what}", q.shape, "int8", q, s, 0)
    for k, gate in enumerate(gates):
        if gate not in present:
            continue
        if layer_norm:
            ln_scales[gate] = np.float32(1.2 / 32767)
            coef = rng.integers(20000, 32767, UNITS).astype(np.int16)
            ins[20 + k] = g.tensor(f"{gate}_ln", (UNITS,), "int16", coef, ln_scales[gate], 0)
            b_scale = np.float32(ln_scales[gate] / 1024)  # the kernel's layer-norm bias scale
        else:
            b_scale = np.float32(s_in) * w_scales[gate, "w"]
        b = _bias(rng, 0.2, b_scale, UNITS, mean=1.0 if gate == "forget" else 0.0)
        ins[12 + k] = g.tensor(f"{gate}_b", (UNITS,), "int32", b, b_scale, 0)
    ins[18] = g.tensor("output_state", (1, UNITS), "int8", scale=s_h, zero_point=zp_h,
                       is_variable=True)
    ins[19] = g.tensor("cell_state", (1, UNITS), "int16", scale=2.0 ** cell_exponent,
                       zero_point=0, is_variable=True)
    for index, (shape, dtype, data, scale) in (extra or {}).items():
        ins[index] = g.tensor(f"input_{index}", shape, dtype, data, scale, 0)
    # Gate pre-activations: Q3.12 without layer norm (the kernel ignores these then), the
    # calibrated int16 ranges of the matmul sums with it; then the hidden state's parameters
    intermediates = [g.tensor(f"intermediate_{k}", (1,), "int16",
                              scale=(0.0004 * (k + 1) if layer_norm else 2.0 ** -12),
                              zero_point=0) for k in range(4)]
    intermediates.append(g.tensor("intermediate_4", (1,), "int8", scale=s_h, zero_point=zp_h))
    seq = g.tensor("lstm_sequence", seq_shape, "int8", scale=s_h, zero_point=zp_h)
    g.op("UNIDIRECTIONAL_SEQUENCE_LSTM", [ins.get(i, -1) for i in range(24)], [seq],
         intermediates=intermediates, fusedActivationFunction="TANH", cellClip=cell_clip,
         projClip=0.0, timeMajor=time_major)
    last = g.tensor("last_step", (1, UNITS), "int8", scale=s_h, zero_point=zp_h)
    begin, end = ((STEPS - 1, 0, 0), (STEPS, 1, UNITS)) if time_major else \
        ((0, STEPS - 1, 0), (1, STEPS, UNITS))
    g.op("STRIDED_SLICE", [seq, _ints(g, "begin", begin), _ints(g, "end", end),
                           _ints(g, "strides", (1, 1, 1))], [last],
         shrinkAxisMask=1 if time_major else 2)
    logits = _fully_connected(g, rng, last, s_h, CLASSES, 0.08, 3)
    probs = g.tensor("probabilities", (1, CLASSES), "int8", scale=1 / 256, zero_point=-128)
    g.op("SOFTMAX", [logits], [probs], beta=1.0)
    return g.finish([x], [probs, logits, seq])


def _ints(g, name, values):
    return g.tensor(name, (len(values),), "int32", np.asarray(values, np.int32))


def _fully_connected(g, rng, x, s_x, n_out, s_out, zp_out, n_in=UNITS, name="logits"):
    q, s = _weights(rng, (n_out, n_in))
    w = g.tensor(f"{name}_w", q.shape, "int8", q, s, 0)
    b_scale = np.float32(s_x) * s
    b = g.tensor(f"{name}_b", (n_out,), "int32", _bias(rng, 0.1, b_scale, n_out), b_scale, 0)
    y = g.tensor(name, (1, n_out), "int8", scale=s_out, zero_point=zp_out)
    g.op("FULLY_CONNECTED", [x, w, b], [y], fusedActivationFunction="NONE")
    return y


def _svdf(g, rng, x, s_x, n_in, units, rank, memory, s_out, zp_out, name):
    filters = units * rank
    wf, s_wf = _weights(rng, (filters, n_in))
    real_time = rng.normal(0.0, 0.5, (filters, memory))
    s_wt = np.float32(np.abs(real_time).max() / 32767)
    wt = np.clip(np.round(real_time / s_wt), -32767, 32767).astype(np.int16)
    s_state = 2.0 ** -10  # the int16 memory: feature activations within +-32
    b_scale = np.float32(s_state) * s_wt
    ins = [x, g.tensor(f"{name}_feature_w", wf.shape, "int8", wf, s_wf, 0),
           g.tensor(f"{name}_time_w", wt.shape, "int16", wt, s_wt, 0),
           g.tensor(f"{name}_b", (units,), "int32", _bias(rng, 0.3, b_scale, units), b_scale, 0),
           g.tensor(f"{name}_state", (1, memory * filters), "int16", scale=s_state,
                    zero_point=0, is_variable=True)]
    y = g.tensor(name, (1, units), "int8", scale=s_out, zero_point=zp_out)
    # TFLite's int8 SVDF requires RELU and does not apply it
    g.op("SVDF", ins, [y], rank=rank, fusedActivationFunction="RELU")
    return y


def svdf_model(seed=0) -> bytes:
    """int8 [1, 16] -> SVDF (rank 2) -> SVDF (rank 1) -> FULLY_CONNECTED; outputs the logits
    and the first SVDF's output."""
    rng = np.random.default_rng(seed)
    g = GraphWriter()
    x = g.tensor("input", (1, 16), "int8", scale=0.05, zero_point=-3)
    first = _svdf(g, rng, x, 0.05, 16, 8, 2, 5, 0.06, 2, "svdf_1")
    second = _svdf(g, rng, first, 0.06, 8, 6, 1, 4, 0.05, -1, "svdf_2")
    logits = _fully_connected(g, rng, second, 0.05, CLASSES, 0.08, 3, n_in=6)
    return g.finish([x], [logits, first])


def _differences(model, runs: int, seed: int = 0) -> dict[str, tuple[int, int, int]]:
    """Per output of ``model``: (differing values, values, max |diff| in LSB) of the canonical
    build against the reference kernels, over ``runs`` uniform random int8 inputs. Built once;
    a fresh interpreter per run (its variables start at their initial state)."""
    mod, _ = canonqnn.canonicalize(canonqnn.load(model))
    built = canonqnn.build(mod)
    io = built.io
    rng = np.random.default_rng(seed)
    found = {o.name: (0, 0, 0) for o in io.outputs}
    for _ in range(runs):
        x = rng.integers(-128, 128, io.inputs[0].shape).astype(np.int8)
        got = built.run({io.inputs[0].name: x})
        for info, ref in zip(io.outputs, run_tflite(model, [x])):
            diff = np.abs(got[info.name].astype(int) - ref.astype(int))
            n, total, worst = found[info.name]
            found[info.name] = (n + int((diff > 0).sum()), total + diff.size,
                                max(worst, int(diff.max())))
    return found


def _check(found):
    for name, (differing, total, worst) in found.items():
        max_lsb, max_fraction = BOUNDS[name]
        assert worst <= max_lsb and differing <= max_fraction * total, (name, found)


def _named_islands(model, reason):
    _, report = canonqnn.canonicalize(canonqnn.load(model))
    return [i for i in report.float_islands if reason in i.reason], report


LSTM_CASES = {
    "plain": {},
    "layer_norm": dict(layer_norm=True),
    "cifg_time_major_cell_clip": dict(cifg=True, time_major=True, cell_clip=3.0),
    # a cell state of scale 2^-15 saturates at +-1: the island must clamp where TFLite does
    "saturating_cell": dict(cell_exponent=-15),
}


# "plain" is "saturating_cell" with the default cell exponent, which "layer_norm" and
# "cifg_time_major_cell_clip" use: it runs under -m slow.
SLOW_LSTM_CASES = {"plain"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow)
                                  if c in SLOW_LSTM_CASES else c for c in sorted(LSTM_CASES)])
def test_lstm_keyword_spotting_model_is_a_named_float_island_within_the_bound(case):
    model = lstm_model(**LSTM_CASES[case])
    named, report = _named_islands(model, LSTM_REASON)
    assert len(named) == 1, report.summary()
    # the slice, FULLY_CONNECTED and SOFTMAX after it are canonical ops
    assert {"strided_slice", "matmul", "softmax"} <= set(report.canonical_ops), \
        report.summary()
    _check(_differences(model, runs=300))


def test_svdf_model_is_two_named_float_islands_within_the_bound():
    model = svdf_model()
    named, report = _named_islands(model, SVDF_REASON)
    assert len(named) == 2, report.summary()
    assert "matmul" in report.canonical_ops, report.summary()
    _check(_differences(model, runs=1000))


def test_parity_starts_every_run_from_the_initial_state():
    """The interpreter carries its variables from one invoke to the next; parity resets them,
    as the module computes one run from the initial state (an SVDF with memory would otherwise
    read the previous run's activations)."""
    result = canonqnn.parity(svdf_model(), runs=6)
    for out in result.outputs:
        assert out.max_abs_diff <= BOUNDS[out.name][0], result.summary()
    assert sum(SVDF_REASON in i["reason"] for i in result.float_islands) == 2, result.summary()


MEASURED = {**{f"lstm_{k}": (lambda v=v: lstm_model(**v)) for k, v in LSTM_CASES.items()},
            "svdf": svdf_model}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(MEASURED))
def test_measured_bound(case):
    """The numbers docs/parity.md quotes: 5,000 inputs per model."""
    found = _differences(MEASURED[case](), runs=5000, seed=1)
    for name, (differing, total, worst) in found.items():
        print(f"\n{case} {name}: {differing} of {total} differ ({differing / total:.2%}), "
              f"max {worst} LSB")
    _check(found)


REFUSED = {
    # (what the error names, lstm_model arguments)
    "peephole": dict(extra={9: ((UNITS,), "int16", np.ones(UNITS, np.int16), 1e-4)}),
    "projection": dict(extra={16: ((UNITS, UNITS), "int8", np.ones((UNITS, UNITS), np.int8),
                                   0.01)}),
    "hybrid": dict(input_dtype="float32"),
    "cell state": dict(cell_exponent=-8),  # TFLite's cell tanh takes at most 6 integer bits
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_unsupported_lstm_variants_are_refused_with_the_reason(what):
    with pytest.raises(UnsupportedError, match=what):
        canonqnn.load(lstm_model(**REFUSED[what]))
