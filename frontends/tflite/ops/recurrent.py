"""UNIDIRECTIONAL_SEQUENCE_LSTM and SVDF, int8 with int16 state: named float islands.

TFLite's integer kernels for both keep internal values in int16 fixed point (LSTM: Q3.12 gate
pre-activations, gemmlowp sigmoid and tanh to Q0.15, a cell state of power-of-two scale; SVDF:
an int16 activation memory) and requantize them with their own multipliers. No canonical op
takes or produces int16 (docs/spec.md: int8 in, int8 out), so canonqnn writes these layers in
float Relax ops between the dequantized input and the quantize of the output, and the Report
names them float islands (docs/parity.md, "Recurrent layers").

The float ops follow the kernels' data flow, including every place the kernel *stores* a value
in a narrow integer type: such a value is rounded to its grid and clamped to its type's range
(``_on_grid``), because saturation and the int8 hidden state fed back into the next step change
results by far more than float rounding does (an int16 cell state of scale 2^-15 saturates at
+-1). What is left of the fixed-point arithmetic (gemmlowp's sigmoid/tanh approximations, Q31
multipliers, ties) differs by at most 1 LSB on a few percent of values, measured in
tests/frontends/tflite/test_recurrent.py.

Both operators are stateful: their state is a variable tensor that the interpreter sets to
real 0 when it allocates tensors and carries from one invocation to the next. The module is one
invocation from the initial state (the importer gives variables their initial content), the
results of a fresh interpreter or one after ``reset_all_variables()``; state carried across
invocations (streaming) is not an input or output of the module.
"""

from __future__ import annotations

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.qparams import QParams

from ..._base import Inputs
from .._context import ImportContext, Unsupported, Value, constant, tflite_op
from ..reader import Operator, Tensor

INT16_MIN, INT16_MAX = -32768, 32767
INT8_MIN, INT8_MAX = -128, 127
GATE_STEP = 2.0 ** -12  # Q3.12: the LSTM's gate pre-activations entering sigmoid and tanh

# UNIDIRECTIONAL_SEQUENCE_LSTM inputs (TFLite's lstm::full indices); -1 marks an absent one
LSTM_INPUT, LSTM_OUTPUT_STATE, LSTM_CELL_STATE = 0, 18, 19
LSTM_GATES = ("input", "forget", "cell", "output")
LSTM_INPUT_WEIGHTS = dict(zip(LSTM_GATES, (1, 2, 3, 4)))
LSTM_RECURRENT_WEIGHTS = dict(zip(LSTM_GATES, (5, 6, 7, 8)))
LSTM_PEEPHOLE = (9, 10, 11)
LSTM_BIASES = dict(zip(LSTM_GATES, (12, 13, 14, 15)))
LSTM_PROJECTION = (16, 17)
LSTM_LAYER_NORM = dict(zip(LSTM_GATES, (20, 21, 22, 23)))
LSTM_HIDDEN_INTERMEDIATE = 4
# TFLite's tanh of the cell state takes 15 + log2(cell scale) integer bits, and only 0 to 6
CELL_SCALE_EXPONENTS = range(-15, -8)

SVDF_INPUT, SVDF_FEATURE_WEIGHTS, SVDF_TIME_WEIGHTS, SVDF_BIAS, SVDF_STATE = range(5)


# ------------------------------------------------------------------------------- helpers
def _const(values) -> object:
    return _tvm.const(np.ascontiguousarray(np.asarray(values, np.float32)))


def _on_grid(ctx: ImportContext, real, step, lo: float, hi: float, offset: float = 0.0):
    """The integer a kernel stores for ``real`` (``round(real / step) + offset`` clamped to
    ``[lo, hi]``), as a float; ``step`` a float or a per-column array. Ties round to even
    where TFLite rounds them away from zero: the quotients here come from float sigmoid and
    tanh values or scales that are not powers of two, so an exact .5 is an accident."""
    units = ctx.emit(relax.op.round(ctx.emit(relax.op.divide(real, _const(step)))))
    if offset:
        units = ctx.emit(relax.op.add(units, _const(offset)))
    return ctx.emit(_tvm.clip_float(units, lo, hi))


