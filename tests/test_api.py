"""The public API as documented in the README."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hostile.verdicts import pointing_to

import canonqnn
from canonqnn.errors import CanonqnnError, InvalidModelError, ParityError


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


# ---------------------------------------------------------------- the ONNX oracle's model
def _with_external_data(folder, threshold: int = 100):
    """The corpus conv saved with its weights (``threshold``: tensors over so many bytes) in
    ``conv.data`` beside it."""
    import onnx
    from hostile.artifacts import onnx_conv

    folder.mkdir()
    path = folder / "conv.onnx"
    onnx.save(onnx_conv(), str(path), save_as_external_data=True, size_threshold=threshold,
              location="conv.data")
    return path


@pytest.mark.parametrize("threshold", [100, 0], ids=["weights", "every-tensor"])
def test_parity_reads_external_data_from_the_models_folder_not_the_working_directory(
        tmp_path, monkeypatch, threshold):
    path = _with_external_data(tmp_path / "model", threshold)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    size = (path.parent / "conv.data").stat().st_size
    (elsewhere / "conv.data").write_bytes(np.random.default_rng(0).bytes(size))  # a decoy
    monkeypatch.chdir(elsewhere)
    result = canonqnn.parity(str(path), runs=1)
    assert result.exact, result.summary()
    session, _ = canonqnn.api.ort_session(str(path))
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0],
                                  canonqnn.build(canonqnn.api.canonical_module(str(path)))
                                  .run({"x": x})["y"])


@pytest.mark.parametrize("location, says", [
    ("../secret.data", "is not inside the model's folder"),
    ("/etc/passwd", "is not inside the model's folder"),
    ("link.data", "is not inside the model's folder"),
    ("sub/../../secret.data", "is not inside the model's folder"),
    ("absent.data", "is not a file in"),
    ("sub", "is not a file in"),
], ids=["parent", "absolute", "symlink-out", "dotdot-via-subfolder", "missing", "directory"])
def test_external_data_outside_the_models_folder_is_refused_naming_the_tensor(
        tmp_path, location, says):
    path = _with_external_data(tmp_path / "model")
    (tmp_path / "secret.data").write_bytes((path.parent / "conv.data").read_bytes())
    (path.parent / "link.data").symlink_to(tmp_path / "secret.data")
    (path.parent / "sub").mkdir()
    pointing_to(path, location)
    for oracle in (canonqnn.api.ort_session,
                   lambda model: canonqnn.api.expose_onnx_tensors(model, ["y"])):
        with pytest.raises(InvalidModelError) as info:
            oracle(str(path))
        assert str(info.value).startswith(f"tensor 'w_q': its data file {location!r} {says}")


def test_external_data_of_a_model_given_in_memory_is_refused(tmp_path):
    import onnx

    proto = onnx.load(str(_with_external_data(tmp_path / "model")), load_external_data=False)
    with pytest.raises(InvalidModelError, match="^model bytes: tensor 'w_q' keeps its data "
                                                "in an external file; a model given in memory"):
        canonqnn.api.ort_session(proto.SerializeToString())
    with pytest.raises(ParityError, match="^tensor 'w_q' of the model given to onnxruntime "
                                          "keeps its data in an external file"):
        canonqnn.api.ort_runtime(proto, ["y"])


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
    from canonqnn.api import _compare

    ref = np.array([1.0, np.nan, np.inf, 3.0], np.float32)
    assert _compare("y", ref, ref.copy(), 0.5) == (4, 0.0)
    assert _compare("y", ref, np.array([1.0, 2.0, -np.inf, 3.0], np.float32), None) == \
        (2, float("inf"))
