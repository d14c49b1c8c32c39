"""A module's external interface: input/output names, dtypes, shapes, quantization step.

Frontends record it on the module (attribute ``canonqnn.io``) so that canonicalized modules,
built libraries and parity reports keep the model's own names and dtypes. Also the files on
either side of a run: input arrays read (``read_arrays``), outputs written whole or not at all
(``replacing``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import _tvm

IO_ATTR = "canonqnn.io"
IO_FUNCTION = "canonqnn_io"  # built libraries carry the same JSON from this function


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    lsb: float | None = None  # one quantization step of this output (1 for integer outputs)


@dataclass(frozen=True)
class ModelIO:
    source: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    rounding: str = "rne_f32"
    extra: dict[str, Any] = field(default_factory=dict)
    # What the import chose for the caller, one sentence each (an ONNX input's dynamic batch
    # dimension set to 1): the command line prints them.
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any] | str) -> ModelIO:
        record: dict[str, Any] = json.loads(data) if isinstance(data, str) else data

        def tensors(items):
            return [TensorInfo(t["name"], t["dtype"], tuple(t["shape"]), t.get("lsb"))
                    for t in items]

        return ModelIO(record["source"], tensors(record["inputs"]), tensors(record["outputs"]),
                       record.get("rounding", "rne_f32"), record.get("extra", {}),
                       [str(note) for note in record.get("notes", [])])


def module_io(mod: Any) -> ModelIO | None:
    """The interface recorded on a module, if any."""
    attrs = mod.attrs
    if attrs is None or IO_ATTR not in attrs:
        return None
    return ModelIO.from_json(str(attrs[IO_ATTR]))


def interface(mod: Any) -> ModelIO:
    """The interface recorded on ``mod``, else one read off its ``main`` (no frontend wrote
    it: inputs by parameter name, outputs ``output_<i>``)."""
    recorded = module_io(mod)
    if recorded is not None:
        return recorded
    func = mod["main"]
    inputs = [TensorInfo(_tvm.var_name(p), _tvm.dtype_of(p), _tvm.shape_of(p))
              for p in func.params]
    ret = func.ret_ty
    fields = list(ret.fields) if hasattr(ret, "fields") else [ret]
    outputs = [TensorInfo(f"output_{i}", str(t.dtype), tuple(int(d) for d in t.shape.values))
               for i, t in enumerate(fields)]
    return ModelIO("relax", inputs, outputs)


def checked_inputs(io: ModelIO, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """``inputs`` as arrays of the model's input dtypes and shapes, keyed by its input names.

    A value is converted only where nothing is lost: integers (or booleans) within an integer
    input's range; into a float input, integers it holds exactly and floats (float64 data
    rounds to float32, but a finite value may not overflow to infinity nor a nonzero one
    become 0). Anything else, a missing or unknown name or another shape raises
    ``CanonqnnError`` naming the input (and the first value lost, with its index): a cast
    that changed the data (float into int8, 300 into int8, 16777217 or 1e300 into float32)
    would give a silently wrong result."""
    from .errors import CanonqnnError

    unknown = set(inputs) - {i.name for i in io.inputs}
    if unknown:
        raise CanonqnnError(f"unknown input(s) {sorted(unknown)}; the model takes "
                            f"{[i.name for i in io.inputs]}")
    out = {}
    for info in io.inputs:
        if info.name not in inputs:
            raise CanonqnnError(f"missing input {info.name!r} (expected {info.dtype} "
                                f"{list(info.shape)})")
        value = np.asarray(inputs[info.name])
        if tuple(value.shape) != tuple(info.shape):
            raise CanonqnnError(f"input {info.name!r} has shape {list(value.shape)}, "
                                f"expected {list(info.shape)}")
        out[info.name] = _converted(info, value)
    return out


def nonfinite_inputs(feeds: list[dict[str, np.ndarray]]) -> dict[str, dict[str, int]]:
    """Per input holding any, its NaN and infinite values over all ``feeds`` (parity reports
    them in ``extra["nonfinite_inputs"]``)."""
    counts: dict[str, dict[str, int]] = {}
    for feed in feeds:
        for name, value in feed.items():
            if value.dtype.kind == "f":
                count = counts.setdefault(name, {"nan": 0, "inf": 0})
                count["nan"] += int(np.count_nonzero(np.isnan(value)))
                count["inf"] += int(np.count_nonzero(np.isinf(value)))
    return {name: n for name, n in counts.items() if n["nan"] or n["inf"]}


def read_arrays(path: str) -> dict[str, np.ndarray] | np.ndarray:
    """The arrays of a ``.npz`` archive (by key) or the array of a ``.npy`` file, refusing
    with ``CanonqnnError`` what is not one: truncated or garbled files, pickled Python objects
    (never unpickled: loading one runs its code) and non-numeric data."""
    import zipfile

    from .errors import CanonqnnError, first_line

    if os.path.isdir(path):
        raise CanonqnnError(f"input file {path!r} is a directory")
    if not os.path.isfile(path):
        raise CanonqnnError(f"input file {path!r} not found")
    try:
        arrays = np.load(path, allow_pickle=False)
        if isinstance(arrays, np.lib.npyio.NpzFile):
            with arrays as archive:
                arrays = {k: archive[k] for k in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, MemoryError) as exc:
        what = "an .npz archive" if path.endswith(".npz") else "an .npy array"
        raise CanonqnnError(f"input file {path!r} is not {what} numpy can read: "
                            f"{first_line(exc)}") from None
    if isinstance(arrays, dict) and not path.endswith(".npz"):
        raise CanonqnnError(f"input file {path!r} is an .npz archive: name it FILE.npz")
    if not isinstance(arrays, dict) and path.endswith(".npz"):
        raise CanonqnnError(f"input file {path!r} is an .npy array, not an .npz archive: name "
                            "it FILE.npy and give it as NAME=FILE.npy")
    for key, value in (arrays.items() if isinstance(arrays, dict) else [("", arrays)]):
        if value.dtype.kind not in "biuf":
            where = f"array {key!r} of {path!r}" if key else repr(path)
            raise CanonqnnError(f"input {where} holds {value.dtype} data; inputs are integer, "
                                "float or bool arrays")
    return arrays


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[str]:
    """A new temporary file to write ``path``'s content to, in ``path``'s directory. When the
    block ends without error it is fsynced and moved onto ``path`` in one step
    (``os.replace``): readers, and other processes writing ``path`` at the same time, see the
    old file or a whole new one, never part of one; on an error (a full disk) it is removed and
    ``path`` is left as it was. An ``OSError`` is a ``CanonqnnError`` naming ``path``.

    A symbolic link is written through (the file it names is replaced). A ``path`` that is no
    regular file (``/dev/null``, ``/dev/full``, a pipe), or a writable file in a directory
    where no file can be created, is written in place from a temporary file elsewhere."""
    from .errors import CanonqnnError

    temp = None
    try:
        existing = os.stat(path) if os.path.exists(path) else None
        in_place = existing is not None and not stat.S_ISREG(existing.st_mode)
        # /dev/stdout names a pipe by a link into /proc: opened, not resolved
        target = os.fspath(path) if in_place else os.path.realpath(path)
        try:
            temp = _new_file(tempfile.gettempdir() if in_place else os.path.dirname(target),
                             os.path.basename(target))
        except PermissionError:
            if existing is None or not os.access(target, os.W_OK):
                raise
            in_place = True
            temp = _new_file(tempfile.gettempdir(), os.path.basename(target))
        yield temp
        if in_place:
            with open(temp, "rb") as source, open(target, "wb") as destination:
                shutil.copyfileobj(source, destination)
            return
        if existing is not None:
            os.chmod(temp, stat.S_IMODE(existing.st_mode))
        descriptor = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the data on disk before the name points to it
        finally:
            os.close(descriptor)
        os.replace(temp, target)
        temp = None
        _sync_directory(os.path.dirname(target))
    except OSError as exc:
        raise CanonqnnError(f"cannot write {os.fspath(path)!r}: {exc.strerror or exc}") \
            from None
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def write_file(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` to ``path`` whole or not at all (``replacing``)."""
    with replacing(path) as temp, open(temp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def _new_file(directory: str, name: str) -> str:
    """A file created empty in ``directory``, its name hidden and ending as ``name`` ends (TVM
    chooses the library format by suffix), with the mode ``open`` gives a new file."""
    suffix = os.path.splitext(name)[1]
    while True:
        path = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.part{suffix}")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return path


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable; file systems that cannot are left as they are."""
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _converted(info: TensorInfo, value: np.ndarray) -> np.ndarray:
    from .errors import CanonqnnError

    target = np.dtype(info.dtype)
    if value.dtype == target:
        return value
    what = f"input {info.name!r} is {value.dtype}, the model takes {info.dtype}"
    if target.kind == "f" and value.dtype.kind in "biuf":
        with np.errstate(over="ignore", under="ignore"):  # judged below, value by value
            converted = value.astype(target)
        changed = _changed_by_cast(value, converted)
        if changed is not None:
            index, why = changed
            raise CanonqnnError(f"{what}: value {value[index].item()!r} at index {list(index)} "
                                f"{why}")
        return converted
    if target.kind in "iu" and value.dtype.kind in "biu":
        limits = np.iinfo(target)
        if value.size and (value.min() < limits.min or value.max() > limits.max):
            raise CanonqnnError(f"{what}: values {value.min()}..{value.max()} are outside "
                                f"{info.dtype}'s range")
        return value.astype(target)
    raise CanonqnnError(f"{what}: converting would change the data")


def _changed_by_cast(value: np.ndarray, converted: np.ndarray) -> tuple[tuple, str] | None:
    """The index of the first value a cast into a float dtype lost, and how; None when none
    was lost. Integers must be exactly representable; floats may round, but not overflow to
    infinity nor underflow to 0 (NaN and infinity given stay what they are)."""
    target = converted.dtype
    if value.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            overflow = np.isinf(converted) & np.isfinite(value)
            underflow = (converted == 0) & (value != 0)
        for bad, why in ((overflow, f"overflows {target} (largest {np.finfo(target).max:.7g})"),
                         (underflow, f"becomes 0 in {target} (smallest nonzero "
                                     f"{np.finfo(target).smallest_subnormal:.2g})")):
            if bad.any():
                return _first(bad), why
        return None
    if value.dtype.kind == "b" or value.dtype.itemsize * 8 <= np.finfo(target).nmant + 1:
        return None  # every value of the integer dtype is exact in the float dtype
    # a float at or past 2**bits does not cast back: it is out of the integer dtype's range
    beyond = float(np.iinfo(value.dtype).max) + 1
    with np.errstate(invalid="ignore"):
        inexact = (converted >= beyond) | (converted.astype(value.dtype) != value)
    if inexact.any():
        index = _first(inexact)
        return index, (f"is not exactly representable in {target} (it would become "
                       f"{converted[index].item()!r})")
    return None


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def random_inputs(io: ModelIO, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of the right dtype and shape: N(0, 1) floats, integers over the 8-bit
    range (int16 activations: the whole int16 range)."""
    from .errors import CanonqnnError

    if seed < 0:
        raise CanonqnnError(f"seed {seed}: random inputs need a seed of 0 or more")
    rng = np.random.default_rng(seed)
    out = {}
    for info in io.inputs:
        draw: Callable[..., np.ndarray]  # called with the number of values
        if info.dtype.startswith("float"):
            draw = rng.standard_normal
        else:
            limits = np.iinfo(info.dtype)
            lo, hi = max(limits.min, -128), min(limits.max, 255)
            if info.dtype == "int16":
                lo, hi = limits.min, limits.max
            draw = lambda n, lo=lo, hi=hi: rng.integers(lo, hi + 1, n)  # noqa: E731
        out[info.name] = _drawn(draw, info.shape, info.dtype)
    return out


_DRAW_CHUNK = 1 << 20  # values drawn at a time: 8 MiB of float64/int64 whatever the input size


def _drawn(draw: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An array of ``dtype`` filled with ``draw(n)``'s float64/int64 values chunk by chunk,
    never holding the whole input in 8-byte values. The generator hands out the same stream
    in chunks as in one call, so a seed gives the values it always gave."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for start in range(0, flat.size, _DRAW_CHUNK):
        flat[start:start + _DRAW_CHUNK] = draw(min(_DRAW_CHUNK, flat.size - start))
    return out