def _scale(ctx: ImportContext, stored, zero_point: float, scale: float):
    """``(stored - zero_point) * scale``: the real value of stored integers."""
    if zero_point:
        stored = ctx.emit(relax.op.subtract(stored, _const(zero_point)))
    return ctx.emit(relax.op.multiply(stored, _const(scale)))


def _columns(ctx: ImportContext, x, begin: int, end: int, axis: int = 1):
    # Slices, not split: a tuple-valued float op has no per-op build in the reference
    # interpreter that checks builds (canonqnn.ops.reference)
    return ctx.emit(relax.op.strided_slice(x, axes=[axis], begin=[begin], end=[end]))


def _per_tensor(t, what: str) -> tuple[float, int]:
    """``(scale, zero_point)`` of a tensor the integer kernels read with one scale."""
    if t is None or t.scale is None:
        raise Unsupported(f"{what} is not quantized")
    if t.scale.size != 1:
        raise Unsupported(f"{what} is quantized per channel; TFLite's integer kernel reads "
                          "one scale")
    return float(t.scale[0]), int(t.zero_point[0])


def _int8_weight(ctx: ImportContext, w: Value, what: str):
    """The dequantized int8 weight (its own per-tensor scale), as a Relax value."""
    return ctx.emit(qdq.dequantize(_tvm.const(_checked_int8(w, what)), w.qparams))


def _stacked_weights_t(ctx: ImportContext, weights: list[Value], whats: list[str]):
    """``[K, sum of rows]``: the gates' weights ``[rows, K]`` stacked and transposed, one
    int8 constant dequantized with each gate's own scale (per column)."""
    data = np.concatenate([_checked_int8(w, what) for w, what in zip(weights, whats)])
    scales = np.concatenate([np.full(w.const.shape[0], w.qparams.scalar_scale, np.float32)
                             for w in weights])
    qp = QParams.make(scales, np.zeros(scales.size, np.int64), 1, "int8")
    return ctx.emit(qdq.dequantize(_tvm.const(np.ascontiguousarray(data.T)), qp))


def _checked_int8(w: Value, what: str) -> np.ndarray:
    """The int8 data of a weight TFLite's integer kernels read: per tensor, symmetric."""
    data = constant(w, what)
    if w.dtype != "int8" or w.qparams is None:
        raise Unsupported(f"{what} of type {w.dtype}{'' if w.qparams else ' (not quantized)'}; "
                          "int8 weights required (hybrid and float kernels are not supported)")
    if not w.qparams.per_tensor:
        raise Unsupported(f"{what} is quantized per channel; TFLite's integer kernel reads one "
                          "scale")
    if int(w.qparams.zero_point) != 0:
        raise Unsupported(f"{what} with zero point {int(w.qparams.zero_point)}; TFLite's "
                          "integer kernel ignores it (symmetric weights required)")
    return data.astype(np.int8)


def _int16_real(value: Value | None, what: str) -> np.ndarray:
    """The real values of an int16 constant, as float32: Q/DQ calls carry int8 and int32
    tensors only, so an int16 one enters the island as its float value."""
    data = constant(value, what)
    t = value.tensor
    if value.dtype != "int16" or t is None:
        raise Unsupported(f"{what} of type {value.dtype}; int16 required")
    scale, zero_point = _per_tensor(t, what)
    if zero_point != 0:
        raise Unsupported(f"{what} with zero point {zero_point}; TFLite's integer kernel "
                          "ignores it (symmetric int16 required)")
    return (data.astype(np.float64) * scale).astype(np.float32)


def _state(value: Value | None, what: str):
    """The stored content of a variable state tensor at the start of a run, and its tensor."""
    if value is None or value.tensor is None or not value.tensor.is_variable:
        raise Unsupported(f"{what} must be a variable tensor (the operator's state)")
    return value.const, value.tensor


def _int8_input(x: Value, kind: str) -> None:
    if x.dtype != "int8" or x.qparams is None:
        raise Unsupported(f"input of type {x.dtype}: only the int8 {kind} kernel is supported "
                          "(float and hybrid ones are not)")
    if not x.qparams.per_tensor:
        raise Unsupported("input quantized per channel")


