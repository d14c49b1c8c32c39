"""The emulated AArch64 device (``tools/arm-device``): canonqnn's AArch64 builds, cross-compiled
here, run there through ``--rpc`` and equal the numpy reference, and parity there is bit-exact
with the onnxruntime-aarch64 running beside them.

Marked ``arm_device``: out of the default run, run by ``.ci/run`` (``pytest -m arm_device``),
where ``CANONQNN_REQUIRE_ARM_DEVICE=1`` turns a missing tool from a skip into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _devices import saved_mobilenet, sessions_closed  # noqa: F401  (autouse)
from canonqnn.cli import EXIT_ERROR, main
from canonqnn.testing import onnx_models

pytestmark = pytest.mark.arm_device

TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "arm-device")
DOTPROD = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod"
NEON = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
# what the device and the cross-compiled libraries need on this host
NEEDS = {"qemu-aarch64": "qemu-user", "mmdebstrap": "mmdebstrap",
         "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"}


def _missing() -> list[str]:
    missing = [f"{tool} (apt-get install {package})" for tool, package in NEEDS.items()
               if shutil.which(tool) is None]
    if not os.path.isfile("/usr/aarch64-linux-gnu/lib/crti.o"):
        missing.append("the AArch64 C library's start files (apt-get install "
                       "libc6-dev-arm64-cross)")
    return missing


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """The emulated device's HOST:PORT (prepared once per machine, started for this module)."""
    missing = _missing()
    if missing:
        message = "the emulated AArch64 device needs " + ", ".join(missing)
        if os.environ.get("CANONQNN_REQUIRE_ARM_DEVICE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    state = str(tmp_path_factory.mktemp("arm-device"))
    started = subprocess.run([sys.executable, os.path.join(TOOLS, "start"), "--state", state],
                             capture_output=True, text=True, timeout=1800)
    assert started.returncode == 0, started.stderr
    yield started.stdout.strip().splitlines()[-1]
    subprocess.run([sys.executable, os.path.join(TOOLS, "stop"), "--state", state],
                   capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small QDQ MobileNet-like ONNX model (int8, per-channel weights) and an input file."""
    folder = tmp_path_factory.mktemp("model")
    path, proto = saved_mobilenet(folder, "s8")
    np.save(folder / "x.npy", onnx_models.random_input(1, onnx_models.input_shape(proto)))
    return path, f"{proto.graph.input[0].name}={folder / 'x.npy'}"


@pytest.mark.parametrize("target", [DOTPROD, NEON], ids=["sdot", "neon"])
def test_an_aarch64_build_runs_on_the_device_equal_to_the_reference(device, model, target,
                                                                     tmp_path, capsys):
    path, feed = model
    library = str(tmp_path / "m.so")
    assert main(["build", path, "--target", target, "-o", library]) == 0
    assert main(["run", library, "--rpc", device, "--input", feed,
                 "-o", str(tmp_path / "device.npz")]) == 0
    assert main(["run", path, "--reference", "--input", feed,
                 "-o", str(tmp_path / "reference.npz")]) == 0
    capsys.readouterr()
    on_device, reference = np.load(tmp_path / "device.npz"), np.load(tmp_path / "reference.npz")
    assert sorted(on_device.files) == sorted(reference.files)
    for name in reference.files:
        np.testing.assert_array_equal(on_device[name], reference[name])


def test_parity_on_the_device_is_bit_exact_with_onnxruntime_there(device, model, capsys):
    path, _ = model
    assert main(["parity", path, "--rpc", device, "--runs", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["exact"]
    assert result["reference"].startswith("onnxruntime 1.31.1 CPU on aarch64")
    assert result["numerics"] == result["runtime_numerics"] == "onnxruntime-1.31-arm64"
    assert result["device"]["machine"] == "aarch64"
    assert '"mtriple":"aarch64-linux-gnu"' in result["target"]
    assert "+dotprod" in result["target"]  # the device says it has the dot product


def test_a_library_of_another_architecture_is_refused_before_it_is_sent(device, model,
                                                                        tmp_path, capsys):
    path, feed = model
    library = str(tmp_path / "host.so")
    assert main(["build", path, "-o", library]) == 0
    capsys.readouterr()
    assert main(["run", library, "--rpc", device, "--input", feed]) == EXIT_ERROR
    assert f"{library} is x86_64 code and the device at {device} is aarch64" in \
        capsys.readouterr().err


def test_build_verifies_on_the_device_and_tunes_with_candidates_measured_there(
        device, model, tmp_path, capsys):
    path, _ = model
    library = str(tmp_path / "m.so")
    # no --target: the device's CPU; no --numerics: onnxruntime's there
    assert main(["build", path, "--rpc", device, "--verify", "-o", library]) == 0
    out = capsys.readouterr().out
    assert "numerics: onnxruntime-1.31-arm64" in out
    assert f"device: {device} (aarch64): verified there" in out
    assert "outputs equal to the numpy reference" in out
    # MetaSchedule's RPC runner times the candidates on the device (the times mean nothing
    # under emulation); the kernels on the dot product are canonqnn's, the pooling is tuned
    assert main(["build", path, "--rpc", device, "--tune", "2", "-o", library]) == 0
    out = capsys.readouterr().out
    assert f"tuning: 1 kernels tuned (2 trials), 0 reused from {tmp_path / 'm.tuning'}" in out
    assert "conv forms are timed on this machine only, not on a device" in out
    records = [json.loads(line)[1] for line in
               (tmp_path / "m.tuning" / "database_tuning_record.json").read_text().splitlines()]
    assert records  # each: the schedule, its run times measured, the target, the arguments
    assert all(r[1] and r[2]["mtriple"] == "aarch64-linux-gnu" for r in records)
