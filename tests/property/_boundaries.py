"""Which differences from onnxruntime are float32 rounding, element by element.

onnxruntime runs some QDQ ops in float32 (ConvTranspose: docs/spec.md, conv2d_transpose)
where canonqnn sums exactly in integers and requantizes in float32. Both are float32
evaluations of one exact value: the QDQ graph in real arithmetic on the model's float32
parameters. They can round to neighbouring codes only where that exact value lies within
their float32 error of a rounding boundary (a half-integer in output units). ``outliers``
lists the differing elements for which it does not: each one is a real discrepancy, however
few they are. How many elements sit that close to a boundary depends on how the scales
relate (docs/random-graphs.md), so no fraction is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from canonqnn.frontends.onnx.oracle import expose_tensors, ort_session

U = 2.0 ** -24  # float32 unit roundoff


@dataclass(frozen=True)
class Exact:
    """An op's exact outputs before rounding, in output units without the zero point
    (float64, within about 2^-50 relative), and a bound on how far either runtime's float32
    evaluation of them can be."""

    value: np.ndarray
    bound: np.ndarray
    zp: int


def outliers(exact: Exact, ref: np.ndarray, got: np.ndarray) -> list[str]:
    """The differing elements of ``ref`` (onnxruntime) and ``got`` (canonqnn) that are not a
    float32 rounding of a value within ``exact.bound`` of the boundary between them."""
    out = []
    for ix in map(tuple, np.argwhere(ref != got)):
        r, g = int(ref[ix]), int(got[ix])
        value, bound = float(exact.value[ix]), float(exact.bound[ix])
        boundary = min(r, g) - exact.zp + 0.5
        if abs(r - g) != 1 or abs(value - boundary) > bound:
            out.append(f"{tuple(int(i) for i in ix)}: ort {r} canonqnn {g}, exact value "
                       f"{value!r} + zp {exact.zp}, {abs(value - boundary):.3g} from the "
                       f"boundary {boundary} (float32 error bound {bound:.3g})")
    return out


def activation_values(model: onnx.ModelProto, feed: dict[str, np.ndarray]) \
        -> Callable[[str], np.ndarray]:
    """``values(name)``: a quantized tensor of ``model`` on ``feed``, as onnxruntime computes
    it (an input as fed; an inner tensor exposed as an output of a copy of the model)."""
    def values(name: str) -> np.ndarray:
        if name in feed:
            return np.asarray(feed[name])
        proto, found = expose_tensors(model, [name])
        assert found == [name], f"tensor {name} cannot be exposed"
        return np.asarray(ort_session(proto)[0].run([name], feed)[0])
    return values


# ---------------------------------------------------------------- ConvTranspose
def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def scatter(x: np.ndarray, w: np.ndarray, strides, pads, dilations, out_hw, group: int):
    """ONNX ConvTranspose in int64 by its definition: each input element times each kernel
    tap, added at ``h*s - pad_begin + k*d`` (output padding only extends the output)."""
    n, c, h, wd = x.shape
    _, opg, kh, kw = w.shape
    cpg = c // group
    out = np.zeros((n, opg * group, *out_hw), np.int64)
    for g in range(group):
        xs, ws = x[:, g * cpg:(g + 1) * cpg], w[g * cpg:(g + 1) * cpg]
        for ky in range(kh):
            for kx in range(kw):
                tap = np.einsum("nchw,co->nohw", xs, ws[:, :, ky, kx])
                for i in range(h):
                    oi = i * strides[0] - pads[0] + ky * dilations[0]
                    for j in range(wd):
                        oj = j * strides[1] - pads[1] + kx * dilations[1]
                        if 0 <= oi < out_hw[0] and 0 <= oj < out_hw[1]:
                            out[:, g * opg:(g + 1) * opg, oi, oj] += tap[:, :, i, j]
    return out


def conv_transpose(model: onnx.ModelProto, output: str,
                   values: Callable[[str], np.ndarray]) -> Exact:
    """``output = QuantizeLinear(ConvTranspose(DQ(x), DQ(w)[, DQ(b)]))`` exactly, and the
    float32 error bound of its evaluations, per element, with ``n`` product terms (input
    channels of the group times the kernel taps landing there) and ``S`` the sum of the
    magnitudes of all terms and the bias, in output units:

    - onnxruntime: dequantized x and w, their product, the bias (one rounding each), the sum
      of ``n + 1`` terms in whatever order its GEMM and col2im take (at most ``n`` roundings,
      ``γ_n S``), the division by the output scale (one rounding of the result): at most
      ``(n + 3) u S + u |y|`` to first order;
    - canonqnn: the exact integer sum times ``M = f32(f32(x_scale * w_scale) / y_scale)`` (the
      accumulator scale, M and the product: at most ``3 u S``).

    The bound taken is ``(n + 8) u S * 1.01 + 2 u |y|`` (second-order terms included)."""
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {o: node for node in g.node for o in node.output}
    quant = producer[output]
    node = producer[quant.input[0]]
    assert quant.op_type == "QuantizeLinear" and node.op_type == "ConvTranspose"

    def dequantized(name: str) -> tuple[str, np.ndarray, np.ndarray]:
        dq = producer[name]
        assert dq.op_type == "DequantizeLinear", f"{name} is not dequantized"
        return dq.input[0], inits[dq.input[1]].astype(np.float64), inits[dq.input[2]]

    a = _attrs(node)
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or "output_shape" in a:
        raise NotImplementedError("ConvTranspose with auto_pad or output_shape")
    x_name, x_scale, x_zp = dequantized(node.input[0])
    w_name, w_scale, w_zp = dequantized(node.input[1])
    assert not np.any(w_zp), "symmetric weights only"
    w = inits[w_name].astype(np.int64)
    x = values(x_name).astype(np.int64) - np.int64(x_zp)
    group = a.get("group", 1)
    opg = w.shape[1]
    channels = opg * group
    strides, dilations = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    out_pad = a.get("output_padding", [0, 0])
    out_hw = tuple((size - 1) * s - p0 - p1 + d * (k - 1) + op + 1 for size, s, p0, p1, d, k, op
                   in zip(x.shape[2:], strides, pads[:2], pads[2:], dilations, w.shape[2:],
                          out_pad))
    # weights [C, O/G, kh, kw] are quantized along axis 1: output channel o has scale o mod O/G
    w_scale_o = np.tile(np.broadcast_to(w_scale, (opg,)), group) if w_scale.ndim \
        else np.full(channels, w_scale)
    bias, bias_scale = np.zeros(channels, np.int64), np.zeros(channels)
    if len(node.input) > 2 and node.input[2]:
        b_name, b_scale, _ = dequantized(node.input[2])
        bias = inits[b_name].astype(np.int64)
        bias_scale = np.broadcast_to(b_scale, (channels,))
    y_scale, y_zp = float(inits[quant.input[1]]), int(inits[quant.input[2]])
    per_channel = (1, channels, 1, 1)
    acc_scale = (float(x_scale) * w_scale_o).reshape(per_channel)  # exact: 24 x 24 bits
    acc = scatter(x, w, strides, pads, dilations, out_hw, group)
    magnitude = scatter(np.abs(x), np.abs(w), strides, pads, dilations, out_hw, group)
    terms = scatter(np.ones_like(x), np.ones_like(w), strides, pads, dilations, out_hw, group)
    bias_real = (bias * bias_scale).reshape(per_channel)
    value = (acc * acc_scale + bias_real) / y_scale
    total = (magnitude * acc_scale + np.abs(bias_real)) / y_scale
    bound = (terms + 8) * U * total * 1.01 + 2 * U * np.abs(value)
    return Exact(value, bound, y_zp)
