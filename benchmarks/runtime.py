"""What the canonical form buys at run time, measured side by side in one run.

For each network (real sizes: MobileNet-V1 and V2 and ResNet-18 at 224x224, a transformer
encoder layer of 128 tokens; ``--small`` takes the test-size models of
``canonqnn.testing.onnx_models``), quantized by onnxruntime's quantizer (QDQ, int8 activations,
per-channel int8 weights):

  (a) canonqnn: load -> canonicalize -> ``canonqnn.build`` (untuned), timed at 1 and 2 threads
      (``TVM_NUM_THREADS``, each in a child process that loads the exported library)
  (a') the same with MetaSchedule tuning (``--tune TRIALS``; database in ``--tuning-dir``)
  (b) TVM alone (``--tvm-alone``): ``tvm.relax.frontend.onnx.from_onnx`` -> ``tvm.compile``
      (the fake-quant form, weights folded to float32 by TVM's FoldConstant)
  (c) onnxruntime's int8 kernels as users run them (default session config), 1 and 2 threads
  (d) onnxruntime configured as canonqnn reproduces it bit for bit, all cores; whether (a)'s
      output equals (d)'s is printed too

printing build seconds, median latency, the ratios, and the bytes of constants each built
module carries. Every TVM build targets this CPU (``mcpu`` from LLVM). Latency is the median of
``--runs`` calls after warm-up, each call timed around the runtime's own entry point
(``vm["main"]`` / ``session.run``) with inputs already in place.

``--kernels`` instead times each kernel of the canonical build alone, with its MAC rate for
convs and matmuls and that rate as a fraction of the host's peak int8 rate on all the build's
threads. The peak is measured, not taken from a datasheet: one thread runs the dot-product
instruction the build uses (``canonqnn.build.forms.dot``) in a loop of independent chains with the
weights loaded from L1 (``measured_peak_gmacs``), times the threads.

    python benchmarks/runtime.py                       # all four, untuned
    python benchmarks/runtime.py --tune 64             # adds the tuned canonical build
    python benchmarks/runtime.py --models resnet18 --small --runs 50
    python benchmarks/runtime.py --kernels --models mobilenet_v1   # where the time goes
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import canonqnn
from canonqnn.build import pipeline, report, schedule, targets
from canonqnn.frontends.onnx.oracle import ort_session
from canonqnn.testing import onnx_models as models

# Real-size networks.
BENCH_MODELS = {
    "mobilenet_v1": models.mobilenet_v1,
    "mobilenet_v2": models.mobilenet_v2,
    "resnet18": models.resnet18,
    "transformer": lambda: models.transformer_encoder_like(seq=128, width=256, heads=4,
                                                           ffn=1024),
}
SMALL_MODELS = {
    "mobilenet_v1": models.mobilenet_v1_like,
    "mobilenet_v2": lambda: models.mobilenet_v2(resolution=32, classes=10),
    "resnet18": lambda: models.resnet18(resolution=32, width=0.125, classes=10),
    "transformer": models.transformer_encoder_like,
}
THREADS = (1, 2)


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
    constants = pipeline.constant_bytes(canonqnn.build.fuse(mod))
    return built, seconds, constants, report


def tvm_alone_build(quantized):
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    target = targets.host_target()
    start = time.perf_counter()
    mod = from_onnx(quantized)
    executable = tvm.compile(mod, target=target)
    seconds = time.perf_counter() - start
    constants = pipeline.constant_bytes(pipeline.fuse_kernels(mod, target))
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
    for threads in THREADS:
        row[f"ms_canonqnn_{threads}"] = library_ms(built, x, threads, args.runs)

    if args.tune:
        tuning_dir = os.path.join(args.tuning_dir, name)
        tuned, row["build_s_tuned"], _, _ = canonical_build(quantized, args.tune, tuning_dir)
        row["tuning"] = {"trials": args.tune, "kernels_tuned": tuned.tuning[0],
                         "kernels_reused": tuned.tuning[1], "dir": tuning_dir}
        row["ms_tuned_2"] = library_ms(tuned, x, 2, args.runs)
        expected = built.run({"input": x})
        got = tuned.run({"input": x})
        row["tuned_equal_untuned"] = all(np.array_equal(expected[k], got[k]) for k in expected)

    if args.tvm_alone:
        executable, row["build_s_tvm"], row["constants_tvm"] = tvm_alone_build(quantized)
        row["ms_tvm"] = median_ms(tvm_call(executable, [x]), args.runs)

    feed = {models.INPUT_NAME: x}
    for threads in THREADS:
        session = default_ort_session(quantized, threads)
        row[f"ms_ort_{threads}"] = median_ms(lambda s=session: s.run(None, feed), args.runs)
    session, row["ort_exact_config"] = ort_session(quantized, threads=max(THREADS))
    row["ms_ort_exact_2"] = median_ms(lambda: session.run(None, feed), args.runs)
    ours = built.run(feed)
    theirs = session.run(None, feed)
    row["exact_with_d"] = all(np.array_equal(ours[k], v) for k, v in zip(ours, theirs))
    return row


def library_ms(built, x: np.ndarray, threads: int, runs: int) -> float:
    """Median ms of the exported ``built`` in a child process on ``threads`` TVM threads (TVM
    sizes its thread pool once per process, from ``TVM_NUM_THREADS``)."""
    with tempfile.TemporaryDirectory(prefix="canonqnn_bench_") as tmp:
        library, data = os.path.join(tmp, "model.so"), os.path.join(tmp, "input.npy")
        built.export(library)
        np.save(data, x)
        env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
        out = subprocess.run([sys.executable, __file__, "--time-library", library, data,
                              "--runs", str(runs)], env=env, check=True, capture_output=True,
                             text=True).stdout
    return float(out.strip().splitlines()[-1])


def time_library(library: str, data: str, runs: int) -> float:
    built = canonqnn.load_built(library)
    return median_ms(tvm_call(built.module, [np.load(data)]), runs)


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


def measured_peak_gmacs(isa, iterations: int = 2_000_000, accumulators: int = 12) -> float:
    """The int8 MAC rate one thread reaches on ``isa``'s instruction alone (GMAC/s): a loop of
    ``accumulators`` independent chains, each instruction's result feeding its chain's next
    one, with the weights loaded from L1 as the kernels load them."""
    import tvm
    from tvm.script import tirx as T

    lanes, pair, name = isa.lanes, isa.pair, isa.llvm_intrinsic
    act = f"int16x{2 * lanes}" if pair == 2 else f"uint8x{4 * lanes}"
    wgt = f"int16x{2 * lanes}" if pair == 2 else f"int8x{4 * lanes}"
    acc_t, width, n = f"int32x{lanes}", lanes * pair, accumulators

    @T.prim_func(s_tir=True)
    def main(B: T.Buffer((n * width,), isa.weight_dtype), C: T.Buffer((n * lanes,), "int32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        acc = T.alloc_buffer((n,), acc_t, scope="local")
        for r in T.unroll(n):
            acc[r] = T.broadcast(T.int32(r), lanes)
        for _ in range(iterations):
            for r in T.unroll(n):
                if pair == 2:
                    acc[r] = acc[r] + T.call_llvm_pure_intrin(
                        T.llvm_lookup_intrinsic_id(name), T.reinterpret(acc[r], dtype=act),
                        B.vload([r * width], wgt), dtype=acc_t)
                else:
                    acc[r] = T.call_llvm_pure_intrin(
                        T.llvm_lookup_intrinsic_id(name), acc[r],
                        T.reinterpret(acc[(r + 1) % n], dtype=act), B.vload([r * width], wgt),
                        dtype=acc_t)
        for r in T.unroll(n):
            C[T.ramp(r * lanes, 1, lanes)] = acc[r]

    lib = pipeline.compile_kernel(main, targets.host_target())
    args = [tvm.runtime.tensor(np.ones([int(d) for d in p.shape], str(p.dtype)))
            for p in main.params]
    seconds = lib.time_evaluator("main", tvm.cpu(), number=3, repeat=3)(*args).median
    return iterations * n * lanes * pair / seconds / 1e9


def host_peak() -> tuple[float, str]:
    """The host's measured peak int8 rate per thread (GMAC/s) on the dot-product ISA a build
    for it uses, and what it was measured on."""
    from canonqnn.build.forms import dot

    isa = dot.host_isa()
    if isa is None:
        return 0.0, "no int8 dot-product ISA"
    return measured_peak_gmacs(isa), f"measured on {isa.name} {isa.llvm_intrinsic}"


def kernel_macs(name: str, func) -> int | None:
    """Multiply-accumulates of a conv or matmul kernel (unscheduled): what its packed
    reduction block records (``macs``), else from a plain conv's or matmul's argument
    shapes."""
    found = [plan["macs"] for annotations in schedule.root_block_annotations(func)
             for plan in annotations.values() if isinstance(plan, dict) and "macs" in plan]
    if found:
        return int(sum(found))
    shapes = [tuple(int(d) for d in p.shape) for p in func.params]
    out, a, w = shapes[-1], shapes[0], shapes[1] if len(shapes) > 1 else ()
    if "conv2d" in name and "transpose" not in name and len(w) == len(out) == 4:  # OIHW
        return int(np.prod(out)) * w[1] * w[2] * w[3]
    if "matmul" in name and len(a) >= 2 and len(out) >= 2:  # [..., M, K] -> [..., M, N]
        return int(np.prod(out)) * a[-1]
    return None


def kernel_times(name: str, model, runs: int) -> None:
    """Each kernel of the untuned canonical build compiled alone and timed with TVM's
    ``time_evaluator`` on random data, largest first, with the conv and matmul kernels' MAC
    rate and its fraction of the host's peak (all the build's threads)."""
    import tvm

    quantized = models.quantize(model, fmt="qdq", activation="s8", per_channel=True)
    mod, _ = canonqnn.canonicalize(canonqnn.load(quantized))
    target = targets.host_target()
    cores = targets.cpu_cores(target)
    unscheduled = canonqnn.build.fuse(mod, target)
    fused = schedule.schedule_cpu(unscheduled, schedule.plan_block, cores, target)
    peak, how = host_peak()
    calls = collections.Counter(name for name, _, _ in report.kernel_calls(fused)[0])
    rng = np.random.default_rng(0)
    rows = []
    for gv, func in fused.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        shapes = [tuple(int(d) for d in p.shape) for p in func.params]
        args = [tvm.runtime.tensor(rng.integers(-5, 5, size=shape).astype(str(p.dtype)))
                for p, shape in zip(func.params, shapes)]
        lib = pipeline.compile_kernel(func, target)
        seconds = lib.time_evaluator("main", tvm.cpu(), number=runs, repeat=5)(*args).median
        macs = kernel_macs(gv.name_hint, unscheduled[gv.name_hint])
        count = calls[gv.name_hint]
        rows.append((seconds * 1e6 * count, seconds * 1e6, count, gv.name_hint, shapes, macs))
    total = sum(r[0] for r in rows)
    print(f"\n{name}: kernels of the untuned canonical build, each timed alone "
          f"({cores} threads), {total / 1e3:.2f} ms in total (each kernel's time x its calls); "
          f"peak {peak:.1f} GMAC/s a thread ({how}), {peak * cores:.1f} on {cores}")
    lines = [["kernel", "us", "calls", "share", "input -> output", "GMAC/s", "of peak"]]
    for all_calls, us, count, kernel, shapes, macs in sorted(rows, reverse=True):
        rate = macs / us / 1e3 if macs else None
        lines.append([kernel, f"{us:.1f}", str(count), f"{100 * all_calls / total:.1f}%",
                      f"{'x'.join(map(str, shapes[0]))} -> {'x'.join(map(str, shapes[-1]))}",
                      f"{rate:.1f}" if rate else "",
                      f"{100 * rate / (peak * cores):.0f}%" if rate and peak else ""])
    _print_rows(lines)


def print_table(rows: list[dict], tuned: bool) -> None:
    print("\nmedian latency, ms; canonqnn untuned (a), onnxruntime's default session (c), "
          "at 1 and 2 threads")
    print("(d) onnxruntime configured as canonqnn reproduces it bit for bit "
          f"({rows[0]['ort_exact_config']}); a = d: canonqnn's output equals (d)'s")
    alone = "ms_tvm" in rows[0]
    head = ["model", "(a) 1T", "(c) 1T", "a/c 1T", "(a) 2T", "(c) 2T", "a/c 2T", "(d) 2T",
            "a = d"] + (["(a') tuned 2T", "a'/c 2T"] if tuned else []) + (
        ["(b) TVM alone", "a/b"] if alone else [])
    lines = [head]
    for r in rows:
        line = [r["model"]]
        for t in THREADS:
            a, c = r[f"ms_canonqnn_{t}"], r[f"ms_ort_{t}"]
            line += [f"{a:.3f}", f"{c:.3f}", f"{a / c:.2f}"]
        line += [f"{r['ms_ort_exact_2']:.3f}", "yes" if r["exact_with_d"] else "NO"]
        if tuned:
            line += [f"{r['ms_tuned_2']:.3f}", f"{r['ms_tuned_2'] / r['ms_ort_2']:.2f}"]
        if alone:
            line += [f"{r['ms_tvm']:.3f}", f"{r['ms_canonqnn_2'] / r['ms_tvm']:.2f}"]
        lines.append(line)
    _print_rows(lines)

    print("\nbuild seconds, and bytes of constants in the built module")
    head = ["model", "input", "build (a)"] + (["build (a')"] if tuned else []) + (
        ["build (b)"] if alone else []) + ["constants (a)"] + (["constants (b)"] if alone else [])
    lines = [head]
    for r in rows:
        line = [r["model"], "x".join(map(str, r["input"])), f"{r['build_s_canonqnn']:.1f}"]
        if tuned:
            line.append(f"{r['build_s_tuned']:.1f}")
        if alone:
            line.append(f"{r['build_s_tvm']:.1f}")
        line.append(fmt_bytes(r["constants_canonqnn"]))
        if alone:
            line.append(fmt_bytes(r["constants_tvm"]))
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
                        help="the models at their test size "
                             "(canonqnn.testing.onnx_models defaults)")
    parser.add_argument("--runs", type=int, default=100, help="timed calls per measurement")
    parser.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                        help="also build with MetaSchedule tuning, TRIALS trials per model")
    parser.add_argument("--tuning-dir", default=None,
                        help="where tuning databases are kept and reused (default: a temp dir)")
    parser.add_argument("--json", metavar="OUT", help="also write the measurements as JSON")
    parser.add_argument("--kernels", action="store_true",
                        help="instead, time each kernel of the canonical build alone")
    parser.add_argument("--tvm-alone", action="store_true",
                        help="also build and time the model with TVM's own ONNX importer")
    parser.add_argument("--time-library", nargs=2, metavar=("LIBRARY", "INPUT"),
                        help=argparse.SUPPRESS)  # the child process of library_ms
    args = parser.parse_args(argv)
    if args.time_library:
        print(time_library(*args.time_library, args.runs))
        return 0
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
