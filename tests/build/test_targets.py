"""Targets (``targets.as_target``): the host CPU by default; the ``llvm -mcpu=...`` string form
(which TVM 0.27 itself refuses) and TVM's JSON form are taken; what canonqnn cannot build is
refused naming the target. Code for another CPU or architecture builds, but ``Built.run``
refuses to run it when it uses instructions this host lacks (``targets.foreign_instructions``):
AVX-512 on a host without it, AMX on any AMD host, any AArch64 code.

Expectations are read off the host's own LLVM CPU features, never assumed: the host varies
(AVX2-only or AVX-512 x86 CPUs)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm

import canonqnn
from _tflite import T, single_op
from canonqnn.build import targets
from canonqnn.errors import CanonqnnError

HOST_CPU = str(tvm.target.codegen.llvm_get_system_cpu())


def _host_features() -> set[str]:
    return set(tvm.target.codegen.llvm_get_cpu_features(targets.host_target()))


def test_no_target_is_the_host_cpu():
    target = targets.as_target(None)
    assert target.kind.name == "llvm" and str(target.attrs["mcpu"]) == HOST_CPU
    assert str(target) == str(targets.host_target())


def test_the_legacy_string_form_tvm_refuses_is_translated():
    legacy = f"llvm -mcpu={HOST_CPU} -mattr=+sse2,+sse4.1"
    with pytest.raises(Exception, match="no longer supported"):
        tvm.target.Target(legacy)  # why canonqnn translates it
    target = targets.as_target(legacy)
    assert target.kind.name == "llvm" and str(target.attrs["mcpu"]) == HOST_CPU
    assert [str(a) for a in target.attrs["mattr"]] == ["+sse2", "+sse4.1"]


def test_tvms_json_form_is_taken():
    target = targets.as_target(json.dumps({"kind": "llvm", "mcpu": HOST_CPU}))
    assert str(target) == str(targets.host_target())


@pytest.mark.parametrize("target, reason", [
    ("not-a-target", "TVM cannot make a target of it: "),
    ("cuda", "canonqnn builds for the host CPU with TVM's llvm target, not cuda"),
    ("llvm -mcpu=no-such-cpu", f"LLVM knows no CPU 'no-such-cpu' (this host's: {HOST_CPU})"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=znver3", "LLVM knows no CPU 'znver3' (for aarch64)"),
    ("llvm -nonsense=1", "TVM cannot make a target of it: Unknown config option 'nonsense'"),
    ("llvm -mcpu", "TVM cannot make a target of it: '-mcpu' is not -key=value"),
], ids=["garbage", "cuda", "unknown-mcpu", "aarch64", "unknown-option", "no-value"])
def test_a_target_canonqnn_cannot_build_is_refused_naming_it(target, reason):
    with pytest.raises(CanonqnnError) as info:
        targets.as_target(target)
    assert str(info.value).startswith(f"target {target!r}: {reason}"), str(info.value)


def test_code_for_the_host_or_baseline_x86_64_uses_no_foreign_instructions():
    assert targets.foreign_instructions(targets.host_target()) == []
    assert targets.foreign_instructions(targets.as_target({"kind": "llvm", "mcpu": "x86-64"})) == []


def test_code_for_an_avx512_cpu_is_foreign_exactly_when_the_host_lacks_avx512():
    target = targets.as_target({"kind": "llvm", "mcpu": "skylake-avx512"})
    foreign = targets.foreign_instructions(target)
    host_has_avx512 = "avx512f" in _host_features()
    assert bool(foreign) == (not host_has_avx512), (foreign, HOST_CPU)
    assert ("avx512f" in foreign) == (not host_has_avx512)
    assert targets.foreign_instructions(str(target)) == foreign  # Built keeps the target as text


FEED = {"in0": np.array([[1, -2, 3, -4]], np.int8), "in1": np.array([[5, 6, -7, 8]], np.int8)}


@pytest.fixture(scope="module")
def add_module():
    return canonqnn.canonicalize(canonqnn.load(single_op(
        "ADD", [T((1, 4), scale=0.1), T((1, 4), scale=0.1)], [T((1, 4), scale=0.2)])))[0]


def test_a_build_for_baseline_x86_64_runs_here(add_module):
    built = canonqnn.build(add_module, {"kind": "llvm", "mcpu": "x86-64"})
    np.testing.assert_array_equal(built.run(FEED)["out0"], canonqnn.build(add_module).run(FEED)
                                  ["out0"])


@pytest.mark.parametrize("cpu, feature", [("skylake-avx512", "avx512f"),
                                          ("sapphirerapids", "amx-tile")])
def test_a_build_for_a_cpu_with_instructions_the_host_lacks_is_refused_at_run(add_module, cpu,
                                                                              feature):
    if feature in _host_features():
        pytest.skip(f"this host's CPU ({HOST_CPU}) has {feature}: code for {cpu} may run here")
    built = canonqnn.build(add_module, {"kind": "llvm", "mcpu": cpu})
    foreign = targets.foreign_instructions(built.target)
    assert feature in foreign
    with pytest.raises(CanonqnnError) as info:
        built.run(FEED)
    assert str(info.value) == (f"this build for {built.target} uses instructions this host's "
                               f"CPU lacks ({', '.join(foreign)}): it cannot run here (run it "
                               f"on a device with --rpc, docs/devices.md)")


def test_a_build_for_another_architecture_compiles_and_is_refused_at_run(add_module, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("CANONQNN_CROSS_CC", "no-such-cross-compiler")
    built = canonqnn.build(add_module, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    assert targets.foreign_instructions(built.target) == ["aarch64"]
    with pytest.raises(CanonqnnError, match=r"lacks \(aarch64\): it cannot run here"):
        built.run(FEED)
    with pytest.raises(CanonqnnError, match="aarch64 code needs a C cross compiler on this "
                                            "host to link it .*; or write it as a .tar"):
        built.export(tmp_path / "m.so")
    library = built.export(tmp_path / "m.tar")  # object files, linked where they are loaded
    with pytest.raises(CanonqnnError, match="cannot load it here: .*file in wrong format"):
        canonqnn.load_built(library)
