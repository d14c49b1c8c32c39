"""One example call of every canonical op, and small canonical modules, for the pattern tests.

``example(name)`` builds a typed call of ``relax.canonqnn.<name>`` through the op's public
builder, with distinct quantization parameters per role (``QX`` for the first quantized input,
``QB`` for the second, ``QOUT`` for the output) so a test can tell which attribute a parameter
was read from. A new canonical op needs an entry in ``EXAMPLES``: the pattern tests iterate the
registry and fail on an op without one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import (
    conv,
    conv_transpose,
    dynamic,
    elementwise,
    indexing,
    lut,
    matmul,
    mean,
    movement,
    pool,
    reduce,
    resize,
    select,
    softmax,
)
from canonqnn.qparams import QParams
from canonqnn.testing import onnx_models as models

QX = QParams.make(0.5, 3)          # first (or only) quantized input
QB = QParams.make(0.25, -5)        # second quantized input
QOUT = QParams.make(0.125, 7)      # output
ACT = (-100, 90)                   # integer clamp of ops that have one
X_SHAPE = (1, 4, 6, 6)             # NCHW activations of the examples
CONV_OUT = 8                       # output channels of the conv2d / conv2d_transpose examples
MATMUL_N = 10                      # columns of the matmul example's weight
# Per-output-channel weight parameters (one value each, distinct).
W_SCALES = (np.arange(1, CONV_OUT + 1, dtype=np.float32) / 64).astype(np.float32)
W_ZPS = np.zeros(CONV_OUT, np.int8)


@dataclass(frozen=True)
class Example:
    """A typed canonical call and what ``params_of`` should read from it."""

    call: Any
    inputs: tuple[tuple[Any, QParams], ...]   # (the quantized activation argument, its params)
    output: QParams | None                    # None: the result is not quantized
    weight: QParams | None = None             # as given to the builder (per tensor or channel)


def var(name: str, shape: Sequence[int], dtype: str = "int8") -> Any:
    return _tvm.Var(name, _tvm.tensor_type(shape, dtype))


def typed(call: Any) -> Any:
    """The call with its type inferred (as inside a module)."""
    return _tvm.BlockBuilder().normalize(call)


def weights(shape: Sequence[int], seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return _tvm.const(rng.integers(-127, 128, shape).astype(np.int8), "int8")


def table(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).permutation(256) - 128).astype(np.int8)


def conv2d_call(x: Any, *, out_channels: int = CONV_OUT, groups: int = 1,
                w_qp: QParams | None = None, act=ACT) -> Any:
    """A 3x3, pad 1 ``conv2d`` of ``x`` (NCHW)."""
    c_in = _tvm.shape_of(x)[1]
    if w_qp is None:
        w_qp = QParams.make(W_SCALES[:out_channels], W_ZPS[:out_channels], axis=0)
    return conv.conv2d(x, weights((out_channels, c_in // groups, 3, 3)),
                       np.arange(out_channels, dtype=np.int32), QX, w_qp, QOUT,
                       strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=groups,
                       act=act)


def _conv2d() -> Example:
    x = var("x", X_SHAPE)
    w_qp = QParams.make(W_SCALES, W_ZPS, axis=0)
    return Example(conv2d_call(x, w_qp=w_qp), ((x, QX),), QOUT, w_qp)


def _conv2d_transpose() -> Example:
    x = var("x", X_SHAPE)
    w_qp = QParams.make(0.03125, 2)  # per tensor
    call = conv_transpose.conv2d_transpose(
        x, weights((X_SHAPE[1], CONV_OUT, 3, 3)), np.zeros(CONV_OUT, np.int32), QX, w_qp, QOUT,
        strides=(2, 2), padding=(1, 1, 1, 1), output_padding=(1, 1), dilation=(1, 1), groups=1,
        act=ACT)
    return Example(call, ((x, QX),), QOUT, w_qp)


def _binary(op: Any) -> Callable[[], Example]:
    def make() -> Example:
        a, b = var("a", X_SHAPE), var("b", (1, X_SHAPE[1], 1, 1))
        if op is elementwise.SUB:
            call = elementwise.sub(a, b, QX, QB, QOUT, act=ACT, rounding="q31_double")
        elif op is elementwise.SQUARED_DIFFERENCE:
            call = elementwise.squared_difference(a, b, QX, QB, QOUT, act=ACT)
        else:
            call = elementwise.binary(op, a, b, QX, QB, QOUT, act=ACT, rounding="q31_double")
        return Example(call, ((a, QX), (b, QB)), QOUT)

    return make


def _extremum(op: Any) -> Callable[[], Example]:
    def make() -> Example:
        a, b = var("a", X_SHAPE), var("b", X_SHAPE)
        return Example(select.extremum(op, a, b, QX, QB, QOUT, act=ACT), ((a, QX), (b, QB)),
                       QOUT)

    return make


def _where() -> Example:
    cond, a, b = var("cond", X_SHAPE, "bool"), var("a", X_SHAPE), var("b", X_SHAPE)
    return Example(select.where(cond, a, b, QX, QB, QOUT, act=ACT), ((a, QX), (b, QB)), QOUT)


def _shared(build: Callable[[Any], Any], shape: Sequence[int] = X_SHAPE) -> Callable[[], Example]:
    """An op whose output keeps its input's parameters."""
    def make() -> Example:
        x = var("x", shape)
        return Example(build(x), ((x, QX),), QX)

    return make


