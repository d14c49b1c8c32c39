"""The model formats canonqnn reads: the one place the core learns of them.

A format is a folder (``canonqnn.frontends.<format>``) holding its importer and its oracle; the
core reaches it only through its ``Format`` record here, which names its module as a string,
imported on first use: the core imports no format. A fourth format is one ``register`` call.

The module a record names implements ``FormatModule``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import extras
from .errors import CanonqnnError


class FormatModule(Protocol):
    """What the core calls on a format's module.

    ``runtimes`` and ``profile`` are its oracle: they run the source runtime, in a child process
    (``canonqnn.oracle.isolated``) when it may crash, and never import TVM where they run.
    """

    def load(self, model: Any, **options: Any) -> Any:
        """The fake-quant Relax module of ``model`` (the FQ form, ``canonqnn.qdq``), whose
        ``ModelIO.source`` is the format's name."""

    def runtimes(self, model: Any, io: Any, profile: Any) -> list[Any]:
        """The source runtimes parity compares a build of ``model`` with
        (``canonqnn.oracle.source.SourceRuntime``), the specification first, each giving the
        outputs of ``io`` (the module's ``ModelIO``) in order; ``profile``: the numerics profile
        the module was converted for."""

    def profile(self) -> Any:
        """The numerics profile (``canonqnn.numerics.Profile``) of the format's runtime on this
        host, found by running it."""


# Optional beside them: ``runtime_tensors(model, profile)``, a function ``(names, feed) ->
# {name: value}`` giving the source runtime's values of inner tensors of the model, with which
# the first diverging layer is also compared with the runtime (ONNX has it); and for parity on
# a device (``--rpc``, a ``canonqnn.build.remote.Device``), ``device_runtimes(model, io,
# profile, device)`` and ``device_profile(device)``, the runtime installed there (ONNX and
# TFLite have them), and ``device_runtime_tensors(model, profile, device)`` (ONNX has it).


@dataclass(frozen=True)
class Format:
    """A model format, how to recognise its models and what reading them needs."""

    name: str                       # also the ``ModelIO.source`` of the modules it loads
    module: str                     # implements ``FormatModule``, imported on first use
    models: str                     # how messages name its models: "TFLite models"
    runtime: str = ""               # how messages name its source runtime: "onnxruntime"
    extra: str | None = None        # the pip extra its packages come with (None: always there)
    suffixes: tuple[str, ...] = ()  # a path ending so is a model of this format
    magic: tuple[int, bytes] | None = None  # (offset, bytes) a file or bytes of it hold there
    types: tuple[tuple[str, str], ...] = ()  # (module prefix, class name) of in-memory models
    # The options ``load`` takes (None: whatever the format's ``load`` accepts); the others are
    # refused with ``options_refusal`` after their names.
    options: tuple[str, ...] | None = None
    options_refusal: str = ""
    parity_runtimes: int = 1        # source runtimes parity runs at once (its memory budget)

    def recognises(self, model: Any) -> bool:
        """Whether ``model`` (a path, bytes or an object) is of this format, by its suffix, its
        magic bytes or its type."""
        if isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(self.suffixes):
            return True
        if any(c.__name__ == name and c.__module__.startswith(prefix)
               for c in type(model).__mro__ for prefix, name in self.types):
            return True
        if self.magic is None:
            return False
        offset, magic = self.magic
        return _head(model, offset + len(magic))[offset:] == magic

    def implementation(self) -> FormatModule:
        """The format's module (its packages missing: an error naming the extra)."""
        return self._missing_extra(importlib.import_module, self.module)

    def function(self, name: str) -> Callable[..., Any]:
        """The interface function ``name`` of the format's module. A module may import its
        packages on first use of a function, so a missing one is found here."""
        return self._missing_extra(getattr, self.implementation(), name)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The interface function ``name`` called: a package of the format's extra found
        missing while it runs (imported on first use) is an error naming the extra."""
        try:
            return self.function(name)(*args, **kwargs)
        except ModuleNotFoundError as exc:
            if self.extra is None or extras.extra_of(exc.name) != self.extra:
                raise
            raise extras.MissingExtra(self.extra, (exc.name or "").split(".")[0],
                                      f"{self.models} need") from None

    def _missing_extra(self, get: Callable[..., Any], *args: Any) -> Any:
        try:
            return get(*args)
        except ImportError as exc:
            if self.extra is None:
                raise
            raise extras.MissingExtra(self.extra, getattr(exc, "name", None) or "",
                                      f"{self.models} need") from None


def _head(model: Any, size: int) -> bytes:
    """The first ``size`` bytes of ``model`` (bytes, or the path of a file), or none."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model[:size])
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        with open(model, "rb") as f:
            return f.read(size)
    return b""


