"""What the canonical form buys at run time, measured side by side in one run.

For each network (real sizes: MobileNet-V1 and V2 and ResNet-18 at 224x224, a transformer
encoder layer of 128 tokens; ``--small`` takes the test-size models of
``canonqnn.testing.onnx_models``), quantized by onnxruntime's quantizer (QDQ, int8 activations,
per-channel int8 weights):

  (a) canonqnn: load -> canonicalize -> ``canonqnn.build`` (untuned), timed at 1 and 2 threads
      (``TVM_NUM_THREADS``, in a child process that loads the exported library)
  (a') the same with MetaSchedule tuning (``--tune TRIALS``; database in ``--tuning-dir``)
  (b) TVM alone (``--tvm-alone``): ``tvm.relax.frontend.onnx.from_onnx`` -> ``tvm.compile``
      (the fake-quant form, weights folded to float32 by TVM's FoldConstant)
  (c) onnxruntime's int8 kernels as users run them (default session config), 1 and 2 threads
  (d) onnxruntime configured as canonqnn reproduces it bit for bit, all cores; whether (a)'s
      output equals (d)'s is printed too
  (e) TFLite's default interpreter (``num_threads`` 1 and 2; its XNNPACK delegate applied by
      default) on the canonical module written as a TFLite flatbuffer: the same network, weights
      and quantization parameters (``canonqnn.testing.tflite_from_canonical``)
  (f) ExecuTorch's XNNPACK delegate (its threadpool reset to 1 and 2 threads) on the float
      network as a PyTorch module with the same weights (``canonqnn.testing.torch_from_onnx``),
      PT2E-quantized with the XNNPACK quantizer (calibrated on the inputs onnxruntime's
      quantizer saw) and lowered with ``to_edge_transform_and_lower``

printing build seconds, median latency, the ratios (canonqnn over the fastest of (c), (e) and
(f), named), the bytes of constants each built module carries, how far each runtime's output is
from the float network's, and how many cores each runtime kept busy. Every TVM build targets this
CPU (``mcpu`` from LLVM). (a), (c), (e) and (f) each run in a child process of their own, taking
turns (``--rounds``: each round times ``runs / rounds`` calls of each runtime; a time is the
median over the rounds of each round's median), each call timed around the runtime's own entry
point (``vm["main"]``, ``session.run``, ``interpreter.invoke``, ``method.execute``) with the
input in place. A peer that cannot run (its package missing, an op its form cannot express) has
the reason in its cell.

``--kernels`` instead times each kernel of the canonical build alone, with its MAC rate for
convs and matmuls and that rate as a fraction of the host's peak int8 rate on all the build's
threads. The peak is measured, not taken from a datasheet: one thread runs the dot-product
instruction the build uses (``canonqnn.build.forms.dot``) in a loop of independent chains with the
weights loaded from L1 (``measured_peak_gmacs``), times the threads.

    python benchmarks/runtime.py                       # all four, untuned
    python benchmarks/runtime.py --tune 64             # adds the tuned canonical build
    python benchmarks/runtime.py --models resnet18 --small --runs 50
    python benchmarks/runtime.py --peers tflite        # leaves ExecuTorch out
    python benchmarks/runtime.py --kernels --models mobilenet_v1   # where the time goes
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import statistics
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
# The peers canonqnn's build is compared with: (c) onnxruntime's default session, (e) TFLite's
# default interpreter, (f) ExecuTorch's XNNPACK delegate.
PEERS = {"ort": "(c) onnxruntime", "tflite": "(e) TFLite", "executorch": "(f) ExecuTorch"}


def _sibling(name: str):
    """``benchmarks/<name>.py``, imported by path (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNTIMES = _sibling("_runtimes")


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
    return mod, built, seconds, constants, report


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

    mod, built, row["build_s_canonqnn"], row["constants_canonqnn"], report = canonical_build(
        quantized, 0, None)
    if report.float_islands:
        row["float_islands"] = [str(i) for i in report.float_islands]
    with tempfile.TemporaryDirectory(prefix="canonqnn_bench_") as tmp:
        specs = runtime_specs(built, quantized, x, tmp)
        for peer, (spec, why) in peer_specs(mod, model, x, specs["canonqnn"]["input"], tmp,
                                            args.peers).items():
            if spec is not None:
                specs[peer] = spec
            row[f"{peer}_note"] = why
        for threads in THREADS:
            times, outputs, busy = RUNTIMES.time_runtimes(
                specs, threads, args.runs, args.rounds, tmp if threads == THREADS[0] else None)
            row[f"busy_cores_{threads}"] = busy
            for runtime in specs:
                ms = times.get(runtime)
                if isinstance(ms, str):
                    if runtime in ("canonqnn", "ort"):
                        raise RuntimeError(f"{name}: {runtime} at {threads} threads: {ms}")
                    row[f"{runtime}_note"], ms = f"failed at {threads} threads: {ms}", None
                row[f"ms_{runtime}_{threads}"] = ms
            for peer in PEERS:
                row.setdefault(f"ms_{peer}_{threads}", None)
            timed = {p: row[f"ms_{p}_{threads}"] for p in PEERS
                     if row[f"ms_{p}_{threads}"] is not None}
            fastest = min(timed, key=timed.__getitem__)
            row[f"fastest_peer_{threads}"] = fastest
            row[f"a_over_fastest_{threads}"] = row[f"ms_canonqnn_{threads}"] / timed[fastest]
            if outputs:
                row.update(agreement(mod, model, x, outputs))

    if args.tune:
        tuning_dir = os.path.join(args.tuning_dir, name)
        _, tuned, row["build_s_tuned"], _, _ = canonical_build(quantized, args.tune, tuning_dir)
        row["tuning"] = {"trials": args.tune, "kernels_tuned": tuned.tuning[0],
                         "kernels_reused": tuned.tuning[1], "dir": tuning_dir}
        row["ms_tuned_2"] = library_ms(tuned, x, 2, args.runs, args.rounds)
        expected = built.run({"input": x})
        got = tuned.run({"input": x})
        row["tuned_equal_untuned"] = all(np.array_equal(expected[k], got[k]) for k in expected)

    if args.tvm_alone:
        executable, row["build_s_tvm"], row["constants_tvm"] = tvm_alone_build(quantized)
        row["ms_tvm"] = median_ms(tvm_call(executable, [x]), args.runs)

    feed = {models.INPUT_NAME: x}
    session, row["ort_exact_config"] = ort_session(quantized, threads=max(THREADS))
    row["ms_ort_exact_2"] = median_ms(lambda: session.run(None, feed), args.runs)
    ours = built.run(feed)
    theirs = session.run(None, feed)
    row["exact_with_d"] = all(np.array_equal(ours[k], v) for k, v in zip(ours, theirs))
    return row


def runtime_specs(built, quantized, x: np.ndarray, folder: str) -> dict[str, dict]:
    """canonqnn's exported library and onnxruntime's default session, as children load them."""
    library, data = os.path.join(folder, "model.so"), os.path.join(folder, "input.npy")
    onnx_path = os.path.join(folder, "quantized.onnx")
    built.export(library)
    np.save(data, x)
    with open(onnx_path, "wb") as f:
        f.write(quantized.SerializeToString())
    return {"canonqnn": {"kind": "canonqnn", "library": library, "input": data},
            "ort": {"kind": "ort", "model": onnx_path, "input": data}}


def peer_specs(mod, model, x: np.ndarray, x_path: str, folder: str,
               peers: list[str]) -> dict[str, tuple[dict | None, str | None]]:
    """(spec, None) for each peer made, (None, why) for each not."""
    made: dict[str, tuple[dict | None, str | None]] = {}
    for peer in ("tflite", "executorch"):
        if peer not in peers:
            made[peer] = (None, "not asked for: --peers")
        elif peer == "tflite":
            made[peer] = RUNTIMES.tflite_spec(mod, x, folder)
        else:
            made[peer] = RUNTIMES.executorch_spec(model, x_path, folder)
    return made


def agreement(mod, model, x: np.ndarray, outputs: dict[str, np.ndarray]) -> dict:
    """How far each runtime's output is from the float network's (max |diff| / max |float|),
    and TFLite's from canonqnn's in steps of the output's quantization (the same network and
    parameters, another runtime's rounding)."""
    import onnxruntime as ort

    from canonqnn.io import interface

    reference = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {models.INPUT_NAME: x})[0]
    scale = float(np.abs(reference).max())
    found: dict = {"error_vs_float": {name: float(np.abs(out - reference).max() / scale)
                                      for name, out in outputs.items()}}
    if "tflite" in outputs:
        lsb = interface(mod).outputs[0].lsb or 1.0
        found["tflite_lsb_from_canonqnn"] = float(
            np.abs(outputs["tflite"] - outputs["canonqnn"]).max() / lsb)
    return found