# ----------------------------------------------------------------------------------- LSTM
@tflite_op("UNIDIRECTIONAL_SEQUENCE_LSTM")
def unidirectional_sequence_lstm_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                                    outputs: list[Tensor]) -> list[Value]:
    if len(inputs) not in (20, 24):
        raise Unsupported(f"{len(inputs)} inputs (TFLite's LSTM takes 20 or 24)")
    inputs = inputs + [None] * (24 - len(inputs))
    opts = op.options
    x = ctx.as_nhwc(inputs[LSTM_INPUT])
    _int8_input(x, "LSTM")
    if any(inputs[i] is not None for i in LSTM_PEEPHOLE):
        raise Unsupported("peephole (cell-to-gate) weights are not supported")
    if inputs[LSTM_PROJECTION[0]] is not None or inputs[LSTM_PROJECTION[1]] is not None:
        raise Unsupported("a projection layer is not supported")
    if opts is not None and opts.DiagonalRecurrentTensors():
        raise Unsupported("diagonal recurrent weights are not supported")
    if len(op.intermediates) != 5:
        raise Unsupported(f"{len(op.intermediates)} intermediate tensors; TFLite's int8 LSTM "
                          "needs 5 (the gates' and the hidden state's quantization)")
    time_major = bool(opts.TimeMajor()) if opts is not None else True
    if len(x.shape) != 3:
        raise Unsupported(f"input of rank {len(x.shape)} (3 required)")
    steps, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    cifg = inputs[LSTM_INPUT_WEIGHTS["input"]] is None
    gates = LSTM_GATES[1:] if cifg else LSTM_GATES
    layer_norm = inputs[LSTM_LAYER_NORM["forget"]] is not None
    cell_units = constant(inputs[LSTM_INPUT_WEIGHTS["forget"]], "input-to-forget weights").shape[0]

    s_in = x.qparams.scalar_scale
    # Gate pre-activations: int16 at the intermediate scales with layer normalization (its
    # input), Q3.12 without
    gate_steps = {g: (_per_tensor(op.intermediates[k], f"intermediate {k}")[0] if layer_norm
                      else GATE_STEP) for k, g in enumerate(LSTM_GATES)}
    hidden_scale, hidden_zp = _per_tensor(op.intermediates[LSTM_HIDDEN_INTERMEDIATE],
                                          "the hidden-state intermediate")
    h_stored0, h_tensor = _state(inputs[LSTM_OUTPUT_STATE], "the output state")
    c_stored0, c_tensor = _state(inputs[LSTM_CELL_STATE], "the cell state")
    state_scale, state_zp = _per_tensor(h_tensor, "the output state")
    cell_scale, cell_zp = _per_tensor(c_tensor, "the cell state")
    exponent = int(np.round(np.log2(cell_scale)))
    if c_tensor.dtype != "int16" or cell_zp != 0 or cell_scale != 2.0 ** exponent or \
            exponent not in CELL_SCALE_EXPONENTS:
        raise Unsupported(f"cell state {c_tensor.dtype} of scale {cell_scale} and zero point "
                          f"{cell_zp}; TFLite's int8 LSTM needs int16, zero point 0 and a "
                          "scale 2^k with -15 <= k <= -9")
    cell_clip = float(opts.CellClip()) if opts is not None else 0.0
    # The kernel's clip is int16(cell_clip / scale) (truncated); the type's range otherwise
    cell_bound = int(np.clip(np.float32(cell_clip) / np.float32(cell_scale), INT16_MIN,
                             INT16_MAX)) if cell_clip > 0 else None

    # Gate columns in the order [sigmoid gates..., cell gate]: one sigmoid and one tanh per
    # step. Input projections of every step at once; the recurrent one per step.
    order = [g for g in gates if g != "cell"] + ["cell"]
    w_in_t = _stacked_weights_t(ctx, [inputs[LSTM_INPUT_WEIGHTS[g]] for g in order],
                                [f"input-to-{g} weights" for g in order])
    w_rec_t = _stacked_weights_t(ctx, [inputs[LSTM_RECURRENT_WEIGHTS[g]] for g in order],
                                 [f"recurrent-to-{g} weights" for g in order])
    step_of_column = np.repeat([gate_steps[g] for g in order], cell_units)

    real_x = ctx.dq(x)
    if not time_major:
        real_x = ctx.emit(relax.op.permute_dims(real_x, [1, 0, 2]))
    real_x = ctx.emit(relax.op.reshape(real_x, (steps * batch, x.shape[2])))
    projected = ctx.emit(relax.op.matmul(real_x, w_in_t, out_dtype="float32"))
    if not layer_norm:
        # Without layer normalization the gate bias joins the input product (TFLite folds it
        # into that accumulator: scale input_scale * weight_scale)
        projected = ctx.emit(relax.op.add(projected, _lstm_biases(ctx, inputs, order, s_in,
                                                                 cell_units)))
    # The input and recurrent products are requantized to int16 separately, then added
    projected = _on_grid(ctx, projected, step_of_column, INT16_MIN, INT16_MAX)
    norm = _lstm_layer_norm_params(inputs, order, cell_units) if layer_norm else None

    h_real = _const((h_stored0.reshape(batch, -1).astype(np.float64) - state_zp) * state_scale)
    c_real = _const(c_stored0.reshape(batch, cell_units).astype(np.float64) * cell_scale)
    hidden = []
    for t in range(steps):
        x_part = _columns(ctx, projected, t * batch, (t + 1) * batch, axis=0)  # time-major
        h_part = ctx.emit(relax.op.matmul(h_real, w_rec_t, out_dtype="float32"))
        h_part = ctx.emit(relax.op.round(ctx.emit(relax.op.divide(h_part,
                                                                   _const(step_of_column)))))
        pre = ctx.emit(_tvm.clip_float(ctx.emit(relax.op.add(x_part, h_part)),
                                       INT16_MIN, INT16_MAX))
        if norm is None:
            pre = ctx.emit(relax.op.multiply(pre, _const(step_of_column)))
        else:
            pre = _lstm_normalized(ctx, pre, norm, batch, len(order), cell_units)
        c_real, stored = _lstm_step(ctx, pre, c_real, len(order), cell_units, cifg,
                                    cell_scale, cell_bound, hidden_scale, hidden_zp)
        hidden.append(stored)
        h_real = _scale(ctx, stored, state_zp, state_scale)

    # The output holds the hidden state's stored integers of every step
    stored = ctx.emit(relax.op.reshape(ctx.emit(relax.op.concat(hidden, axis=0)),
                                       (steps, batch, -1)))
    if not time_major:
        stored = ctx.emit(relax.op.permute_dims(stored, [1, 0, 2]))
    out = outputs[0]
    if out.dtype != "int8":
        raise Unsupported(f"output of type {out.dtype} (the int8 kernel writes int8)")
    out_scale, out_zp = _per_tensor(out, "the output")
    return [ctx.quantized(_scale(ctx, stored, out_zp, out_scale), out)]


