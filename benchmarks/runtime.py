"""What the canonical form buys at run time, measured side by side in one run.

For each example architecture (``canonqnn.models``, at benchmark size unless ``--small``),
quantized by onnxruntime's quantizer (QDQ, int8 activations, per-channel int8 weights):

  (a) canonqnn: load -> canonicalize -> ``canonqnn.build`` (int8 kernels, canonqnn's CPU schedule)
  (a') the same with MetaSchedule tuning (``--tune TRIALS``; database in ``--tuning-dir``)
  (b) TVM alone: ``tvm.relax.frontend.onnx.from_onnx`` -> ``tvm.compile`` (the fake-quant form:
      dequantize -> float op -> quantize, weights folded to float32 by TVM's FoldConstant)
  (c) onnxruntime's int8 kernels as users run them (default session config), 1 thread and all
      cores, and (d) onnxruntime configured as canonqnn reproduces it bit for bit, all cores

printing build seconds, median latency, the ratios a/b, a/c and a/d, and the bytes of constants
each built module carries. Every TVM build targets this CPU (``mcpu`` from LLVM) and runs on TVM's
thread pool (all cores unless ``TVM_NUM_THREADS`` says otherwise). Latency is the median of
``--runs`` calls after warm-up, each call timed around the runtime's own entry point
(``vm["main"]`` / ``session.run``) with inputs already in place.

    python benchmarks/runtime.py                       # all three, untuned
    python benchmarks/runtime.py --tune 64             # adds the tuned canonical build
    python benchmarks/runtime.py --models resnet --small --runs 50
    python benchmarks/runtime.py --kernels --models mobilenet_v1   # where the time goes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import canonqnn
from canonqnn import _tvm, models
from canonqnn.api import ort_session

# Benchmark sizes: large enough that kernels, not per-call overhead, dominate.
BENCH_MODELS = {
    "mobilenet_v1": lambda: models.mobilenet_v1_like(resolution=128, width=2),
    "resnet": lambda: models.resnet_like(resolution=64, width=2),
    "transformer": lambda: models.transformer_encoder_like(seq=64, width=128, heads=4, ffn=512),
}
SMALL_MODELS = {name: models.ARCHITECTURES[name] for name in BENCH_MODELS}


def median_ms(call, runs: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def tvm_call(executable, inputs: list[np.ndarray]):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(x) for x in inputs]
    main = vm["main"]
    return lambda: main(*args)


def canonical_build(quantized, tune: int, tuning_dir: str | None):
    start = time.perf_counter()
    mod, report = canonqnn.canonicalize(canonqnn.load(quantized))
    built = canonqnn.build(mod, tune=tune, tuning_dir=tuning_dir)
    seconds = time.perf_counter() - start
    constants = _tvm.constant_bytes(canonqnn.builder.fuse(mod))
    return built, seconds, constants, report


def tvm_alone_build(quantized):
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    target = _tvm.host_target()
    start = time.perf_counter()
    mod = from_onnx(quantized)
    executable = tvm.compile(mod, target=target)
    seconds = time.perf_counter() - start
    constants = _tvm.constant_bytes(_tvm.fuse_kernels(mod, target))
    return executable, seconds, constants


def fmt_bytes(sizes: dict[str, int]) -> str:
    total = sum(sizes.values())
    parts = ", ".join(f"{dtype} {n / 1024:.0f}" for dtype, n in sorted(sizes.items(),
                                                                         key=lambda kv: -kv[1]))
    return f"{total / 1024:.0f} KiB ({parts})"


def bench_model(name: str, model, args) -> dict:
    quantized = models.quantize(model, fmt="qdq", activation="s8", per_channel=True)
    x = models.random_input(1, models.input_shape(model))
    row: dict = {"model": name, "input": list(x.shape)}

    built, row["build_s_canonqnn"], row["constants_canonqnn"], report = canonical_build(
        quantized, 0, None)
    if report.float_islands:
        row["float_islands"] = [str(i) for i in report.float_islands]
    row["ms_canonqnn"] = median_ms(tvm_call(built.module, [x]), args.runs)

    if args.tune:
        tuning_dir = os.path.join(args.tuning_dir, name)
        tuned, row["build_s_tuned"], _, _ = canonical_build(quantized, args.tune, tuning_dir)
        row["tuning"] = {"trials": args.tune, "kernels_tuned": tuned.tuning[0],
                         "kernels_reused": tuned.tuning[1], "dir": tuning_dir}
        row["ms_tuned"] = median_ms(tvm_call(tuned.module, [x]), args.runs)
        expected = built.run({"input": x})
        got = tuned.run({"input": x})
        row["tuned_equal_untuned"] = all(np.array_equal(expected[k], got[k]) for k in expected)

    executable, row["build_s_tvm"], row["constants_tvm"] = tvm_alone_build(quantized)
    row["ms_tvm"] = median_ms(tvm_call(executable, [x]), args.runs)

    feed = {models.INPUT_NAME: x}
    for threads, suffix in ((1, "1"), (os.cpu_count() or 1, "all")):
        session = default_ort_session(quantized, threads)
        row[f"ms_ort_{suffix}"] = median_ms(lambda: session.run(None, feed), args.runs)
        session, row["ort_exact_config"] = ort_session(quantized, threads=threads)
        row[f"ms_ort_exact_{suffix}"] = median_ms(lambda: session.run(None, feed), args.runs)
    return row


def default_ort_session(quantized, threads: int):
    """onnxruntime as users run it: ORT_ENABLE_ALL, default session config. On x86 it runs
    int8-activation QDQ models through its u8 kernels (outputs differ from the int8 path
    canonqnn reproduces, which ``ort_session`` configures)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(quantized.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def kernel_times(name: str, model, runs: int) -> None:
    """Each kernel of the untuned canonical build compiled alone and timed with TVM's
    ``time_evaluator`` on random data, largest first, with the conv kernels' MAC rate."""
    import tvm

    from canonqnn import schedule

    quantized = models.quantize(model, fmt="qdq", activation="s8", per_channel=True)
    mod, _ = canonqnn.canonicalize(canonqnn.load(quantized))
    target = _tvm.host_target()
    fused = _tvm.schedule_cpu(canonqnn.builder.fuse(mod, target), schedule.plan_block,
                              _tvm.cpu_cores(target))
    rng = np.random.default_rng(0)
    rows = []
    for gv, func in fused.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        shapes = [tuple(int(d) for d in p.shape) for p in func.params]
        args = [tvm.runtime.tensor(rng.integers(-5, 5, size=shape).astype(str(p.dtype)))
                for p, shape in zip(func.params, shapes)]
        lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                          target=target).jit()
        seconds = lib.time_evaluator("main", tvm.cpu(), number=runs, repeat=5)(*args).median
        macs = None
        if "conv2d" in gv.name_hint and len(shapes[1]) == 4:
            macs = int(np.prod(shapes[-1])) * int(np.prod(shapes[1][1:]))
        rows.append((seconds * 1e6, gv.name_hint, shapes, macs))
    total = sum(r[0] for r in rows)
    print(f"\n{name}: kernels of the untuned canonical build, each timed alone "
          f"({_tvm.cpu_cores(target)} cores), {total / 1e3:.2f} ms in total")
    lines = [["kernel", "us", "share", "input -> output", "GMAC/s"]]
    for us, kernel, shapes, macs in sorted(rows, reverse=True):
        lines.append([kernel, f"{us:.1f}", f"{100 * us / total:.1f}%",
                      f"{'x'.join(map(str, shapes[0]))} -> {'x'.join(map(str, shapes[-1]))}",
                      f"{macs / us / 1e3:.1f}" if macs else ""])
    _print_rows(lines)


