"""The Report of a module: recomputed from a canonicalized module (a saved module file) it has
the ops and islands the conversion reported, not the rules; a model with no quantization says
that nothing was quantized, and ``--explain`` lists each island once."""

from __future__ import annotations

import canonqnn
from canonqnn.api import load_module, save_module
from canonqnn.rewrites import report_of
from canonqnn.testing import onnx_models

ARM64 = "onnxruntime-1.31-arm64"  # its HardSwish tables are float islands


def test_a_saved_modules_report_has_its_ops_and_islands_but_no_rules(tmp_path):
    model = onnx_models.quantize(onnx_models.mobilenet_v3_like(), fmt="qdq", activation="s8",
                                 per_channel=False)
    mod, converted = canonqnn.canonicalize(canonqnn.load(model), numerics=ARM64)
    assert converted.float_islands and converted.canonical_ops
    save_module(mod, tmp_path / "m.json")
    report = report_of(load_module(tmp_path / "m.json"))
    assert report.numerics == converted.numerics == ARM64
    assert report.canonical_ops == converted.canonical_ops
    assert [(i.op, i.var) for i in report.float_islands] == \
        [(i.op, i.var) for i in converted.float_islands]
    assert report.to_json()["rules"] is None and converted.to_json()["rules"]
    assert "rules fired: not recorded" in report.summary()


def test_a_float_model_says_nothing_was_quantized_and_lists_no_island_twice():
    _, report = canonqnn.canonicalize(canonqnn.load(onnx_models.resnet_like()),
                                      numerics="exact")
    assert not report.quantized and not report.canonical_ops and report.float_islands
    summary = report.summary()
    assert f"all its {len(report.float_islands)} ops compute in float" in summary
    assert "float islands" not in summary  # every op is one: the statement says it
    explained = report.summary(explain=True)
    first = report.float_islands[0]
    assert explained.count(f"{first.var} = {first.op}:") == 1


def test_a_quantized_model_is_quantized():
    model = onnx_models.quantize(onnx_models.conv_classifier_like(), fmt="qdq", activation="u8",
                                 per_channel=True)
    _, report = canonqnn.canonicalize(canonqnn.load(model), numerics="exact")
    assert report.quantized and report.canonical_ops
