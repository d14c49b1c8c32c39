"""AVERAGE_POOL_2D, MAX_POOL_2D, MEAN, RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR."""

from __future__ import annotations

import numpy as np

from canonqnn._tvm import relax

from ..._base import Inputs
from .._context import ImportContext, Unsupported, Value, constant, padding_2d, tflite_op
from .._schema import PADDINGS
from ..reader import Operator, Tensor
from .activation import fused_activation


@tflite_op("AVERAGE_POOL_2D", "MAX_POOL_2D")
def pool_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    x = ctx.as_nchw(inputs[0])
    opts = op.options
    _, h, w, _ = x.shape
    kernel, strides = (opts.FilterHeight(), opts.FilterWidth()), (opts.StrideH(), opts.StrideW())
    pads = padding_2d(PADDINGS.get(opts.Padding()), (h, w), kernel, strides)
    real = ctx.dq_stored(x, outputs[0])
    if op.kind == "AVERAGE_POOL_2D":  # TFLite divides by the taps inside the input
        y = relax.op.nn.avg_pool2d(real, kernel, strides, pads, layout="NCHW",
                                   count_include_pad=False)
    else:
        y = relax.op.nn.max_pool2d(real, kernel, strides, pads, layout="NCHW")
    y = fused_activation(ctx, ctx.emit(y), opts.FusedActivationFunction())
    return [ctx.quantized(y, outputs[0], nchw=True)]


@tflite_op("MEAN")
def mean_op(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor]) -> list[Value]:
    x = inputs[0]
    rank = len(x.shape)
    axes = sorted({int(a) % rank for a in constant(inputs[1], "MEAN axes").reshape(-1)})
    keepdims = bool(op.options.KeepDims()) if op.options is not None else False
    if rank == 4 and axes == [1, 2]:  # over H and W: the global average pool of NCHW
        x = ctx.as_nchw(x)
        y = ctx.emit(relax.op.mean(ctx.dq(x), axis=[2, 3], keepdims=keepdims))
        return [ctx.quantized(y, outputs[0], nchw=keepdims)]
    x = ctx.as_nhwc(x)
    total = ctx.emit(relax.op.sum(ctx.dq(x), axis=axes, keepdims=keepdims))
    count = np.float32(np.prod([x.shape[a] for a in axes]))
    return [ctx.quantized(ctx.emit(relax.op.divide(total, relax.const(count))), outputs[0])]


# (align_corners, half_pixel_centers) -> Relax coordinate_transformation_mode
BILINEAR_COORDINATES = {(False, False): "asymmetric", (True, False): "align_corners",
                        (False, True): "half_pixel"}
# ... and (mode, rounding_method) for nearest neighbour
NEAREST_COORDINATES = {(False, False): ("asymmetric", "floor"),
                       (True, False): ("align_corners", "round_prefer_ceil"),
                       (False, True): ("tf_half_pixel_for_nn", "floor")}


@tflite_op("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def resize_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    x = ctx.as_nchw(inputs[0])
    size = [int(v) for v in constant(inputs[1], "resize size").reshape(-1)]
    opts = op.options
    flags = (bool(opts.AlignCorners()), bool(opts.HalfPixelCenters())) if opts else (False, False)
    if flags == (True, True):
        raise Unsupported("align_corners and half_pixel_centers together")
    if op.kind == "RESIZE_BILINEAR":
        method, coordinate, rounding = "linear", BILINEAR_COORDINATES[flags], ""
    else:
        method = "nearest_neighbor"
        coordinate, rounding = NEAREST_COORDINATES[flags]
    y = ctx.emit(relax.op.image.resize2d(ctx.dq_stored(x, outputs[0]), size=tuple(size),
                                         layout="NCHW",
                                         method=method, coordinate_transformation_mode=coordinate,
                                         rounding_method=rounding))
    return [ctx.quantized(y, outputs[0], nchw=True)]
