"""Devices through TVM's RPC (``canonqnn.build.remote``), with canonqnn's device server
(``canonqnn.build.device_server``) run on this host as the device: a build runs there, parity
compares with the onnxruntime there, a tracker hands the device out by key, and each way of
getting it wrong is named. (An AArch64 device: tests/tools/test_arm_device.py.)"""

from __future__ import annotations

import gc
import json
import threading
import time

import numpy as np
import pytest

import canonqnn
from _devices import (  # noqa: F401  (sessions_closed: autouse)
    DEVICE_SERVER,
    saved_mobilenet,
    sessions_closed,
)
from _servers import serving
from canonqnn.build import remote
from canonqnn.cli import EXIT_ERROR, main
from canonqnn.errors import CanonqnnError
from canonqnn.frontends.tflite import runtime as tflite_runtime
from canonqnn.testing import onnx_models, tflite_models


@pytest.fixture(scope="module")
def server():
    with serving(DEVICE_SERVER, "--port", "19190", "--port-end", "19290") as address:
        yield address


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path, proto = saved_mobilenet(tmp_path_factory.mktemp("model"), "u8")
    feed = {proto.graph.input[0].name: onnx_models.random_input(2, onnx_models.input_shape(proto))}
    return path, feed


@pytest.fixture(scope="module")
def built(model, tmp_path_factory):
    """The model's build for this host, and its library."""
    made = canonqnn.build(canonqnn.canonicalize(canonqnn.load(model[0]))[0])
    return made, made.export(tmp_path_factory.mktemp("library") / "m.so")


@pytest.mark.parametrize("address", ["localhost", "localhost:", "localhost:port", "h:70000",
                                     "h:9190:", "h:1:2:3", ":9190"])
def test_an_address_that_is_neither_a_server_nor_a_tracker_and_key_is_refused(address):
    with pytest.raises(CanonqnnError, match=r"expected HOST:PORT \(an RPC server\) or "
                                            r"HOST:PORT:KEY"):
        remote.parse(address)


def test_an_unreachable_server_is_named():
    with pytest.raises(CanonqnnError, match="--rpc 127.0.0.1:1: cannot reach the RPC server "
                                            "at 127.0.0.1:1"):
        remote.connect("127.0.0.1:1")


def test_the_device_says_what_it_is_and_its_target_follows(server):
    device = remote.connect(server)
    assert device.machine == "x86_64"
    assert device.runtimes["onnxruntime"] == "1.31.1"
    target = remote.device_target(device)
    assert target.startswith("llvm -mtriple=x86_64-linux-gnu")
    for linux, llvm in remote.LLVM_FEATURES["x86_64"].items():
        assert (f"+{llvm}" in target.split("-mattr=")[-1].split(",")) == \
            (linux in device.features), linux


