"""The public API as documented in the README."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import canonqnn
from canonqnn.errors import CanonqnnError


def test_public_functions_stay_functions_after_submodule_imports():
    for name in ("builder", "api", "cli", "rewrites", "frontends.onnx"):
        importlib.import_module(f"canonqnn.{name}")
    assert callable(canonqnn.build) and callable(canonqnn.canonicalize)
    assert callable(canonqnn.parity) and callable(canonqnn.load_built)


def test_readme_flow_runs_with_the_models_own_names(quantized_model, tmp_path):
    mod = canonqnn.frontends.onnx.load(quantized_model("mobilenet_v1", "qdq", "s8", False))
    mod, report = canonqnn.canonicalize(mod)
    assert "float islands: none" in report.summary()
    built = canonqnn.build(mod)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    out = built.run({"input": x})
    assert list(out) == ["logits"] and out["logits"].dtype == np.float32
    lib = built.export(tmp_path / "m.so")
    again = canonqnn.load_built(lib).run({"input": x})
    np.testing.assert_array_equal(again["logits"], out["logits"])


def test_parity_refuses_to_compare_nothing(quantized_model):
    model = quantized_model("conv_classifier")
    with pytest.raises(CanonqnnError, match="at least one run, not 0"):
        canonqnn.parity(model, runs=0)
    with pytest.raises(CanonqnnError, match="at least one input, not an empty list"):
        canonqnn.parity(model, [])
