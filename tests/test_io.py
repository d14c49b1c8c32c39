"""A module's interface: inputs are checked against it, converted only where no value changes;
input files are read only when they hold numeric arrays, and never unpickled; outputs are
written whole or not at all."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from canonqnn.errors import CanonqnnError
from canonqnn.io import (
    ModelIO,
    TensorInfo,
    checked_inputs,
    random_inputs,
    read_arrays,
    replacing,
    write_file,
)
from hostile.runs import npy_header

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


@pytest.mark.parametrize("value, message", [
    (np.full((2, 3), 16777217, np.int64),
     r"value 16777217 at index \[0, 0\] is not exactly representable in float32 \(it would "
     r"become 16777216\.0\)"),
    (np.array([[0, 1, 2], [3, 2 ** 31 - 1, 5]], np.int32),
     r"value 2147483647 at index \[1, 1\] is not exactly representable"),
    (np.array([[0, 1, 2], [3, 4, 2 ** 64 - 1]], np.uint64),
     r"value 18446744073709551615 at index \[1, 2\] is not exactly representable"),
    (np.array([[1.5, 1e300, 2.0], [0, 0, 0]]),
     r"value 1e\+300 at index \[0, 1\] overflows float32 \(largest 3\.402823e\+38\)"),
    (np.array([[1.5, 2.0, 0], [0, -1e39, 0]]), r"value -1e\+39 at index \[1, 1\] overflows"),
    (np.array([[0.0, 1.0, 1e-300], [0, 0, 0]]),
     r"value 1e-300 at index \[0, 2\] becomes 0 in float32 \(smallest nonzero 1\.4e-45\)"),
], ids=["int64-2**24+1", "int32-max", "uint64-max", "1e300", "-1e39", "1e-300"])
def test_a_value_a_float_input_cannot_hold_is_refused_naming_it_and_its_index(value, message):
    with pytest.raises(CanonqnnError, match=f"^input 'f' is {value.dtype}, the model takes "
                                            f"float32: {message}"):
        checked_inputs(IO, feed(f=value))


def test_float_inputs_take_exact_integers_rounded_floats_nan_inf_and_subnormals():
    values = {np.int64: [[2 ** 24, -2 ** 24, 2 ** 62], [3, 0, -7]],
              np.int16: [[-32768, 32767, 0], [1, 2, 3]], bool: [[True, False, True]] * 2,
              np.float64: [[0.1, 1e-40, np.nan], [np.inf, -np.inf, -0.0]]}
    for dtype, value in values.items():
        given = np.array(value, dtype)
        with np.errstate(all="raise"):  # no numpy warning either
            out = checked_inputs(IO, feed(f=given))["f"]
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, given.astype(np.float32))


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


def _npy_as_npz(path):
    with open(path, "wb") as f:  # a file object: np.save adds no .npy suffix
        np.save(f, X)


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
    ("array.npz", _npy_as_npz,
     "is an .npy array, not an .npz archive: name it FILE.npy and give it as NAME=FILE.npy"),
], ids=["missing", "directory", "truncated", "garbage", "empty", "corrupt-npz", "npz-named-npy",
        "npy-named-npz"])
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


# ---------------------------------------------------------------- random_inputs
RANDOM_IO = ModelIO("onnx", [TensorInfo("f", "float32", (2, 3)), TensorInfo("q", "int8", (4,)),
                             TensorInfo("s", "int16", (2,))], [])


def test_random_inputs_keep_the_values_a_seed_always_gave():
    out = random_inputs(RANDOM_IO, 7)
    assert [v.dtype for v in out.values()] == [np.float32, np.int8, np.int16]
    np.testing.assert_array_equal(out["f"].ravel(), np.array(
        [0.001230153371579945, 0.2987455427646637, -0.27413785457611084, -0.8905918598175049,
         -0.454670786857605, -0.9916465282440186], np.float32))
    assert out["q"].tolist() == [105, -127, -1, 82] and out["s"].tolist() == [-24154, 19468]


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_random_inputs_are_made_in_their_own_dtype_without_8_byte_copies(dtype):
    io = ModelIO("onnx", [TensorInfo("x", dtype, (16, 1 << 20))], [])
    tracemalloc.start()
    try:
        out = random_inputs(io, 0)["x"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.dtype == dtype
    # the input, and one chunk of 8-byte values drawn at a time (whole: 8 bytes per value)
    assert peak < out.nbytes + (24 << 20), peak


def test_random_inputs_refuse_a_negative_seed():
    with pytest.raises(CanonqnnError, match="^seed -1: random inputs need a seed of 0 or more$"):
        random_inputs(RANDOM_IO, -1)


# ---------------------------------------------------------------- replacing, write_file
def _leftovers(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def test_write_file_replaces_a_file_whole_keeping_its_mode(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    path.chmod(0o640)
    write_file(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    write_file(tmp_path / "fresh.bin", b"\x00\x01")
    assert (tmp_path / "fresh.bin").read_bytes() == b"\x00\x01"
    assert _leftovers(tmp_path) == []


def test_a_symbolic_link_is_written_through(tmp_path):
    (tmp_path / "real").write_text("old")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    write_file(tmp_path / "link", "new")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real").read_text() == "new"


def test_a_failure_while_writing_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "m.so"
    path.write_bytes(b"the library")
    with pytest.raises(RuntimeError, match="linker failed"), replacing(path) as temp:
        assert temp.endswith(".so") and os.path.dirname(temp) == str(tmp_path)
        with open(temp, "wb") as f:
            f.write(b"half a lib")
        raise RuntimeError("linker failed")
    assert path.read_bytes() == b"the library" and _leftovers(tmp_path) == []


def test_a_device_is_written_in_place_not_replaced():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    write_file("/dev/null", b"discarded")
    with pytest.raises(CanonqnnError, match="^cannot write '/dev/full': No space left on "
                                            "device$"):
        write_file("/dev/full", b"x" * 100000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


_WRITE_PAST_LIMIT = """
import resource, signal, sys
from canonqnn.errors import CanonqnnError
from canonqnn.io import write_file
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), no signal
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_file(sys.argv[1], b"n" * 100000)
except CanonqnnError as exc:
    print(exc)
"""


def test_a_write_past_the_file_size_limit_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "m.json"
    path.write_bytes(b"o" * 1000)
    done = subprocess.run([sys.executable, "-c", _WRITE_PAST_LIMIT, str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cannot write {str(path)!r}: File too large"
    assert path.read_bytes() == b"o" * 1000 and _leftovers(tmp_path) == []


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, filled: needs the right to mount (root in most containers)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
                    "test_a_write_past_the_file_size_limit_leaves_the_file_as_it_was covers it")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_convert_over_a_file_on_a_full_disk_leaves_it_as_it_was(full_disk, tmp_path, capsys):
    import onnx

    from canonqnn.cli import EXIT_ERROR, main
    from hostile.artifacts import onnx_conv

    model = tmp_path / "m.onnx"
    onnx.save(onnx_conv(), str(model))
    target = full_disk / "m.json"
    target.write_bytes(b"the converted module of yesterday")
    with open(full_disk / "filler", "wb", buffering=0) as filler, pytest.raises(OSError):
        while True:
            filler.write(b"f" * 4096)
    assert main(["convert", str(model), "-o", str(target)]) == EXIT_ERROR
    assert capsys.readouterr().err == (f"canonqnn: error: cannot write {str(target)!r}: No "
                                       "space left on device\n")
    assert target.read_bytes() == b"the converted module of yesterday"
    assert sorted(os.listdir(full_disk)) == ["filler", "m.json"]
