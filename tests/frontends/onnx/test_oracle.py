"""The ONNX format's oracle on parity's side (``canonqnn.frontends.onnx.oracle``): the model as
onnxruntime gets it, its external data read from the model's folder only."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from canonqnn.api import canonical_module
from canonqnn.errors import InvalidModelError, ParityError
from canonqnn.frontends.onnx import oracle
from hostile.verdicts import pointing_to


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
    session, _ = oracle.ort_session(str(path))
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0],
                                  canonqnn.build(canonical_module(str(path)))
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
    for reading in (oracle.ort_session, lambda model: oracle.expose_tensors(model, ["y"])):
        with pytest.raises(InvalidModelError) as info:
            reading(str(path))
        assert str(info.value).startswith(f"tensor 'w_q': its data file {location!r} {says}")


def test_external_data_of_a_model_given_in_memory_is_refused(tmp_path):
    import onnx

    proto = onnx.load(str(_with_external_data(tmp_path / "model")), load_external_data=False)
    with pytest.raises(InvalidModelError, match="^model bytes: tensor 'w_q' keeps its data "
                                                "in an external file; a model given in memory"):
        oracle.ort_session(proto.SerializeToString())
    with pytest.raises(ParityError, match="^tensor 'w_q' of the model given to onnxruntime "
                                          "keeps its data in an external file"):
        oracle.ort_runtime(proto, ["y"])
