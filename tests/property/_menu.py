"""The op menu of the random-graph generator: one small function per op kind.

Each function ``build(draw, d, x)`` draws the op's parameters, picks further operands among the
draft's tensors (joins) or makes constants, writes DequantizeLinear -> op -> QuantizeLinear
into the draft ``d`` and records the op. ``accepts(d, x)`` says whether it can take ``x`` as
its first operand. Entries marked ``pending`` are ops canonqnn is gaining: the test includes
them only once canonqnn imports and canonicalizes them (``_graphs.support``).

``TOLERANCES`` lists the ops documented as not always bit-exact with onnxruntime and their
bound (docs/parity.md, docs/spec.md); every other op must match bit for bit. The outputs of
those ops are never consumed: later ops would amplify their difference beyond the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import _boundaries
from _draft import (
    MAX_ELEMENTS,
    Draft,
    QTensor,
    Tolerance,
    clip_is_redundant,
    draw_qparams,
    draw_range,
    draw_seed,
    f32,
    folded_activation,
)

TOLERANCES = {
    # docs/spec.md (conv2d_transpose): onnxruntime runs QDQ ConvTranspose in float32 (MLAS
    # SGEMM + col2im); canonqnn accumulates exactly: 1 LSB, only where the exact value is
    # within float32 error of a rounding boundary (checked element by element: how many
    # elements are that close depends on the scales, docs/random-graphs.md).
    "ConvTranspose": Tolerance(1, "docs/spec.md (conv2d_transpose)",
                               _boundaries.conv_transpose),
    # ReduceMean left this table when canonqnn.reduce_mean started reproducing onnxruntime's
    # float32 summation order (docs/parity.md; before: 1 LSB on up to 11 of 5,120 outputs).
}


@dataclass(frozen=True)
class OpKind:
    name: str
    build: Callable[..., None]
    accepts: Callable[[Draft, QTensor], bool]
    onnx_ops: tuple[str, ...]
    pending: bool = False  # canonqnn support is being added: gated on a probe
    min_opset: int = 13
    probe_shape: tuple[int, ...] = (1, 4, 4, 4)
    weight: int = 1  # relative chance of being drawn among the entries that accept x


# ---------------------------------------------------------------- shared helpers
def representable(d: Draft, t: QTensor) -> np.ndarray:
    """Every real value ``t`` can hold."""
    return (np.arange(d.qmin, d.qmax + 1) - t.zp).astype(np.float32) * np.float32(t.scale)


def same_or_new(draw, d: Draft, x: QTensor, amp: float, *, noop: bool = False):
    """Data movement: the input's own parameters (what onnxruntime's quantizer writes, and
    what lets onnxruntime run the op on integers) three times in four, else new ones.

    Always the input's for an op that leaves the shape as it is (``noop``): onnxruntime may
    delete it, and the Q -> DQ -> Q -> DQ left behind it would be merged into one pair with
    new parameters (docs/parity.md)."""
    if noop or draw(st.integers(0, 3)) < 3:
        return x.scale, x.zp
    return draw_qparams(draw, d, *draw_range(draw, amp))


def rank(*ranks: int) -> Callable[[Draft, QTensor], bool]:
    return lambda d, x: x.rank in ranks


def any_rank(d: Draft, x: QTensor) -> bool:
    return True


def window_out(size: int, k: int, s: int, dil: int, p0: int, p1: int, ceil_mode: bool) -> int:
    """Output length of a pooling/conv window (onnxruntime's rule, ceil_mode included)."""
    span = size + p0 + p1 - dil * (k - 1) - 1
    if span < 0:
        return 0
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p0:
        out -= 1
    return out


def draw_ceil_mode(draw, attrs: dict, h: int, w: int) -> int:
    """ceil_mode, unless the last window would start in the end padding: onnxruntime's kernel
    then drops it but ONNX shape inference (which sizes onnxruntime's buffers) does not, and
    onnxruntime fails at run time."""
    if not draw(st.booleans()):
        return 0
    for i, size in enumerate((h, w)):
        k, s = attrs["kernel_shape"][i], attrs["strides"][i]
        dil = attrs.get("dilations", [1, 1])[i]
        p0, p1 = attrs["pads"][i], attrs["pads"][i + 2]
        span = size + p0 + p1 - dil * (k - 1) - 1
        if ((span + s - 1) // s) * s >= size + p0:
            return 0
    return 1


def draw_window(draw, h: int, w: int, *, dilations: bool, auto_pad: bool):
    """Kernel, strides, dilations and padding of a 2-D window with output size >= 1."""
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    s = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    dil = list(draw(st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2)]))) if dilations else [1, 1]
    mode = draw(st.sampled_from(["pads", "pads", "SAME_UPPER", "SAME_LOWER", "VALID"])) \
        if auto_pad else "pads"
    pads = [draw(st.integers(0, kk - 1)) for kk in k + k] if mode == "pads" else [0, 0, 0, 0]
    if mode.startswith("SAME"):  # onnxruntime's QLinearConv rejects dilated SAME padding
        dil = [1, 1]
    for i, size in enumerate((h, w)):
        if window_out(size, k[i], s[i], dil[i], pads[i], pads[i + 2], False) < 1:
            k[i], dil[i], pads[i], pads[i + 2] = 1, 1, 0, 0  # pads stay below the kernel
    if mode.startswith("SAME"):
        out = [-(-h // s[0]), -(-w // s[1])]
    else:
        out = [window_out(size, k[i], s[i], dil[i], pads[i], pads[i + 2], False)
               for i, size in enumerate((h, w))]
    attrs = dict(kernel_shape=k, strides=s)
    if dilations:
        attrs["dilations"] = dil
    attrs.update({"auto_pad": mode} if mode != "pads" else {"pads": pads})
    return attrs, out


def int8_weights(draw, rng: np.random.Generator, shape) -> tuple[np.ndarray, str]:
    style = draw(st.sampled_from(["uniform", "extremes"]))
    if style == "extremes":
        return rng.choice(np.array([-128, -127, 127], np.int8), shape), style
    return rng.integers(-127, 128, shape).astype(np.int8), style


def weight_scales(draw, rng: np.random.Generator, channels: int) -> np.ndarray:
    """One float32 scale (0-d) or one per channel, log-uniform around 2^-7."""
    base = 2.0 ** draw(st.floats(-10.0, -4.0))
    if draw(st.booleans()):
        return np.asarray(base * 2.0 ** rng.uniform(-1, 1, channels), np.float32)
    return np.float32(base)


def int32_bias(draw, rng: np.random.Generator, channels: int) -> np.ndarray | None:
    if not draw(st.booleans()):
        return None
    bound = 2 ** draw(st.integers(3, 18))
    return rng.integers(-bound, bound + 1, channels).astype(np.int32)


def product_amp(x: QTensor, w_scale: np.ndarray, k: int) -> float:
    """Magnitude of sum_k x * w for uniform-ish x and int8 weights."""
    return float(x.amp * float(np.mean(w_scale)) * 127 * math.sqrt(k) * 0.8)


def const_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes of a constant operand that broadcast to ``shape``."""
    out = [(), (shape[-1],), (1,) * len(shape), tuple(shape)]
    if len(shape) == 4:
        out += [(shape[1], 1, 1), (1, shape[1], 1, 1)]
    return out


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def partner_or_const(draw, d: Draft, x: QTensor):
    """The second operand of a binary op: an earlier tensor whose shape broadcasts with x's
    (a join; x itself included), or a quantized constant. Returns (float name, shape, amp,
    tensor or None)."""
    partners = [t for t in reversed(d.usable())
                if (s := broadcast(x.shape, t.shape)) and int(np.prod(s)) <= MAX_ELEMENTS]
    if partners and draw(st.booleans()):
        y = draw(st.sampled_from(partners))
        return y, y.shape, y.amp, y
    shape = draw(st.sampled_from(const_shapes(x.shape)))
    rng = draw_seed(draw)
    amp = x.amp * 2.0 ** draw(st.floats(-2.0, 1.0))
    scale, zp = draw_qparams(draw, d, *draw_range(draw, amp), jitter=False)
    q = rng.integers(d.qmin, d.qmax + 1, shape)
    return d.quantized_const(q, scale, zp), shape, amp, None


# ---------------------------------------------------------------- compute ops
def conv(draw, d: Draft, x: QTensor) -> None:
    n, c, h, w = x.shape
    groups = [1] + ([c] if c > 1 else []) + [g for g in range(2, c) if c % g == 0]
    g = draw(st.sampled_from(groups))
    if g == c and c > 1:
        o = c * draw(st.integers(1, 2))
    else:
        o = g * draw(st.integers(1, max(1, 8 // g)))
    attrs, (oh, ow) = draw_window(draw, h, w, dilations=True, auto_pad=True)
    kh, kw = attrs["kernel_shape"]
    rng = draw_seed(draw)
    weights, style = int8_weights(draw, rng, (o, c // g, kh, kw))
    ws = weight_scales(draw, rng, o)
    bias = int32_bias(draw, rng, o)
    inputs = [d.dq(x), d.weight(weights, ws, axis=0)]
    if bias is not None:
        inputs.append(d.bias(bias, np.float32(x.scale) * ws))
    amp = product_amp(x, ws, c // g * kh * kw)
    act, scale, zp = folded_activation(draw, d, *draw_range(draw, amp))
    y = d.activation(d.emit("Conv", inputs, group=g, **attrs), act)
    params = dict(out_channels=o, group=g, **attrs, per_channel=bool(ws.ndim),
                  bias=bias is not None, weights=style, act=act)
    d.quantize(y, "Conv", [x], params, (n, o, oh, ow), scale, zp, amp)


def matmul(draw, d: Draft, x: QTensor) -> None:
    """At opset >= 21 with uint8 activations the weights stay within [-64, 64]: onnxruntime
    1.31 then fuses to QLinearMatMul-21, which its session.x64quantprecision rewrite (int8
    weights to uint8) does not match (it lists since-version 10 only), so its AVX2 u8 x s8
    kernel saturates pair sums to int16 (docs/random-graphs.md, "Findings")."""
    k = x.shape[-1]
    n = draw(st.integers(1, 8))
    rng = draw_seed(draw)
    weights, style = int8_weights(draw, rng, (k, n))
    if d.dtype == "uint8" and d.opset >= 21:
        weights = np.clip(weights, -64, 64).astype(np.int8)
    ws = weight_scales(draw, rng, n)
    amp = product_amp(x, ws, k)
    act, scale, zp = folded_activation(draw, d, *draw_range(draw, amp))
    y = d.activation(d.emit("MatMul", [d.dq(x), d.weight(weights, ws, axis=1)]), act)
    params = dict(n=n, per_channel=bool(ws.ndim), weights=style, act=act)
    d.quantize(y, "MatMul", [x], params, (*x.shape[:-1], n), scale, zp, amp)


def gemm(draw, d: Draft, x: QTensor) -> None:
    trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
    m, k = x.shape[::-1] if trans_a else x.shape
    n = draw(st.integers(1, 8))
    rng = draw_seed(draw)
    weights, style = int8_weights(draw, rng, (n, k) if trans_b else (k, n))
    ws = weight_scales(draw, rng, n)
    bias = int32_bias(draw, rng, n)
    # With a bias, alpha is 1 (as onnxruntime's quantizer writes it): Gemm with alpha != 1 and a
    # bias is a known gap, left as a named float island (docs/random-graphs.md, Findings 2).
    alpha = draw(st.sampled_from([1.0] if bias is not None else [1.0, 0.5, 2.0, 0.3, 1.7]))
    inputs = [d.dq(x), d.weight(weights, ws, axis=0 if trans_b else 1)]
    if bias is not None:
        inputs.append(d.bias(bias, np.float32(x.scale) * ws * np.float32(alpha)))
    amp = product_amp(x, ws, k) * alpha
    act, scale, zp = folded_activation(draw, d, *draw_range(draw, amp))
    attrs = dict(alpha=alpha, beta=1.0, transA=int(trans_a), transB=int(trans_b))
    y = d.activation(d.emit("Gemm", inputs, **attrs), act)
    params = dict(n=n, **attrs, per_channel=bool(ws.ndim), bias=bias is not None,
                  weights=style, act=act)
    d.quantize(y, "Gemm", [x], params, (m, n), scale, zp, amp)


def binary(op_type: str, *, activation: bool = True,
           amp: Callable[[float, float], float] = lambda a, b: a + b):
    """Add / Mul / Sub / Min / Max with a joined tensor or a constant."""
    def build(draw, d: Draft, x: QTensor) -> None:
        y, y_shape, y_amp, y_tensor = partner_or_const(draw, d, x)
        xf = d.dq(x)
        yf = d.dq(y) if y_tensor is not None else y
        swap = draw(st.booleans())
        out_amp = amp(x.amp, y_amp)
        act, scale, zp = folded_activation(draw, d, *draw_range(draw, out_amp),
                                           allow=activation)
        v = d.activation(d.emit(op_type, [yf, xf] if swap else [xf, yf]), act)
        operands = [x] + ([y_tensor] if y_tensor is not None else [])
        params = dict(other=y_tensor.name if y_tensor else f"const{list(y_shape)}",
                      swapped=swap, act=act)
        d.quantize(v, op_type, operands, params, broadcast(x.shape, y_shape), scale, zp,
                   out_amp)
    return build


def prelu(draw, d: Draft, x: QTensor) -> None:
    """PRelu with a float slope initializer (per channel, scalar or along the last axis), as
    quantizers leave it (canonqnn needs the slope at compile time)."""
    shape = draw(st.sampled_from([s for s in const_shapes(x.shape) if s != x.shape]))
    slope = draw_seed(draw).uniform(-0.5, 0.5, shape).astype(np.float32)
    lo = -x.amp * float(np.abs(slope).max(initial=0.0))
    scale, zp = draw_qparams(draw, d, lo, x.amp)
    y = d.emit("PRelu", [d.dq(x), d.const(slope, "slope")])
    d.quantize(y, "PRelu", [x], dict(slope=list(shape)), x.shape, scale, zp, x.amp)


def matmul_activations(draw, d: Draft, x: QTensor) -> None:
    """MatMul of two activations (B an earlier tensor with B.shape[-2] == A.shape[-1])."""
    y = draw(st.sampled_from(matmul_partners(d, x)))
    amp = x.amp * y.amp * math.sqrt(x.shape[-1]) * 0.5
    scale, zp = draw_qparams(draw, d, *draw_range(draw, amp))
    shape = (*broadcast(x.shape[:-2], y.shape[:-2]), x.shape[-2], y.shape[-1])
    v = d.emit("MatMul", [d.dq(x), d.dq(y)])
    d.quantize(v, "MatMulActivations", [x, y], {}, shape, scale, zp, amp)


def matmul_partners(d: Draft, x: QTensor) -> list[QTensor]:
    out = []
    for t in reversed(d.usable()):
        if t.rank >= 2 and t.shape[-2] == x.shape[-1]:
            batch = broadcast(x.shape[:-2], t.shape[:-2])
            if batch is not None and int(np.prod(batch)) * x.shape[-2] * t.shape[-1] \
                    <= MAX_ELEMENTS:
                out.append(t)
    return out


def conv_transpose(draw, d: Draft, x: QTensor) -> None:
    n, c, h, w = x.shape
    g = draw(st.sampled_from([1, c] if c > 1 else [1]))
    o = c if g == c else draw(st.integers(1, 6))
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    s = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    pads = [draw(st.integers(0, kk - 1)) for kk in k + k]
    out_pad = [draw(st.integers(0, ss - 1)) for ss in s]
    out = [(size - 1) * s[i] - pads[i] - pads[i + 2] + k[i] + out_pad[i]
           for i, size in enumerate((h, w))]
    if min(out) < 1 or n * o * out[0] * out[1] > MAX_ELEMENTS:
        pads, out_pad = [0, 0, 0, 0], [0, 0]
        k, s = [1, 1], [1, 1]
        out = [h, w]
    rng = draw_seed(draw)
    weights, style = int8_weights(draw, rng, (c, o // g, *k))
    ws = weight_scales(draw, rng, o) if g == 1 else np.float32(2.0 ** draw(st.floats(-10, -4)))
    bias = int32_bias(draw, rng, o)
    inputs = [d.dq(x), d.weight(weights, ws, axis=1)]
    if bias is not None:
        inputs.append(d.bias(bias, np.float32(x.scale) * ws))
    amp = product_amp(x, ws, c // g * k[0] * k[1])
    scale, zp = draw_qparams(draw, d, *draw_range(draw, amp))
    attrs = dict(kernel_shape=k, strides=s, pads=pads, output_padding=out_pad, group=g)
    y = d.emit("ConvTranspose", inputs, **attrs)
    params = dict(out_channels=o, **attrs, per_channel=bool(ws.ndim), bias=bias is not None,
                  weights=style)
    d.quantize(y, "ConvTranspose", [x], params, (n, o, *out), scale, zp, amp,
               tolerance=TOLERANCES["ConvTranspose"])


# ---------------------------------------------------------------- pooling and reductions
def average_pool(draw, d: Draft, x: QTensor) -> None:
    n, c, h, w = x.shape
    if draw(st.integers(0, 4)) == 0:  # whole input: onnxruntime's global-pool path
        attrs, out = dict(kernel_shape=[h, w]), (1, 1)
    else:
        attrs, out = draw_window(draw, h, w, dilations=False, auto_pad=False)
        attrs["ceil_mode"] = draw_ceil_mode(draw, attrs, h, w)
        attrs["count_include_pad"] = int(draw(st.booleans()))
        out = [window_out(size, attrs["kernel_shape"][i], attrs["strides"][i], 1,
                          attrs["pads"][i], attrs["pads"][i + 2], bool(attrs["ceil_mode"]))
               for i, size in enumerate((h, w))]
    act, scale, zp = folded_activation(draw, d, *draw_range(draw, x.amp * 0.7))
    if attrs["kernel_shape"] == [h, w] and not any(attrs.get("pads", [])):
        scale = global_pool_scale(x, h * w, scale)
    y = d.activation(d.emit("AveragePool", [d.dq(x)], **attrs), act)
    d.quantize(y, "AveragePool", [x], dict(**attrs, act=act), (n, c, *out), scale, zp,
               x.amp * 0.7)


def max_pool(draw, d: Draft, x: QTensor) -> None:
    n, c, h, w = x.shape
    attrs, _ = draw_window(draw, h, w, dilations=True, auto_pad=False)
    attrs["ceil_mode"] = draw_ceil_mode(draw, attrs, h, w)
    out = [window_out(size, attrs["kernel_shape"][i], attrs["strides"][i],
                      attrs["dilations"][i], attrs["pads"][i], attrs["pads"][i + 2],
                      bool(attrs["ceil_mode"])) for i, size in enumerate((h, w))]
    scale, zp = same_or_new(draw, d, x, x.amp)
    y = d.emit("MaxPool", [d.dq(x)], **attrs)
    d.quantize(y, "MaxPool", [x], attrs, (n, c, *out), scale, zp, x.amp)


def global_pool_scale(x: QTensor, count: int, scale: float) -> float:
    """onnxruntime's global-average-pool kernel refuses x_scale / (y_scale * count) >= 256."""
    return max(scale, f32(x.scale / (128.0 * count)))


def global_average_pool(draw, d: Draft, x: QTensor) -> None:
    scale, zp = draw_qparams(draw, d, *draw_range(draw, x.amp * 0.5))
    scale = global_pool_scale(x, x.shape[2] * x.shape[3], scale)
    y = d.emit("GlobalAveragePool", [d.dq(x)])
    d.quantize(y, "GlobalAveragePool", [x], {}, (*x.shape[:2], 1, 1), scale, zp, x.amp * 0.5)


def reduce_axes(d: Draft, op_type: str, xf: str, axes: list[int], keepdims: int) -> str:
    """ReduceX with axes as an attribute (opset < 18) or as an input (opset >= 18)."""
    if d.opset >= 18:
        return d.emit(op_type, [xf, d.ints(axes)], keepdims=keepdims)
    return d.emit(op_type, [xf], axes=axes, keepdims=keepdims)


def reduce_mean(draw, d: Draft, x: QTensor) -> None:
    """Over trailing axes (H, W of NCHW, the last axis, ...): onnxruntime sums those rows with
    Eigen, which canonqnn.reduce_mean reproduces; middle-axis means follow a thread-count
    dependent order (docs/parity.md) and are left out."""
    first = draw(st.integers(1 if x.rank > 1 else 0, x.rank - 1))
    axes = list(range(first, x.rank))
    if draw(st.booleans()):
        axes = [a - x.rank for a in axes]
    keepdims = int(draw(st.booleans())) if first > 0 else 1
    scale, zp = draw_qparams(draw, d, *draw_range(draw, x.amp * 0.5))
    y = reduce_axes(d, "ReduceMean", d.dq(x), axes, keepdims)
    shape = tuple(1 if i >= first else s for i, s in enumerate(x.shape) if keepdims or i < first)
    d.quantize(y, "ReduceMean", [x], dict(axes=axes, keepdims=keepdims), shape, scale, zp,
               x.amp * 0.5)


def reduce_max_min(op_type: str):
    def build(draw, d: Draft, x: QTensor) -> None:
        axes = sorted(draw(st.sets(st.integers(0, x.rank - 1), min_size=1, max_size=x.rank)))
        keepdims = int(draw(st.booleans())) if len(axes) < x.rank else 1
        scale, zp = same_or_new(draw, d, x, x.amp)
        y = reduce_axes(d, op_type, d.dq(x), axes, keepdims)
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape) if keepdims
                      or i not in axes)
        d.quantize(y, op_type, [x], dict(axes=axes, keepdims=keepdims), shape, scale, zp,
                   x.amp)
    return build


