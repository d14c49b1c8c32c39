"""onnxruntime as the ONNX format's oracle runs it (``canonqnn.frontends.onnx.runtime``): the
probe of its numerics on this host."""

from __future__ import annotations

from canonqnn import numerics
from canonqnn.frontends.onnx import runtime


def test_probe_classifies_this_hosts_onnxruntime_by_what_it_computes():
    profile = runtime.profile()
    pair_sum = runtime._matmul_integer_probe()
    assert pair_sum in (runtime.PAIR_EXACT, runtime.PAIR_SATURATED)
    expected = "x86-avx2" if pair_sum == runtime.PAIR_SATURATED else "x86-vnni"
    assert profile.host == expected and profile.runtime == "onnxruntime"
    assert profile.u8s8_runtime_b == (numerics.PAIR_SAT16 if expected == "x86-avx2"
                                      else numerics.EXACT)
