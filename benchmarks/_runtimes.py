"""Runtimes timed side by side for ``runtime.py``: each in a child process of its own, the
children taking turns.

A runtime is a spec (a dict: its kind, the files it loads, its thread count). ``time_runtimes``
starts one child per spec (``python _runtimes.py SPEC``), each loads its runtime and waits; then,
round by round, each child in turn times ``runs / rounds`` calls of its runtime's own entry point
(after a warm-up call) while the others sleep, and the median over the rounds of each round's
median is the runtime's time. Alternating spreads the machine's slow spells over every runtime;
separate processes keep the thread pools apart (each runtime sizes its own: ``TVM_NUM_THREADS``,
``intra_op_num_threads``, ``num_threads``, ExecuTorch's threadpool).

The peers' forms are made here too: ``tflite_spec`` writes the canonical module as a TFLite
flatbuffer (``canonqnn.testing.tflite_from_canonical``), ``executorch_spec`` the float network as
a PT2E program lowered to ExecuTorch's XNNPACK delegate (``canonqnn.testing.torch_from_onnx``).
When one cannot be made (its package is missing, the network has an op its form cannot express),
the reason is returned instead, for the benchmark to print in its place.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

# After its timed calls each child waits, before answering, until its thread pool's workers
# have stopped spinning (its process idle for a window), so that they take no core from the
# next runtime: TVM's workers spin about 0.16 s after a call (Zen 4), and a 50 ms pause had
# onnxruntime's default session at 2 threads three times slower than alone.
SETTLE_WINDOW_S, SETTLE_LIMIT_S = 0.02, 2.0
PREFIX = "@@ "  # the protocol's lines; whatever else a runtime prints on stdout is skipped


def tflite_spec(mod: Any, x: np.ndarray, folder: str) -> tuple[dict | None, str | None]:
    """TFLite's default interpreter on the canonical module ``mod`` written as TFLite."""
    try:
        import ai_edge_litert  # noqa: F401
    except ImportError:
        return None, "not installed: ai-edge-litert (pip install canonqnn[tflite])"
    from canonqnn.testing import tflite_from_canonical

    try:
        form = tflite_from_canonical.write(mod)
    except tflite_from_canonical.NotExpressible as exc:
        return None, f"not expressible in TFLite: {exc}"
    model, data = os.path.join(folder, "model.tflite"), os.path.join(folder, "input_tflite.npy")
    with open(model, "wb") as f:
        f.write(form.data)
    np.save(data, form.inputs([x])[0])
    return {"kind": "tflite", "model": model, "input": data,
            "output_perm": list(form.output_perms[0])}, None


def executorch_spec(float_model: Any, x_path: str, folder: str) -> tuple[dict | None, str | None]:
    """ExecuTorch's XNNPACK delegate on the float network's PT2E form."""
    try:
        import executorch  # noqa: F401
        import torchao  # noqa: F401
    except ImportError:
        return None, "not installed: executorch (pip install canonqnn[torch])"
    from canonqnn.testing import torch_from_onnx

    try:
        pte = torch_from_onnx.executorch_pte(torch_from_onnx.pt2e_program(float_model))
    except Exception as exc:  # noqa: BLE001  (export, quantization or lowering: the reason)
        return None, f"PT2E failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    program = os.path.join(folder, "model.pte")
    with open(program, "wb") as f:
        f.write(pte)
    return {"kind": "executorch", "program": program, "input": x_path}, None


