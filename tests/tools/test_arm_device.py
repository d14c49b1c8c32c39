"""The emulated AArch64 device (``tools/arm-device``): canonqnn's AArch64 builds, cross-compiled
here, run there through ``--rpc`` and equal the numpy reference, and parity there is bit-exact
with the onnxruntime-aarch64 and the TFLite interpreter running beside them.

Marked ``arm_device``: out of the default run, run by ``.ci/run`` (``pytest -m arm_device``),
where ``CANONQNN_REQUIRE_ARM_DEVICE=1`` turns a missing tool from a skip into a failure.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from _devices import saved_mobilenet, sessions_closed  # noqa: F401  (autouse)
from canonqnn.cli import EXIT_DIFFERS, EXIT_ERROR, main
from canonqnn.tables import kernel_table
from canonqnn.testing import onnx_models, tflite_models

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
    assert result["target"]["mtriple"] == "aarch64-linux-gnu"
    assert "+dotprod" in result["target"]["mattr"]  # the device says it has the dot product


@pytest.mark.parametrize("arch,fmt,activation", [
    ("resnet", "qdq", "u8"), ("mobilenet_v3", "qdq", "s8"), ("transformer", "qdq", "u8"),
    ("conv_classifier", "qoperator", "u8"), ("conv_classifier", "qdq", "s8")])
def test_onnx_networks_on_the_device_are_bit_exact_with_onnxruntime_there(
        device, arch, fmt, activation, tmp_path, capsys):
    """The example ONNX networks (residual adds, hard-swish islands and muls, attention,
    sigmoid and leaky relu tables, integer and float bilinear resizes) against
    onnxruntime-aarch64."""
    result = _device_parity(device, arch, fmt, activation, tmp_path, capsys, 0)
    assert result["exact"], result["outputs"]
    assert result["numerics"] == "onnxruntime-1.31-arm64"


def test_parity_on_the_device_finds_the_first_layer_where_another_profile_parts(
        device, tmp_path, capsys):
    # converted for x86's arithmetic, the float bilinear resize (fused on AArch64) is the
    # first layer that parts from onnxruntime-aarch64's tensors: found by running each layer
    # alone there and reading onnxruntime's inner tensors there
    result = _device_parity(device, "conv_classifier", "qdq", "s8", tmp_path, capsys,
                            EXIT_DIFFERS, "--numerics", "onnxruntime-1.31-x86-avx2")
    found = result["first_divergence"]
    assert found["op"] == "resize2d" and found["tensor"] == "resize1_out_QuantizeLinear_Output"
    assert found["reference_vs_runtime"] > 0 and not found["build_vs_reference"]


def _device_parity(device, arch, fmt, activation, tmp_path, capsys, code, *options) -> dict:
    proto = onnx_models.quantize(onnx_models.ARCHITECTURES[arch](), fmt=fmt,
                                 activation=activation, per_channel=True)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    assert main(["parity", str(path), "--rpc", device, "--runs", "2", "--json",
                 *options]) == code
    return json.loads(capsys.readouterr().out)


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


@pytest.mark.parametrize("network", ["mobilenet_v1", "mobilenet_v2", "classifier"])
def test_tflite_networks_on_the_device_are_bit_exact_with_its_default_interpreter(
        device, network, tmp_path, capsys):
    """The example TFLite networks, int8 and uint8, their last feature map an output too: the
    default interpreter there (its XNNPACK delegate, NEON kernels) is the specification."""
    for dtype in ("int8", "uint8"):
        path = tmp_path / f"{network}_{dtype}.tflite"
        path.write_bytes(tflite_models.ARCHITECTURES[network](dtype=dtype, features=True))
        assert main(["parity", str(path), "--rpc", device, "--runs", "2", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["exact"], (dtype, result["outputs"])
        assert len(result["outputs"]) == 2
        assert result["numerics"] == result["runtime_numerics"] == "tflite-xnnpack-arm64"
        assert result["reference"].startswith("TFLite interpreter (ai-edge-litert 2.3.0) on "
                                              "aarch64, OpResolverType.BUILTIN ")
        assert "+dotprod" in result["target"]["mattr"]


def test_tflite_delegate_tables_on_the_device_equal_the_profiles(device):
    """Every input code of LOGISTIC, TANH, LEAKY_RELU (int8, uint8) and ELU (int8) under the
    default interpreter there equals the tables of ``tflite-xnnpack-arm64``: random parameters
    and those where XNNPACK's table differs from the reference kernels'."""
    from canonqnn.build import remote
    from canonqnn.frontends.tflite.oracle import _run_on_device
    from canonqnn.frontends.tflite.reader import read_model
    from canonqnn.numerics import get
    from test_litert_xnnpack_tables import CHOSEN, _chosen, interpreter_table, random_params

    family = get("tflite-xnnpack-arm64").tables
    connected = remote.connect(device)

    def on_the_device(model: bytes, x: np.ndarray, resolver) -> tuple[np.ndarray, bool]:
        m = read_model(model)
        (y,), _, taken = _run_on_device(connected, model, resolver.name,
                                        {m.tensors[m.inputs[0]].name: x},
                                        [m.tensors[m.outputs[0]].name])
        return y.reshape(-1), taken

    compared = delegated = 0
    try:
        for function, dtypes in (("sigmoid", ("int8", "uint8")), ("tanh", ("int8", "uint8")),
                                 ("leaky_relu", ("int8", "uint8")), ("elu", ("int8",))):
            rng = np.random.default_rng(len(function))
            cases = random_params(rng, function, 40) + [_chosen(f, p) for f, p in CHOSEN
                                                        if f == function]
            for dtype, (in_qp, out_qp, alpha) in itertools.product(dtypes, cases):
                want, taken = interpreter_table(function, in_qp, out_qp, dtype, alpha,
                                                runner=on_the_device)
                got = kernel_table("tflite", function, in_qp, out_qp, family,
                                   source_dtype=dtype,
                                   **({"alpha": alpha} if function == "leaky_relu" else {}))
                np.testing.assert_array_equal(got, want, f"{function} {dtype} {in_qp} {out_qp}")
                compared += 1
                delegated += taken
    finally:
        connected.release()
    assert compared >= 280 and delegated >= 260