def _requantizing(build: Callable[[Any], Any],
                  shape: Sequence[int] = X_SHAPE) -> Callable[[], Example]:
    """A single-input op with its own output parameters."""
    def make() -> Example:
        x = var("x", shape)
        return Example(build(x), ((x, QX),), QOUT)

    return make


def _matmul() -> Example:
    a = var("a", (1, 6, 16))
    b_qp = QParams.make(np.linspace(0.01, 0.1, MATMUL_N, dtype=np.float32),
                        np.zeros(MATMUL_N, np.int8), axis=0)
    call = matmul.matmul(a, weights((16, MATMUL_N)), None, QX, b_qp, QOUT, act=ACT)
    return Example(call, ((a, QX),), QOUT, b_qp)


def _concat() -> Example:
    xs = [var("x0", X_SHAPE), var("x1", (1, 2, 6, 6)), var("x2", (1, 1, 6, 6))]
    qps = [QX, QB, QParams.make(0.0625, -1)]
    return Example(movement.concat(xs, qps, QOUT, axis=1), tuple(zip(xs, qps)), QOUT)


def _argmax() -> Example:
    x = var("x", X_SHAPE)
    return Example(reduce.argmax(x, 1, False, False, QX), ((x, QX),), None)


def _gather() -> Example:
    x = var("x", X_SHAPE)
    return Example(indexing.gather(x, _tvm.const(np.array([0, 2], np.int64)), 1, QX),
                   ((x, QX),), QX)


def _dynamic_product(conv_form: bool) -> Callable[[], Example]:
    """A float input quantized at run time: no quantized input or output, weights only."""
    def make() -> Example:
        if conv_form:
            x, w_qp = var("x", X_SHAPE, "float32"), QParams.make(W_SCALES, W_ZPS, 0)
            call = dynamic.dynamic_conv2d(x, weights((CONV_OUT, 4, 3, 3)), W_SCALES, W_ZPS,
                                          strides=[1, 1], padding=[1, 1, 1, 1],
                                          dilation=[1, 1], groups=1)
        else:
            x, w_qp = var("x", (1, 5, 6), "float32"), QParams.make(0.25, -5)
            call = dynamic.dynamic_matmul(x, weights((6, MATMUL_N)), np.float32(0.25), np.int8(-5))
        return Example(typed(call), (), None, w_qp)
    return make


def _dynamic_result(op: Any) -> Callable[[], Example]:
    def make() -> Example:
        return Example(typed(op.call([var("x", X_SHAPE, "float32")], {})), (), None)
    return make


