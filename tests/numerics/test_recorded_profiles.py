"""Profiles pinned on any host: onnxruntime outputs recorded on each x86 host class and on an
emulated ARM64 CPU (``fixtures/``, written by record_onnxruntime.py), reproduced by the module
converted for the recorded profile, both by its numpy reference and by its TVM build.

Two kinds of case: u8 x s8 products (``*_u8s8``), whose sums tell the two x86 classes apart,
recorded on all three; QLinearAdd and QLinearMul (``qlinear_*``), lookup tables
(``qdq_tables_*``) and the float bilinear Resize (``qdq_resize_*``), computed alike on both x86
classes and otherwise on ARM64, recorded on x86 with AVX2 and on ARM64."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest

import canonqnn
from canonqnn import reference

FIXTURES = sorted((pathlib.Path(__file__).parent / "fixtures").glob("*.npz"))


def load_fixture(path: pathlib.Path):
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    runs: dict[int, tuple[dict, dict]] = {}
    for key, value in arrays.items():
        kind, _, rest = key.partition("/")
        if kind in ("input", "output"):
            run, name = rest.split("/", 1)
            runs.setdefault(int(run), ({}, {}))[kind == "output"][name] = value
    model = onnx.load_from_string(arrays["model"].tobytes())
    return model, str(arrays["profile"]), str(arrays["machine"]), [runs[k] for k in sorted(runs)]


CASES = sorted({p.name.split(".")[0] for p in FIXTURES})
def recording(case: str, host: str):
    """The fixture of ``case`` recorded under ``onnxruntime-1.31-<host>`` (``load_fixture``)."""
    return load_fixture(next(p for p in FIXTURES
                             if p.name == f"{case}.onnxruntime-1.31-{host}.npz"))


PRODUCTS = [case for case in CASES if case.endswith("u8s8")]
ELEMENTWISE = [case for case in CASES if case.startswith("qlinear_")]
TABLES = [case for case in CASES if case.startswith("qdq_tables_")]
RESIZES = [case for case in CASES if case.startswith("qdq_resize_")]


def test_each_case_is_recorded_on_the_host_classes_it_tells_apart():
    recorded = {(p.name.split(".")[0], p.name.split(".", 1)[1][:-4]) for p in FIXTURES}
    x86 = ("onnxruntime-1.31-x86-avx2", "onnxruntime-1.31-x86-vnni")
    assert len(PRODUCTS) == len(ELEMENTWISE) == len(TABLES) == 2 and len(RESIZES) == 1
    assert recorded == {(case, profile) for case in PRODUCTS
                        for profile in (*x86, "onnxruntime-1.31-arm64")} | \
        {(case, profile) for case in ELEMENTWISE + TABLES + RESIZES
         for profile in (x86[0], "onnxruntime-1.31-arm64")}


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name[:-4] for p in FIXTURES])
def test_recorded_onnxruntime_outputs_are_reproduced_under_their_profile(path):
    model, profile, machine, runs = load_fixture(path)
    mod, report = canonqnn.canonicalize(canonqnn.load(model), numerics=profile)
    assert not report.float_islands, report.summary()
    built = canonqnn.build(mod)
    for k, (feeds, recorded) in enumerate(runs):
        spec = reference.evaluate(mod, feeds).outputs
        got = built.run(feeds)
        for name, want in recorded.items():
            np.testing.assert_array_equal(spec[name], want, f"reference, run {k} ({machine})")
            np.testing.assert_array_equal(got[name], want, f"build, run {k} ({machine})")


@pytest.mark.parametrize("case", ELEMENTWISE)
def test_arm64_adds_and_multiplies_otherwise_than_x86_on_every_parameter_set(case):
    # onnxruntime's NEON QLinearAdd (fixed point, or float for ratios out of its range) and
    # QLinearMul (fused) against its x86 ones: the fixtures tell the arithmetics apart
    (_, _, machine, arm), (_, _, _, x86) = (
        recording(case, h) for h in ("arm64", "x86-avx2"))
    assert "Neoverse N1" in machine
    for op in ("QLinearAdd", "QLinearMul"):
        assert sum(int(np.count_nonzero(arm[0][1][name] != x86[0][1][name]))
                   for name in arm[0][1] if name.startswith(op)) > 0, op


@pytest.mark.parametrize("case", TABLES)
def test_arm64_tables_differ_from_x86_only_where_its_logistic_is_clamped_at_one(case):
    # the second Sigmoid's input code 0 is 17.482065: 1.0000001 on x86, 1.0 on AArch64
    (_, _, _, [(_, arm)]), (_, _, _, [(feed, x86)]) = (
        recording(case, h) for h in ("arm64", "x86-avx2"))
    differing = {name: np.flatnonzero(arm[name] != x86[name]).tolist() for name in arm}
    zero_code = int(np.flatnonzero(feed["X"].astype(np.int32) == (128 if "u8" in case else 0))[0])
    assert differing == {name: [zero_code] if name == "Sigmoid1" else [] for name in arm}


@pytest.mark.parametrize("case", RESIZES)
def test_arm64_float_bilinear_resize_differs_from_x86(case):
    # its AArch64 build contracts the interpolation's sum into fused multiply-adds
    (_, _, _, arm), (_, _, _, x86) = (
        recording(case, h) for h in ("arm64", "x86-avx2"))
    assert sum(int(np.count_nonzero(a[1][n] != b[1][n])) for a, b in zip(arm, x86)
               for n in a[1]) > 0


@pytest.mark.parametrize("case", PRODUCTS)
def test_the_host_classes_differ_on_every_recorded_case(case):
    # Each fixture discriminates: the AVX2 recording saturates where the VNNI one is exact.
    (_, _, _, avx2), (_, _, _, vnni) = (
        recording(case, h) for h in ("x86-avx2", "x86-vnni"))
    differing = sum(int(np.count_nonzero(a[1][n] != v[1][n]))
                    for a, v in zip(avx2, vnni) for n in a[1])
    assert differing > 0


@pytest.mark.parametrize("case", PRODUCTS)
def test_arm64_sums_u8_by_s8_exactly_as_vnni_does(case):
    # onnxruntime's ARM64 kernels (sdot/udot, on the emulated Neoverse N1) sum every product:
    # the same outputs as the VNNI recording, where the AVX2 one saturates pair sums.
    (_, _, machine, arm), (_, _, _, vnni) = (
        recording(case, h) for h in ("arm64", "x86-vnni"))
    assert "Neoverse N1" in machine
    for (arm_in, arm_out), (vnni_in, vnni_out) in zip(arm, vnni, strict=True):
        for name in vnni_in:
            np.testing.assert_array_equal(arm_in[name], vnni_in[name])
        for name in vnni_out:
            np.testing.assert_array_equal(arm_out[name], vnni_out[name])
