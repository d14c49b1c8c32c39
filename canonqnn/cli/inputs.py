"""What a command is given, checked before any work: the kind of file it reads, the files it
writes, input arrays and shapes."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .. import formats
from ..errors import CanonqnnError

LIBRARY_KINDS = ("library", "objects")
MODULE_KINDS = (*formats.MODEL_KINDS, "module")
# The kinds of file each command reads.
ACCEPTS: dict[str, tuple[str, ...]] = {
    "convert": formats.MODEL_KINDS,
    "build": MODULE_KINDS,
    "run": LIBRARY_KINDS,
    "run --reference": MODULE_KINDS,
    "inspect": MODULE_KINDS,
    "inspect --built": (*MODULE_KINDS, "library"),
    "parity": formats.MODEL_KINDS,
    "patterns": MODULE_KINDS,
    "view": MODULE_KINDS,
    "view --parity": formats.MODEL_KINDS,
}
# The commands that run the model in its source runtime.
RUNS_SOURCE = ("parity", "view --parity")
MODEL_SUFFIXES = ".onnx, .tflite, .pt2"
MODELS = f"a model ({MODEL_SUFFIXES})"


def checked_file(path: str, command: str) -> str:
    """``path`` when it exists and holds a kind of file ``command`` reads; otherwise an error
    saying what the file is and which command (or flag) takes it."""
    if not os.path.exists(path):
        raise CanonqnnError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CanonqnnError(f"{path}: is a directory; give a file")
    kind = formats.file_kind(path)
    if kind in ACCEPTS[command]:
        return path
    what, named = formats.KINDS[kind], _NAMED_BY_SUFFIX.get(os.path.splitext(path)[1])
    said = f"{path}: not {formats.KINDS[named]}, it is {what}" if named and named != kind \
        else f"{path} is {what}"
    raise CanonqnnError(f"{said}: {_what_fits(path, kind, command)}")


# What a file's name says it holds, where the name says (the content decides: ``file_kind``).
_NAMED_BY_SUFFIX = {".onnx": "onnx", ".tflite": "tflite", ".pt2": "torch", ".json": "module",
                    ".so": "library", ".tar": "objects", ".npy": "npy", ".npz": "npz"}


def _what_fits(path: str, kind: str, command: str) -> str:
    """What to do instead, for a file of ``kind`` given to ``command``."""
    if kind in LIBRARY_KINDS:
        return {"run --reference": f"run it without --reference (canonqnn run {path})",
                "inspect": f"inspect --built {path} lists its kernels",
                **{c: f"{c} runs the model in its source runtime and needs the model it "
                      f"was built from ({MODEL_SUFFIXES})" for c in RUNS_SOURCE}}.get(
            command, f"it is built already: canonqnn run {path} runs it")
    if kind == "module":
        if command in RUNS_SOURCE:
            return (f"{command} runs the model in its source runtime and needs the model it was "
                    f"converted from ({MODEL_SUFFIXES}); to check this module's build against "
                    f"its numpy reference: canonqnn build {path} --verify")
        if command == "run":
            return (f"run takes a built library: build it (canonqnn build {path}), or run its "
                    f"numpy reference (canonqnn run --reference {path})")
        return "it is converted already: inspect, build, run --reference and patterns read it"
    if kind in formats.MODEL_KINDS:  # given to run
        return (f"run takes a built library: build it (canonqnn build {path}), or run its "
                f"numpy reference (canonqnn run --reference {path})")
    takes = {"run": "a built library (.so, .tar)"}.get(command, MODELS if command in (
        "convert", *RUNS_SOURCE) else f"{MODELS} or a canonical module file (.json)")
    given_with = " (inputs are given with --input)" if kind in ("npy", "npz") else ""
    return f"{command} takes {takes}{given_with}"


def output_file(path: str) -> str:
    """``path`` if a file can be written there, checked before any work is done."""
    if os.path.isdir(path):
        raise CanonqnnError(f"output {path!r} is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CanonqnnError(f"output {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK) and not os.access(path, os.W_OK):
        raise CanonqnnError(f"output {path!r}: directory {parent!r} is not writable")
    return path


def parse_inputs(items: Sequence[str] | None) -> dict[str, np.ndarray] | None:
    """``NAME=FILE.npy`` pairs and/or ``FILE.npz`` archives keyed by input name."""
    from ..io import read_arrays

    if not items:
        return None
    feeds: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            path, name = item, ""
        if not path.endswith(".npz") and not name:
            raise CanonqnnError(f"give the input name for {path!r} as NAME={path}")
        arrays = read_arrays(path)
        if isinstance(arrays, dict):
            if not arrays:
                raise CanonqnnError(f"input archive {path!r} holds no arrays")
            feeds.update(arrays)
        else:
            feeds[name] = arrays
    return feeds


def parse_shapes(items: Sequence[str] | None) -> dict[str, list[int]] | None:
    """``NAME=1x3x224x224`` pairs fixing dynamic input dimensions."""
    if not items:
        return None
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            sep = ""
        if not sep or not name:
            raise CanonqnnError(f"--shape {item!r}: expected NAME=D1xD2x...")
    return shapes
