"""The device side of ``--rpc``: a TVM RPC server that can also run the source runtime there.

Run it on the device, where TVM's runtime (``apache-tvm``) and numpy are installed::

    python device_server.py --host 0.0.0.0 --port 9190                  # a server
    python device_server.py --tracker TRACKER:9190 --key rasp4 --port 9190  # behind a tracker

The file imports nothing of canonqnn (copy it to a device that has only TVM); where canonqnn is
installed, ``python -m canonqnn.build.device_server`` is the same. Besides TVM's own RPC
functions (upload, load a library, run it) the sessions it serves have
``canonqnn.device.describe`` (the machine, TVM's version, which runtimes are installed) and
``canonqnn.device.onnxruntime`` and ``canonqnn.device.tflite`` (a model run by onnxruntime's
default session or by the TFLite interpreter on the device, for ``parity --rpc``).

TVM's ``rpc_server`` starts its listener in a new interpreter and serves each session in a
fork of it; this server listens in its own process, in its only thread, instead: each session's
fork has the functions registered here, and it needs no new interpreter (under user-mode
emulation, where an emulated program cannot start another, that is what makes it run at all).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import platform
import signal
import socket
import sys
from typing import Any, NoReturn

PREFIX = "canonqnn.device."
DESCRIPTION = "description"  # the entry of a runtime's outputs that describes the runtime
DELEGATED = "delegated"  # the entry of the TFLite interpreter's: a delegate took operators


def describe() -> str:
    """The device as JSON: machine, Python and TVM versions, the runtimes installed."""
    import tvm

    runtimes = {}
    for name in ("onnxruntime", "ai_edge_litert", "tflite_runtime"):
        try:
            runtimes[name] = getattr(__import__(name), "__version__", "installed")
        except ImportError:
            continue
    return json.dumps({"machine": platform.machine(), "python": platform.python_version(),
                       "tvm": tvm.__version__, "runtimes": runtimes,
                       "features": cpu_features()})


def cpu_features() -> list[str]:
    """The CPU's features as Linux lists them (AArch64: ``asimddp`` is the dot product)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("Features", "flags"):
                    return value.split()
    except OSError:
        pass
    return []


