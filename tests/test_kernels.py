"""The kernel report of a build: kernels with dtypes, and what breaks int8-between-layers."""

from __future__ import annotations

from _onnx_chains import conv_then_separately_quantized

import canonqnn
from canonqnn.kernels import Kernel, KernelReport, analyze

I8 = ("int8", (1, 8))
F32 = ("float32", (1, 8))
I32 = ("int32", (1, 8))


def test_non_int8_tensor_between_canonical_kernels_is_flagged_and_island_edges_are_not():
    kernels = [
        Kernel("quantize", [F32], [I8], [None]),
        Kernel("canonqnn_conv2d", [I8], [I32], [0]),
        Kernel("canonqnn_requantize", [I32], [I8], [1]),
        Kernel("fused_canonqnn_add_dequantize", [I8, I8], [F32], [2, 0]),
        Kernel("layer_norm", [F32], [F32], [3]),
    ]
    report = analyze(kernels)
    assert [(e.producer, e.consumer, e.dtype) for e in report.non_int8_edges] == [
        ("canonqnn_conv2d", "canonqnn_requantize", "int32")]
    assert [(e.producer, e.consumer) for e in report.float_island_edges] == [
        ("fused_canonqnn_add_dequantize", "layer_norm")]
    assert not report.ok
    assert "NOT int8 between canonical kernels (1)" in report.summary()


def test_lookup_table_in_a_kernel_of_its_own_after_a_conv_is_flagged():
    kernels = [Kernel("canonqnn_conv2d", [I8], [I8], [None]),
               Kernel("canonqnn_lut", [I8, ("int8", (256,))], [I8], [0, None]),
               Kernel("canonqnn_lut1", [I8, ("int8", (256,))], [I8], [None, None])]
    report = analyze(kernels)
    assert report.unfused_luts == ["canonqnn_lut"]
    assert KernelReport.from_json(report.to_json()).unfused_luts == ["canonqnn_lut"]


def test_build_reports_int8_kernels_and_the_library_keeps_the_report(quantized_model, tmp_path):
    mod, report = canonqnn.canonicalize(
        canonqnn.load(quantized_model("resnet", "qdq", "u8", True)))
    inspected = canonqnn.inspect_built(mod)
    assert inspected.ok and not inspected.float_island_edges
    names = [k.name for k in inspected.kernels]
    assert names[0] == "quantize" and sum("canonqnn_conv2d" in n for n in names) == \
        report.canonical_ops["conv2d"]
    assert all(k.canonical for k in inspected.kernels[1:])
    built = canonqnn.build(mod)
    assert built.kernels.to_json() == inspected.to_json()
    loaded = canonqnn.load_built(built.export(tmp_path / "r.so"))
    assert loaded.kernels.to_json() == inspected.to_json()


def test_lookup_table_after_a_conv_is_built_into_the_conv_kernel():
    model = conv_then_separately_quantized("Sigmoid")
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert dict(report.canonical_ops) == {"conv2d": 1, "lut": 1}
    kernels = canonqnn.inspect_built(mod)
    [conv] = [k for k in kernels.kernels if "canonqnn_conv2d" in k.name]
    assert "canonqnn_lut" in conv.name and ("int8", (256,)) in conv.inputs
    assert not any(k.name.startswith("canonqnn_lut") for k in kernels.kernels)
    assert kernels.ok
    assert canonqnn.parity(model, runs=2).exact
