"""The canonical op registry: each ``relax.canonqnn.<name>`` op is declared once, here.

A ``CanonicalOp`` bundles what defines an op: its builder contract (tensor arguments and
attributes), type inference, legalization to integer TIR, the numpy reference that is its
executable specification, and its constraint: one function saying which parameters the op
accepts, and why not (``CanonicalOp.accepts``). Frontends, rules and builders all ask it, so a
refusal reads the same wherever it happens; its docstring is the constraint's prose, which
``docs/spec.md`` shows (``canonqnn.ops.spec`` renders it there) and ``canonqnn ops`` prints.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _tvm

PREFIX = "relax.canonqnn."
# docs/spec.md, "Rounding modes"
ROUNDINGS = ("rne_f32", "q31_double", "q31_single", "xnnpack", "mlas_neon")


@dataclass(frozen=True)
class CanonicalOp:
    """One canonical op. ``args`` names its tensor arguments (``*name`` = variadic tuple)."""

    name: str
    summary: str
    args: tuple[str, ...]
    attrs: tuple[str, ...]
    infer: Callable[[Any], Any]
    legalize: Callable[[Any, Any], Any]
    reference: Callable[..., np.ndarray]
    # The executable constraint: keyword parameters in, None (accepted) or a Refusal out; its
    # docstring is the constraint's prose (``constraints``).
    constraint: Callable[..., Refusal | None]
    family: str = "compute"
    # The rounding modes this op implements (a subset of ROUNDINGS, for ops that round).
    roundings: tuple[str, ...] = ("rne_f32",)
    # Layout of the 4-D activations ("NCHW") and of the weight argument ("OIHW", "IOHW",
    # "KN"), for ops that have one; patterns expose them to pattern authors.
    layout: str | None = None
    weight_layout: str | None = None
    # The op applies its [act_min, act_max] clamp to its output, so a clamp that only follows
    # it folds into that attribute (rewrites.epilogue).
    absorbs_clamp: bool = False
    # A lookup table that follows it belongs to its output stage: the build fuses the table into
    # the op's kernel (the kernel report, ``build.report``, flags a table it left alone), and
    # pattern authors get a ``<op>_lut`` group (patterns.table).
    absorbs_table: bool = False
    _op: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def relax_name(self) -> str:
        return PREFIX + self.name

    @property
    def op(self) -> Any:
        return self._op[0]

    @property
    def constraints(self) -> str:
        """The constraint's prose: its function's docstring, on one line."""
        return " ".join((inspect.getdoc(self.constraint) or "").split())

    def accepts(self, **params: Any) -> Refusal | None:
        """None when this op takes ``params`` (the keywords of its constraint function), else
        why not, in the words frontends, rules and builders all report."""
        return self.constraint(**params)

    def require(self, **params: Any) -> None:
        """Raise the refusal ``accepts`` gives, as ``canonqnn.<op>: <reason>``:
        ``UnsupportedRounding`` where the op exists but not under this rounding (a rule's
        decline), else ValueError."""
        why = self.accepts(**params)
        if why is not None:
            raise why.error(f"canonqnn.{self.name}: {why}")

    def call(self, args: list[Any], attrs: dict[str, Any]) -> Any:
        """Build the Relax call; attribute names must be exactly the declared ones."""
        self.check_attrs(attrs)
        return _tvm.make_call(self.op, args, {k: _attr_value(v) for k, v in attrs.items()})

    def check_attrs(self, attrs: dict[str, Any]) -> None:
        """Raise (TypeError, ValueError) unless ``attrs`` are this op's, each in its range:
        a known rounding this op implements, a non-empty activation range, finite numbers and
        positive scales. Calls are built through here and loaded modules checked by it."""
        missing, extra = set(self.attrs) - set(attrs), set(attrs) - set(self.attrs)
        if missing or extra:
            raise TypeError(f"{self.relax_name}: missing attrs {sorted(missing)}, unexpected "
                            f"{sorted(extra)}")
        if "rounding" in attrs and attrs["rounding"] not in ROUNDINGS:
            raise ValueError(f"{self.relax_name}: unknown rounding {attrs['rounding']!r}")
        if "rounding" in attrs and attrs["rounding"] not in self.roundings:
            raise UnsupportedRounding(
                f"{self.relax_name} does not implement rounding {attrs['rounding']!r} "
                f"(it implements {', '.join(self.roundings)})")
        if "act_min" in attrs and attrs["act_min"] > attrs["act_max"]:
            raise ValueError(f"{self.relax_name}: empty activation range "
                             f"[{attrs['act_min']}, {attrs['act_max']}]")
        for name, value in attrs.items():
            kind = type(value)
            if kind is str or kind is bool:
                continue
            if kind is int or kind is float:  # (the common case, without numpy)
                if kind is float and not math.isfinite(value):
                    raise ValueError(f"{self.relax_name}: attribute {name} is not finite")
                if name.endswith(("scale", "scales")) and not value > 0:
                    raise ValueError(f"{self.relax_name}: scale {name} is not positive")
                continue
            numbers = np.asarray(value) if isinstance(value, (int, float, list, tuple, np.ndarray,
                                                               np.number)) else None
            if numbers is None or numbers.dtype.kind not in "iuf":
                continue
            if numbers.dtype.kind == "f" and not np.all(np.isfinite(numbers)):
                raise ValueError(f"{self.relax_name}: attribute {name} is not finite")
            if name.endswith(("scale", "scales")) and not np.all(numbers > 0):
                raise ValueError(f"{self.relax_name}: scale {name} is not positive")

    def run_reference(self, call: Any, arg_values: list[np.ndarray]) -> np.ndarray:
        """Evaluate ``call`` with numpy on the given argument values."""
        return self.reference(*arg_values, **_tvm.attrs_dict(call))


def _attr_value(value: Any) -> Any:
    """Attrs are stored as Python scalars/lists; float32 values survive exactly as doubles."""
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_attr_value(v) for v in value]
    return value


class UnsupportedRounding(ValueError):
    """A canonical op was asked for a rounding mode its legalization does not implement."""


class Refusal(str):
    """Why a canonical op refuses parameters: the text users read, and the ``error`` a builder
    raises with it (``UnsupportedRounding``: the op exists, not under this rounding)."""

    error: type[ValueError]

    def __new__(cls, reason: str, error: type[ValueError] = ValueError) -> Refusal:
        made = super().__new__(cls, reason)
        made.error = error
        return made


REGISTRY: dict[str, CanonicalOp] = {}


def register(op: CanonicalOp) -> CanonicalOp:
    """Register ``op`` with TVM (idempotent) and in the registry; printed modules parse back."""
    op._op.append(_tvm.register_op(op.relax_name, op.summary, op.infer, op.legalize))
    REGISTRY[op.name] = op
    _tvm.install_script_namespace("canonqnn", {
        name: (lambda *args, _op=entry, **attrs: _tvm.make_call(_op.op, args, attrs))
        for name, entry in REGISTRY.items()})
    return op


def absorbing(prop: str) -> tuple[str, ...]:
    """Names of the registered ops whose ``absorbs_clamp`` / ``absorbs_table`` (``prop``) is
    set, in registration order."""
    return tuple(name for name, op in REGISTRY.items() if getattr(op, prop))


def lookup(call: Any) -> CanonicalOp | None:
    """The canonical op a Relax call invokes, or None."""
    name = _tvm.op_name(call)
    if name and name.startswith(PREFIX):
        return REGISTRY.get(name[len(PREFIX):])
    return None