def arg_max(draw, d: Draft, x: QTensor) -> None:
    axis = draw(st.integers(-x.rank, x.rank - 1))
    keepdims = int(draw(st.booleans()))
    y = d.emit("ArgMax", [d.dq(x)], axis=axis, keepdims=keepdims)
    shape = tuple(1 if i == axis % x.rank else s for i, s in enumerate(x.shape)
                  if keepdims or i != axis % x.rank)
    d.int_output(y, shape)
    d.record("ArgMax", [x], [y], dict(axis=axis, keepdims=keepdims))


def softmax(draw, d: Draft, x: QTensor) -> None:
    axis = draw(st.integers(-x.rank, x.rank - 1))
    if draw(st.booleans()):  # what onnxruntime's quantizer writes for softmax outputs
        scale, zp = 1.0 / 256.0, d.qmin
    else:
        scale, zp = draw_qparams(draw, d, 0.0, 1.0)
    y = d.emit("Softmax", [d.dq(x)], axis=axis)
    d.quantize(y, "Softmax", [x], dict(axis=axis), x.shape, scale, zp, 1.0)


# ---------------------------------------------------------------- elementwise unary
def relu(draw, d: Draft, x: QTensor) -> None:
    """A standalone Relu, kept by onnxruntime: output zero point above qmin (with the zero
    point at qmin onnxruntime deletes the Relu, and the Q -> DQ -> Q -> DQ left behind is
    merged with other parameters: docs/parity.md)."""
    if x.zp > d.qmin and draw(st.booleans()):
        scale, zp = x.scale, x.zp
    else:
        scale, zp = draw_qparams(draw, d, *draw_range(draw, x.amp))
        if zp == d.qmin:
            zp += 1 + draw(st.integers(0, 40))
    y = d.emit("Relu", [d.dq(x)])
    d.quantize(y, "Relu", [x], {}, x.shape, scale, zp, x.amp)


