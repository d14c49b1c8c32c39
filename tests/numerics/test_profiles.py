"""canonqnn.numerics: the profiles and their records (the probe of this host's onnxruntime:
tests/frontends/onnx/test_runtime.py)."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from _onnx_chains import conv_then_separately_quantized
from canonqnn import numerics


def test_profiles_are_named_versioned_and_say_where_their_arithmetic_comes_from():
    assert {"exact", "tflite-reference", "onnxruntime-1.31-x86-avx2", "onnxruntime-1.31-x86-vnni",
            "onnxruntime-1.31-arm64", "xnnpack", "xnnpack-x86-avx2",
            "xnnpack-x86-avx512"} <= set(numerics.PROFILES)
    for name, p in numerics.PROFILES.items():
        assert p.name == name and p.version and p.host and p.provenance and p.description
    avx2, vnni = (numerics.get(f"onnxruntime-1.31-x86-{h}") for h in ("avx2", "vnni"))
    assert avx2.differences(vnni) == ["u8s8_runtime_b: u8s8_pair_sat16 here, exact there"]
    assert numerics.get("xnnpack-x86-avx2").differences(numerics.get("xnnpack")) == [
        "tables: xnnpack_avx2 here, unverified there"]
    # the two x86 classes of ExecuTorch's XNNPACK differ in their lookup tables only
    assert numerics.get("xnnpack-x86-avx512").differences(numerics.get("xnnpack-x86-avx2")) \
        == ["tables: xnnpack_avx512 here, xnnpack_avx2 there"]
    with pytest.raises(numerics.UnsupportedNumerics, match="unknown numerics profile 'x'"):
        numerics.get("x")


def test_module_records_and_prints_its_profile():
    mod, report = canonqnn.canonicalize(
        canonqnn.load(conv_then_separately_quantized("Relu")), numerics="exact")
    assert numerics.recorded(mod).name == "exact" == report.numerics
    assert '"canonqnn.numerics": "exact"' in mod.script()
    assert report.summary().startswith("numerics: exact")


def test_the_arm64_profile_folds_quantized_adds_and_muls_with_its_own_rounding():
    # onnxruntime's NEON QLinearAdd is fixed point and its QLinearMul fused: canonqnn.add and
    # canonqnn.mul under rounding mlas_neon, where x86's profiles give rne_f32
    from onnx import helper  # noqa: PLC0415

    from _canonical import canonical_calls  # noqa: PLC0415
    from _onnx_chains import qdq_model, scalar  # noqa: PLC0415

    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["B", "sa", "za"], ["bf"]),
             helper.make_node("Add", ["af", "bf"], ["sf"]),
             helper.make_node("Mul", ["sf", "bf"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["Y"])]
    inits = dict(sa=scalar(0.02, np.float32), za=scalar(1, np.int8),
                 sy=scalar(0.04, np.float32), zy=scalar(0, np.int8))
    nodes[2:3] = [helper.make_node("Add", ["af", "bf"], ["s0"]),
                  helper.make_node("QuantizeLinear", ["s0", "sy", "zy"], ["sq"]),
                  helper.make_node("DequantizeLinear", ["sq", "sy", "zy"], ["sf"])]
    model = qdq_model(nodes, {"A": (np.int8, (2, 8)), "B": (np.int8, (2, 8))}, inits)
    roundings = {}
    for profile in ("onnxruntime-1.31-x86-avx2", "onnxruntime-1.31-arm64"):
        mod, report = canonqnn.canonicalize(canonqnn.load(model), numerics=profile)
        assert dict(report.canonical_ops) == {"add": 1, "mul": 1} and not report.float_islands
        roundings[profile] = {attrs["rounding"] for _, attrs, _ in canonical_calls(mod)}
    assert roundings == {"onnxruntime-1.31-x86-avx2": {"rne_f32"},
                         "onnxruntime-1.31-arm64": {"mlas_neon"}}


def test_a_lookup_table_of_kernels_nobody_measured_is_a_named_float_island(quantized_model):
    # onnxruntime's HardSwish on AArch64 (one kernel, GCC's contraction there) is not measured
    model = quantized_model("mobilenet_v3", "qdq", "u8", True)  # hardswish tables
    _, x86 = canonqnn.canonicalize(canonqnn.load(model), numerics="onnxruntime-1.31-x86-vnni")
    assert x86.canonical_ops["lut"] >= 1 and not x86.float_islands
    _, arm = canonqnn.canonicalize(canonqnn.load(model), numerics="onnxruntime-1.31-arm64")
    assert "lut" not in arm.canonical_ops
    assert any("has no onnx table evaluator in canonqnn/tables (tables onnxruntime_arm64)"
               in i.reason for i in arm.float_islands)


def test_a_float_linear_resize_on_arm64_is_built_with_its_fused_sum(quantized_model):
    # onnxruntime-aarch64's float bilinear Resize contracts its sum into fused multiply-adds:
    # canonqnn.resize2d under rounding mlas_neon there, rne_f32 on x86
    from _canonical import canonical_calls  # noqa: PLC0415

    model = quantized_model("conv_classifier", "qdq", "u8", True)  # a linear resize
    roundings = {}
    for profile in ("onnxruntime-1.31-x86-avx2", "onnxruntime-1.31-arm64"):
        mod, report = canonqnn.canonicalize(canonqnn.load(model), numerics=profile)
        assert not report.float_islands
        roundings[profile] = [(attrs["method"], attrs["rounding"])
                              for name, attrs, _ in canonical_calls(mod) if name == "resize2d"]
    assert roundings == {"onnxruntime-1.31-x86-avx2": [("nearest", "rne_f32"),
                                                       ("linear", "rne_f32")],
                         "onnxruntime-1.31-arm64": [("nearest", "rne_f32"),
                                                    ("linear", "mlas_neon")]}
