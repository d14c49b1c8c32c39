"""Fold quantized pooling.

    q(act(avg_pool2d(dq(x))))                   -> canonqnn.avg_pool2d
      (a window covering the whole unpadded input -> canonqnn.global_avg_pool2d)
    q(act(mean(dq(x), axis=[2, 3])))             -> canonqnn.global_avg_pool2d [-> reshape]
      (GlobalAveragePool: onnxruntime fuses it into its integer QLinearGlobalAveragePool)
    q(act(divide(sum(dq(x), axes), count)))      -> canonqnn.reduce_mean
      (ReduceMean: onnxruntime runs it in float; the op reproduces its summation order)
      (both also int16 -> int16 under the Q31 roundings: TFLite 16x8 MEAN)
    q(max_pool2d(dq(x)))                         -> canonqnn.max_pool2d [-> requantize]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import mean, movement, pool
from canonqnn.qdq import QUANTIZE, QdqCall

from ._engine import Context, Decline, Rule
from ._match import (
    INT8_OR_INT32,
    Activation,
    UnaryChain,
    dequantized,
    output,
    per_tensor_int8,
    requantized,
    sixteen_bit,
    strip_activation,
    unary_step,
)

AVG, MEAN, MAX = "relax.nn.avg_pool2d", "relax.mean", "relax.nn.max_pool2d"
SUM, DIVIDE = "relax.sum", "relax.divide"


def nchw(ctx: Context, m: UnaryChain):
    """The pooling call is in NCHW layout (the canonical ops' only layout)."""
    layouts = _tvm.attrs_dict(m.inner)
    if layouts.get("layout", "NCHW") != "NCHW" or layouts.get("out_layout", "NCHW") != "NCHW":
        return Decline(f"layout {layouts['layout']} is not NCHW", m.at)
    return m


def undilated(ctx: Context, m: UnaryChain):
    if any(d != 1 for d in _tvm.attrs_dict(m.inner)["dilation"]):
        return Decline("dilated average pooling", m.at)
    return m


def build_avg_pool(ctx: Context, m: UnaryChain):
    out, x, a = m.out, m.x, _tvm.attrs_dict(m.inner)
    bounds = m.act.bounds(out.qparams)
    _, _, h, w = _tvm.shape_of(x.operand)
    if list(a["pool_size"]) == [h, w] and not any(a["padding"]):
        return pool.global_avg_pool2d(x.operand, x.qparams, out.qparams, bounds,
                                      rounding=ctx.rounding, q31_kernel="average_pool",
                                      source_dtype=ctx.source_dtype())
    return pool.avg_pool2d(x.operand, x.qparams, out.qparams, pool_size=a["pool_size"],
                           strides=a["strides"], padding=a["padding"], ceil_mode=a["ceil_mode"],
                           count_include_pad=a["count_include_pad"], act=bounds,
                           source_dtype=ctx.source_dtype(), rounding=ctx.rounding)


def spatial_mean(ctx: Context, m: UnaryChain):
    axes = _tvm.attrs_dict(m.inner)["axis"]
    if len(_tvm.shape_of(m.x.operand)) != 4 or sorted(int(i) % 4 for i in axes) != [2, 3]:
        return Decline(f"mean over axes {axes} (only H, W of NCHW fold)", m.at)
    return m


def build_mean(ctx: Context, m: UnaryChain):
    out, x = m.out, m.x
    pooled = pool.global_avg_pool2d(x.operand, x.qparams, out.qparams,
                                    m.act.bounds(out.qparams), rounding=ctx.rounding,
                                    q31_kernel="mean", source_dtype=ctx.source_dtype())
    if _tvm.attrs_dict(m.inner)["keepdims"]:
        return pooled
    return movement.reshape(ctx.emit(pooled), _tvm.shape_of(x.operand)[:2], out.qparams)


@dataclass(frozen=True)
class ReduceMean:
    out: QdqCall
    act: Activation
    x: QdqCall
    axes: list[int]
    keepdims: bool


def reduce_mean_chain(ctx: Context, call: Any):
    dtypes = ("int8", *sixteen_bit(ctx))  # int16: TFLite 16x8 MEAN
    out = output(call, dtypes)
    if out is None or out.qparams.dtype not in dtypes:
        return None
    y, act = strip_activation(ctx, out.operand)
    div = ctx.call(y, DIVIDE)
    total = None if div is None else ctx.call(div.args[0], SUM)
    if total is None:
        return None
    if not (ctx.single_use(y) and ctx.single_use(div.args[0])):
        return Decline("the float result has other users", y)
    x = dequantized(ctx, total.args[0], (*INT8_OR_INT32, out.qparams.dtype))
    if x is None:
        return Decline(f"input is not dequantized from {out.qparams.dtype}", y)
    if (why := per_tensor_int8(x, "input", y, (out.qparams.dtype,))) is not None:
        return why
    shape = _tvm.shape_of(x.operand)
    a = _tvm.attrs_dict(total)
    axes = list(range(len(shape))) if a.get("axis") is None else \
        sorted(int(i) % len(shape) for i in a["axis"])
    count = float(np.prod([shape[i] for i in axes]))
    divisor = div.args[1]
    if not (_tvm.is_const(divisor) and _tvm.const_value(divisor).size == 1
            and float(_tvm.const_value(divisor)) == count):
        return Decline(f"sum divided by something other than its count {count:g}", y)
    return ReduceMean(out, act, x, axes, a["keepdims"])


def build_reduce_mean(ctx: Context, m: ReduceMean):
    shape = _tvm.shape_of(m.x.operand)
    summation = mean.onnxruntime_summation(shape, m.axes, ctx.numerics.threads)
    return mean.reduce_mean(m.x.operand, m.axes, m.keepdims, m.x.qparams, m.out.qparams,
                            act=m.act.bounds(m.out.qparams), rounding=ctx.rounding,
                            summation=summation, source_dtype=ctx.source_dtype())


def build_max_pool(ctx: Context, m: UnaryChain):
    out, x, a = m.out, m.x, _tvm.attrs_dict(m.inner)
    pooled = movement.max_pool2d(x.operand, x.qparams, pool_size=a["pool_size"],
                                 strides=a["strides"], padding=a["padding"],
                                 dilation=a["dilation"], ceil_mode=a["ceil_mode"])
    return requantized(ctx, pooled, x.qparams, out.qparams, m.act.bounds(out.qparams))


RULES = (
    Rule("avg_pool2d", QUANTIZE, (unary_step(AVG), nchw, undilated), build_avg_pool,
         "q(act(avg_pool2d(dq x))) -> canonqnn.avg_pool2d", phase="elementwise_pool_movement"),
    Rule("global_avg_pool2d", QUANTIZE, (unary_step(MEAN, int16=True), nchw, spatial_mean),
         build_mean, "q(act(mean(dq x, axis=[2, 3]))) -> canonqnn.global_avg_pool2d",
         phase="elementwise_pool_movement"),
    Rule("reduce_mean", QUANTIZE, (reduce_mean_chain,), build_reduce_mean,
         "q(act(divide(sum(dq x, axes), count))) -> canonqnn.reduce_mean",
         phase="elementwise_pool_movement"),
    Rule("max_pool2d", QUANTIZE, (unary_step(MAX), nchw), build_max_pool,
         "q(max_pool2d(dq x)) -> canonqnn.max_pool2d", phase="elementwise_pool_movement"),
)
