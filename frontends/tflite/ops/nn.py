"""Convolutions and matrix products: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV,
FULLY_CONNECTED, BATCH_MATMUL.

Weights become int8 constants in Relax layouts (OIHW; IOHW for the transposed convolution)
under a dequantize along their output-channel axis. The int32 bias is dequantized with scale
``input_scale * weight_scale`` (per channel): TFLite adds the stored integers to its
accumulator whatever scale the file records, and this is the scale that means the same.

16x8 layers (int16 input and output, int8 weights) hold their int64 bias as an int32 constant
whose dequantize carries ``source_dtype="int64"``: the bias's type is the accumulator's
(docs/spec.md, conv2d), and Relax's dequantize takes no int64.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.ops import conv as conv_ops
from canonqnn.ops import conv_transpose as conv_transpose_ops
from canonqnn.ops import matmul as matmul_ops
from canonqnn.qparams import QParams, product_scale, uint8_to_int8

from ..._base import Inputs
from .._context import (
    ImportContext,
    Unsupported,
    Value,
    constant,
    padding_2d,
    tensor_qparams,
    tflite_op,
)
from .._schema import DTYPES, PADDINGS
from ..reader import Operator, Tensor
from .activation import fused_activation

NOT_SET = 0  # a quantized_bias_type of FLOAT32 (the schema's default) means "not given"
INT32 = np.iinfo(np.int32)


def _weight(ctx: ImportContext, w: Value, tensor_axis: int, layout: tuple[int, ...],
            relax_axis: int) -> tuple[object, QParams]:
    """The dequantized weight constant permuted by ``layout`` and its parameters (per-channel
    parameters must run along ``tensor_axis`` of the model's tensor)."""
    data = constant(w, "weight")
    if w.qparams is None or w.dtype not in ("int8", "uint8"):
        raise Unsupported(f"weight of type {w.dtype}{'' if w.qparams else ' (not quantized)'}; "
                          "int8 or uint8 weights required (hybrid float kernels are not "
                          "supported)")
    qp = w.qparams
    if not qp.per_tensor:
        if qp.axis != tensor_axis:
            raise Unsupported(f"weight quantized along axis {qp.axis}, not the output channels "
                              f"(axis {tensor_axis})")
        qp = QParams(qp.scale, qp.zero_point, relax_axis, qp.dtype)
    q = uint8_to_int8(data) if w.dtype == "uint8" else data.astype(np.int8)
    q = np.ascontiguousarray(q.transpose(layout))
    return ctx.emit(qdq.dequantize(_tvm.const(q), qp)), qp


def _bias(ctx: ImportContext, b: Value | None, x_qp: QParams, w_qp: QParams, channels: int,
          shape, canonical) -> object | None:
    """The dequantized bias; its values as the ``canonical`` op's bias rule accepts them."""
    if b is None:
        return None
    data = constant(b, "bias")
    dtype = "int64" if b.dtype == "int64" and x_qp.dtype == "int16" else "int32"
    if b.dtype != dtype:
        raise Unsupported(f"bias of type {b.dtype} with {data.size} values for {channels} "
                          "channels (int32, or int64 for int16 input, one per output channel, "
                          "required)")
    if (why := canonical.accepts(bias_shape=(data.size,), channels=channels)) is not None:
        raise Unsupported(why)
    if data.size and (data.min() < INT32.min or data.max() > INT32.max):
        raise Unsupported("int64 bias values beyond the int32 range (the fake-quant form holds "
                          "the bias as int32)")
    scale = product_scale(x_qp.scale, w_qp.scale).reshape(-1)
    qp = (QParams.make(scale[0], 0, None, "int32") if scale.size == 1 else
          QParams.make(scale, np.zeros(channels, np.int32), 0, "int32"))
    real = ctx.emit(qdq.dequantize(_tvm.const(data.astype(np.int32).reshape(channels)), qp,
                                   source_dtype=qdq.source_dtype(dtype)))
    return ctx.emit(relax.op.reshape(real, shape)) if len(shape) != 1 else real


def _sixteen_by_eight(op, canonical, x: Value, w_qp: QParams, b: Value | None, out) -> None:
    """A 16x8 layer (int16 input) as the canonical op (``conv.CONV2D``, ``matmul.MATMUL``)
    accepts it, else Unsupported with its reason; and the bias as TFLite's kernels read it:
    int64 unless the operator's ``quantized_bias_type`` says INT32 (DEPTHWISE_CONV_2D has no
    such option and refuses int32)."""
    if x.dtype != "int16" or x.qparams is None:
        return
    out_qp = tensor_qparams(out)
    x_name, w_name = ("x", "w") if canonical.name == "conv2d" else ("a", "b")
    why = canonical.accepts(**{
        f"{x_name}_dtype": x.dtype, "out_dtype": out.dtype if out_qp else "float32",
        "accumulator": b.dtype if b is not None and b.dtype == "int64" else "int32",
        "zero_points": {f"{x_name}_zp": x.qparams.zero_point, f"{w_name}_zp": w_qp.zero_point,
                        "out_zp": out_qp.zero_point if out_qp else 0}})
    if why is not None:
        raise Unsupported(why)
    if b is None:
        return
    code = getattr(op.options, "QuantizedBiasType", lambda: NOT_SET)()
    declared = None if code == NOT_SET else DTYPES.get(code, str(code))
    if b.dtype == "int32" and declared != "int32":
        raise Unsupported(f"int32 bias on a 16x8 {op.kind} without quantized_bias_type INT32 "
                          "(the interpreter reads it as int64, or refuses it)")
    if declared not in (None, b.dtype):
        raise Unsupported(f"{b.dtype} bias on a 16x8 {op.kind} whose quantized_bias_type is "
                          f"{declared}")


def _padding(opts) -> str:
    return PADDINGS.get(opts.Padding(), str(opts.Padding()))


def _conv(ctx: ImportContext, op: Operator, inputs: Inputs, outputs: list[Tensor],
          depthwise: bool) -> list[Value]:
    x, w = ctx.as_nchw(inputs[0]), inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    opts = op.options
    if len(x.shape) != 4:
        raise Unsupported(f"input of rank {len(x.shape)} (4-D NHWC required)")
    n, h, wd, c = x.shape
    if depthwise:  # [1, KH, KW, C*M] -> OIHW [C*M, 1, KH, KW], per channel along dim 3
        _, kh, kw, o = constant(w, "weight").shape
        groups = c
        wq, w_qp = _weight(ctx, w, 3, (3, 0, 1, 2), 0)
    else:  # OHWI [O, KH, KW, I] -> OIHW, per channel along dim 0
        o, kh, kw, i = constant(w, "weight").shape
        if c % i:
            raise Unsupported(f"{c} input channels for a filter of {i}")
        groups = c // i
        wq, w_qp = _weight(ctx, w, 0, (0, 3, 1, 2), 0)
    _sixteen_by_eight(op, conv_ops.CONV2D, x, w_qp, b, outputs[0])
    strides = (opts.StrideH(), opts.StrideW())
    dilation = (opts.DilationHFactor(), opts.DilationWFactor())
    pads = padding_2d(_padding(opts), (h, wd), (kh, kw), strides, dilation)
    y = ctx.emit(_tvm.conv2d(ctx.dq(x), wq, strides, pads, dilation, groups, "float32"))
    bias = _bias(ctx, b, x.qparams, w_qp, o, (1, o, 1, 1), conv_ops.CONV2D)
    if bias is not None:
        y = ctx.emit(relax.op.add(y, bias))
    y = fused_activation(ctx, y, opts.FusedActivationFunction())
    return [ctx.quantized(y, outputs[0], nchw=True)]


@tflite_op("CONV_2D")
def conv2d_op(ctx: ImportContext, op: Operator, inputs: Inputs,
              outputs: list[Tensor]) -> list[Value]:
    return _conv(ctx, op, inputs, outputs, depthwise=False)


@tflite_op("DEPTHWISE_CONV_2D")
def depthwise_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                 outputs: list[Tensor]) -> list[Value]:
    return _conv(ctx, op, inputs, outputs, depthwise=True)