def run_onnxruntime(model: bytearray, inputs: bytearray, names: str, configs: str,
                    threads: int) -> bytearray:
    """Run an ONNX model (its bytes) by onnxruntime's CPU session with all graph optimizations
    on ``inputs`` (an ``.npz`` in bytes), returning the outputs ``names`` (a JSON list) and,
    under ``DESCRIPTION``, the session's description, as an ``.npz`` in bytes. ``configs`` is a
    JSON list of session config entries, each tried in turn until a session loads (as parity
    runs onnxruntime here, ``canonqnn.frontends.onnx.runtime``); ``threads`` 0 for its default."""
    import numpy as np
    import onnxruntime as ort

    feeds = dict(np.load(io.BytesIO(bytes(inputs)), allow_pickle=False))
    errors = []
    for config in json.loads(configs):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        for key, value in config.items():
            options.add_session_config_entry(key, value)
        try:
            session = ort.InferenceSession(bytes(model), options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001  (onnxruntime raises its own types)
            errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
            continue
        settings = ", ".join(f"{k}={v}" for k, v in config.items())
        described = (f"onnxruntime {ort.__version__} CPU on {platform.machine()}, "
                     f"ORT_ENABLE_ALL, {settings}" + (f", {threads} intra-op threads"
                                                      if threads else ""))
        outputs = session.run(json.loads(names), feeds)
        buffer = io.BytesIO()
        arrays: dict[str, Any] = {f"arr_{k}": v for k, v in enumerate(outputs)}
        arrays[DESCRIPTION] = np.array(described)
        np.savez(buffer, **arrays)
        return bytearray(buffer.getvalue())
    raise RuntimeError("onnxruntime cannot run this model: " + "; ".join(errors))


def tflite_interpreter(model: bytes, resolver: str, preserve_all: bool) -> Any:
    """The TFLite interpreter (ai-edge-litert) of ``model`` with the op resolver ``resolver`` (an
    ``OpResolverType`` name), its tensors allocated. ``preserve_all``: keep inner tensors
    (the interpreter frees them otherwise)."""
    from ai_edge_litert import interpreter as litert

    interp = litert.Interpreter(
        model_content=model, experimental_preserve_all_tensors=preserve_all,
        experimental_op_resolver_type=getattr(litert.OpResolverType, resolver))
    interp.allocate_tensors()
    return interp


def tflite_invoker(interp: Any, names: list[str], detections: dict[str, str]) -> Any:
    """``run(feed)`` of ``interp``: the tensors ``names`` (graph outputs or inner ones) after
    one invocation on ``feed``. ``detections``: outputs of a TFLite_Detection_PostProcess -> its
    count output; TFLite leaves their entries past the count undefined (stale memory), so they
    are given as 0, what a built module writes there."""
    import numpy as np

    inputs = {d["name"]: d["index"] for d in interp.get_input_details()}
    tensors = {d["name"]: d["index"] for d in interp.get_tensor_details()}
    tensors.update({d["name"]: d["index"] for d in interp.get_output_details()})

    def defined(name: str, value: Any) -> Any:
        if name in detections:
            count = int(np.asarray(interp.get_tensor(tensors[detections[name]])).reshape(-1)[0])
            value[:, max(count, 0):] = 0
        return value

    def run(feed: dict[str, Any]) -> list[Any]:
        # Stateful operators (LSTM, SVDF) carry their variable tensors from one invoke to the
        # next; a converted module is one run from the initial state, so every run starts there
        interp.reset_all_variables()
        for name, value in feed.items():
            interp.set_tensor(inputs[name], np.ascontiguousarray(value))
        interp.invoke()
        return [defined(name, interp.get_tensor(tensors[name]).copy()) for name in names]

    return run


def run_tflite(model: bytearray, inputs: bytearray, names: str, resolver: str,
               preserve_all: bool, detections: str) -> bytearray:
    """Run a TFLite model (its bytes) by the TFLite interpreter with the op resolver
    ``resolver`` on ``inputs`` (an ``.npz`` in bytes), returning the tensors ``names`` (a JSON
    list) as ``run_onnxruntime`` does, and under ``DELEGATED`` whether a delegate took some of
    its operators (no ``names``: only that, nothing is run). ``detections``: JSON, as
    ``tflite_invoker`` takes it."""
    import ai_edge_litert
    import numpy as np

    interp = tflite_interpreter(bytes(model), resolver, bool(preserve_all))
    feed = dict(np.load(io.BytesIO(bytes(inputs)), allow_pickle=False))
    wanted = json.loads(names)
    outputs = tflite_invoker(interp, wanted, json.loads(detections))(feed) if wanted else []
    version = getattr(ai_edge_litert, "__version__", "")
    arrays: dict[str, Any] = {f"arr_{k}": v for k, v in enumerate(outputs)}
    arrays[DESCRIPTION] = np.array(f"TFLite interpreter (ai-edge-litert {version}) on "
                                   f"{platform.machine()}, OpResolverType.{resolver}")
    arrays[DELEGATED] = np.array(any(d["op_name"] == "DELEGATE"
                                     for d in interp._get_ops_details()))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return bytearray(buffer.getvalue())


def register() -> None:
    import tvm

    tvm.register_global_func(PREFIX + "describe", describe, override=True)
    tvm.register_global_func(PREFIX + "onnxruntime", run_onnxruntime, override=True)
    tvm.register_global_func(PREFIX + "tflite", run_tflite, override=True)


def main(argv=None) -> NoReturn:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: "
                                                       "127.0.0.1; 0.0.0.0 for the network)")
    p.add_argument("--port", type=int, default=9190, help="first port to try (default 9190)")
    p.add_argument("--port-end", type=int, default=9199, help="last port to try")
    p.add_argument("--tracker", metavar="HOST:PORT", help="register with this RPC tracker")
    p.add_argument("--key", default="", help="device key the tracker hands out")
    args = p.parse_args(argv)
    tracker = None
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        tracker = (host, int(port))
    register()
    from tvm.rpc import server

    sock = _listening_socket(args.host, args.port, args.port_end)
    port, home = sock.getsockname()[1], os.getcwd()
    print(f"serving on {args.host}:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: _leave())
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            # TVM's listening loop, in this process's only thread (TVM runs it in a thread of
            # its own, or in a new interpreter): each session is a fork of this process, with
            # the functions registered above, and under user-mode emulation a fork of a
            # threaded program may hang (a session once hung at its start, the listener then
            # in a thread of its own; the cause is not established)
            try:
                server._listen_loop(sock, port, args.key, tracker, None, None)
            except RuntimeError as exc:  # a session's process died (a library that crashed)
                os.chdir(home)  # TVM's loop left its session's folder without returning
                print(f"a session ended abnormally ({exc}): listening again", flush=True)
    _leave()


def _listening_socket(host: str, port: int, port_end: int) -> socket.socket:
    """A socket listening on the first free port of [port, port_end]."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for candidate in range(port, port_end + 1):
        try:
            sock.bind((host, candidate))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        sock.listen(1)
        return sock
    raise SystemExit(f"device_server: no free port in [{port}, {port_end}] on {host}")


def _leave() -> NoReturn:
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
