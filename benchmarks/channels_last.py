"""Channels-last int8 kernels against the NCHW forms the build uses, measured in one run.

The layout pass of docs/build.md ("Layout") is not built; this script measures the kernels it
would run, so the decision of which stages go channels-last rests on numbers from this CPU:

- **1x1 conv, NHWC**: the input read as NHWC int8, a contiguous ``x + 128`` copy (``_dot``'s
  activation), the plane's pixels flattened and padded to whole tiles, a tile of ``--tile``
  pixels x 4 blocks of output channels (output channels in lanes, the activations broadcast:
  the channels form's intrinsic), requantized (the build's per-channel requantization,
  ``ops/_requant``) to NHWC int8 as each tile finishes (with
  ``--second-pass``, in a pass of its own after the reduction);
- **depthwise 3x3, NHWC**: channels in lanes, int16 products summed in int32 (no dot-product
  instruction), pad and requantization in passes of their own.

The data are random: activations over all of int8, weights up to +-128, per-channel
multipliers, an activation clamp.

Each is timed against the NCHW kernel of the same shape taken from the untuned MobileNet-V1
build (``canonqnn.build``'s schedule), alternating the two, on the threads ``TVM_NUM_THREADS``
gives (run it with ``TVM_NUM_THREADS=1`` for one thread). Both prototypes are checked against
numpy on the data they are timed on (``exact``). Needs a target with a 4-product dot-product
instruction (``vpdpbusd`` on x86).

    TVM_NUM_THREADS=1 python benchmarks/channels_last.py
    TVM_NUM_THREADS=1 python benchmarks/channels_last.py --second-pass --runs 100
"""

from __future__ import annotations

import argparse

import numpy as np

import canonqnn
from canonqnn import _tvm, _tvm_dot, schedule
from canonqnn.ops import _dot
from canonqnn.ops._requant import RNE_F32, requant_channels, te_requant_channel
from canonqnn.testing import onnx_models as models

X_ZP = 3
# the conv's requantization (ops/_requant), with an activation clamp as ReLU6 leaves it
REQUANT = {"out_zp": -5, "act_min": -128, "act_max": 100, "rounding": "rne_f32",
           "out_dtype": "int8"}


def _multipliers(rng, channels: int) -> np.ndarray:
    return rng.uniform(0.0005, 0.005, channels).astype(np.float32)


def _requant(acc, mult, channel):
    return te_requant_channel(acc, RNE_F32, mult, channel, REQUANT, "int32")


def _requant_np(acc: np.ndarray, mult: np.ndarray) -> np.ndarray:
    return requant_channels(acc, RNE_F32, mult, REQUANT, "int32", axis=acc.ndim - 1)