def clip(draw, d: Draft, x: QTensor) -> None:
    """A standalone Clip (either bound may be absent), never redundant for the same reason."""
    lo = -x.amp * draw(st.floats(0.0, 1.0)) if draw(st.integers(0, 3)) else None
    hi = x.amp * draw(st.floats(0.05, 1.0)) if draw(st.integers(0, 3)) else None
    if draw(st.booleans()):
        scale, zp = x.scale, x.zp
    else:
        scale, zp = draw_qparams(draw, d, *draw_range(draw, x.amp))
    if clip_is_redundant(-math.inf if lo is None else lo, math.inf if hi is None else hi,
                         scale, zp, d):
        lo, hi = (d.qmin - zp) * scale / 2, (d.qmax - zp) * scale / 2
    bounds = [d.float_scalar(b) if b is not None else "" for b in (lo, hi)]
    while bounds and not bounds[-1]:
        bounds.pop()
    y = d.emit("Clip", [d.dq(x), *bounds])
    lo, hi = (None if b is None else f32(b) for b in (lo, hi))
    d.quantize(y, "Clip", [x], dict(lo=lo, hi=hi), x.shape, scale, zp, x.amp)


def erf(v: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(v.astype(np.float64))


# real function, attributes drawn, and whether the input must be >= 0
UNARY = {
    "Sigmoid": (lambda v, a: 1 / (1 + np.exp(-v)), lambda draw: {}),
    "Tanh": (lambda v, a: np.tanh(v), lambda draw: {}),
    "HardSwish": (lambda v, a: v * np.clip(v / 6 + 0.5, 0, 1), lambda draw: {}),
    "HardSigmoid": (lambda v, a: np.clip(a.get("alpha", 0.2) * v + a.get("beta", 0.5), 0, 1),
                    lambda draw: draw(st.sampled_from(
                        [{}, {"alpha": 1 / 6, "beta": 0.5}, {"alpha": 0.3, "beta": 0.4}]))),
    "LeakyRelu": (lambda v, a: np.where(v >= 0, v, a.get("alpha", 0.01) * v),
                  lambda draw: draw(st.sampled_from([{}, {"alpha": 0.1}, {"alpha": 0.2}]))),
    "Gelu": (lambda v, a: 0.5 * v * (1 + erf(v / math.sqrt(2))), lambda draw: {}),
    "Erf": (lambda v, a: erf(v), lambda draw: {}),
    "Exp": (lambda v, a: np.exp(np.minimum(v, 30)), lambda draw: {}),
    "Log": (lambda v, a: np.log(np.maximum(v, 1e-30)), lambda draw: {}),
    "Sqrt": (lambda v, a: np.sqrt(np.maximum(v, 0)), lambda draw: {}),
    "Softplus": (lambda v, a: np.log1p(np.exp(np.minimum(v, 30))), lambda draw: {}),
    "Elu": (lambda v, a: np.where(v > 0, v, a.get("alpha", 1.0) * (np.exp(np.minimum(v, 0)) - 1)),
            lambda draw: draw(st.sampled_from([{}, {"alpha": 0.5}]))),
    "Abs": (lambda v, a: np.abs(v), lambda draw: {}),
    "Neg": (lambda v, a: -v, lambda draw: {}),
}
NONNEGATIVE_INPUT = ("Log", "Sqrt")


def unary(op_type: str):
    fn, draw_attrs = UNARY[op_type]

    def build(draw, d: Draft, x: QTensor) -> None:
        attrs = draw_attrs(draw)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            values = fn(representable(d, x).astype(np.float64), attrs)
        values = values[np.isfinite(values)]
        lo, hi = float(values.min()), float(values.max())
        scale, zp = draw_qparams(draw, d, lo, hi)
        y = d.emit(op_type, [d.dq(x)], **attrs)
        d.quantize(y, op_type, [x], attrs, x.shape, scale, zp, max(abs(lo), abs(hi)))
    return build


def nonnegative(d: Draft, x: QTensor) -> bool:
    """Log / Sqrt take tensors with no negative value (zero point at qmin), as in models."""
    return x.zp == d.qmin


# ---------------------------------------------------------------- data movement
def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def reshape(draw, d: Draft, x: QTensor) -> None:
    r = draw(st.integers(2, 4))
    dims = [1] * r
    for f in prime_factors(x.size):
        dims[draw(st.integers(0, r - 1))] *= f
    shape = list(dims)
    if draw(st.booleans()):
        shape[draw(st.integers(0, r - 1))] = -1
    if draw(st.booleans()):  # 0 copies the input's dimension (allowzero = 0)
        shape = [0 if i < x.rank and s == x.shape[i] and s != 1 else s
                 for i, s in enumerate(shape)]
    scale, zp = same_or_new(draw, d, x, x.amp, noop=tuple(dims) == x.shape)
    y = d.emit("Reshape", [d.dq(x), d.ints(shape)])
    d.quantize(y, "Reshape", [x], dict(shape=shape), tuple(dims), scale, zp, x.amp)


def flatten(draw, d: Draft, x: QTensor) -> None:
    axis = draw(st.integers(-x.rank, x.rank))
    a = axis if axis >= 0 else axis + x.rank
    shape = (int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))
    scale, zp = same_or_new(draw, d, x, x.amp, noop=shape == x.shape)
    y = d.emit("Flatten", [d.dq(x)], axis=axis)
    d.quantize(y, "Flatten", [x], dict(axis=axis), shape, scale, zp, x.amp)