# ---------------------------------------------------------------------- the children
def _open(spec: dict) -> tuple[Any, Any]:
    """``(call, output)``: one call of the runtime's entry point with its input in place, and
    the output of one call as an array in the canonical layout."""
    kind, threads, x = spec["kind"], int(spec["threads"]), np.load(spec["input"])
    if kind == "canonqnn":  # TVM sized its pool from TVM_NUM_THREADS (set by the parent)
        import tvm
        from tvm import relax

        import canonqnn

        built = canonqnn.load_built(spec["library"])
        main = relax.VirtualMachine(built.module, tvm.cpu())["main"]
        args = [tvm.runtime.tensor(x)]
        return (lambda: main(*args)), (lambda: next(iter(built.run({"input": x}).values())))
    if kind == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()  # as users run it: every graph optimization, default config
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        session = ort.InferenceSession(spec["model"], so, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}
        return (lambda: session.run(None, feed)), (lambda: session.run(None, feed)[0])
    if kind == "tflite":  # default options: the XNNPACK delegate is applied
        from ai_edge_litert.interpreter import Interpreter

        with open(spec["model"], "rb") as f:
            interpreter = Interpreter(model_content=f.read(), num_threads=threads)
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        out = interpreter.get_output_details()[0]["index"]
        perm = np.argsort(spec["output_perm"])

        def tflite_output() -> np.ndarray:
            interpreter.invoke()
            return np.transpose(interpreter.get_tensor(out), perm)

        return interpreter.invoke, tflite_output
    if kind == "executorch":
        import torch
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime

        # The XNNPACK delegate runs on the runtime's one threadpool (as many threads as
        # cores by default): sized before the program is loaded.
        portable_lib._unsafe_reset_threadpool(threads)
        if portable_lib._threadpool_get_thread_count() != threads:
            raise RuntimeError(f"ExecuTorch's threadpool did not take {threads} threads")
        program = Runtime.get().load_program(spec["program"])
        method = program.load_method("forward")
        inputs = [torch.from_numpy(x)]

        def execute(_program: Any = program) -> Any:  # holds the program its method runs on
            return method.execute(inputs)

        return execute, lambda: np.asarray(execute()[0])
    raise ValueError(f"unknown runtime kind {kind!r}")


def serve(spec: dict) -> None:
    """The child: open the runtime, then answer ``time N`` (median ms of N calls) and
    ``output PATH`` (one call's output saved) until stdin closes."""
    def answer(text: str) -> None:
        print(PREFIX + text, flush=True)

    try:
        call, output = _open(spec)
    except Exception as exc:  # noqa: BLE001  (the parent reports it in the runtime's place)
        answer("error " + f"{type(exc).__name__}: {exc}".replace("\n", " "))
        return
    answer("ready")
    warm_up = 3
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "time":
            for _ in range(warm_up):
                call()
            warm_up = 1
            times = []
            cpu = time.process_time()
            for _ in range(int(argument)):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            busy = (time.process_time() - cpu) / sum(times)
            _settle()
            answer(f"{statistics.median(times) * 1e3} {busy}")
        elif command == "output":
            np.save(argument, output())
            answer("ok")


def _settle() -> None:
    """Wait until this process spends under a tenth of a window's time on the CPU (its
    runtime's threads stopped spinning), at most ``SETTLE_LIMIT_S``."""
    start = time.perf_counter()
    while time.perf_counter() - start < SETTLE_LIMIT_S:
        cpu = time.process_time()
        time.sleep(SETTLE_WINDOW_S)
        if time.process_time() - cpu < SETTLE_WINDOW_S / 10:
            return


class _Child:
    def __init__(self, spec: dict, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), json.dumps(spec)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready = self.read()
        self.error = None if ready == "ready" else ready.removeprefix("error ")

    def read(self) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(PREFIX):
                return line[len(PREFIX):].strip()
        return f"error the child exited (code {self.process.wait()})"

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def time_runtimes(specs: dict[str, dict], threads: int, runs: int, rounds: int,
                  outputs: str | None = None) -> tuple[dict[str, float | str], dict, dict]:
    """Each runtime of ``specs`` at ``threads`` threads: its time (ms, the median over
    ``rounds`` rounds of each round's median) or why it did not run; how many cores it kept
    busy (its process's CPU time over the wall time of its timed calls, the median over the
    rounds: below ``threads`` when the machine's other work took the cores); with ``outputs``
    (a folder), also each runtime's output."""
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    children = {name: _Child({**spec, "threads": threads}, env) for name, spec in specs.items()}
    results: dict[str, float | str] = {n: c.error for n, c in children.items() if c.error}
    running = {n: c for n, c in children.items() if not c.error}
    per_round: dict[str, list[float]] = {n: [] for n in running}
    busy: dict[str, list[float]] = {n: [] for n in running}
    got: dict[str, np.ndarray] = {}
    try:
        for _ in range(rounds):
            for name, child in list(running.items()):
                reply = child.ask(f"time {max(1, -(-runs // rounds))}")
                if reply.startswith("error"):
                    results[name] = reply.removeprefix("error ")
                    del running[name]
                else:
                    ms, cores = reply.split()
                    per_round[name].append(float(ms))
                    busy[name].append(float(cores))
        for name, child in running.items():
            results[name] = statistics.median(per_round[name])
            if outputs is not None:
                path = os.path.join(outputs, f"{name}_output.npy")
                if child.ask(f"output {path}") == "ok":
                    got[name] = np.load(path)
    finally:
        for child in children.values():
            child.close()
    return results, got, {name: statistics.median(b) for name, b in busy.items() if b}


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