def nhwc_pointwise(c: int, o: int, hw: int, tile: int, per_tile: bool, isa):
    """``(kernel, args, exact)`` of the NHWC 1x1 conv prototype on random data."""
    import tvm
    from tvm import te, tirx

    lanes, pair = isa.lanes, isa.pair
    plane = hw * hw
    padded = -(-plane // tile) * tile
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (o, c, 1, 1)).astype(np.int8)
    packed = _dot.pack_conv_weights(w, np.zeros(o, np.int64), X_ZP, isa)
    x = te.placeholder((1, hw, hw, c), "int8", name="x")
    wp = te.placeholder(packed.packed.shape, isa.weight_dtype, name="w")
    mult = te.placeholder((o,), "float32", name="mult")
    xp = te.compute((1, padded, c // pair, pair), lambda n, p, g, k: tirx.if_then_else(
        p < plane, _dot._activation(x[n, p // hw, p % hw, g * pair + k], X_ZP, isa),
        _dot._padding(X_ZP, isa)), name="x_pack")
    rc, rk = te.reduce_axis((0, c // pair), "rc"), te.reduce_axis((0, pair), "rk")
    acc = te.compute((1, padded, o // lanes, lanes), lambda n, p, ob, ol: te.sum(
        xp[n, p, rc, rk].astype("int32") * wp[ob, 0, 0, rc, ol, rk].astype("int32"),
        axis=[rc, rk]), name="acc")
    out = te.compute((1, padded, o), lambda n, p, oc: _requant(
        acc[n, p, oc // lanes, oc % lanes], mult, oc), name="requant")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, wp, mult, out]))
    _tvm_dot.register_intrinsics()
    block = sch.get_sblock("acc")
    n, p, ob, ol, rc_, rk_ = sch.get_loops(block)
    p_out, p_in = sch.split(p, [None, tile])
    ob_out, ob_in = sch.split(ob, [None, 4])
    sch.reorder(n, p_out, ob_out, rc_, p_in, ob_in, ol, rk_)
    tiles = sch.fuse(n, p_out, ob_out)
    sch.parallel(tiles)
    requant = sch.get_sblock("requant")
    if per_tile:
        sch.reverse_compute_at(requant, tiles)
    init = sch.decompose_reduction(block, rc_)
    sch.tensorize(ol, isa.intrinsic)
    sch.unroll(p_in)
    sch.unroll(ob_in)
    *tile_loops, lanes_loop = sch.get_loops(init)[-3:]
    sch.vectorize(lanes_loop)
    for loop in tile_loops:
        sch.unroll(loop)
    loops = sch.get_loops(sch.get_sblock("x_pack"))
    sch.parallel(sch.fuse(loops[0], loops[1]))
    sch.vectorize(sch.split(sch.fuse(loops[2], loops[3]), [None, 64])[1])
    loops = sch.get_loops(requant)
    if not per_tile:
        sch.parallel(sch.fuse(loops[0], loops[1]))
    sch.vectorize(sch.split(loops[-1], [None, lanes])[1])
    kernel = _tvm.compile_kernel(sch.mod["main"], _tvm.host_target())
    xs = rng.integers(-128, 128, (1, hw, hw, c)).astype(np.int8)
    ms = _multipliers(rng, o)
    args = [tvm.runtime.tensor(xs), tvm.runtime.tensor(packed.packed), tvm.runtime.tensor(ms),
            tvm.runtime.tensor(np.zeros((1, padded, o), np.int8))]
    kernel["main"](*args)
    shifted = xs.reshape(plane, c).astype(np.int64) + isa.act_shift
    expected = _requant_np((shifted @ w.reshape(o, c).T.astype(np.int64)).astype(np.int32), ms)
    return kernel, args, bool(np.array_equal(args[-1].numpy()[0, :plane], expected))


def nhwc_depthwise(c: int, hw: int, stride: int, tile: int):
    """``(kernel, args, exact)`` of the NHWC 3x3 depthwise prototype (padding 1)."""
    import tvm
    from tvm import te, tirx

    oh = (hw - 1) // stride + 1
    rng = np.random.default_rng(0)
    x = te.placeholder((1, hw, hw, c), "int8", name="x")
    w = te.placeholder((3, 3, c), "int16", name="w")
    mult = te.placeholder((c,), "float32", name="mult")
    xpad = te.compute((1, hw + 2, hw + 2, c), lambda n, y, xx, ch: tirx.if_then_else(
        tirx.all(y >= 1, y <= hw, xx >= 1, xx <= hw),
        x[n, y - 1, xx - 1, ch].astype("int16") - X_ZP, tirx.const(0, "int16")), name="x_pad")
    ky, kx = te.reduce_axis((0, 3), "ky"), te.reduce_axis((0, 3), "kx")
    acc = te.compute((1, oh, oh, c), lambda n, i, j, ch: te.sum(
        xpad[n, i * stride + ky, j * stride + kx, ch].astype("int32")
        * w[ky, kx, ch].astype("int32"), axis=[ky, kx]), name="acc")
    out = te.compute((1, oh, oh, c), lambda n, i, j, ch: _requant(acc[n, i, j, ch], mult, ch),
                     name="requant")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, mult, out]))
    n, i, j, ch, ky_, kx_ = sch.get_loops(sch.get_sblock("acc"))
    j_out, j_in = sch.split(j, [None, tile])
    c_out, c_in = sch.split(ch, [None, 16])
    sch.reorder(n, i, c_out, j_out, ky_, kx_, j_in, c_in)
    sch.parallel(sch.fuse(n, i))
    sch.vectorize(c_in)
    for loop in (j_in, kx_, ky_):
        sch.unroll(loop)
    for name in ("x_pad", "requant"):
        loops = sch.get_loops(sch.get_sblock(name))
        sch.parallel(sch.fuse(loops[0], loops[1]))
        sch.vectorize(sch.split(loops[-1], [None, 16])[1])
    kernel = _tvm.compile_kernel(sch.mod["main"], _tvm.host_target())
    xs = rng.integers(-128, 128, (1, hw, hw, c)).astype(np.int8)
    ws = rng.integers(-128, 128, (3, 3, c)).astype(np.int16)
    ms = _multipliers(rng, c)
    args = [tvm.runtime.tensor(xs), tvm.runtime.tensor(ws), tvm.runtime.tensor(ms),
            tvm.runtime.tensor(np.zeros((1, oh, oh, c), np.int8))]
    kernel["main"](*args)
    xp = np.pad(xs.astype(np.int64) - X_ZP, ((0, 0), (1, 1), (1, 1), (0, 0)))
    total = sum(xp[:, a:a + stride * (oh - 1) + 1:stride, b:b + stride * (oh - 1) + 1:stride]
                * ws[a, b].astype(np.int64) for a in range(3) for b in range(3))
    expected = _requant_np(total.astype(np.int32), ms)
    return kernel, args, bool(np.array_equal(args[-1].numpy(), expected))


def nchw_kernels():
    """``{(input shape, output shape, depthwise): (kernel, args)}`` of the convs of the
    untuned MobileNet-V1 build, on random data."""
    import tvm

    quantized = models.quantize(models.mobilenet_v1(), fmt="qdq", activation="s8",
                                per_channel=True)
    mod, _ = canonqnn.canonicalize(canonqnn.load(quantized))
    target = _tvm.host_target()
    fused = _tvm.schedule_cpu(canonqnn.builder.fuse(mod, target), schedule.plan_block,
                              _tvm.cpu_cores(target), target)
    rng = np.random.default_rng(0)
    found = {}
    for gv, func in fused.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc) or "conv2d" not in gv.name_hint:
            continue
        shapes = [tuple(int(d) for d in p.shape) for p in func.params]
        args = [tvm.runtime.tensor(rng.integers(-5, 5, size=s).astype(str(p.dtype)))
                for p, s in zip(func.params, shapes)]
        depthwise = "acc_depthwise" in func.script()
        found[(shapes[0], shapes[-1], depthwise)] = (_tvm.compile_kernel(func, target), args)
    return found


def micros(kernel, args, runs: int) -> float:
    import tvm

    timer = kernel.time_evaluator("main", tvm.cpu(), number=runs, repeat=7)
    return float(np.median(timer(*args).results)) * 1e6


POINTWISE = [(32, 64, 112), (64, 128, 56), (128, 128, 56), (128, 256, 28), (256, 256, 28),
             (256, 512, 14), (512, 512, 14), (512, 1024, 7), (1024, 1024, 7)]
DEPTHWISE = [(32, 112, 1), (128, 56, 1), (256, 28, 2), (512, 14, 1), (512, 14, 2), (1024, 7, 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="calls per timing (7 timings)")
    parser.add_argument("--tile", type=int, default=6, help="pixels per 1x1 conv tile")
    parser.add_argument("--second-pass", action="store_true",
                        help="requantize the 1x1 conv's output in a pass after the reduction")
    args = parser.parse_args(argv)
    isa = _dot.host_isa()
    if isa is None or isa.pair != 4:
        print("this CPU has no 4-product dot-product instruction (vpdpbusd); nothing measured")
        return 1
    nchw = nchw_kernels()
    rows = [["conv", "NCHW us", "NHWC us", "NHWC / NCHW", "exact"]]
    for c, o, hw in POINTWISE:
        kernel, kargs, exact = nhwc_pointwise(c, o, hw, args.tile, not args.second_pass, isa)
        base = nchw[((1, c, hw, hw), (1, o, hw, hw), False)]
        before, after = micros(*base, args.runs), micros(kernel, kargs, args.runs)
        rows.append([f"1x1 {c}->{o} {hw}x{hw}", f"{before:.1f}", f"{after:.1f}",
                     f"{after / before:.2f}", "yes" if exact else "NO"])
    for c, hw, stride in DEPTHWISE:
        oh = (hw - 1) // stride + 1
        kernel, kargs, exact = nhwc_depthwise(c, hw, stride, 7 if oh % 7 == 0 else 4)
        base = nchw[((1, c, hw, hw), (1, c, oh, oh), True)]
        before, after = micros(*base, args.runs), micros(kernel, kargs, args.runs)
        rows.append([f"dw3x3 {c} {hw}x{hw} s{stride}", f"{before:.1f}", f"{after:.1f}",
                     f"{after / before:.2f}", "yes" if exact else "NO"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