def transpose(draw, d: Draft, x: QTensor) -> None:
    """Never the identity; always the input's parameters: onnxruntime's transpose optimizer
    merges and cancels transposes across Q/DQ pairs, which leaves Q -> DQ -> Q -> DQ chains
    (re-parameterized by onnxruntime when the parameters differ: docs/parity.md)."""
    perm = list(draw(st.permutations(range(x.rank))))
    if perm == sorted(perm):
        perm = perm[1:] + perm[:1]
    y = d.emit("Transpose", [d.dq(x)], perm=perm)
    d.quantize(y, "Transpose", [x], dict(perm=perm), tuple(x.shape[p] for p in perm), x.scale,
               x.zp, x.amp)


def squeeze(draw, d: Draft, x: QTensor) -> None:
    units = [i for i, s in enumerate(x.shape) if s == 1]
    axes = sorted(draw(st.sets(st.sampled_from(units), min_size=1,
                               max_size=min(len(units), x.rank - 2))))
    axes_in = [a - x.rank if draw(st.booleans()) else a for a in axes]
    scale, zp = same_or_new(draw, d, x, x.amp)
    y = d.emit("Squeeze", [d.dq(x), d.ints(axes_in)])
    shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    d.quantize(y, "Squeeze", [x], dict(axes=axes_in), shape, scale, zp, x.amp)