ONNX = Format("onnx", "canonqnn.frontends.onnx", "ONNX models", "onnxruntime")
TFLITE = Format("tflite", "canonqnn.frontends.tflite", "TFLite models", "the TFLite interpreter",
                extra="tflite",
                suffixes=(".tflite",), magic=(4, b"TFL3"), options=("outputs",),
                options_refusal="apply to ONNX models only (TFLite models have static shapes "
                                "and constant parameters)",
                parity_runtimes=3)
TORCH = Format("torch", "canonqnn.frontends.torch", "PyTorch programs", "ExecuTorch's XNNPACK",
               extra="torch",
               suffixes=(".pt2",), types=(("torch.", "ExportedProgram"),), options=(),
               options_refusal="apply to ONNX and TFLite models, not to PyTorch programs (their "
                               "shapes are static and the whole program is converted)",
               parity_runtimes=2)

# Recognised in this order; a model no format recognises is read as ONNX (a ModelProto, or
# bytes with no identifier of their own).
_FORMATS: dict[str, Format] = {f.name: f for f in (TORCH, TFLITE, ONNX)}
DEFAULT = ONNX.name


def register(fmt: Format) -> None:
    """Add a format (recognised before the built-in ones); its name must be new."""
    if fmt.name in _FORMATS:
        raise CanonqnnError(f"a format named {fmt.name!r} is registered already")
    ordered = {fmt.name: fmt, **_FORMATS}
    _FORMATS.clear()
    _FORMATS.update(ordered)


def unregister(name: str) -> None:
    """Remove a format ``register`` added (the built-in ones stay)."""
    if name in (ONNX.name, TFLITE.name, TORCH.name):
        raise CanonqnnError(f"the built-in format {name!r} cannot be unregistered")
    _FORMATS.pop(name, None)


def get(name: str) -> Format:
    """The format called ``name`` (a ``ModelIO.source``)."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise CanonqnnError(f"no model format {name!r} (known: {', '.join(_FORMATS)})") from None


def names() -> list[str]:
    return list(_FORMATS)


def of(model: Any) -> Format:
    """The format of ``model``: the first that recognises it, else ONNX."""
    return next((f for f in _FORMATS.values() if f.recognises(model)), _FORMATS[DEFAULT])


# ------------------------------------------------------------------ what a file holds
# A file's kind by its content (``file_kind``), and how messages name it: a command given the
# wrong kind of file says what it was given and which command takes it.
KINDS = {
    "onnx": "an ONNX model",
    "tflite": "a TFLite model",
    "torch": "a PyTorch program (.pt2)",
    "module": "a canonical module file (written by canonqnn convert)",
    "library": "a shared library (written by canonqnn build)",
    "objects": "a tar archive of object files (written by canonqnn build for another "
               "architecture)",
    "npy": "a NumPy array (.npy)",
    "npz": "a NumPy archive (.npz)",
    "empty": "an empty file",
    "text": "a text file",
}
MODEL_KINDS = ("onnx", "tflite", "torch")
_ZIP, _TAR_AT = b"PK\x03\x04", 257


def file_kind(path: str | os.PathLike) -> str:
    """What the file at ``path`` holds, by its first bytes: a key of ``KINDS``. A file of no
    kind recognised (ONNX has no identifier of its own) is "onnx", as loading reads it."""
    head = _head(path, 1024)
    if not head:
        return "empty"
    if head.startswith(b"\x7fELF"):
        return "library"
    if head[4:8] == b"TFL3":
        return "tflite"
    if head.startswith(_ZIP):
        # an .npz's first member is an array; a .pt2 archive's are its program's files
        name_size = int.from_bytes(head[26:28], "little")
        return "npz" if head[30:30 + name_size].endswith(b".npy") else "torch"
    if head[_TAR_AT:_TAR_AT + 5] == b"ustar":
        return "objects"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.lstrip().startswith(b"{") and b'"root_index"' in head:
        return "module"
    # text: no control character but whitespace (a protobuf, ONNX's encoding, is full of them)
    if head.translate(None, _TEXT_CONTROLS) != head:
        return "onnx"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # (a multi-byte character cut at the end is text)
        if exc.start < len(head) - 4:
            return "onnx"
    return "text"


_TEXT_CONTROLS = bytes(c for c in range(32) if chr(c) not in "\t\n\r\f") + b"\x7f"