def _gate_bias(inputs, gate: str, units: int) -> np.ndarray:
    b = inputs[LSTM_BIASES[gate]]
    data = constant(b, f"{gate} gate bias")
    if b.dtype != "int32" or data.size != units:
        raise Unsupported(f"{gate} gate bias of type {b.dtype} with {data.size} values "
                          f"(int32, {units} required)")
    return data.astype(np.int32).reshape(units)


def _lstm_biases(ctx: ImportContext, inputs, order, s_in: float, units: int):
    """The gates' int32 biases, stacked, each at its input product's scale."""
    scales = np.concatenate([np.full(units, np.float32(s_in) * np.float32(
        inputs[LSTM_INPUT_WEIGHTS[g]].qparams.scalar_scale), np.float32) for g in order])
    qp = QParams.make(scales, np.zeros(scales.size, np.int64), 0, "int32")
    data = np.concatenate([_gate_bias(inputs, g, units) for g in order])
    return ctx.emit(qdq.dequantize(_tvm.const(data), qp))


def _lstm_layer_norm_params(inputs, order, units: int) -> dict[str, np.ndarray]:
    """Per gate row: the coefficients and bias as the kernel applies them to the normalized
    pre-activation (real values; its bias is int32 of scale coefficient_scale / 1024), and
    the variance it substitutes below 1 (``max(1, int(10000 * coefficient_scale))``)."""
    gammas, betas, guards = [], [], []
    for g in order:
        coefficients = inputs[LSTM_LAYER_NORM[g]]
        gammas.append(_int16_real(coefficients, f"{g} layer-norm coefficients"))
        scale, _ = _per_tensor(coefficients.tensor, f"{g} layer-norm coefficients")
        bias = _gate_bias(inputs, g, units)
        betas.append((bias.astype(np.float64) * (scale / 1024)).astype(np.float32))
        guards.append(max(1, int(np.float32(10000) * np.float32(scale))))
    return {"gamma": np.stack(gammas), "beta": np.stack(betas),
            "guard": np.asarray(guards, np.float32).reshape(-1, 1)}