def unsqueeze(draw, d: Draft, x: QTensor) -> None:
    axis = draw(st.integers(-(x.rank + 1), x.rank))
    scale, zp = same_or_new(draw, d, x, x.amp)
    y = d.emit("Unsqueeze", [d.dq(x), d.ints([axis])])
    shape = list(x.shape)
    shape.insert(axis % (x.rank + 1), 1)
    d.quantize(y, "Unsqueeze", [x], dict(axes=[axis]), tuple(shape), scale, zp, x.amp)


def concat(draw, d: Draft, x: QTensor) -> None:
    axis = draw(st.integers(0, x.rank - 1))
    partners = [t for t in reversed(d.usable()) if t.rank == x.rank and all(
        t.shape[i] == x.shape[i] for i in range(x.rank) if i != axis)]
    parts = [x, *draw(st.lists(st.sampled_from(partners), min_size=1, max_size=2))]
    while sum(p.size for p in parts) > MAX_ELEMENTS and len(parts) > 2:
        parts.pop()
    shape = list(x.shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    amp = max(p.amp for p in parts)
    if draw(st.booleans()):  # one input's parameters: onnxruntime copies that input
        source = draw(st.sampled_from(parts))
        scale, zp = source.scale, source.zp
    else:
        scale, zp = draw_qparams(draw, d, *draw_range(draw, amp))
    axis_attr = axis - x.rank if draw(st.booleans()) else axis
    y = d.emit("Concat", [d.dq(p) for p in parts], axis=axis_attr)
    d.quantize(y, "Concat", parts, dict(axis=axis_attr), tuple(shape), scale, zp, amp)


def concat_fits(d: Draft, x: QTensor) -> bool:
    return 2 * x.size <= MAX_ELEMENTS


def pad(draw, d: Draft, x: QTensor) -> None:
    mode = draw(st.sampled_from(["constant", "reflect", "edge"]))
    pads = [0] * (2 * x.rank)
    for axis in (x.rank - 2, x.rank - 1):
        limit = x.shape[axis] - 1 if mode == "reflect" else 2
        for side in (0, x.rank):
            pads[axis + side] = draw(st.integers(0, min(2, limit)))
    shape = tuple(s + pads[i] + pads[i + x.rank] for i, s in enumerate(x.shape))
    scale, zp = same_or_new(draw, d, x, x.amp, noop=shape == x.shape)
    y = d.emit("Pad", [d.dq(x), d.ints(pads)], mode=mode)
    d.quantize(y, "Pad", [x], dict(mode=mode, pads=pads), shape, scale, zp, x.amp)


def resize(draw, d: Draft, x: QTensor) -> None:
    mode = draw(st.sampled_from(["nearest", "linear"]))
    ctm = draw(st.sampled_from(["half_pixel", "asymmetric", "align_corners",
                                "pytorch_half_pixel"]))
    # Halving only even sizes: canonqnn refuses a scale that is not out/in exactly
    # (onnxruntime maps coordinates with the given scale, canonqnn with out/in).
    factors = [draw(st.sampled_from([0.5, 1.0, 2.0, 3.0] if size % 2 == 0 else [1.0, 2.0, 3.0]))
               for size in x.shape[2:]]
    shape = (*x.shape[:2], *(max(1, int(s * f)) for s, f in zip(x.shape[2:], factors)))
    if int(np.prod(shape)) > MAX_ELEMENTS:
        factors, shape = [1.0, 1.0], x.shape
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    if mode == "nearest":
        attrs["nearest_mode"] = draw(st.sampled_from(["round_prefer_floor", "floor", "ceil"]))
    scales = d.const(np.asarray([1.0, 1.0, *factors], np.float32), "f")
    scale, zp = same_or_new(draw, d, x, x.amp, noop=shape == x.shape)
    y = d.emit("Resize", [d.dq(x), "", scales], **attrs)
    d.quantize(y, "Resize", [x], dict(**attrs, scales=factors), shape, scale, zp, x.amp)


def gather(draw, d: Draft, x: QTensor) -> None:
    axis = draw(st.integers(0, x.rank - 1))
    dim = x.shape[axis]
    rng = draw_seed(draw)
    scalar_index = x.rank >= 3 and draw(st.booleans())
    count = () if scalar_index else (draw(st.integers(1, 4)),)
    indices = rng.integers(-dim, dim, count).astype(np.int64)
    scale, zp = same_or_new(draw, d, x, x.amp)
    axis_attr = axis - x.rank if draw(st.booleans()) else axis
    y = d.emit("Gather", [d.dq(x), d.const(indices, "i")], axis=axis_attr)
    shape = (*x.shape[:axis], *count, *x.shape[axis + 1:])
    d.quantize(y, "Gather", [x], dict(axis=axis_attr, indices=indices.tolist()), shape, scale,
               zp, x.amp)


def slice_(draw, d: Draft, x: QTensor) -> None:
    axes = sorted(draw(st.sets(st.integers(0, x.rank - 1), min_size=1, max_size=2)))
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for a in axes:
        dim = x.shape[a]
        step = draw(st.sampled_from([1, 1, 2, -1]))
        start = draw(st.integers(-dim, dim - 1))
        end = draw(st.sampled_from([dim, -dim - 1, 2**31 - 1, -(2**31)] + list(range(-dim, dim))))
        length = len(range(*slice(start, end, step).indices(dim)))
        if length == 0:
            start, end, step = 0, dim, 1
            length = dim
        starts.append(start), ends.append(end), steps.append(step)
        shape[a] = length
    scale, zp = same_or_new(draw, d, x, x.amp, noop=tuple(shape) == x.shape)
    y = d.emit("Slice", [d.dq(x), d.ints(starts), d.ints(ends), d.ints(axes), d.ints(steps)])
    d.quantize(y, "Slice", [x], dict(starts=starts, ends=ends, axes=axes, steps=steps),
               tuple(shape), scale, zp, x.amp)


def split(draw, d: Draft, x: QTensor) -> None:
    axes = [i for i, s in enumerate(x.shape) if s >= 2]
    axis = draw(st.sampled_from(axes))
    dim = x.shape[axis]
    parts = draw(st.integers(2, min(3, dim)))
    cuts = sorted(draw(st.sets(st.integers(1, dim - 1), min_size=parts - 1,
                               max_size=parts - 1)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, dim])]
    outs = d.emit("Split", [d.dq(x), d.ints(sizes)], n_out=len(sizes), axis=axis)
    made = []
    for size, y in zip(sizes, outs):
        scale, zp = same_or_new(draw, d, x, x.amp)
        shape = tuple(size if i == axis else s for i, s in enumerate(x.shape))
        made.append(d.quantize(y, "Split", [x], {}, shape, scale, zp, x.amp, record=False))
    d.record("Split", [x], made, dict(axis=axis, split=sizes))


