"""The kernel report of a build: kernels with dtypes, and what breaks int8-between-layers."""

from __future__ import annotations

import canonqnn
from _onnx_chains import conv_then_separately_quantized
from canonqnn.build.report import Kernel, KernelReport, analyze

I8 = ("int8", (1, 8))
F32 = ("float32", (1, 8))
I32 = ("int32", (1, 8))


def test_wide_integer_tensor_between_canonical_kernels_is_flagged_and_float_ones_are_not():
    kernels = [
        Kernel("quantize", [F32], [I8], [None]),
        Kernel("canonqnn_conv2d", [I8], [I32], [0]),
        Kernel("canonqnn_requantize", [I32], [I8], [1]),
        Kernel("fused_canonqnn_add_dequantize", [I8, I8], [F32], [2, 0]),
        Kernel("layer_norm", [F32], [F32], [3]),
        Kernel("fused_canonqnn_conv2d1_dequantize_multiply", [I8], [F32], [2]),
        Kernel("fused_quantize1_canonqnn_mul", [F32, I8], [I8], [5, 2]),
    ]
    report = analyze(kernels)
    assert [(e.producer, e.consumer, e.dtype) for e in report.non_int8_edges] == [
        ("canonqnn_conv2d", "canonqnn_requantize", "int32")]
    assert [(e.producer, e.consumer) for e in report.float_island_edges] == [
        ("fused_canonqnn_add_dequantize", "layer_norm"),
        ("fused_canonqnn_conv2d1_dequantize_multiply", "fused_quantize1_canonqnn_mul")]
    assert not report.ok
    assert "NOT int8 between canonical kernels (1)" in report.summary()


def test_lookup_table_left_out_of_the_conv_it_solely_reads_is_flagged():
    table = ("int8", (256,))
    kernels = [Kernel("canonqnn_conv2d", [I8], [I8], [None]),
               Kernel("fused_canonqnn_lut_canonqnn_mul", [I8, table, I8], [I8], [0, None, None]),
               Kernel("canonqnn_lut1", [I8, table], [I8], [None, None]),
               # a conv read by a table and by another kernel cannot absorb the table
               Kernel("canonqnn_conv2d1", [I8], [I8], [None]),
               Kernel("canonqnn_lut2", [I8, table], [I8], [3, None]),
               Kernel("canonqnn_reshape", [I8], [I8], [3])]
    report = analyze(kernels)
    assert report.unfused_luts == ["fused_canonqnn_lut_canonqnn_mul"]
    again = KernelReport.from_json(report.to_json())
    assert again.unfused_luts == ["fused_canonqnn_lut_canonqnn_mul"]


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


def test_every_call_of_a_module_is_mapped_to_the_kernel_of_its_build_that_computes_it():
    from canonqnn import _tvm
    from canonqnn.build.builder import kernel_of_vars
    from canonqnn.testing import onnx_models

    model = onnx_models.quantize(onnx_models.resnet_like(), fmt="qdq", activation="s8",
                                 per_channel=True)
    mod = canonqnn.canonicalize(canonqnn.load(model))[0]
    kernels = kernel_of_vars(mod)
    calls = [_tvm.var_name(v) for v, c in _tvm.function_bindings(mod["main"])
             if _tvm.op_name(c) is not None]
    assert set(calls) <= set(kernels)
    assert set(kernels.values()) == {k.name for k in canonqnn.inspect_built(mod).kernels}
    # a residual add fuses into the conv that computes its first operand (elementwise_kernel)
    adds = [v for v, c in _tvm.function_bindings(mod["main"])
            if _tvm.op_name(c) == "relax.canonqnn.add"]
    assert adds and all("canonqnn_add" in kernels[_tvm.var_name(v)] for v in adds)
