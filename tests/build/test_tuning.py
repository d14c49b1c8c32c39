"""MetaSchedule tuning of a build: bit-exact results, and a database that later builds reuse."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

import canonqnn
from _onnx_chains import conv_then_separately_quantized
from canonqnn import extras
from canonqnn.cli import main
from canonqnn.errors import CanonqnnError
from canonqnn.frontends.onnx.oracle import ort_session

TRIALS = 4  # one round for the model's one tunable kernel (conv + table + dequantize)
# A CPU without the int8 dot-product instructions: its conv kernel keeps the plain loop nest,
# which is tunable (kernels on those instructions keep their own schedule; test below).
PLAIN = {"kind": "llvm", "mcpu": "nehalem"}


@pytest.fixture(scope="module")
def model():
    return conv_then_separately_quantized("Sigmoid")


@pytest.fixture(scope="module")
def tuned(model, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tuning") / "db"
    mod, _ = canonqnn.canonicalize(canonqnn.load(model))
    return mod, directory, canonqnn.build(mod, PLAIN, tune=TRIALS, tuning_dir=directory)


def _inputs(n: int):
    rng = np.random.default_rng(7)
    return [{"x": rng.uniform(-4, 4, (1, 3, 6, 6)).astype(np.float32)} for _ in range(n)]


@pytest.mark.slow  # a real MetaSchedule run: about 90 s on 2 cores
def test_tuned_build_records_its_kernel_and_stays_bit_exact_with_onnxruntime(model, tuned):
    _, directory, built = tuned
    assert built.tuning == (1, 0)
    assert (directory / "database_tuning_record.json").read_text().strip()
    session, _ = ort_session(model)
    for feed in _inputs(5):
        (expected,) = session.run(None, feed)
        np.testing.assert_array_equal(built.run(feed)["out"], expected)


@pytest.mark.slow  # a real MetaSchedule run: about 90 s on 2 cores
def test_second_build_reuses_the_database_instead_of_tuning(tuned):
    mod, directory, _ = tuned
    assert canonqnn.build(mod, PLAIN, tune=TRIALS, tuning_dir=directory).tuning == (0, 1)


@pytest.mark.slow  # a real MetaSchedule run: about 90 s on 2 cores
def test_cli_keeps_the_database_next_to_the_library_and_reuses_it(model, tuned, tmp_path,
                                                                   capsys):
    _, directory, _ = tuned
    shutil.copytree(directory, tmp_path / "m.tuning")  # as a first `--tune` build leaves it
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["build", str(path), "-o", str(tmp_path / "m.so"), "--tune", str(TRIALS),
                 "--target", json.dumps(PLAIN)]) == 0
    out = capsys.readouterr().out
    assert f"tuning: 0 kernels tuned ({TRIALS} trials), 1 reused from {tmp_path / 'm.tuning'}" \
        in out
    assert f"conv forms: 0 conv shapes measured, 1 reused from {tmp_path / 'm.tuning'}" in out
    library = canonqnn.load_built(tmp_path / "m.so")
    session, _ = ort_session(model)
    feed = _inputs(1)[0]
    np.testing.assert_array_equal(library.run(feed)["out"], session.run(None, feed)[0])


def test_kernels_on_the_dot_product_instructions_keep_their_schedule(model, tmp_path):
    from canonqnn.build.forms import dot

    if dot.host_isa() is None:
        pytest.skip("this host's CPU has no int8 dot-product instruction")
    mod, _ = canonqnn.canonicalize(canonqnn.load(model))
    built = canonqnn.build(mod, tune=TRIALS, tuning_dir=tmp_path / "db")
    assert built.tuning == (0, 0)  # the conv kernel is tensorized: nothing to tune
    assert built.forms == (1, 0)  # its forms measured (docs/build.md, "Tuning")
    session, _ = ort_session(model)
    feed = _inputs(1)[0]
    np.testing.assert_array_equal(built.run(feed)["out"], session.run(None, feed)[0])


def test_tuning_without_a_directory_is_refused(model):
    mod, _ = canonqnn.canonicalize(canonqnn.load(model))
    with pytest.raises(CanonqnnError, match="tuning_dir"):
        canonqnn.build(mod, tune=TRIALS)


@pytest.mark.slow  # a real MetaSchedule run: about 90 s on 2 cores
def test_database_directory_is_applied_without_tuning_and_a_missing_one_is_an_error(
        tuned, tmp_path):
    mod, directory, _ = tuned
    assert canonqnn.build(mod, PLAIN, tuning_dir=directory).tuning == (0, 1)
    with pytest.raises(CanonqnnError, match="no tuning database"):
        canonqnn.build(mod, tuning_dir=tmp_path / "typo")


def test_missing_tuning_packages_are_named_with_the_extra_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "xgboost" else real(name, *a))
    with pytest.raises(CanonqnnError, match=r"tuning \(build --tune\) needs the tune extra "
                                            r"\(xgboost is not installed\): pip install "
                                            r"'canonqnn\[tune\]'"):
        extras.require("tune")


def test_cli_refuses_a_negative_trial_count(tmp_path, capsys):
    assert main(["build", str(tmp_path / "m.onnx"), "--tune", "-1"]) == 2
    assert "--tune -1: the number of trials must be 0 or more" in capsys.readouterr().err
