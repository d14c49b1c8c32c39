"""A module's interface: inputs are checked against it, converted only where no value changes;
input files are read only when they hold numeric arrays, and never unpickled."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hostile.runs import npy_header

from canonqnn.errors import CanonqnnError
from canonqnn.io import ModelIO, TensorInfo, checked_inputs, read_arrays

IO = ModelIO("onnx", [TensorInfo("x", "int8", (2, 3)), TensorInfo("u", "uint8", (2, 3)),
                      TensorInfo("f", "float32", (2, 3))], [TensorInfo("y", "int8", (2, 3))])


def feed(**overrides):
    values = {"x": np.zeros((2, 3), np.int8), "u": np.zeros((2, 3), np.uint8),
              "f": np.zeros((2, 3), np.float32)}
    values.update(overrides)
    return values


def test_values_convert_where_none_changes():
    out = checked_inputs(IO, feed(x=np.full((2, 3), -128, np.int64), u=[[0, 1, 255]] * 2,
                                  f=np.full((2, 3), 0.1, np.float64)))
    assert [out[k].dtype for k in ("x", "u", "f")] == [np.int8, np.uint8, np.float32]
    assert out["x"].min() == -128 and out["u"].max() == 255
    assert out["f"][0, 0] == np.float32(0.1)


@pytest.mark.parametrize("name, value, message", [
    ("x", np.full((2, 3), 0.5, np.float32), "'x' is float32, the model takes int8: converting"),
    ("x", np.full((2, 3), 300, np.int16), r"values 300\.\.300 are outside int8's range"),
    ("u", np.full((2, 3), -100, np.int8), r"values -100\.\.-100 are outside uint8's range"),
    ("f", np.full((2, 3), 1 + 2j), "'f' is complex128, the model takes float32"),
    ("f", np.full((2, 3), "a"), "'f' is <U1, the model takes float32"),
    ("x", np.zeros((3, 2), np.int8), r"'x' has shape \[3, 2\], expected \[2, 3\]"),
])
def test_a_value_that_would_change_is_refused_naming_the_input(name, value, message):
    with pytest.raises(CanonqnnError, match=message):
        checked_inputs(IO, feed(**{name: value}))


def test_missing_and_unknown_inputs_are_named():
    values = feed()
    del values["u"]
    with pytest.raises(CanonqnnError, match=r"missing input 'u' \(expected uint8 \[2, 3\]\)"):
        checked_inputs(IO, values)
    with pytest.raises(CanonqnnError, match=r"unknown input\(s\) \['z'\]"):
        checked_inputs(IO, feed(z=np.zeros(1)))


# ---------------------------------------------------------------- read_arrays
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_read_arrays_reads_an_npy_array_and_an_npz_archive_by_key(tmp_path):
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "x.npz", a=X, b=np.array([1, -2], np.int8), c=np.array([True]))
    single = read_arrays(str(tmp_path / "x.npy"))
    np.testing.assert_array_equal(single, X)
    assert single.dtype == np.float32
    archive = read_arrays(str(tmp_path / "x.npz"))
    assert sorted(archive) == ["a", "b", "c"]
    np.testing.assert_array_equal(archive["a"], X)
    assert archive["b"].dtype == np.int8 and archive["c"].dtype == bool


class _RunsWhenUnpickled:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling creates the marker file


def _object_array(marker) -> np.ndarray:
    array = np.empty(2, object)
    array[0] = _RunsWhenUnpickled(str(marker))
    return array


@pytest.mark.parametrize("name", ["x.npy", "x.npz"])
def test_read_arrays_refuses_pickled_objects_without_unpickling_them(tmp_path, name):
    path, marker = tmp_path / name, tmp_path / "unpickled"
    if name.endswith(".npz"):
        np.savez(path, x=_object_array(marker))
    else:
        np.save(path, _object_array(marker), allow_pickle=True)
    with pytest.raises(CanonqnnError, match=f"^input file {re.escape(repr(str(path)))} is not "
                                            r"an \.np[yz] (array|archive) numpy can read: "
                                            "Object arrays cannot be loaded"):
        read_arrays(str(path))
    assert not marker.exists()


def _write(path, data: bytes):
    path.write_bytes(data)


def _npz_as_npy(path):
    np.savez(path.with_suffix(".npz"), x=X)
    path.with_suffix(".npz").rename(path)


@pytest.mark.parametrize("name, make, says", [
    ("absent.npy", lambda p: None, "not found"),
    ("dir.npy", lambda p: p.mkdir(), "is a directory"),
    ("trunc.npy", lambda p: _write(p, npy_header("(1, 4, 6, 6)") + bytes(100)),
     "is not an .npy array numpy can read: Failed to read all data"),
    ("garbage.npy", lambda p: _write(p, b"not an array"), "is not an .npy array numpy can read"),
    ("empty.npy", lambda p: _write(p, b""), "is not an .npy array numpy can read"),
    ("corrupt.npz", lambda p: _write(p, b"PK\x03\x04" + bytes(200)),
     "is not an .npz archive numpy can read"),
    ("archive.npy", _npz_as_npy, "is an .npz archive: name it FILE.npz"),
], ids=["missing", "directory", "truncated", "garbage", "empty", "corrupt-npz", "npz-named-npy"])
def test_read_arrays_refuses_what_is_no_array_file_naming_the_file(tmp_path, name, make, says):
    path = tmp_path / name
    make(path)
    with pytest.raises(CanonqnnError) as info:
        read_arrays(str(path))
    assert str(info.value).startswith(f"input file {str(path)!r} {says}"), str(info.value)


@pytest.mark.parametrize("value, dtype", [
    (np.array(["a", "b"]), "<U1"), (X.astype(np.complex64), "complex64"),
    (np.zeros(2, [("a", "i4"), ("b", "f4")]), "[('a', '<i4'), ('b', '<f4')]"),
], ids=["strings", "complex", "structured"])
def test_read_arrays_refuses_non_numeric_data_naming_the_file_and_dtype(tmp_path, value, dtype):
    path = tmp_path / "x.npy"
    np.save(path, value)
    with pytest.raises(CanonqnnError) as info:
        read_arrays(str(path))
    assert str(info.value) == (f"input {str(path)!r} holds {dtype} data; inputs are integer, "
                               "float or bool arrays")


def test_read_arrays_names_the_non_numeric_array_of_an_archive(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, good=X, bad=X.astype(np.complex64))
    with pytest.raises(CanonqnnError, match=f"^input array 'bad' of {re.escape(repr(str(path)))} "
                                            "holds complex64 data"):
        read_arrays(str(path))
