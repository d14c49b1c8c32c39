"""The optional dependencies (pip extras) and the one error a missing one gives.

The base install reads and builds ONNX models; TFLite models, PyTorch programs and tuning need
the packages of an extra (``pyproject.toml``). Wherever such a package is imported and missing,
the error names the extra to install (``MissingExtra``), not the package's ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from .errors import CanonqnnError

# What needs each extra (how messages say it), and the top-level modules it installs.
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tflite": ("TFLite models need", ("tflite", "ai_edge_litert", "flatbuffers")),
    "torch": ("PyTorch programs need", ("torch", "torchao", "executorch")),
    "tune": ("tuning (build --tune) needs", ("xgboost", "cloudpickle", "psutil")),
    "view": ("the graph viewer (canonqnn view) needs", ("model_explorer",)),
}


class MissingExtra(CanonqnnError):
    """An optional dependency is not installed: the message names its extra."""

    def __init__(self, extra: str, module: str = "", what: str = "") -> None:
        """``what`` needs it (default: as ``EXTRAS`` says, "TFLite models need")."""
        self.extra = extra
        what = what or EXTRAS[extra][0]
        missing = f" ({module} is not installed)" if module else ""
        super().__init__(f"{what} the {extra} extra{missing}: "
                         f"pip install 'canonqnn[{extra}]'")


def extra_of(module: str | None) -> str | None:
    """The extra that installs the (possibly dotted) ``module``, or None."""
    top = (module or "").split(".")[0]
    return next((name for name, (_, modules) in EXTRAS.items() if top in modules), None)


def as_missing_extra(exc: BaseException) -> MissingExtra | None:
    """``exc`` as the extra to install, when it is the import of a module an extra installs
    that is not there (None otherwise: a broken install is not a missing extra)."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    extra = extra_of(exc.name)
    return MissingExtra(extra, (exc.name or "").split(".")[0]) if extra else None


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [m for m in EXTRAS[extra][1] if importlib.util.find_spec(m) is None]


def require(extra: str) -> None:
    """Raise ``MissingExtra`` unless every module of ``extra`` is installed."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(extra, absent[0])


def script_needs(extra: str, script: str) -> int:
    """For a script (an example): 0 where ``extra`` is installed, else 2 after printing
    ``SCRIPT: error: <what needs which extra>`` on stderr, as the command line does."""
    try:
        require(extra)
    except MissingExtra as exc:
        print(f"{os.path.basename(script)}: error: {exc}", file=sys.stderr)
        return 2
    return 0
