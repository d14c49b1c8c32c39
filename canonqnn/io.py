"""A module's external interface: input/output names, dtypes, shapes, quantization step.

Frontends record it on the module (attribute ``canonqnn.io``) so that canonicalized modules,
built libraries and parity reports keep the model's own names and dtypes.
"""

from __future__ import annotations

import json
import os
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any] | str) -> ModelIO:
        if isinstance(data, str):
            data = json.loads(data)
        def tensors(items):
            return [TensorInfo(t["name"], t["dtype"], tuple(t["shape"]), t.get("lsb"))
                    for t in items]

        return ModelIO(data["source"], tensors(data["inputs"]), tensors(data["outputs"]),
                       data.get("rounding", "rne_f32"), data.get("extra", {}))


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
    input's range; numbers into a float input (float64 data rounds to float32). Anything else,
    a missing or unknown name or another shape raises ``CanonqnnError`` naming the input: a
    cast that changed the data (float into int8, 300 into int8, -100 into uint8) would give a
    silently wrong result."""
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
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        else:
            arrays = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, MemoryError) as exc:
        what = "an .npz archive" if path.endswith(".npz") else "an .npy array"
        raise CanonqnnError(f"input file {path!r} is not {what} numpy can read: "
                            f"{first_line(exc)}") from None
    if isinstance(arrays, np.lib.npyio.NpzFile):  # np.load of an archive named .npy
        raise CanonqnnError(f"input file {path!r} is an .npz archive: name it FILE.npz")
    for key, value in (arrays.items() if isinstance(arrays, dict) else [("", arrays)]):
        if value.dtype.kind not in "biuf":
            where = f"array {key!r} of {path!r}" if key else repr(path)
            raise CanonqnnError(f"input {where} holds {value.dtype} data; inputs are integer, "
                                "float or bool arrays")
    return arrays


def _converted(info: TensorInfo, value: np.ndarray) -> np.ndarray:
    from .errors import CanonqnnError

    target = np.dtype(info.dtype)
    if value.dtype == target:
        return value
    what = f"input {info.name!r} is {value.dtype}, the model takes {info.dtype}"
    if target.kind == "f" and value.dtype.kind in "biuf":
        return value.astype(target)
    if target.kind in "iu" and value.dtype.kind in "biu":
        limits = np.iinfo(target)
        if value.size and (value.min() < limits.min or value.max() > limits.max):
            raise CanonqnnError(f"{what}: values {value.min()}..{value.max()} are outside "
                                f"{info.dtype}'s range")
        return value.astype(target)
    raise CanonqnnError(f"{what}: converting would change the data")


def random_inputs(io: ModelIO, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of the right dtype and shape: N(0, 1) floats, integers over the 8-bit
    range (int16 activations: the whole int16 range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for info in io.inputs:
        if info.dtype.startswith("float"):
            out[info.name] = rng.standard_normal(info.shape).astype(info.dtype)
        else:
            limits = np.iinfo(info.dtype)
            lo, hi = max(limits.min, -128), min(limits.max, 255)
            if info.dtype == "int16":
                lo, hi = limits.min, limits.max
            out[info.name] = rng.integers(lo, hi + 1, info.shape).astype(info.dtype)
    return out