def library_ms(built, x: np.ndarray, threads: int, runs: int, rounds: int = 1) -> float:
    """Median ms of the exported ``built`` in a child process on ``threads`` TVM threads (TVM
    sizes its thread pool once per process, from ``TVM_NUM_THREADS``)."""
    with tempfile.TemporaryDirectory(prefix="canonqnn_bench_") as tmp:
        library, data = os.path.join(tmp, "model.so"), os.path.join(tmp, "input.npy")
        built.export(library)
        np.save(data, x)
        spec = {"kind": "canonqnn", "library": library, "input": data}
        times, _, _ = RUNTIMES.time_runtimes({"canonqnn": spec}, threads, runs, rounds)
    ms = times["canonqnn"]
    if isinstance(ms, str):
        raise RuntimeError(f"the exported library did not run: {ms}")
    return ms


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
    # the threads TVM's pool runs them on (TVM_NUM_THREADS, as canonqnn sets it by default)
    threads = int(os.environ.get("TVM_NUM_THREADS") or cores)
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
    plural = "s" if threads > 1 else ""
    print(f"\n{name}: kernels of the untuned canonical build, each timed alone "
          f"({threads} thread{plural}), {total / 1e3:.2f} ms in total (each kernel's time x "
          f"its calls); peak {peak:.1f} GMAC/s a thread ({how}), {peak * threads:.1f} on "
          f"{threads}")
    lines = [["kernel", "us", "calls", "share", "input -> output", "GMAC/s", "of peak"]]
    for all_calls, us, count, kernel, shapes, macs in sorted(rows, reverse=True):
        rate = macs / us / 1e3 if macs else None
        lines.append([kernel, f"{us:.1f}", str(count), f"{100 * all_calls / total:.1f}%",
                      f"{'x'.join(map(str, shapes[0]))} -> {'x'.join(map(str, shapes[-1]))}",
                      f"{rate:.1f}" if rate else "",
                      f"{100 * rate / (peak * threads):.0f}%" if rate and peak else ""])
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
    print_peers(rows)


