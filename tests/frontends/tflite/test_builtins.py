"""Every TFLite builtin canonqnn imports, through the whole flow: import, canonicalize, build,
and bit-exact against the TFLite interpreter's reference kernels, with no float island.

One small model per case (NHWC tensors, int8 unless named u8); ``canonqnn.parity`` runs the
interpreter and the TVM build on seeded random inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from _tflite import T, run_tflite, single_op
from canonqnn.errors import ParityError, UnsupportedError
from canonqnn.testing.tflite_writer import GraphWriter

RNG = np.random.default_rng(7)
CONV = dict(padding="SAME", strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1,
            fusedActivationFunction="NONE")


def q(shape, scale=0.05, zp=0, dtype="int8"):
    return T(tuple(shape), dtype, scale, zp + (128 if dtype == "uint8" else 0))


def weights(shape, axis, per_channel=True, dtype="int8"):
    data = RNG.integers(-127, 128, shape).astype(np.int8)
    n = shape[axis]
    scale = RNG.uniform(0.002, 0.02, n if per_channel else 1).astype(np.float32)
    if dtype == "uint8":
        return T(tuple(shape), "uint8", scale, 140, (data.astype(np.int32) + 128).astype(np.uint8))
    return T(tuple(shape), "int8", scale, np.zeros(scale.size, np.int64), data, axis)


def bias(n, x_scale, w):
    scale = (np.float32(x_scale) * np.broadcast_to(w.scale, (n,))).astype(np.float32)
    stored = scale[:1] if np.size(w.scale) == 1 else scale
    return T((n,), "int32", stored, np.zeros(stored.size, np.int64),
             RNG.integers(-2000, 2000, n).astype(np.int32))


def conv_case(dtype="int8", act="RELU6", stride=2, padding="SAME"):
    w = weights((8, 3, 3, 4), 0, per_channel=dtype == "int8", dtype=dtype)
    out = (1, 5, 5, 8) if (stride, padding) == (2, "SAME") else (1, 7, 7, 8)
    return single_op("CONV_2D", [q((1, 9, 9, 4), 0.04, 5, dtype), w, bias(8, 0.04, w)],
                     [q(out, 0.03, -7, dtype)],
                     **dict(CONV, strideH=stride, strideW=stride, padding=padding,
                            fusedActivationFunction=act))


def depthwise_case(dtype="int8"):
    w = weights((1, 3, 3, 8), 3, per_channel=dtype == "int8", dtype=dtype)
    return single_op("DEPTHWISE_CONV_2D", [q((1, 8, 8, 4), 0.04, -3, dtype), w, bias(8, 0.04, w)],
                     [q((1, 6, 6, 8), 0.02, 4, dtype)],
                     **dict(CONV, padding="VALID", depthMultiplier=2,
                            fusedActivationFunction="RELU"))


def fully_connected_case(dtype="int8"):
    """On a 4-D input: TFLite flattens it in NHWC order."""
    w = weights((10, 48), 0, per_channel=False, dtype=dtype)
    return single_op("FULLY_CONNECTED", [q((1, 2, 3, 8), 0.05, 2, dtype), w, bias(10, 0.05, w)],
                     [q((1, 10), 0.2, -1, dtype)], fusedActivationFunction="RELU")


def transpose_conv_case():
    w = weights((6, 3, 3, 4), 0)
    return single_op("TRANSPOSE_CONV",
                     [T((4,), "int32", data=np.array([1, 10, 10, 6], np.int32)), w,
                      q((1, 5, 5, 4), 0.05, 1), bias(6, 0.05, w)],
                     [q((1, 10, 10, 6), 0.05, -3)], padding="SAME", strideH=2, strideW=2)


def binary_case(kind, dtype="int8", b_shape=(1, 4, 4, 6), act="NONE"):
    return single_op(kind, [q((1, 4, 4, 6), 0.05, 3, dtype), q(b_shape, 0.11, -9, dtype)],
                     [q((1, 4, 4, 6), 0.09, 2, dtype)], fusedActivationFunction=act)


def binary_case_scales(kind, scales, out_scale):
    return single_op(kind, [q((1, 4, 4, 6), scales[0], 3), q((1, 4, 4, 6), scales[1], -2)],
                     [q((1, 4, 4, 6), out_scale, 1)], fusedActivationFunction="NONE")


def pool_case(kind, dtype="int8", padding="SAME"):
    return single_op(kind, [q((1, 7, 7, 5), 0.05, 3, dtype)], [q((1, 4, 4, 5), 0.05, 3, dtype)],
                     padding=padding, strideH=2, strideW=2, filterHeight=3, filterWidth=3,
                     fusedActivationFunction="NONE")


def mean_case(keep, out_scale=0.05, out_zp=3):
    axes = T((2,), "int32", data=np.array([1, 2], np.int32))
    out = (1, 1, 1, 6) if keep else (1, 6)
    return single_op("MEAN", [q((1, 5, 4, 6), 0.05, 3), axes], [q(out, out_scale, out_zp)],
                     keepDims=keep)


def mean_axes_case(shape, axes, out, dtype="int8"):
    """MEAN over other axes (a layer norm's last axis, channels)."""
    return single_op("MEAN", [q(shape, 0.05, 3, dtype),
                              T((len(axes),), "int32", data=np.array(axes, np.int32))],
                     [q(out, 0.03, -5, dtype)], keepDims=len(out) == len(shape))


def unary_case(kind, out=(0.05, 3), dtype="int8", **options):
    return single_op(kind, [q((1, 4, 5, 6), 0.06, -4, dtype)],
                     [q((1, 4, 5, 6), out[0], out[1], dtype)], **options)


def two_op_model(first, second):
    """CONV_2D then a layout-sensitive op on its (NCHW-held) output."""
    g = GraphWriter()
    x = g.tensor("x", (1, 4, 4, 3), "int8", scale=0.05, zero_point=1)
    w = RNG.integers(-127, 128, (6, 1, 1, 3)).astype(np.int8)
    wt = g.tensor("w", w.shape, "int8", w, np.full(6, 0.01, np.float32), np.zeros(6, np.int64))
    # a per-channel bias for per-channel weights: the default interpreter refuses any other
    b = g.tensor("b", (6,), "int32", RNG.integers(-500, 500, 6).astype(np.int32),
                 np.full(6, np.float32(0.05) * np.float32(0.01)), np.zeros(6, np.int64))
    y = g.tensor("y", (1, 4, 4, 6), "int8", scale=0.02, zero_point=-5)
    g.op("CONV_2D", [x, wt, b], [y], **CONV)
    out = second(g, y)
    return g.finish([x], [out])


def reshape_after_conv(g, y):
    shape = g.tensor("shape", (2,), "int32", np.array([1, 96], np.int32))
    z = g.tensor("z", (1, 96), "int8", scale=0.02, zero_point=-5)
    g.op("RESHAPE", [y, shape], [z], newShape=[1, 96])
    return z


def transpose_after_conv(g, y):
    perm = g.tensor("perm", (4,), "int32", np.array([0, 3, 1, 2], np.int32))
    z = g.tensor("z", (1, 6, 4, 4), "int8", scale=0.02, zero_point=-5)
    g.op("TRANSPOSE", [y, perm], [z])
    return z


def concat_after_conv(g, y):
    """(TFLite's int8 CONCATENATION requires the output's parameters on every input.)"""
    other = g.tensor("other", (1, 4, 4, 2), "int8",
                     RNG.integers(-128, 128, (1, 4, 4, 2)).astype(np.int8), 0.02, -5)
    z = g.tensor("z", (1, 4, 4, 8), "int8", scale=0.02, zero_point=-5)
    g.op("CONCATENATION", [y, other], [z], axis=3, fusedActivationFunction="NONE")
    return z


def slice_after_conv(g, y):
    consts = [g.tensor(n, (4,), "int32", np.array(v, np.int32)) for n, v in
              (("b", [0, 1, 0, 2]), ("e", [1, 4, 3, 6]), ("s", [1, 2, 1, 1]))]
    z = g.tensor("z", (1, 2, 3, 4), "int8", scale=0.02, zero_point=-5)
    g.op("STRIDED_SLICE", [y, *consts], [z], beginMask=0, endMask=0, shrinkAxisMask=0)
    return z


def split_after_conv(g, y):
    axis = g.tensor("axis", (), "int32", np.array(3, np.int32))
    parts = [g.tensor(f"p{i}", (1, 4, 4, 3), "int8", scale=0.02, zero_point=-5)
             for i in range(2)]
    g.op("SPLIT", [axis, y], parts, numSplits=2)
    z = g.tensor("z", (1, 4, 4, 3), "int8", scale=0.04, zero_point=1)
    g.op("ADD", parts, [z], fusedActivationFunction="NONE")
    return z


def pad_after_conv(g, y, v2=False):
    pads = g.tensor("pads", (4, 2), "int32", np.array([[0, 0], [1, 2], [0, 1], [0, 0]],
                                                      np.int32))
    z = g.tensor("z", (1, 7, 5, 6), "int8", scale=0.02, zero_point=-5)
    if v2:
        value = g.tensor("value", (), "int8", np.array(7, np.int8), 0.02, -5)
        g.op("PADV2", [y, pads, value], [z])
    else:
        g.op("PAD", [y, pads], [z])
    return z


def gather_case():
    indices = T((3,), "int32", data=np.array([2, 0, 3], np.int32))
    return single_op("GATHER", [q((1, 5, 6), 0.05, 3), indices], [q((1, 5, 3), 0.05, 3)],
                     axis=2, batchDims=0)


def batch_matmul_case():
    return single_op("BATCH_MATMUL", [q((2, 4, 8), 0.05, 3), q((2, 8, 5), 0.04, -2)],
                     [q((2, 4, 5), 0.3, 1)], adjX=False, adjY=False)


def resize_case(kind, align, half):
    size = T((2,), "int32", data=np.array([8, 10], np.int32))
    return single_op(kind, [q((1, 4, 5, 3), 0.05, 3), size], [q((1, 8, 10, 3), 0.05, 3)],
                     alignCorners=align, halfPixelCenters=half)


def quantize_edges_case():
    """float input -> QUANTIZE -> int8 LOGISTIC -> DEQUANTIZE -> float output."""
    g = GraphWriter()
    x = g.tensor("x", (1, 16), "float32")
    xq = g.tensor("xq", (1, 16), "int8", scale=0.03, zero_point=2)
    y = g.tensor("y", (1, 16), "int8", scale=1 / 256, zero_point=-128)
    out = g.tensor("out", (1, 16), "float32")
    g.op("QUANTIZE", [x], [xq])
    g.op("LOGISTIC", [xq], [y])
    g.op("DEQUANTIZE", [y], [out])
    return g.finish([x], [out])


def ints(values):
    return T((len(values),), "int32", data=np.array(values, np.int32))


def extremum_case(kind, b_shape, out=(0.05, 3)):
    """The interpreter compares stored integers: an output of other parameters gets them."""
    return single_op(kind, [q((1, 4, 4, 6), 0.05, 3), q(b_shape, 0.05, 3)],
                     [q((1, 4, 4, 6), *out)])


def pack_case():
    return single_op("PACK", [q((2, 5), 0.05, 3), q((2, 5), 0.05, 3)], [q((2, 2, 5), 0.05, 3)],
                     valuesCount=2, axis=1)


def unpack_case():
    return single_op("UNPACK", [q((3, 4, 2), 0.05, 3)], [q((3, 2), 0.05, 3)] * 4, num=4, axis=1)


def gather_nd_case():
    indices = T((3, 2), "int32", data=np.array([[1, 0], [0, 3], [1, 2]], np.int32))
    return single_op("GATHER_ND", [q((2, 4, 5), 0.05, 3), indices], [q((3, 5), 0.05, 3)])


def argmax_case(dtype):
    return single_op("ARG_MAX", [q((2, 7, 5), 0.05, 3), ints([1])],
                     [T((2, 5), dtype)], outputType={"int32": 2, "int64": 4}[dtype])


def shape_subgraph_case():
    """``SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE`` and ``REDUCE_PROD``, as today's converter
    writes a flatten: the target [batch, prod(rest)] computed from the input's shape."""
    g = GraphWriter()
    x = g.tensor("x", (1, 3, 4, 5), "int8", scale=0.05, zero_point=3)
    shape = g.tensor("shape", (4,), "int32")
    batch = g.tensor("batch", (), "int32")
    rest = g.tensor("rest", (3,), "int32")
    count = g.tensor("count", (), "int32")
    target = g.tensor("target", (2,), "int32")
    y = g.tensor("y", (1, 60), "int8", scale=0.05, zero_point=3)
    const = {n: g.tensor(n, (1,), "int32", data=np.array([v], np.int32))
             for n, v in (("zero", 0), ("one", 1), ("four", 4))}
    g.op("SHAPE", [x], [shape], outType=2)
    g.op("STRIDED_SLICE", [shape, const["zero"], const["one"], const["one"]], [batch],
         beginMask=0, endMask=0, shrinkAxisMask=1)
    g.op("STRIDED_SLICE", [shape, const["one"], const["four"], const["one"]], [rest],
         beginMask=0, endMask=0, shrinkAxisMask=0)
    g.op("REDUCE_PROD", [rest, const["zero"]], [count], keepDims=False)
    g.op("PACK", [batch, count], [target], valuesCount=2, axis=0)
    g.op("RESHAPE", [x, target], [y])
    return g.finish([x], [y])


def rsqrt_case(shape=(1, 4, 5, 6), in_zp=-128):
    """TFLite's int8 RSQRT refuses inputs below the zero point; with zero point -128 (what the
    converter gives a non-negative tensor) every code is valid and -128 reads as zero."""
    return single_op("RSQRT", [q(shape, 0.02, in_zp)], [q(shape, 0.04, -110)])


def squared_difference_case(b_shape, b_scale=0.05, b_zp=3):
    return single_op("SQUARED_DIFFERENCE", [q((1, 4, 5, 6), 0.05, 3), q(b_shape, b_scale, b_zp)],
                     [q((1, 4, 5, 6), 0.08, -128)])


def keras_layer_norm_case():
    """int8 layer normalization over the last axis as Keras 3 / TF 2.21's converter writes it
    (gamma 1, beta 0): mean, variance = MEAN(SQUARED_DIFFERENCE(x, mean)), inv = RSQRT(variance
    + epsilon), then x * inv - mean * inv."""
    g = GraphWriter()
    t = {name: g.tensor(name, shape, "int8", scale=scale, zero_point=zp) for name, shape, scale,
         zp in (("x", (1, 8, 16), 0.05, 3), ("mean", (1, 8, 1), 0.02, 8),
                ("squares", (1, 8, 16), 0.16, -128), ("variance", (1, 8, 1), 0.05, -128),
                ("shifted", (1, 8, 1), 0.05, -128), ("inv", (1, 8, 1), 0.018, -128),
                ("scaled", (1, 8, 16), 0.03, 0), ("mean_scaled", (1, 8, 1), 0.03, 0),
                ("y", (1, 8, 16), 0.03, 0))}
    axis = g.tensor("axis", (1,), "int32", np.array([2], np.int32))
    epsilon = g.tensor("epsilon", (1,), "int8", np.array([127], np.int8), 1e-3 / 127, 0)
    g.op("MEAN", [t["x"], axis], [t["mean"]], keepDims=True)
    g.op("SQUARED_DIFFERENCE", [t["x"], t["mean"]], [t["squares"]])
    g.op("MEAN", [t["squares"], axis], [t["variance"]], keepDims=True)
    g.op("ADD", [t["variance"], epsilon], [t["shifted"]], fusedActivationFunction="NONE")
    g.op("RSQRT", [t["shifted"]], [t["inv"]])
    g.op("MUL", [t["x"], t["inv"]], [t["scaled"]], fusedActivationFunction="NONE")
    g.op("MUL", [t["mean"], t["inv"]], [t["mean_scaled"]], fusedActivationFunction="NONE")
    g.op("SUB", [t["scaled"], t["mean_scaled"]], [t["y"]], fusedActivationFunction="NONE")
    return g.finish([t["x"]], [t["y"]])


# ---------------------------------------------------------------- 16x8 (int16 activations)
def q16(shape, scale):
    """An int16 activation as the 16x8 converter writes it: zero point 0."""
    return T(tuple(shape), "int16", np.float32(scale), 0)


def bias16(n, x_scale, w, dtype="int64"):
    scale = (np.float32(x_scale) * np.broadcast_to(w.scale, (n,))).astype(np.float32)
    stored = scale[:1] if np.size(w.scale) == 1 else scale
    return T((n,), dtype, stored, np.zeros(stored.size, np.int64),
             RNG.integers(-40000, 40000, n).astype(dtype))


def mean16_case(axes, keepdims):
    shape = (1, 5, 6, 8)
    out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keepdims else \
        tuple(d for i, d in enumerate(shape) if i not in axes)
    return single_op("MEAN", [q16(shape, 7e-4), T((len(axes),), "int32", data=np.array(
        axes, np.int32))], [q16(out, 3e-4)], keepDims=keepdims)


INT32_BIAS_TYPE = 2  # tflite.TensorType.INT32: quantized_bias_type of an int32 16x8 bias


def conv16_case(act="RELU", bias_dtype="int64"):
    w = weights((8, 3, 3, 4), 0)
    options = dict(quantizedBiasType=INT32_BIAS_TYPE) if bias_dtype == "int32" else {}
    return single_op("CONV_2D", [q16((1, 9, 9, 4), 1 / 4096), w, bias16(8, 1 / 4096, w,
                                                                       bias_dtype)],
                     [q16((1, 5, 5, 8), 1 / 1024)],
                     **dict(CONV, strideH=2, strideW=2, fusedActivationFunction=act), **options)


def depthwise16_case():
    w = weights((1, 3, 3, 8), 3)
    return single_op("DEPTHWISE_CONV_2D", [q16((1, 8, 8, 4), 1e-3), w, bias16(8, 1e-3, w)],
                     [q16((1, 6, 6, 8), 2e-3)],
                     **dict(CONV, padding="VALID", depthMultiplier=2,
                            fusedActivationFunction="RELU6"))


def fully_connected16_case(bias_dtype="int64"):
    """On a 4-D input of 4 rows, as FULLY_CONNECTED flattens it (NHWC order)."""
    w = weights((10, 48), 0, per_channel=False)
    options = dict(quantizedBiasType=INT32_BIAS_TYPE) if bias_dtype == "int32" else {}
    return single_op("FULLY_CONNECTED", [q16((4, 2, 3, 8), 1 / 2048), w,
                                         bias16(10, 1 / 2048, w, bias_dtype)],
                     [q16((4, 10), 1 / 256)], fusedActivationFunction="RELU", **options)


def quantize16_edges_case():
    """float -> QUANTIZE (int16) -> CONV_2D 16x8 -> DEQUANTIZE -> float."""
    g = GraphWriter()
    x = g.tensor("x", (1, 6, 6, 3), "float32")
    xq = g.tensor("xq", (1, 6, 6, 3), "int16", scale=1 / 4096, zero_point=0)
    w = RNG.integers(-127, 128, (4, 1, 1, 3)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.02, 4).astype(np.float32)
    wt = g.tensor("w", w.shape, "int8", w, ws, np.zeros(4, np.int64))
    b = g.tensor("b", (4,), "int64", RNG.integers(-5000, 5000, 4),
                 (np.float32(1 / 4096) * ws).astype(np.float32), np.zeros(4, np.int64))
    y = g.tensor("y", (1, 6, 6, 4), "int16", scale=1 / 2048, zero_point=0)
    out = g.tensor("out", (1, 6, 6, 4), "float32")
    g.op("QUANTIZE", [x], [xq])
    g.op("CONV_2D", [xq, wt, b], [y], **CONV)
    g.op("DEQUANTIZE", [y], [out])
    return g.finish([x], [out])


def movement16_case(kind):
    x = q16((1, 4, 4, 6), 1e-3)
    if kind == "PAD":
        pads = np.array([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32)
        return single_op("PAD", [x, T((4, 2), "int32", data=pads)], [q16((1, 7, 5, 6), 1e-3)])
    if kind == "STRIDED_SLICE":
        return single_op("STRIDED_SLICE", [x, ints([0, 1, 0, 2]), ints([1, 4, 3, 6]),
                                           ints([1, 2, 1, 1])], [q16((1, 2, 3, 4), 1e-3)],
                         beginMask=0, endMask=0, shrinkAxisMask=0)
    return single_op("RESHAPE", [x, ints([1, 96])], [q16((1, 96), 1e-3)], newShape=[1, 96])


CASES = {
    "conv2d_per_channel_same_stride2_relu6": lambda: conv_case(),
    "conv2d_valid_u8": lambda: conv_case("uint8", act="RELU", stride=1, padding="VALID"),
    "depthwise_multiplier2_valid_relu": lambda: depthwise_case(),
    "depthwise_u8": lambda: depthwise_case("uint8"),
    "fully_connected_flattens_4d": lambda: fully_connected_case(),
    "fully_connected_u8": lambda: fully_connected_case("uint8"),
    "transpose_conv": transpose_conv_case,
    "batch_matmul": batch_matmul_case,
    "add": lambda: binary_case("ADD", act="RELU6"),
    "add_broadcast_channels": lambda: binary_case("ADD", b_shape=(6,)),
    "add_u8": lambda: binary_case("ADD", "uint8"),
    "sub": lambda: binary_case("SUB"),
    "mul": lambda: binary_case("MUL"),
    # scale ratios below what the XNNPACK delegate takes: the built-in kernels compute them
    # (above it, where nearly every value saturates, TFLite's optimized ADD wraps where its
    # reference kernel saturates: docs/parity.md)
    "add_below_the_delegates_scale_ratios": lambda: binary_case_scales(
        "ADD", (0.00003, 0.05), 0.08),
    "sub_below_the_delegates_scale_ratios": lambda: binary_case_scales(
        "SUB", (0.00005, 0.05), 0.08),
    "mul_below_the_delegates_scale_ratios": lambda: binary_case_scales(
        "MUL", (0.02, 0.0005), 0.7),
    "mul_u8": lambda: binary_case("MUL", "uint8"),
    "average_pool_same": lambda: pool_case("AVERAGE_POOL_2D"),
    "average_pool_u8": lambda: pool_case("AVERAGE_POOL_2D", "uint8"),
    "max_pool": lambda: pool_case("MAX_POOL_2D"),
    "mean_hw_keepdims": lambda: mean_case(True),
    "mean_hw_requantized": lambda: mean_case(False, 0.02, -6),
    "mean_last_axis_keepdims": lambda: mean_axes_case((1, 16, 32), [-1], (1, 16, 1)),
    "mean_channels_u8": lambda: mean_axes_case((1, 4, 5, 6), [3], (1, 4, 5), "uint8"),
    "mean_hw_u8": lambda: mean_axes_case((1, 4, 5, 6), [1, 2], (1, 1, 1, 6), "uint8"),
    "reshape_restores_nhwc_order": lambda: two_op_model(None, reshape_after_conv),
    "transpose": lambda: two_op_model(None, transpose_after_conv),
    "concatenation_channels": lambda: two_op_model(None, concat_after_conv),
    "concatenation_u8_rescales": lambda: single_op(
        "CONCATENATION", [q((1, 3, 4, 2), 0.05, 3, "uint8"), q((1, 3, 4, 5), 0.11, -9, "uint8")],
        [q((1, 3, 4, 7), 0.08, 1, "uint8")], axis=3, fusedActivationFunction="NONE"),
    "strided_slice": lambda: two_op_model(None, slice_after_conv),
    "split": lambda: two_op_model(None, split_after_conv),
    "pad": lambda: two_op_model(None, pad_after_conv),
    "padv2": lambda: two_op_model(None, lambda g, y: pad_after_conv(g, y, v2=True)),
    "gather": gather_case,
    "squeeze": lambda: single_op("SQUEEZE", [q((1, 1, 5, 6))], [q((5, 6))], squeezeDims=[0, 1]),
    "resize_bilinear": lambda: resize_case("RESIZE_BILINEAR", False, False),
    "resize_bilinear_half_pixel": lambda: resize_case("RESIZE_BILINEAR", False, True),
    "resize_bilinear_align_corners": lambda: resize_case("RESIZE_BILINEAR", True, False),
    "resize_nearest": lambda: resize_case("RESIZE_NEAREST_NEIGHBOR", False, False),
    "resize_nearest_half_pixel": lambda: resize_case("RESIZE_NEAREST_NEIGHBOR", False, True),
    "resize_nearest_align_corners": lambda: resize_case("RESIZE_NEAREST_NEIGHBOR", True, False),
    "softmax": lambda: single_op("SOFTMAX", [q((2, 10), 0.1, 3)], [q((2, 10), 1 / 256, -128)],
                                 beta=1.0),
    "softmax_u8": lambda: single_op("SOFTMAX", [q((2, 10), 0.1, 3, "uint8")],
                                    [q((2, 10), 1 / 256, -128, "uint8")], beta=1.0),
    "logistic": lambda: unary_case("LOGISTIC", (1 / 256, -128)),
    "logistic_u8": lambda: unary_case("LOGISTIC", (1 / 256, -128), "uint8"),
    "tanh": lambda: unary_case("TANH", (1 / 128, 0)),
    "hard_swish": lambda: unary_case("HARD_SWISH", (0.04, -20)),
    "elu": lambda: unary_case("ELU", (0.04, -100)),
    "leaky_relu": lambda: unary_case("LEAKY_RELU", (0.05, 10), alpha=0.2),
    "gelu": lambda: unary_case("GELU", (0.03, -40), approximate=False),
    "relu": lambda: unary_case("RELU", (0.06, -4)),
    "relu6_requantized": lambda: unary_case("RELU6", (0.03, -128)),
    "quantize_requantizes": lambda: unary_case("QUANTIZE", (0.09, 11)),
    "quantize_dequantize_at_the_edges": quantize_edges_case,
    "maximum": lambda: extremum_case("MAXIMUM", (1, 4, 4, 6)),
    "minimum_broadcast": lambda: extremum_case("MINIMUM", (6,)),
    "maximum_stored_values_other_output_scale": lambda: extremum_case(
        "MAXIMUM", (1, 4, 4, 6), out=(0.09, 2)),
    "reduce_max": lambda: single_op("REDUCE_MAX", [q((2, 6, 5), 0.05, 3), ints([1])],
                                    [q((2, 5), 0.05, 3)], keepDims=False),
    "reduce_max_keepdims_u8": lambda: single_op(
        "REDUCE_MAX", [q((1, 4, 4, 6), 0.05, 3, "uint8"), ints([1, 2])],
        [q((1, 1, 1, 6), 0.05, 3, "uint8")], keepDims=True),
    "arg_max_int32": lambda: argmax_case("int32"),
    "arg_max_int64": lambda: argmax_case("int64"),
    "tile": lambda: single_op("TILE", [q((2, 3), 0.05, 3), ints([2, 3])],
                              [q((4, 9), 0.05, 3)]),
    "pack": pack_case,
    "unpack": unpack_case,
    "gather_nd": gather_nd_case,
    "shape_subgraph_reshape": shape_subgraph_case,
    "rsqrt": rsqrt_case,
    "squared_difference_broadcast": lambda: squared_difference_case((1, 4, 5, 1)),
    "squared_difference_input_scales": lambda: squared_difference_case((1, 4, 5, 6), 0.13, -20),
    "keras_int8_layer_norm": keras_layer_norm_case,
    "conv2d_16x8_per_channel_relu": conv16_case,
    "conv2d_16x8_int32_bias": lambda: conv16_case("RELU6", "int32"),
    "depthwise_16x8": depthwise16_case,
    "fully_connected_16x8": fully_connected16_case,
    "fully_connected_16x8_int32_bias": lambda: fully_connected16_case("int32"),
    "quantize_16x8_requantizes": lambda: single_op("QUANTIZE", [q16((1, 4, 5, 6), 1 / 4096)],
                                                   [q16((1, 4, 5, 6), 1e-3)]),
    "quantize_dequantize_16x8_at_the_edges": quantize16_edges_case,
    "pad_16x8": lambda: movement16_case("PAD"),
    "strided_slice_16x8": lambda: movement16_case("STRIDED_SLICE"),
    "reshape_16x8": lambda: movement16_case("RESHAPE"),
    "add_16x8_broadcast_channels": lambda: single_op(
        "ADD", [q16((1, 4, 4, 6), 1e-3), q16((6,), 2.0 ** -11)], [q16((1, 4, 4, 6), 3e-3)],
        fusedActivationFunction="RELU", potScaleInt16=False),
    "leaky_relu_16x8": lambda: single_op("LEAKY_RELU", [q16((1, 4, 4, 6), 1e-3)],
                                         [q16((1, 4, 4, 6), 7e-4)], alpha=0.1),
    "logistic_16x8": lambda: single_op("LOGISTIC", [q16((1, 4, 4, 6), 3e-4)],
                                       [q16((1, 4, 4, 6), 1 / 32768)]),
    # a power-of-two input scale: the optimized kernel computes it in fixed point
    "logistic_16x8_power_of_two_input": lambda: single_op(
        "LOGISTIC", [q16((1, 4, 4, 6), 2.0 ** -12)], [q16((1, 4, 4, 6), 1 / 32768)]),
    "tanh_16x8": lambda: single_op("TANH", [q16((1, 4, 4, 6), 2.0 ** -12)],
                                   [q16((1, 4, 4, 6), 1 / 32768)]),
    "mean_16x8_height_width": lambda: mean16_case((1, 2), keepdims=False),
    "mean_16x8_channels_keepdims": lambda: mean16_case((3,), keepdims=True),
    "softmax_16x8": lambda: single_op("SOFTMAX", [q16((1, 3, 10), 6e-4)],
                                      [q16((1, 3, 10), 1 / 32768)], beta=1.0),
}


# Builtins the reference resolver (BUILTIN_REF) has no kernel for, in any operator version.
NO_REFERENCE_KERNEL = {"elu": "ELU"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_is_bit_exact_with_tflite_reference_kernels(case):
    if case in NO_REFERENCE_KERNEL:
        with pytest.raises(ParityError, match=f"Didn't find op for builtin opcode "
                                              f"'{NO_REFERENCE_KERNEL[case]}'"):
            canonqnn.parity(CASES[case](), runs=2, numerics="tflite-reference")
        return
    result = canonqnn.parity(CASES[case](), runs=2, numerics="tflite-reference")
    assert result.float_islands == [], result.summary()
    assert result.exact, result.summary()
    assert "reference kernels" in result.reference


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_is_bit_exact_with_the_default_interpreter(case):
    """The interpreter as users run it: on x86-64 its XNNPACK delegate computes the operators
    it takes (``tflite-xnnpack-x86``), the built-in kernels the rest."""
    result = canonqnn.parity(CASES[case](), runs=1)
    assert result.float_islands == [], result.summary()
    assert result.exact, result.summary()
    assert "default" in result.reference


# XNNPACK picks its kernels by the CPU's class; on an AVX-512 host a child masked to AVX2
# (tests/support/cpuid_mask.py) runs the AVX2 ones, so the default interpreter's profile is
# checked on both (tests/frontends/tflite/test_runtime.py: the mask reaches the interpreter).
AVX2_CASES = ("conv2d_per_channel_same_stride2_relu6", "depthwise_multiplier2_valid_relu",
              "fully_connected_u8", "add_broadcast_channels", "sub", "mul", "mean_hw_keepdims",
              "mean_last_axis_keepdims", "quantize_requantizes", "resize_bilinear_half_pixel",
              "logistic", "tanh", "leaky_relu", "transpose_conv")


@pytest.mark.parametrize("case", AVX2_CASES)
def test_builtin_is_bit_exact_with_the_default_interpreter_on_an_avx2_class(case):
    from support import cpuid_mask

    if (reason := cpuid_mask.unavailable("x86-avx2")) is not None:
        pytest.skip(reason)
    with cpuid_mask.masked("x86-avx2"):
        result = canonqnn.parity(CASES[case](), runs=1, numerics="tflite-xnnpack-x86")
    assert "default" in result.reference and result.exact, result.summary()


@pytest.mark.parametrize("in_zp", [-128, -20, 90])
def test_rsqrt_is_bit_exact_on_every_code_from_the_zero_point_up(in_zp):
    """Every input TFLite accepts, the zero point (zero: 127) included."""
    codes = np.arange(in_zp, 128, dtype=np.int8)
    x = np.resize(codes, 256).astype(np.int8).reshape(1, 256)
    result = canonqnn.parity(rsqrt_case((1, 256), in_zp), {"in0": x})
    assert result.float_islands == [], result.summary()
    assert result.exact, result.summary()


def test_rsqrt_below_the_zero_point_is_refused_by_tflite():
    """TFLite raises on codes below the input zero point, so no result exists to match there;
    canonqnn's table holds the kernel's value for zero (127), as docs/spec.md says."""
    model = rsqrt_case((1, 2), -20)
    with pytest.raises(RuntimeError, match="Rsqrt is only defined for positive values"):
        run_tflite(model, [np.array([[-21, 0]], np.int8)])
    built = canonqnn.build(canonqnn.canonicalize(canonqnn.load(model))[0])
    np.testing.assert_array_equal(built.run({"in0": np.array([[-128, -21]], np.int8)})["out0"],
                                  [[127, 127]])


def test_unsupported_uint8_rsqrt_and_squared_difference_name_the_op():
    for model, kind in ((single_op("RSQRT", [q((1, 4), 0.02, -128, "uint8")],
                                   [q((1, 4), 0.04, -110, "uint8")]), "RSQRT"),
                        (single_op("SQUARED_DIFFERENCE", [q((1, 4), 0.05, 3, "uint8")] * 2,
                                   [q((1, 4), 0.08, -128, "uint8")]), "SQUARED_DIFFERENCE"),
                        (unary_case("ELU", (0.04, 60), "uint8"), "ELU")):
        with pytest.raises(UnsupportedError, match=rf"\(op {kind}\): {kind} on uint8"):
            canonqnn.load(model)


def test_16x8_int32_bias_without_its_declared_type_is_refused():
    """Without quantized_bias_type INT32 the interpreter reads an int32 16x8 bias as int64 (its
    results are then meaningless): canonqnn names the operator instead of matching them."""
    w = weights((8, 3, 3, 4), 0)
    model = single_op("CONV_2D", [q16((1, 9, 9, 4), 1 / 4096), w, bias16(8, 1 / 4096, w, "int32")],
                      [q16((1, 9, 9, 8), 1 / 1024)], **CONV)
    with pytest.raises(UnsupportedError, match=r"\(op CONV_2D\): int32 bias on a 16x8 CONV_2D"):
        canonqnn.load(model)


def test_16x8_ops_without_a_canonical_int16_kernel_are_named_float_islands():
    """int16 MUL and AVERAGE_POOL_2D (kernels of their own) stay float, named, never folded
    into an int8 kernel."""
    for model, op in ((single_op("MUL", [q16((1, 4, 4, 6), 1e-3), q16((1, 4, 4, 6), 2e-3)],
                                 [q16((1, 4, 4, 6), 3e-3)], fusedActivationFunction="NONE"),
                       "relax.multiply"),
                      (single_op("AVERAGE_POOL_2D", [q16((1, 4, 4, 6), 1e-3)],
                                 [q16((1, 2, 2, 6), 1e-3)], padding="VALID", strideH=2,
                                 strideW=2, filterHeight=2, filterWidth=2,
                                 fusedActivationFunction="NONE"), "relax.nn.avg_pool2d")):
        _, report = canonqnn.canonicalize(canonqnn.load(model))
        assert [i.op for i in report.float_islands] == [op], report.summary()
        assert "TFLite 16x8" in report.float_islands[0].reason


def test_16x8_add_with_power_of_two_scales_is_refused():
    """pot_scale_int16 (true unless the model says false) with power-of-two scales runs
    TFLite's power-of-two int16 ADD, another arithmetic than the general one canonqnn.add
    reproduces."""
    model = single_op("ADD", [q16((1, 4, 6), 2.0 ** -12), q16((1, 4, 6), 2.0 ** -11)],
                      [q16((1, 4, 6), 2.0 ** -10)], fusedActivationFunction="NONE")
    with pytest.raises(UnsupportedError, match=r"\(op ADD\): int16 ADD with power-of-two"):
        canonqnn.load(model)