def depth_to_space(draw, d: Draft, x: QTensor) -> None:
    n, c, h, w = x.shape
    mode = draw(st.sampled_from(["DCR", "CRD"]))
    scale, zp = same_or_new(draw, d, x, x.amp)
    y = d.emit("DepthToSpace", [d.dq(x)], blocksize=2, mode=mode)
    d.quantize(y, "DepthToSpace", [x], dict(blocksize=2, mode=mode), (n, c // 4, 2 * h, 2 * w),
               scale, zp, x.amp)


def space_to_depth(draw, d: Draft, x: QTensor) -> None:
    n, c, h, w = x.shape
    scale, zp = same_or_new(draw, d, x, x.amp)
    y = d.emit("SpaceToDepth", [d.dq(x)], blocksize=2)
    d.quantize(y, "SpaceToDepth", [x], dict(blocksize=2), (n, 4 * c, h // 2, w // 2), scale, zp,
               x.amp)


def tile(draw, d: Draft, x: QTensor) -> None:
    repeats = [draw(st.integers(1, 2)) for _ in x.shape]
    if x.size * int(np.prod(repeats)) > MAX_ELEMENTS:
        repeats = [1] * x.rank
    scale, zp = same_or_new(draw, d, x, x.amp, noop=max(repeats) == 1)
    y = d.emit("Tile", [d.dq(x), d.ints(repeats)])
    shape = tuple(s * r for s, r in zip(x.shape, repeats))
    d.quantize(y, "Tile", [x], dict(repeats=repeats), shape, scale, zp, x.amp)


def expand(draw, d: Draft, x: QTensor) -> None:
    target = [draw(st.integers(1, 3)) if s == 1 else s for s in x.shape]
    if x.rank < 4 and draw(st.booleans()):
        target.insert(0, draw(st.integers(1, 2)))
    if int(np.prod(target)) > MAX_ELEMENTS:
        target = list(x.shape)
    scale, zp = same_or_new(draw, d, x, x.amp, noop=tuple(target) == x.shape)
    y = d.emit("Expand", [d.dq(x), d.ints(target)])
    d.quantize(y, "Expand", [x], dict(shape=target), tuple(target), scale, zp, x.amp)


def where(draw, d: Draft, x: QTensor) -> None:
    y, y_shape, y_amp, y_tensor = partner_or_const(draw, d, x)
    cond_shape = draw(st.sampled_from(const_shapes(x.shape)))
    cond = draw_seed(draw).integers(0, 2, cond_shape).astype(bool)
    xf = d.dq(x)
    yf = d.dq(y) if y_tensor is not None else y
    swap = draw(st.booleans())
    amp = max(x.amp, y_amp)
    scale, zp = draw_qparams(draw, d, *draw_range(draw, amp))
    v = d.emit("Where", [d.const(cond, "cond"), *([yf, xf] if swap else [xf, yf])])
    shape = broadcast(broadcast(x.shape, y_shape), cond_shape)
    operands = [x] + ([y_tensor] if y_tensor is not None else [])
    d.quantize(v, "Where", operands, dict(cond=list(cond_shape), swapped=swap), shape, scale,
               zp, amp)


# ---------------------------------------------------------------- the menu
def _unary_entry(op_type: str, min_opset: int = 13) -> OpKind:
    accepts = nonnegative if op_type in NONNEGATIVE_INPUT else any_rank
    return OpKind(op_type, unary(op_type), accepts, (op_type,), pending=True,
                  min_opset=min_opset)


MENU: tuple[OpKind, ...] = (
    # supported today
    OpKind("Conv", conv, rank(4), ("Conv",), weight=3),
    OpKind("MatMul", matmul, lambda d, x: x.rank >= 2 and x.size // x.shape[-1] * 8
           <= MAX_ELEMENTS, ("MatMul",), probe_shape=(3, 4), weight=3),
    OpKind("Gemm", gemm, rank(2), ("Gemm",), probe_shape=(3, 4), weight=3),
    OpKind("Add", binary("Add"), any_rank, ("Add",), weight=3),
    OpKind("Mul", binary("Mul", amp=lambda a, b: a * b), any_rank, ("Mul",), weight=2),
    OpKind("AveragePool", average_pool, rank(4), ("AveragePool",), weight=3),
    OpKind("MaxPool", max_pool, rank(4), ("MaxPool",), weight=3),
    OpKind("GlobalAveragePool", global_average_pool, rank(4), ("GlobalAveragePool",), weight=3),
    OpKind("ReduceMean", reduce_mean, any_rank, ("ReduceMean",), weight=2),
    OpKind("Concat", concat, concat_fits, ("Concat",), weight=2),
    OpKind("Reshape", reshape, any_rank, ("Reshape",)),
    OpKind("Flatten", flatten, any_rank, ("Flatten",)),
    OpKind("Transpose", transpose, any_rank, ("Transpose",)),
    OpKind("Squeeze", squeeze, lambda d, x: x.rank >= 3 and 1 in x.shape, ("Squeeze",),
           probe_shape=(1, 4, 4)),
    OpKind("Unsqueeze", unsqueeze, lambda d, x: x.rank <= 3, ("Unsqueeze",),
           probe_shape=(4, 4)),
    OpKind("Relu", relu, any_rank, ("Relu",)),
    OpKind("Clip", clip, any_rank, ("Clip",)),
    # being added to canonqnn: included once supported
    OpKind("Sub", binary("Sub"), any_rank, ("Sub",), pending=True),
    OpKind("Min", binary("Min", activation=False, amp=max), any_rank, ("Min",), pending=True),
    OpKind("Max", binary("Max", activation=False, amp=max), any_rank, ("Max",), pending=True),
    OpKind("PRelu", prelu, any_rank, ("PRelu",), pending=True, min_opset=16),
    *(_unary_entry(op) for op in UNARY if op not in ("HardSwish", "Gelu")),
    _unary_entry("HardSwish", min_opset=14),
    _unary_entry("Gelu", min_opset=20),
    OpKind("Softmax", softmax, any_rank, ("Softmax",), pending=True),
    OpKind("Pad", pad, lambda d, x: x.rank >= 2, ("Pad",), pending=True),
    OpKind("Resize", resize, lambda d, x: x.rank == 4 and x.size * 4 <= MAX_ELEMENTS,
           ("Resize",), pending=True, weight=3),
    OpKind("Gather", gather, any_rank, ("Gather",), pending=True),
    OpKind("Slice", slice_, any_rank, ("Slice",), pending=True),
    OpKind("Split", split, lambda d, x: max(x.shape) >= 2, ("Split",), pending=True),
    OpKind("DepthToSpace", depth_to_space, lambda d, x: x.rank == 4 and x.shape[1] % 4 == 0,
           ("DepthToSpace",), pending=True),
    OpKind("SpaceToDepth", space_to_depth,
           lambda d, x: x.rank == 4 and x.shape[2] % 2 == 0 and x.shape[3] % 2 == 0,
           ("SpaceToDepth",), pending=True),
    OpKind("Tile", tile, any_rank, ("Tile",), pending=True),
    OpKind("Expand", expand, lambda d, x: 1 in x.shape or x.rank < 4, ("Expand",),
           pending=True, probe_shape=(1, 4, 1, 4)),
    OpKind("Where", where, any_rank, ("Where",), pending=True),
    OpKind("ReduceMax", reduce_max_min("ReduceMax"), any_rank, ("ReduceMax",), pending=True),
    OpKind("ReduceMin", reduce_max_min("ReduceMin"), any_rank, ("ReduceMin",), pending=True),
    OpKind("ArgMax", arg_max, any_rank, ("ArgMax",), pending=True),
    OpKind("ConvTranspose", conv_transpose, rank(4), ("ConvTranspose",), pending=True, weight=3),
    OpKind("MatMulActivations", matmul_activations,
           lambda d, x: x.rank >= 2 and bool(matmul_partners(d, x)), ("MatMul",), pending=True,
           probe_shape=(4, 4), weight=3),
)