def print_table(rows: list[dict], tuned: bool) -> None:
    cores = os.cpu_count()
    print(f"\nmedian latency, ms ({cores} cores; TVM builds on all of them)")
    print("(c) onnxruntime as users run it (default session config), 1 thread and all cores;")
    print("(d) onnxruntime configured as canonqnn reproduces it bit for bit "
          f"({rows[0]['ort_exact_config']}), all cores")
    head = ["model", "(a) canonqnn"] + (["(a') tuned"] if tuned else []) + [
        "(b) TVM alone", "(c) ORT 1T", f"(c) ORT {cores}T", f"(d) ORT {cores}T", "a/b",
        "a/c 1T", f"a/c {cores}T"] + ([f"a'/c {cores}T"] if tuned else []) + [f"a/d {cores}T"]
    lines = [head]
    for r in rows:
        a = r["ms_canonqnn"]
        line = [r["model"], f"{a:.3f}"] + ([f"{r['ms_tuned']:.3f}"] if tuned else []) + [
            f"{r['ms_tvm']:.3f}", f"{r['ms_ort_1']:.3f}", f"{r['ms_ort_all']:.3f}",
            f"{r['ms_ort_exact_all']:.3f}", f"{a / r['ms_tvm']:.2f}", f"{a / r['ms_ort_1']:.2f}",
            f"{a / r['ms_ort_all']:.2f}"]
        if tuned:
            line.append(f"{r['ms_tuned'] / r['ms_ort_all']:.2f}")
        line.append(f"{a / r['ms_ort_exact_all']:.2f}")
        lines.append(line)
    _print_rows(lines)

    print("\nbuild seconds, and bytes of constants in the built module")
    head = ["model", "input", "build (a)"] + (["build (a')"] if tuned else []) + [
        "build (b)", "constants (a)", "constants (b)"]
    lines = [head]
    for r in rows:
        line = [r["model"], "x".join(map(str, r["input"])), f"{r['build_s_canonqnn']:.1f}"]
        if tuned:
            line.append(f"{r['build_s_tuned']:.1f}")
        line += [f"{r['build_s_tvm']:.1f}", fmt_bytes(r["constants_canonqnn"]),
                 fmt_bytes(r["constants_tvm"])]
        lines.append(line)
    _print_rows(lines)
    for r in rows:
        if tuned:
            t = r["tuning"]
            print(f"{r['model']}: tuning {t['trials']} trials, {t['kernels_tuned']} kernels tuned, "
                  f"{t['kernels_reused']} reused from {t['dir']}; tuned outputs equal untuned: "
                  f"{r['tuned_equal_untuned']}")
        if r.get("float_islands"):
            print(f"{r['model']}: float islands {r['float_islands']}")


