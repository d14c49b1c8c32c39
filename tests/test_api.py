"""The public API as documented in the README."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import canonqnn
from canonqnn.errors import CanonqnnError


def test_public_functions_stay_functions_after_submodule_imports():
    for name in ("build", "api", "cli", "rewrites", "frontends.onnx", "oracle.parity"):
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


# ---------------------------------------------------------------- NaN and infinity
def test_parity_reports_nan_and_inf_inputs_and_prints_no_numpy_warning(recwarn):
    import json

    from hostile.artifacts import onnx_conv

    x = np.zeros((1, 4, 6, 6), np.float32)
    x[0, 0, 0, :3] = np.nan
    x[0, 1, 2, 3] = -np.inf
    result = canonqnn.parity(onnx_conv(), [{"x": x}, {"x": np.ones_like(x)}])
    assert result.extra["nonfinite_inputs"] == {"x": {"nan": 3, "inf": 1}}
    assert json.loads(json.dumps(result.to_json()))["nonfinite_inputs"] == \
        {"x": {"nan": 3, "inf": 1}}
    assert "inputs holding NaN or infinity (given, not made by canonqnn; runtimes may " \
           "quantize them differently): x: 3 NaN, 1 inf" in result.summary().splitlines()
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []
    assert "nonfinite_inputs" not in canonqnn.parity(onnx_conv(), runs=1).extra


def test_nan_in_both_outputs_is_the_same_value_and_against_a_number_differs_most():
    from canonqnn.oracle.parity import _compare

    ref = np.array([1.0, np.nan, np.inf, 3.0], np.float32)
    assert _compare("y", ref, ref.copy(), 0.5) == (4, 0.0)
    assert _compare("y", ref, np.array([1.0, 2.0, -np.inf, 3.0], np.float32), None) == \
        (2, float("inf"))
