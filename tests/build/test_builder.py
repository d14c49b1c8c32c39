"""Exported libraries carry an integrity record (canonqnn.build.integrity) that ``load_built``
checks before loading any code: a library cut short (which would segfault in the loader),
edited, or not written by canonqnn build is refused with its path and the reason."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from _tflite import T, single_op
from canonqnn.errors import CanonqnnError

FEED = {"in0": np.array([[1, -2, 3, -4]], np.int8), "in1": np.array([[5, 6, -7, 8]], np.int8)}


@pytest.fixture(scope="module")
def built():
    model = single_op("ADD", [T((1, 4), scale=0.1), T((1, 4), scale=0.1)],
                      [T((1, 4), scale=0.2)])
    return canonqnn.build(canonqnn.canonicalize(canonqnn.load(model))[0])


@pytest.fixture(scope="module")
def library(built, tmp_path_factory) -> bytes:
    return open(built.export(tmp_path_factory.mktemp("lib") / "m.so"), "rb").read()


def test_an_exported_library_loads_and_runs_as_built(built, library, tmp_path):
    path = tmp_path / "m.so"
    path.write_bytes(library)
    np.testing.assert_array_equal(canonqnn.load_built(path).run(FEED)["out0"],
                                  built.run(FEED)["out0"])


def test_a_library_exported_as_tar_is_linked_when_loaded(built, tmp_path):
    # object files in TVM's gzipped tar, no record: gzip's CRC-32 refuses a damaged one
    path = built.export(tmp_path / "m.tar")
    np.testing.assert_array_equal(canonqnn.load_built(path).run(FEED)["out0"],
                                  built.run(FEED)["out0"])
    with open(path, "rb") as f:
        data = f.read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(CanonqnnError, match="cannot load it here: .*unexpected end of file"):
        canonqnn.load_built(cut)


def _refusal(tmp_path, data: bytes) -> str:
    path = tmp_path / "m.so"
    path.write_bytes(data)
    with pytest.raises(CanonqnnError) as info:
        canonqnn.load_built(path)
    assert str(info.value).startswith(f"{path}: ")
    return str(info.value)[len(f"{path}: "):]


def test_a_library_cut_to_half_its_size_is_refused_as_truncated(library, tmp_path):
    reason = _refusal(tmp_path, library[:len(library) // 2])
    assert reason == (f"truncated: its ELF headers describe at least {len(library) - 48} "
                      f"bytes, the file has {len(library) // 2}")


def test_a_library_with_one_byte_changed_is_refused_as_modified(library, tmp_path):
    data = bytearray(library)
    data[len(data) // 2] ^= 0x01
    assert _refusal(tmp_path, bytes(data)) == ("modified since export: its SHA-256 differs "
                                               "from the one recorded at export")


def test_a_library_with_bytes_cut_from_its_middle_is_refused_as_modified(library, tmp_path):
    data = library[:1000] + library[1100:]
    assert _refusal(tmp_path, data) == (f"modified since export: {len(library) - 148} bytes "
                                        f"before its integrity record, {len(library) - 48} "
                                        "when exported")


def test_a_library_cut_in_its_integrity_record_is_refused_as_truncated(library, tmp_path):
    assert _refusal(tmp_path, library[:-1]) == "truncated: its integrity record is cut short"


def test_a_library_with_bytes_appended_is_refused_as_modified(library, tmp_path):
    assert _refusal(tmp_path, library + b"\0\0") == ("modified since export: 2 bytes after "
                                                     "its integrity record")


NOT_OURS = ("not a library written by canonqnn build (no integrity record at its end; a "
            "library built before canonqnn wrote one must be built again)")


@pytest.mark.parametrize("data", [b"", np.random.default_rng(0).bytes(4096)],
                         ids=["empty", "random"])
def test_a_file_canonqnn_did_not_write_is_refused(data, tmp_path):
    assert _refusal(tmp_path, data) == NOT_OURS


def test_a_library_tvm_exported_without_the_record_is_refused(built, tmp_path):
    from canonqnn.build import runtime

    runtime.export_library(built.module, str(tmp_path / "tvm.so"))
    assert _refusal(tmp_path, (tmp_path / "tvm.so").read_bytes()) == NOT_OURS


# Exports the module of argv[1] to argv[2], holding on after TVM wrote its library (until
# the other process has written its own, file argv[4]) before the integrity record is added.
_EXPORT_AT_ONCE = """
import os, sys, time
import canonqnn
from canonqnn.api import load_module
from canonqnn.build import runtime

built = canonqnn.build(load_module(sys.argv[1]))
export_library = runtime.export_library

def export_then_wait(module, path, fcompile=None):
    export_library(module, path, fcompile)
    open(sys.argv[3], "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline:
        time.sleep(0.05)

runtime.export_library = export_then_wait
built.export(sys.argv[2])
"""


def test_two_exports_to_one_path_at_once_leave_one_whole_singly_sealed_library(built,
                                                                                tmp_path):
    import subprocess
    import sys

    from canonqnn.api import save_module
    from canonqnn.build import integrity

    model = single_op("ADD", [T((1, 4), scale=0.1), T((1, 4), scale=0.1)],
                      [T((1, 4), scale=0.2)])
    module = tmp_path / "m.json"
    save_module(canonqnn.canonicalize(canonqnn.load(model))[0], module)
    path, marks = tmp_path / "m.so", [tmp_path / "a.written", tmp_path / "b.written"]
    runs = [subprocess.Popen([sys.executable, "-c", _EXPORT_AT_ONCE, str(module), str(path),
                              str(mine), str(other)], stderr=subprocess.PIPE, text=True)
            for mine, other in (marks, marks[::-1])]
    for run in runs:
        assert run.wait(300) == 0, run.stderr.read()
    integrity.check(str(path))
    assert path.read_bytes().count(integrity.MAGIC) == 1
    np.testing.assert_array_equal(canonqnn.load_built(path).run(FEED)["out0"],
                                  built.run(FEED)["out0"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.written", "b.written", "m.json",
                                                          "m.so"]


def test_a_failed_export_leaves_the_library_there_as_it_was(built, library, tmp_path,
                                                            monkeypatch):
    from canonqnn.build import runtime

    path = tmp_path / "m.so"
    path.write_bytes(library)

    def linker_fails(module, where, fcompile=None):
        with open(where, "wb") as f:
            f.write(b"\x7fELF half")
        raise RuntimeError("ld: cannot write: No space left on device")

    monkeypatch.setattr(runtime, "export_library", linker_fails)
    with pytest.raises(CanonqnnError, match=f"^cannot write the library {path}: ld: cannot "
                                            "write: No space left on device$"):
        built.export(path)
    assert path.read_bytes() == library and [p.name for p in tmp_path.iterdir()] == ["m.so"]
