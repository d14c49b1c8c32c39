"""What the tests of devices reached through RPC share (tests/build/test_remote.py, and
tests/tools/test_arm_device.py on the emulated Arm device)."""

from __future__ import annotations

import gc
import pathlib

import onnx
import pytest

import canonqnn
from canonqnn.testing import onnx_models


@pytest.fixture(autouse=True)
def sessions_closed():
    """A device serves one session at a time: the objects holding a test's session (a
    library loaded there, its VM) are freed before the next test connects."""
    yield
    gc.collect()


def saved_mobilenet(folder: pathlib.Path, activation: str) -> tuple[str, onnx.ModelProto]:
    """A small QDQ MobileNet-like ONNX model (``activation`` u8 or s8, per-channel int8
    weights) written to ``folder``: its path, and the model."""
    proto = onnx_models.quantize(onnx_models.ARCHITECTURES["mobilenet_v1"](), fmt="qdq",
                                 activation=activation, per_channel=True)
    path = str(folder / "m.onnx")
    onnx.save(proto, path)
    return path, proto


# canonqnn's device server, run on this host as a device
DEVICE_SERVER = str(pathlib.Path(canonqnn.__file__).parent / "build" / "device_server.py")

