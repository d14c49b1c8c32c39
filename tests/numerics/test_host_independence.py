"""The same model converted with the same --numerics gives the same module on another x86 host
class: here, this host and QEMU's user-mode emulation of a Haswell (AVX2, no AVX-512, no VNNI),
whose numpy and libm take other code paths. Slow (about a minute under emulation); needs
``qemu-x86_64`` (Debian package qemu-user)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import onnx
import pytest

from canonqnn.testing import onnx_models as models
from canonqnn.testing import tflite_models

pytestmark = pytest.mark.slow
QEMU = shutil.which("qemu-x86_64")


def convert(model_path, out, numerics, emulate: bool) -> bytes:
    cmd = [sys.executable, "-m", "canonqnn.cli", "convert", str(model_path), "-o", str(out),
           "--numerics", numerics]
    if emulate:
        cmd = [QEMU, "-cpu", "Haswell", *cmd]
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


@pytest.mark.skipif(QEMU is None, reason="needs qemu-x86_64 (apt-get install qemu-user)")
@pytest.mark.parametrize("name,numerics", [("mobilenet_v3", "exact"),
                                           ("transformer", "onnxruntime-1.31-x86-avx2"),
                                           ("tflite_mobilenet_v2_uint8", "tflite-reference")])
def test_module_is_the_same_converted_on_an_emulated_avx2_host(tmp_path, name, numerics):
    if name.startswith("tflite_"):
        path = tmp_path / "m.tflite"
        path.write_bytes(tflite_models.mobilenet_v2(dtype="uint8"))
    else:
        path = tmp_path / "m.onnx"
        onnx.save(models.quantize(models.ARCHITECTURES[name](), fmt="qdq", activation="u8",
                                  per_channel=True), path)
    here = convert(path, tmp_path / "here.json", numerics, emulate=False)
    there = convert(path, tmp_path / "there.json", numerics, emulate=True)
    assert here == there
