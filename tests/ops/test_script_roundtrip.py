"""Canonical modules print as readable Relax and parse back to the same module."""

from __future__ import annotations

import tvm

import canonqnn


def test_printed_canonical_module_parses_back_structurally_equal(quantized_model):
    mod, _ = canonqnn.canonicalize(canonqnn.frontends.onnx.load(
        quantized_model("resnet", "qoperator", "u8", True)))
    text = mod.script(show_meta=True)
    assert "R.canonqnn.conv2d(" in text and "R.canonqnn.add(" in text
    parsed = tvm.script.from_source(text)
    tvm.ir.assert_structural_equal(parsed["main"], mod["main"])