def test_a_build_run_on_the_device_equals_the_build_run_here(server, model, built):
    (here, library), (_, feed) = built, model
    there = canonqnn.load_built(library, remote.connect(server))
    assert there.device is not None and there.io == here.io
    got, expected = there.run(feed), here.run(feed)
    assert list(got) == list(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_parity_on_the_device_compares_with_the_onnxruntime_there(server, model, capsys):
    path, _ = model
    assert main(["parity", path, "--rpc", server, "--runs", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["exact"]
    assert result["reference"].startswith("onnxruntime 1.31.1 CPU on x86_64")
    assert result["reference"].endswith(f"(the device at {server})")
    assert result["device"] == {"address": server, "machine": "x86_64"}


def test_parity_of_a_tflite_model_on_the_device_compares_with_its_interpreter_there(
        server, tmp_path, capsys):
    path = tmp_path / "classifier.tflite"
    path.write_bytes(tflite_models.classifier())
    # two commands, one after the other: each frees its session when it ends
    for _ in range(2):
        assert main(["parity", str(path), "--rpc", server, "--runs", "1", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["exact"]
        # the device's interpreter is probed there for its profile, and runs each resolver
        assert result["numerics"] == result["runtime_numerics"] == tflite_runtime.profile().name
        assert result["reference"].startswith("TFLite interpreter (ai-edge-litert 2.3.0) on "
                                              "x86_64, OpResolverType.")
        assert result["reference"].endswith(f"(the device at {server})")
        assert len(result["also_compared"]) == 2


def test_a_tracker_hands_out_the_device_of_a_key_and_names_the_keys_it_has():
    tracker = ("-c", "import sys, tvm.rpc.tracker as t; s = t.Tracker('127.0.0.1', 19300, "
                     "19400, silent=True); print('serving on 127.0.0.1:%d' % s.port, "
                     "flush=True); s.proc.join()")
    with serving(*tracker) as tracker_address, \
            serving(DEVICE_SERVER, "--port", "19400", "--port-end", "19500",
                    "--tracker", tracker_address, "--key", "test-x86"):
        deadline = time.monotonic() + 60  # the server registers with the tracker on its own
        while True:
            try:
                device = remote.connect(f"{tracker_address}:test-x86")
                break
            except CanonqnnError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert device.machine == "x86_64"
        with pytest.raises(CanonqnnError, match=f"the tracker at {tracker_address} has no "
                                                f"device of key 'rasp4' \\(its keys: "
                                                f"test-x86\\)"):
            remote.connect(f"{tracker_address}:rasp4")


def test_a_plain_tvm_server_runs_builds_but_parity_there_names_the_device_server(model, built,
                                                                               capsys):
    plain = ("-c", "from tvm import rpc; s = rpc.Server('127.0.0.1', 19500, 19600, "
                   "silent=True); print('serving on 127.0.0.1:%d' % s.port, flush=True); "
                   "s.proc.join()")
    with serving(*plain) as address:
        (path, feed), (_, library) = model, built

        def run_there() -> list[str]:
            device = remote.connect(address)
            assert device.machine is None  # a plain server says nothing of the device
            return list(canonqnn.load_built(library, device).run(feed))

        assert run_there() == ["logits"]
        gc.collect()  # the session closed: the server serves one at a time
        assert main(["parity", path, "--rpc", address, "--target", "llvm", "--runs", "1"]) == \
            EXIT_ERROR
        assert f"the device at {address} does not say what it runs: start canonqnn's " \
               "device server there" in capsys.readouterr().err


def test_the_command_line_refuses_rpc_with_reference_and_names_an_unreachable_device(
        model, capsys):
    path, _ = model
    assert main(["run", path, "--reference", "--rpc", "127.0.0.1:1"]) == EXIT_ERROR
    assert "--reference runs the numpy reference here; --rpc runs a built library on a " \
           "device" in capsys.readouterr().err
    assert main(["parity", path, "--rpc", "127.0.0.1:1"]) == EXIT_ERROR
    assert "cannot reach the RPC server at 127.0.0.1:1" in capsys.readouterr().err


def test_build_for_a_device_runs_there_and_its_target_is_the_devices(server, model, tmp_path,
                                                                     capsys):
    path, _ = model
    assert main(["build", path, "--rpc", server, "-o", str(tmp_path / "m.so")]) == 0
    out = capsys.readouterr().out
    assert f"device: {server} (x86_64): loaded and ran there" in out
    target = next(line for line in out.splitlines() if line.startswith("target: "))
    assert "-mtriple=x86_64-linux-gnu" in target.split()


def test_a_client_held_back_by_a_busy_device_is_told_why_it_waits(server, monkeypatch, capfd):
    monkeypatch.setattr(remote, "WAIT_NOTE_SECONDS", 0.5)
    holder = remote.connect(server)  # the one session the server serves now
    waiting = threading.Thread(target=lambda: remote.connect(server).release(), daemon=True)
    waiting.start()
    time.sleep(2)
    assert f"canonqnn: note: waiting for the device at {server}: it serves one session at a " \
        "time and another client holds it" in capfd.readouterr().err
    holder.release()
    waiting.join(60)
    assert not waiting.is_alive()  # served once the first session closed
