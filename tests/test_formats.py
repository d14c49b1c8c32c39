"""The registry of formats (``canonqnn.formats``): the built-in formats are recognised as
before, and a fourth format is one ``register`` call: load, canonicalize, build and parity
work on it with no other change. The toy format is tests/_toy_format.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

import _toy_format
import canonqnn
from canonqnn import formats
from canonqnn.errors import CanonqnnError

TOY = formats.Format("toy", "_toy_format", "toy models", suffixes=(".toyq",), options=(),
                     options_refusal="apply to no toy model")


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "max.toyq"
    path.write_text(json.dumps({
        "shape": [2, 16],
        "inputs": [{"name": "a", "scale": 0.05, "zero_point": 3},
                   {"name": "b", "scale": 0.07, "zero_point": -5}],
        "output": {"name": "y", "scale": 0.06, "zero_point": 1}}))
    formats.register(TOY)
    yield path
    formats.unregister(TOY.name)


def test_the_built_in_formats_are_recognised_by_suffix_magic_or_type(tmp_path):
    tflite = tmp_path / "m.bin"
    tflite.write_bytes(b"\0\0\0\0TFL3" + bytes(8))
    assert formats.of(str(tflite)).name == "tflite"
    assert formats.of(tflite.read_bytes()).name == "tflite"
    assert formats.of(tmp_path / "absent.pt2").name == "torch"
    assert formats.of(str(tmp_path / "m.onnx")).name == "onnx"  # the default
    assert formats.of(b"\x08\x07").name == "onnx"
    assert [formats.get(n).parity_runtimes for n in ("onnx", "tflite", "torch")] == [1, 3, 2]


def test_a_missing_extra_is_named():
    missing = formats.Format("nothing", "canonqnn_no_such_module", "nothing models",
                             extra="nothing")
    with pytest.raises(CanonqnnError, match=r"^nothing models need the nothing extra "
                                            r"\(canonqnn_no_such_module is not installed\): "
                                            r"pip install 'canonqnn\[nothing\]'"):
        missing.function("load")


def test_a_fourth_format_loads_canonicalizes_builds_and_parity_checks(toy):
    assert formats.of(toy) is TOY and formats.names()[0] == "toy"
    mod, report = canonqnn.canonicalize(canonqnn.load(toy))
    assert dict(report.canonical_ops) == {"maximum": 1} and not report.float_islands
    assert report.numerics == "exact"  # the toy runtime's profile, asked through the registry
    built = canonqnn.build(mod)
    rng = np.random.default_rng(0)
    feed = {n: rng.integers(-128, 128, (2, 16), dtype=np.int8) for n in "ab"}
    spec = json.loads(toy.read_text())
    np.testing.assert_array_equal(built.run(feed)["y"], _toy_format.run(spec, feed)[0])
    result = canonqnn.parity(toy, runs=2)
    assert result.exact and result.reference == "toy numpy runtime", result.summary()
    assert result.extra["runtime_numerics"] == "exact"
    with pytest.raises(CanonqnnError, match=r"^options \['outputs'\] apply to no toy model$"):
        canonqnn.load(toy, outputs=["y"])


def test_a_format_is_registered_once_and_the_built_in_ones_stay(toy):
    with pytest.raises(CanonqnnError, match="registered already"):
        formats.register(TOY)
    with pytest.raises(CanonqnnError, match="cannot be unregistered"):
        formats.unregister("onnx")


def test_a_files_kind_is_read_from_its_content_not_its_name(tmp_path):
    import numpy as np

    def write(name, data):
        (tmp_path / name).write_bytes(data)
        return tmp_path / name

    import zipfile

    np.save(tmp_path / "a.npy", np.zeros(2))
    np.savez(tmp_path / "a.npz", x=np.zeros(2))
    with zipfile.ZipFile(tmp_path / "program.zip", "w") as archive:  # torch.export.save's
        archive.writestr("program/archive_format", "pt2")
    kinds = {
        write("m.bin", b"\0\0\0\0TFL3" + bytes(8)): "tflite",
        write("lib.onnx", b"\x7fELF" + bytes(60)): "library",
        write("module.onnx", b'{"root_index":3,"nodes":[]}'): "module",
        write("empty.onnx", b""): "empty",
        write("notes.tflite", "text, not a model: é\n".encode()): "text",
        write("proto.bin", b"\x08\x0a\x12\x07pytorch"): "onnx",  # ONNX has no identifier
        write("objects.so", bytes(257) + b"ustar" + bytes(250)): "objects",
        tmp_path / "a.npy": "npy",
        tmp_path / "a.npz": "npz",
        tmp_path / "program.zip": "torch",
    }
    assert {path.name: formats.file_kind(path) for path in kinds} == \
        {path.name: kind for path, kind in kinds.items()}
    assert set(kinds.values()) <= set(formats.KINDS)
