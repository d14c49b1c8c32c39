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

from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.ops import movement, pool
from canonqnn.qdq import QUANTIZE

from ._engine import Context, Decline, Rule
from ._match import (INT8_OR_INT32, dequantized, output, per_tensor_int8, sixteen_bit,
                     strip_activation, unary_chain)

AVG, MEAN, MAX = "relax.nn.avg_pool2d", "relax.mean", "relax.nn.max_pool2d"
SUM, DIVIDE = "relax.sum", "relax.divide"


def _single_input(ctx: Context, call: Any, op: str, int16: bool = False):
    """``(out, act, pool_call, x, at)`` for q(act(op(dq(x)))) in NCHW, or a Decline / None;
    ``int16``: int16 in and out too (TFLite 16x8 MEAN)."""
    m = unary_chain(ctx, call, op, activation=True, int16=int16)
    if not isinstance(m, tuple):
        return m
    layouts = _tvm.attrs_dict(m[2])
    if layouts.get("layout", "NCHW") != "NCHW" or layouts.get("out_layout", "NCHW") != "NCHW":
        return Decline(f"layout {layouts['layout']} is not NCHW", m[4])
    return m


def fold_avg_pool(ctx: Context, call: Any):
    m = _single_input(ctx, call, AVG)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    a = _tvm.attrs_dict(inner)
    if any(d != 1 for d in a["dilation"]):
        return Decline("dilated average pooling", at)
    bounds = act.bounds(out.qparams)
    _, _, h, w = _tvm.shape_of(x.operand)
    if list(a["pool_size"]) == [h, w] and not any(a["padding"]):
        return pool.global_avg_pool2d(x.operand, x.qparams, out.qparams, bounds,
                                      rounding=ctx.rounding, q31_kernel="average_pool",
                                      source_dtype=ctx.source_dtype())
    return pool.avg_pool2d(x.operand, x.qparams, out.qparams, pool_size=a["pool_size"],
                           strides=a["strides"], padding=a["padding"], ceil_mode=a["ceil_mode"],
                           count_include_pad=a["count_include_pad"], act=bounds,
                           source_dtype=ctx.source_dtype(), rounding=ctx.rounding)


def fold_mean(ctx: Context, call: Any):
    m = _single_input(ctx, call, MEAN, int16=True)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    a = _tvm.attrs_dict(inner)
    shape = _tvm.shape_of(x.operand)
    if len(shape) != 4 or sorted(int(i) % 4 for i in a["axis"]) != [2, 3]:
        return Decline(f"mean over axes {a['axis']} (only H, W of NCHW fold)", at)
    pooled = pool.global_avg_pool2d(x.operand, x.qparams, out.qparams, act.bounds(out.qparams),
                                    rounding=ctx.rounding, q31_kernel="mean")
    if a["keepdims"]:
        return pooled
    return movement.reshape(ctx.emit(pooled), shape[:2], out.qparams)


def fold_reduce_mean(ctx: Context, call: Any):
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
    summation = pool.onnxruntime_summation(shape, axes, ctx.numerics.threads)
    return pool.reduce_mean(x.operand, axes, a["keepdims"], x.qparams, out.qparams,
                            act=act.bounds(out.qparams), rounding=ctx.rounding,
                            summation=summation)


def fold_max_pool(ctx: Context, call: Any):
    m = _single_input(ctx, call, MAX)
    if not isinstance(m, tuple):
        return m
    out, act, inner, x, at = m
    a = _tvm.attrs_dict(inner)
    pooled = movement.max_pool2d(x.operand, x.qparams, pool_size=a["pool_size"],
                                 strides=a["strides"], padding=a["padding"],
                                 dilation=a["dilation"], ceil_mode=a["ceil_mode"])
    bounds = act.bounds(out.qparams)
    if x.qparams.same_as(out.qparams) and bounds == (-128, 127):
        return pooled
    return movement.requantize(ctx.emit(pooled), x.qparams, out.qparams, bounds,
                               rounding=ctx.rounding)


RULES = (
    Rule("avg_pool2d", QUANTIZE, fold_avg_pool, "q(act(avg_pool2d(dq x))) -> canonqnn.avg_pool2d"),
    Rule("global_avg_pool2d", QUANTIZE, fold_mean,
         "q(act(mean(dq x, axis=[2, 3]))) -> canonqnn.global_avg_pool2d"),
    Rule("reduce_mean", QUANTIZE, fold_reduce_mean,
         "q(act(divide(sum(dq x, axes), count))) -> canonqnn.reduce_mean"),
    Rule("max_pool2d", QUANTIZE, fold_max_pool, "q(max_pool2d(dq x)) -> canonqnn.max_pool2d"),
)
