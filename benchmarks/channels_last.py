"""The layout pass measured: each conv kernel of a network built with it and without it,
side by side, in one run.

``canonqnn.build.layout`` runs convs channels-last where ``channels_last_form`` and its plan
keep them (docs/build.md, "Layout"). This script fuses the network twice, with the pass and
without it (every conv in its NCHW form), pairs the two builds' conv kernels in model order,
and times each kernel alone (``time_evaluator`` median on random data, the pair one after
the other), with the transposes the pass adds. ``--plane N`` lets planes of up to N a side
run channels-last (the build's limit is ``channels_last.CHANNELS_LAST_PLANE``, in
``canonqnn.build.forms``), to see what the
limit leaves out. Threads: ``TVM_NUM_THREADS`` (``TVM_NUM_THREADS=1`` for one).

    TVM_NUM_THREADS=1 python benchmarks/channels_last.py
    TVM_NUM_THREADS=1 python benchmarks/channels_last.py --plane 112
    python benchmarks/channels_last.py --small --runs 5
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

import canonqnn
from canonqnn import _tvm
from canonqnn.build import isa as dot_isa
from canonqnn.build import pipeline, report, schedule, targets
from canonqnn.build.forms import channels_last
from canonqnn.testing import onnx_models as models


def _kernels(mod, target, channels_last: bool) -> tuple[list[str], dict]:
    """The kernels a build calls, in order, and every kernel scheduled as the build does."""
    fused = canonqnn.build.fuse(mod, target, channels_last=channels_last)
    names = [name for name, _, _ in report.kernel_calls(fused)[0]]
    scheduled = schedule.schedule_cpu(fused, schedule.plan_block, targets.cpu_cores(target), target)
    return names, _tvm.module_functions(scheduled)


def _form(func) -> str:
    """The packed form of a conv kernel (``dot_isa.BLOCK_PLANS``; a row-form plan over the
    whole plane is ``plane``), or ``plain``."""
    for block in schedule.root_block_annotations(func):
        for key in dot_isa.BLOCK_PLANS:
            if key in block:
                plane = key == dot_isa.ROWS and int(dict(block[key]).get("plane", 0))
                return "plane" if plane else key.split(".")[-1]
    return "plain"


def _micros(func, target, runs: int) -> float:
    import tvm

    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.integers(-5, 5, [int(d) for d in p.shape])
                               .astype(str(p.dtype))) for p in func.params]
    kernel = pipeline.compile_kernel(func, target)
    timer = kernel.time_evaluator("main", tvm.cpu(), number=runs, repeat=7)
    return float(np.median(timer(*args).results)) * 1e6


def _shapes(func) -> str:
    first, last = ([int(d) for d in p.shape] for p in (func.params[0], func.params[-1]))
    return f"{'x'.join(map(str, first))} -> {'x'.join(map(str, last))}"


def compare(mod, runs: int) -> list[list[str]]:
    """Rows ``[conv, calls, NCHW form, us, channels-last form, us, ratio]`` and the totals."""
    target = targets.host_target()
    (nchw_names, nchw), (last_names, last) = (_kernels(mod, target, channels_last)
                                              for channels_last in (False, True))
    convs = [[n for n in names if "conv2d" in n] for names in (nchw_names, last_names)]
    pairs = collections.Counter(zip(*convs))
    rows, totals, times = [], [0.0, 0.0], {}
    for (a, b), calls in pairs.items():
        for name, funcs in ((a, nchw), (b, last)):
            if name not in times:
                times[name] = _micros(funcs[name], target, runs)
        totals[0] += times[a] * calls
        totals[1] += times[b] * calls
        rows.append([_shapes(nchw[a]), str(calls), _form(nchw[a]), f"{times[a]:.1f}",
                     _form(last[b]) if a != b else "(the same)",
                     f"{times[b]:.1f}", f"{times[b] / times[a]:.2f}"])
    for name, calls in collections.Counter(n for n in last_names
                                           if n.startswith("transpose")).items():
        us = _micros(last[name], target, runs)
        totals[1] += us * calls
        rows.append([_shapes(last[name]), str(calls), "", "", "transpose", f"{us:.1f}", ""])
    rows.append(["all convs (and transposes), x calls", "", "", f"{totals[0]:.1f}", "",
                 f"{totals[1]:.1f}", f"{totals[1] / totals[0]:.2f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v1",
                        choices=["mobilenet_v1", "mobilenet_v2", "resnet18"])
    parser.add_argument("--small", action="store_true",
                        help="a test-size MobileNet-V1 instead (32x32, 16 to 128 channels)")
    parser.add_argument("--runs", type=int, default=50, help="calls per timing (7 timings)")
    parser.add_argument("--plane", type=int, default=None,
                        help="run planes of up to this side channels-last")
    args = parser.parse_args(argv)
    if args.plane is not None:
        channels_last.CHANNELS_LAST_PLANE = args.plane
    model = (getattr(models, args.model)() if not args.small else
             models.mobilenet_v1_like(resolution=32))
    quantized = models.quantize(model, fmt="qdq", activation="s8", per_channel=True)
    mod, _ = canonqnn.canonicalize(canonqnn.load(quantized))
    rows = [["conv (NCHW kernel)", "calls", "NCHW form", "us", "with the layout pass", "us",
             "ratio"], *compare(mod, args.runs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