@tflite_op("TRANSPOSE_CONV")
def transpose_conv_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                      outputs: list[Tensor]) -> list[Value]:
    out_shape = [int(v) for v in constant(inputs[0], "output shape").reshape(-1)]
    w, x = inputs[1], ctx.as_nchw(inputs[2])
    b = inputs[3] if len(inputs) > 3 else None
    opts = op.options
    o, kh, kw, i = constant(w, "weight").shape
    n, h, wd, c = x.shape
    if c != i:
        raise Unsupported(f"{c} input channels for a filter of {i} (groups are not supported)")
    wq, w_qp = _weight(ctx, w, 0, (3, 0, 1, 2), 1)  # OHWI -> IOHW, per channel along O
    strides = (opts.StrideH(), opts.StrideW())
    oh, ow = out_shape[1], out_shape[2]
    pads, output_padding = [0, 0, 0, 0], [0, 0]
    for k, (size, in_size, kernel, stride) in enumerate(((oh, h, kh, strides[0]),
                                                         (ow, wd, kw, strides[1]))):
        if _padding(opts) == "SAME":
            total = max((in_size - 1) * stride + kernel - size, 0)
            pads[k], pads[k + 2] = total // 2, total - total // 2
        natural = (in_size - 1) * stride + kernel - pads[k] - pads[k + 2]
        output_padding[k] = size - natural
        if not 0 <= output_padding[k] < stride:
            raise Unsupported(f"output size {size} does not follow from input size {in_size}, "
                              f"kernel {kernel} and stride {stride}")
    y = ctx.emit(relax.op.nn.conv2d_transpose(
        ctx.dq(x), wq, strides=strides, padding=pads, output_padding=output_padding,
        data_layout="NCHW", kernel_layout="IOHW", out_dtype="float32"))
    w_out_qp = QParams(w_qp.scale, w_qp.zero_point, 0, w_qp.dtype) if not w_qp.per_tensor \
        else w_qp
    bias = _bias(ctx, b, x.qparams, w_out_qp, o, (1, o, 1, 1), conv_transpose_ops.CONV2D_TRANSPOSE)
    if bias is not None:
        y = ctx.emit(relax.op.add(y, bias))
    fused = opts.FusedActivationFunction() if hasattr(opts, "FusedActivationFunction") else 0
    y = fused_activation(ctx, y, fused)
    return [ctx.quantized(y, outputs[0], nchw=True)]


