"""canonqnn.dynamic_* against onnxruntime running what ``quantize_dynamic`` writes
(DynamicQuantizeLinear -> MatMulInteger | ConvInteger -> Cast -> Mul(x_scale * w_scale)), their
numpy references and their TVM legalizations (one module, one build). Inputs include the edges
of DynamicQuantizeLinear's parameter arithmetic: all zeros (scale 1), one sign only (zero point
0 or 255), a tiny range, and values whose quotient lands on .5 ties."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _ort import U8S8_EXACT, MultiOp, assert_bit_exact, run_graph, to_int8
from canonqnn import _tvm
from canonqnn.ops import dynamic

RNG = np.random.default_rng(11)
M, K, N = 6, 40, 9
C, OC, HW = 5, 7, 8
B_INT8 = RNG.integers(-127, 128, (K, N)).astype(np.int8)
B_SCALE = RNG.uniform(0.002, 0.02, N).astype(np.float32)
W_UINT8 = RNG.integers(0, 256, (OC, C, 3, 3)).astype(np.uint8)
W_SCALE = RNG.uniform(0.002, 0.02, OC).astype(np.float32)
W_ZP = np.uint8(131)  # onnxruntime's ConvInteger takes a per-tensor weight zero point only
CONV_ATTRS = dict(strides=[2, 2], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1)


def _inputs(shape, kind: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "positive":
        return rng.uniform(0.1, 3.0, shape).astype(np.float32)
    if kind == "negative":
        return -rng.uniform(0.1, 3.0, shape).astype(np.float32)
    if kind == "tiny":
        return (rng.normal(size=shape) * 1e-30).astype(np.float32)
    if kind == "ties":  # multiples of scale/2 with scale 1/255 * 2: many exact .5 quotients
        return (rng.integers(-255, 256, shape) / np.float32(255.0)).astype(np.float32)
    return (rng.normal(size=shape) * 2).astype(np.float32)


KINDS = ["normal", "zeros", "positive", "negative", "tiny", "ties"]


@pytest.fixture(scope="module")
def module():
    return MultiOp(lambda x, xc: [
        dynamic.dynamic_matmul(x, _tvm.const(B_INT8), B_SCALE, np.int8(0)),
        dynamic.dynamic_conv2d(xc, _tvm.const(to_int8(W_UINT8)), W_SCALE, to_int8(W_ZP),
                               **CONV_ATTRS),
        dynamic.DYNAMIC_QUANTIZE.call([x], {}),
        dynamic.DYNAMIC_SCALE.call([x], {}),
        dynamic.DYNAMIC_ZERO_POINT.call([x], {}),
    ], {"x": ((2, M, K), "float32"), "xc": ((1, C, HW, HW), "float32")})


def _dynamic_nodes(product: helper.NodeProto) -> list:
    return [helper.make_node("DynamicQuantizeLinear", ["X"], ["q", "s", "z"]), product,
            helper.make_node("Cast", ["acc"], ["accf"], to=1),
            helper.make_node("Mul", ["s", "ws"], ["scale"]),
            helper.make_node("Mul", ["accf", "scale"], ["Y"])]


def _ort_matmul(x):
    """With ``x64quantprecision`` (as parity runs onnxruntime): on AVX2 without VNNI its u8 x s8
    kernel otherwise saturates int16 pair sums (docs/parity.md)."""
    nodes = _dynamic_nodes(helper.make_node("MatMulInteger", ["q", "B", "z"], ["acc"]))
    return run_graph(nodes, {"X": x}, {"B": B_INT8, "ws": B_SCALE}, np.float32,
                     config=U8S8_EXACT)


def _ort_conv(x):
    nodes = _dynamic_nodes(helper.make_node("ConvInteger", ["q", "W", "z", "wz"], ["acc"],
                                            strides=[2, 2], pads=[1, 1, 1, 1]))
    return run_graph(nodes, {"X": x}, {"W": W_UINT8, "wz": W_ZP,
                                       "ws": W_SCALE.reshape(OC, 1, 1)}, np.float32)


def _ort_quantize(x):
    """DynamicQuantizeLinear's three outputs, each run as the graph's output "Y"."""
    outs = []
    for i, dtype in enumerate((np.uint8, np.float32, np.uint8)):
        names = ["Y" if j == i else f"unused{j}" for j in range(3)]
        node = helper.make_node("DynamicQuantizeLinear", ["X"], names)
        outs.append(run_graph([node], {"X": x}, {}, dtype))
    return to_int8(outs[0]), outs[1], to_int8(outs[2])


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_matmul_and_conv_match_onnxruntime(kind, module):
    x, xc = _inputs((2, M, K), kind), _inputs((1, C, HW, HW), kind)
    ref, got = module.references(x=x, xc=xc), module.tvm(x=x, xc=xc)
    assert_bit_exact(_ort_matmul(x), ref[0], got[0], f"dynamic_matmul {kind}")
    assert_bit_exact(_ort_conv(xc), ref[1], got[1], f"dynamic_conv2d {kind}")


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_quantize_outputs_match_onnxruntime(kind, module):
    x = _inputs((2, M, K), kind)
    ref, got = module.references(x=x, xc=np.zeros((1, C, HW, HW), np.float32)), \
        module.tvm(x=x, xc=np.zeros((1, C, HW, HW), np.float32))
    for i, (oracle, what) in enumerate(zip(_ort_quantize(x), ("q", "scale", "zero point")), 2):
        assert_bit_exact(oracle, ref[i], got[i], f"{what} {kind}")