def _print_rows(lines: list[list[str]]) -> None:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(line, widths))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(BENCH_MODELS),
                        help=f"comma-separated, from {sorted(BENCH_MODELS)}")
    parser.add_argument("--small", action="store_true",
                        help="the models at their test size (canonqnn.models defaults)")
    parser.add_argument("--runs", type=int, default=100, help="timed calls per measurement")
    parser.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                        help="also build with MetaSchedule tuning, TRIALS trials per model")
    parser.add_argument("--tuning-dir", default=None,
                        help="where tuning databases are kept and reused (default: a temp dir)")
    parser.add_argument("--json", metavar="OUT", help="also write the measurements as JSON")
    parser.add_argument("--kernels", action="store_true",
                        help="instead, time each kernel of the canonical build alone")
    args = parser.parse_args(argv)
    table = SMALL_MODELS if args.small else BENCH_MODELS
    names = [n for n in args.models.split(",") if n]
    unknown = set(names) - set(table)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from {sorted(table)}")
    if args.kernels:
        for name in names:
            kernel_times(name, table[name](), args.runs)
        return 0
    with tempfile.TemporaryDirectory(prefix="canonqnn_tuning_") as tmp:
        args.tuning_dir = args.tuning_dir or tmp
        rows = []
        for name in names:
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(bench_model(name, table[name](), args))
    print_table(rows, bool(args.tune))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