def print_peers(rows: list[dict]) -> None:
    """canonqnn against each peer per network and thread count; a peer that did not run has
    the reason in its cell (its first words, the whole of it below the table)."""
    print("\nmedian latency, ms, against the peers: (a) canonqnn, " + ", ".join(
        PEERS.values()) + " (default session; default interpreter, its XNNPACK delegate on the "
          "canonical module written as TFLite; XNNPACK delegate on the PT2E form); "
          "a/fastest: (a) over the fastest peer")
    lines = [["model", "T", "(a)", *(label.split()[0] for label in PEERS.values()),
              "fastest peer", "a/fastest"]]
    reasons: list[str] = []
    for r in rows:
        for t in THREADS:
            line = [r["model"], str(t), f"{r[f'ms_canonqnn_{t}']:.3f}"]
            for peer in PEERS:
                ms, note = r.get(f"ms_{peer}_{t}"), r.get(f"{peer}_note")
                if ms is not None:
                    line.append(f"{ms:.3f}")
                    continue
                if note not in reasons:
                    reasons.append(note)
                line.append(f"{note.split(':')[0]} [{reasons.index(note) + 1}]")
            fastest = r[f"fastest_peer_{t}"]
            line += [PEERS[fastest], f"{r[f'a_over_fastest_{t}']:.2f}"]
            lines.append(line)
    _print_rows(lines)
    for k, reason in enumerate(reasons, 1):
        print(f"[{k}] {reason}")
    for r in rows:
        busy = r[f"busy_cores_{THREADS[-1]}"]
        print(f"{r['model']}: cores kept busy at {THREADS[-1]} threads (CPU time / wall time; "
              "fewer than the threads: the machine's other work took them): " +
              ", ".join(f"{name} {cores:.1f}" for name, cores in busy.items()))
        errors = r.get("error_vs_float")
        if errors:
            text = ", ".join(f"{name} {100 * e:.2f}%" for name, e in errors.items())
            lsb = r.get("tflite_lsb_from_canonqnn")
            print(f"{r['model']}: output against the float network's, max |diff| / max |float|: "
                  f"{text}" + ("" if lsb is None else
                               f"; TFLite's within {lsb:.0f} LSB of canonqnn's"))


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
    parser.add_argument("--rounds", type=int, default=5,
                        help="the runtimes take turns, each timing runs/rounds calls a round; "
                             "a runtime's time is the median over the rounds")
    parser.add_argument("--peers", default="tflite,executorch",
                        help="peers timed besides onnxruntime, from tflite, executorch")
    args = parser.parse_args(argv)
    args.peers = [p for p in args.peers.split(",") if p]
    if set(args.peers) - {"tflite", "executorch"}:
        parser.error(f"unknown peer(s) {sorted(set(args.peers) - {'tflite', 'executorch'})}")
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
