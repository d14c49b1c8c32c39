"""A strided transposed conv lowered one output phase at a time, against the conv its definition
is: ``canonqnn.conv2d`` of the input upsampled with zeros (docs/spec.md), measured in one run.

Both are built by ``canonqnn.build`` for this CPU (the int8 kernels of docs/build.md) and timed
as the median of ``--runs`` calls of the VM's ``main``; the upsampled input is made before
timing, so the second figure leaves out the upsampling kernel the first one needs none of.
Their outputs must be equal, and the script says so.

    python benchmarks/conv_transpose.py
    python benchmarks/conv_transpose.py --channels 128,64 --size 14 --kernel 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import canonqnn
from canonqnn import _tvm
from canonqnn.ops import conv, conv_transpose
from canonqnn.qparams import QParams


def _module(make, shape):
    bb = _tvm.BlockBuilder()
    x = _tvm.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(make(x)))
        bb.emit_func_output(out)
    return bb.get()


def median_ms(built, x: np.ndarray, runs: int) -> float:
    for _ in range(3):
        built.run({"x": x})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        built.run({"x": x})
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--channels", default="64,32", help="input,output channels")
    p.add_argument("--size", type=int, default=28, help="input height and width")
    p.add_argument("--kernel", type=int, default=4)
    p.add_argument("--stride", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    args = p.parse_args(argv)
    c, o = (int(v) for v in args.channels.split(","))
    k, s, pad = args.kernel, args.stride, (args.kernel - args.stride + 1) // 2
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (c, o, k, k)).astype(np.int8)
    bias = rng.integers(-2000, 2000, o).astype(np.int32)
    x_qp, out_qp = QParams.make(0.05, 3), QParams.make(0.4, -2)
    w_qp = QParams.make(rng.uniform(0.002, 0.02, o).astype(np.float32), np.zeros(o, np.int8),
                        axis=0)
    geometry = dict(strides=(s, s), padding=(pad,) * 4, output_padding=(0, 0), dilation=(1, 1),
                    groups=1)
    x = rng.integers(-128, 128, (1, c, args.size, args.size)).astype(np.int8)
    phases = canonqnn.build(_module(lambda v: conv_transpose.conv2d_transpose(
        v, _tvm.const(w, "int8"), bias, x_qp, w_qp, out_qp, **geometry), x.shape))
    attrs = dict(x_zp=x_qp.scalar_zp, strides=[s, s], padding=[pad] * 4,
                 output_padding=[0, 0], dilation=[1, 1])
    upsampled = conv_transpose.upsample(x, k, k, **attrs)
    definition = canonqnn.build(_module(lambda v: conv.conv2d(
        v, _tvm.const(conv_transpose.flip_weight(w, 1), "int8"), bias, x_qp, w_qp, out_qp,
        strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1), upsampled.shape))
    (ours,), (theirs,) = phases.run({"x": x}).values(), definition.run({"x": upsampled}).values()
    a, b = median_ms(phases, x, args.runs), median_ms(definition, upsampled, args.runs)
    print(f"conv2d_transpose {c}->{o} channels, {k}x{k}, stride {s}, input {args.size}x"
          f"{args.size} -> {'x'.join(map(str, ours.shape[2:]))}; median of {args.runs} calls")
    print(f"by output phases          {a:8.3f} ms")
    print(f"conv of upsampled input   {b:8.3f} ms   (phases / upsampled: {a / b:.2f})")
    print(f"outputs equal: {'yes' if np.array_equal(ours, theirs) else 'NO'}")
    return 0 if np.array_equal(ours, theirs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
