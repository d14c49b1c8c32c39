"""The probe of the TFLite interpreter's default configuration (``runtime.profile``): which
operators its XNNPACK delegate takes, and the profile that follows from them on this host."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from ai_edge_litert import interpreter as litert

from canonqnn.frontends.tflite import runtime
from canonqnn.numerics import PROFILES, TFLITE_XNNPACK_DELEGATED

X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_every_probe_model_prepares_in_the_default_interpreter():
    for kind in runtime.PROBED:
        interp = litert.Interpreter(model_content=runtime.probe_model(kind))
        interp.allocate_tensors()
        assert any(d["op_name"] == kind for d in interp._get_ops_details()), kind


def test_the_delegated_operators_are_the_ones_the_profile_was_measured_with():
    if not X86:
        pytest.skip(f"tflite-xnnpack-x86 was measured on x86-64, not {platform.machine()}")
    assert runtime.delegated_operators() == TFLITE_XNNPACK_DELEGATED & set(runtime.PROBED)
    assert runtime.profile() is PROFILES["tflite-xnnpack-x86"]


def test_a_probe_model_the_delegate_takes_runs_in_it():
    """The probe reads delegation from the execution plan: a delegated node is replaced."""
    if not X86:
        pytest.skip(f"measured on x86-64, not {platform.machine()}")
    taken = litert.Interpreter(model_content=runtime.probe_model("CONV_2D"))
    left = litert.Interpreter(model_content=runtime.probe_model("SOFTMAX"))
    for interp in (taken, left):
        interp.allocate_tensors()
        x = interp.get_input_details()[0]
        interp.set_tensor(x["index"], np.ones(x["shape"], np.int8))
        interp.invoke()
    assert any(d["op_name"] == "DELEGATE" for d in taken._get_ops_details())
    assert not any(d["op_name"] == "DELEGATE" for d in left._get_ops_details())


def test_an_operator_outside_the_delegated_set_follows_the_built_in_kernels():
    default = PROFILES["tflite-xnnpack-x86"]
    assert default.for_operator("CONV_2D") is default
    assert default.for_operator("SOFTMAX") is PROFILES["tflite-builtin"]
    # 16x8 operators: the delegate takes 8-bit ones only
    assert default.for_operator("CONV_2D", "int16") is PROFILES["tflite-builtin"]
    assert default.for_operator(None) is default


# ---------------------------------------------------------------- the other x86 class
# XNNPACK picks its kernels by the CPU's class; on an AVX-512 host a child masked to AVX2
# (tests/support/cpuid_mask.py) runs the AVX2 ones, so the profile is checked on both.
def test_a_child_masked_to_avx2_runs_other_xnnpack_kernels_in_the_interpreter(tmp_path):
    """The mask reaches the interpreter's XNNPACK: its float sigmoid (a kernel per class)
    changes, so the int8 results below were computed by the AVX2 kernels."""
    from support import cpuid_mask

    if (reason := cpuid_mask.unavailable("x86-avx2")) is not None:
        pytest.skip(reason)
    import os
    import subprocess
    import sys

    from canonqnn.testing.tflite_writer import GraphWriter

    g = GraphWriter()
    x, y = g.tensor("x", (1, 4096), "float32"), g.tensor("y", (1, 4096), "float32")
    g.op("LOGISTIC", [x], [y])
    (tmp_path / "sigmoid.tflite").write_bytes(g.finish([x], [y]))
    code = ("import sys, numpy as np\n"
            "from ai_edge_litert import interpreter as litert\n"
            "i = litert.Interpreter(model_path=sys.argv[1]); i.allocate_tensors()\n"
            "x = np.linspace(-20, 20, 4096, dtype=np.float32).reshape(1, 4096)\n"
            "i.set_tensor(i.get_input_details()[0]['index'], x); i.invoke()\n"
            "np.save(sys.argv[2], i.get_tensor(i.get_output_details()[0]['index']))\n")
    for name, env in (("host", {}), ("avx2", cpuid_mask.environment("x86-avx2"))):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / "sigmoid.tflite"),
                        str(tmp_path / f"{name}.npy")], check=True, capture_output=True,
                       env={**os.environ, **env})
    host, avx2 = (np.load(tmp_path / f"{n}.npy").view(np.uint32) for n in ("host", "avx2"))
    assert (host != avx2).any()