def _lstm_normalized(ctx: ImportContext, pre, norm, batch: int, gates: int, units: int):
    """The kernel's integer layer normalization of each gate's row of int16 pre-activations
    (mean and variance of the stored integers, the variance as ``sum_sq * floor(2^20/n) /
    2^20 - mean^2``), in float, the result stored as Q3.12."""
    rows = ctx.emit(relax.op.reshape(pre, (batch, gates, units)))
    mean = ctx.emit(relax.op.divide(ctx.emit(relax.op.sum(rows, axis=[2], keepdims=True)),
                                    _const(units)))
    squares = ctx.emit(relax.op.sum(ctx.emit(relax.op.multiply(rows, rows)), axis=[2],
                                    keepdims=True))
    variance = ctx.emit(relax.op.subtract(
        ctx.emit(relax.op.multiply(squares, _const((2 ** 20 // units) / 2 ** 20))),
        ctx.emit(relax.op.multiply(mean, mean))))
    variance = ctx.emit(relax.op.where(ctx.emit(relax.op.less(variance, _const(1.0))),
                                       _const(norm["guard"]), variance))
    normalized = ctx.emit(relax.op.divide(ctx.emit(relax.op.subtract(rows, mean)),
                                          ctx.emit(relax.op.sqrt(variance))))
    scaled = ctx.emit(relax.op.add(ctx.emit(relax.op.multiply(normalized,
                                                              _const(norm["gamma"]))),
                                   _const(norm["beta"])))
    scaled = _on_grid(ctx, scaled, GATE_STEP, INT16_MIN, INT16_MAX)
    return ctx.emit(relax.op.reshape(ctx.emit(relax.op.multiply(scaled, _const(GATE_STEP))),
                                     (batch, gates * units)))


def _lstm_step(ctx: ImportContext, pre, c_real, gates: int, units: int, cifg: bool,
               cell_scale: float, cell_bound: int | None, hidden_scale: float,
               hidden_zp: int):
    """One step from the gate pre-activations (columns: sigmoid gates, then the cell gate):
    the new cell state (real values on its int16 grid) and the hidden state's stored int8."""
    sig = ctx.emit(relax.op.sigmoid(_columns(ctx, pre, 0, (gates - 1) * units)))
    cell_gate = ctx.emit(relax.op.tanh(_columns(ctx, pre, (gates - 1) * units, gates * units)))
    sigmoids = [_columns(ctx, sig, k * units, (k + 1) * units) for k in range(gates - 1)]
    if cifg:  # coupled input and forget gates: input = 1 - forget
        forget, output = sigmoids
        input_gate = ctx.emit(relax.op.subtract(_const(1.0), forget))
    else:
        input_gate, forget, output = sigmoids
    # forget * cell and input * cell_gate are each rounded to the cell grid, then added with
    # int16 saturation (and the cell clip)
    lo, hi = (-cell_bound, cell_bound) if cell_bound is not None else (INT16_MIN, INT16_MAX)
    kept = _on_grid(ctx, ctx.emit(relax.op.multiply(forget, c_real)), cell_scale,
                    INT16_MIN, INT16_MAX)
    added = _on_grid(ctx, ctx.emit(relax.op.multiply(input_gate, cell_gate)), cell_scale,
                     INT16_MIN, INT16_MAX)
    cell = ctx.emit(_tvm.clip_float(ctx.emit(relax.op.add(kept, added)), lo, hi))
    c_real = ctx.emit(relax.op.multiply(cell, _const(cell_scale)))
    h = ctx.emit(relax.op.multiply(output, ctx.emit(relax.op.tanh(c_real))))
    stored = _on_grid(ctx, h, hidden_scale, INT8_MIN, INT8_MAX, offset=hidden_zp)
    return c_real, stored


# ----------------------------------------------------------------------------------- SVDF
@tflite_op("SVDF")
def svdf_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    if len(inputs) != 5:
        raise Unsupported(f"{len(inputs)} inputs (SVDF takes 5)")
    x = ctx.as_nhwc(inputs[SVDF_INPUT])
    _int8_input(x, "SVDF")
    if len(x.shape) != 2:
        raise Unsupported(f"input of rank {len(x.shape)} (2 required: batch, features)")
    rank = op.options.Rank() if op.options is not None else 0
    features = constant(inputs[SVDF_FEATURE_WEIGHTS], "feature weights")
    filters = features.shape[0]
    if rank <= 0 or filters % rank:
        raise Unsupported(f"rank {rank} for {filters} filters")
    units, batch = filters // rank, x.shape[0]
    state0, state = _state(inputs[SVDF_STATE], "the activation state")
    if state.dtype != "int16":
        # int8 state and time weights are TFLite Micro's form; the interpreter's kernel has
        # no such path and runs it on twice the tensor's bytes (measured: its results change
        # from one fresh interpreter to the next), so there is no result to match
        raise Unsupported(f"activation state of type {state.dtype}: TFLite's int8 SVDF kernel "
                          "reads and writes its state as int16 whatever the tensor's type (an "
                          "int8 state is TFLite Micro's kernel), past the end of this "
                          f"{state.dtype} tensor, so the interpreter's results are undefined; "
                          "int16 required")
    state_scale, state_zp = _per_tensor(state, "the activation state")
    if state_zp != 0 or np.any(state0 != 0):
        raise Unsupported("the activation state must start at 0 with zero point 0")
    if inputs[SVDF_TIME_WEIGHTS] is not None and inputs[SVDF_TIME_WEIGHTS].dtype != "int16":
        raise Unsupported(f"time weights of type {inputs[SVDF_TIME_WEIGHTS].dtype}: TFLite's "
                          "int8 SVDF kernel reads them as int16 whatever their type (int8 ones "
                          "are TFLite Micro's kernel); int16 required")
    time_weights = _int16_real(inputs[SVDF_TIME_WEIGHTS], "time weights")
    if time_weights.ndim != 2 or time_weights.shape[0] != filters:
        raise Unsupported(f"time weights of shape {list(time_weights.shape)} for {filters} "
                          "filters")
    time_scale, _ = _per_tensor(inputs[SVDF_TIME_WEIGHTS].tensor, "time weights")

    # The newest activation: the feature product stored as int16 in the state's last column
    weights = _int8_weight(ctx, inputs[SVDF_FEATURE_WEIGHTS], "feature weights")
    activation = ctx.emit(relax.op.matmul(
        ctx.dq(x), ctx.emit(relax.op.permute_dims(weights, [1, 0])), out_dtype="float32"))
    activation = _on_grid(ctx, activation, state_scale, INT16_MIN, INT16_MAX)
    activation = ctx.emit(relax.op.multiply(activation, _const(state_scale)))
    # From the zero state every older column of the memory is 0: only the newest time weight
    # counts. Each unit sums its rank filters.
    y = ctx.emit(relax.op.multiply(activation, _const(time_weights[:, -1])))
    y = ctx.emit(relax.op.sum(ctx.emit(relax.op.reshape(y, (batch, units, rank))), axis=[2]))
    if inputs[SVDF_BIAS] is not None:
        bias = inputs[SVDF_BIAS]
        data = constant(bias, "bias")
        if bias.dtype != "int32" or data.size != units:
            raise Unsupported(f"bias of type {bias.dtype} with {data.size} values (int32, "
                              f"{units} required)")
        # Added to the accumulator of state x time weights: scale state_scale * time_scale
        qp = QParams.make(np.float32(state_scale) * np.float32(time_scale), 0, None, "int32")
        y = ctx.emit(relax.op.add(y, ctx.emit(qdq.dequantize(
            _tvm.const(data.astype(np.int32).reshape(units)), qp))))
    # The int8 kernel requires the fused activation RELU and does not apply it (measured)
    return [ctx.quantized(y, outputs[0])]