EXAMPLES: dict[str, Callable[[], Example]] = {
    "dynamic_matmul": _dynamic_product(False),
    "dynamic_conv2d": _dynamic_product(True),
    "dynamic_quantize": _dynamic_result(dynamic.DYNAMIC_QUANTIZE),
    "dynamic_scale": _dynamic_result(dynamic.DYNAMIC_SCALE),
    "dynamic_zero_point": _dynamic_result(dynamic.DYNAMIC_ZERO_POINT),
    "conv2d": _conv2d,
    "conv2d_transpose": _conv2d_transpose,
    "add": _binary(elementwise.ADD),
    "mul": _binary(elementwise.MUL),
    "sub": _binary(elementwise.SUB),
    "squared_difference": _binary(elementwise.SQUARED_DIFFERENCE),
    "pad": _shared(lambda x: indexing.pad(x, QX, [0, 0, 1, 1], [0, 0, 1, 1])),
    "gather": _gather,
    "strided_slice": _shared(lambda x: indexing.strided_slice(x, QX, [1], [0], [2], [2])),
    "tile": _shared(lambda x: indexing.tile(x, [1, 1, 2, 1], QX)),
    "broadcast_to": _shared(lambda x: indexing.broadcast_to(x, (2, 4, 6, 6), QX),
                            (1, 4, 1, 6)),
    "depth_to_space": _shared(lambda x: indexing.depth_to_space(x, 2, "DCR", QX)),
    "space_to_depth": _shared(lambda x: indexing.space_to_depth(x, 2, QX)),
    "lut": _requantizing(lambda x: lut.lut(x, table(), QX, QOUT, "sigmoid")),
    "matmul": _matmul,
    "reshape": _shared(lambda x: movement.reshape(x, (1, 144), QX)),
    "transpose": _shared(lambda x: movement.transpose(x, (0, 2, 3, 1), QX)),
    "max_pool2d": _shared(lambda x: movement.max_pool2d(
        x, QX, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1),
        ceil_mode=False)),
    "requantize": _requantizing(lambda x: movement.requantize(x, QX, QOUT, act=ACT)),
    "concat": _concat,
    "global_avg_pool2d": _requantizing(lambda x: pool.global_avg_pool2d(x, QX, QOUT, act=ACT)),
    "avg_pool2d": _requantizing(lambda x: pool.avg_pool2d(
        x, QX, QOUT, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False,
        count_include_pad=False, act=ACT)),
    "reduce_mean": _requantizing(lambda x: mean.reduce_mean(x, (2, 3), True, QX, QOUT,
                                                            act=ACT)),
    "reduce_max": _shared(lambda x: reduce.reduce(reduce.REDUCE_MAX, x, (1,), True, QX)),
    "reduce_min": _shared(lambda x: reduce.reduce(reduce.REDUCE_MIN, x, (2, 3), False, QX)),
    "argmax": _argmax,
    "resize2d": _requantizing(lambda x: resize.resize2d(
        x, (12, 12), QX, QOUT, method="nearest", coordinate_transformation_mode="asymmetric",
        nearest_mode="floor", act=ACT)),
    "maximum": _extremum(select.MAXIMUM),
    "minimum": _extremum(select.MINIMUM),
    "where": _where,
    "softmax": _requantizing(lambda x: softmax.softmax(x, QX, QOUT, axis=-1), (1, 10)),
}


def example(name: str) -> Example:
    """The example call of canonical op ``name``, typed."""
    if name not in EXAMPLES:
        raise KeyError(f"canonical op {name!r} has no example call in tests/_pattern_modules.py "
                       f"(EXAMPLES): add one so the pattern tests cover it")
    e = EXAMPLES[name]()
    return Example(typed(e.call), e.inputs, e.output, e.weight)


# ---------------------------------------------------------------- modules
def function_module(params: Sequence[Any], body: Callable[..., Sequence[Any]]) -> Any:
    """``main(params) = body(emit, *params)``: ``body`` emits calls through ``emit`` and returns
    the outputs (one, or several returned as a tuple)."""
    bb = _tvm.BlockBuilder()
    with bb.function("main", list(params)):
        with bb.dataflow():
            outs = list(body(bb.emit, *params))
            out = bb.emit_output(outs[0] if len(outs) == 1 else _tvm.relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def producer_then_lut(producer: str, table_values: np.ndarray, *,
                      leak: bool = False) -> Any:
    """``main`` = the example call of ``producer`` followed by a ``lut``; with ``leak`` the
    producer's result is also added to the lookup's (read twice)."""
    e = EXAMPLES[producer]()
    params = [a for a in e.call.args if isinstance(a, _tvm.Var)]

    def body(emit, *_):
        y = emit(e.call)
        z = emit(lut.lut(y, table_values, QOUT, QParams.make(0.0078125, -2), "sigmoid"))
        if leak:
            return [emit(elementwise.binary(elementwise.ADD, y, z, QOUT,
                                            QParams.make(0.0078125, -2), QOUT))]
        return [z]

    return function_module(params, body)


def mobilenet_v1_canonical() -> Any:
    """``models.mobilenet_v1_like`` quantized (QDQ, int8 activations, per-channel weights) and
    canonicalized: quantize, 9 conv2d (4 depthwise), global_avg_pool2d, reshape, matmul, add,
    dequantize."""
    import canonqnn

    model = models.quantize(models.mobilenet_v1_like(), fmt="qdq", activation="s8",
                            per_channel=True)
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert not report.float_islands
    return mod