@tflite_op("FULLY_CONNECTED")
def fully_connected_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                       outputs: list[Tensor]) -> list[Value]:
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    opts = op.options
    if opts is not None and opts.WeightsFormat() != 0:
        raise Unsupported("shuffled weights format")
    units, k = constant(w, "weight").shape
    rows = int(np.prod(x.shape)) // k
    if rows * k != int(np.prod(x.shape)):
        raise Unsupported(f"input of {int(np.prod(x.shape))} elements is not rows of {k}")
    x2 = ctx.reshape(x, (rows, k))
    wq, w_qp = _weight(ctx, w, 0, (0, 1), 0)
    _sixteen_by_eight(op, matmul_ops.MATMUL, x, w_qp, b, outputs[0])
    y = ctx.emit(relax.op.matmul(ctx.dq(x2), ctx.emit(relax.op.permute_dims(wq, [1, 0])),
                                 out_dtype="float32"))
    bias = _bias(ctx, b, x.qparams, w_qp, units, (units,), matmul_ops.MATMUL)
    if bias is not None:
        y = ctx.emit(relax.op.add(y, bias))
    y = fused_activation(ctx, y, opts.FusedActivationFunction() if opts is not None else 0)
    out = outputs[0]
    if out.shape == (rows, units):
        return [ctx.quantized(y, out)]
    flat = ctx.quantized(y, _with_shape(out, (rows, units)))
    return [ctx.reshape(flat, out.shape)]


def _with_shape(t, shape):
    return replace(t, shape=tuple(shape))


@tflite_op("BATCH_MATMUL")
def batch_matmul_op(ctx: ImportContext, op: Operator, inputs: Inputs,
                    outputs: list[Tensor]) -> list[Value]:
    a, b = ctx.as_nhwc(inputs[0]), ctx.as_nhwc(inputs[1])
    opts = op.options
    operands = []
    adjoints = (bool(opts.AdjX()), bool(opts.AdjY())) if opts is not None else (False, False)
    for value, adjoint in zip((a, b), adjoints):
        real = ctx.dq(value)
        if adjoint:
            rank = len(value.shape)
            real = ctx.emit(relax.op.permute_dims(real, [*range(rank - 2), rank - 1, rank - 2]))
        operands.append(real)
    y = ctx.emit(relax.op.matmul(*operands, out_dtype="float32"))
    return [ctx.quantized(y, outputs[0])]
