"""One DPL pattern per canonical op and per common fused group, as TVM ``FusionPattern``s.

A single-op pattern is the call with any arguments; its annotation ``"root"`` is the call. A
group pattern matches a producer whose only consumer is a lookup table (``conv2d -> lut``:
an activation the hardware applies in the producer's epilogue); ``"root"`` is the producer
and ``"epilogue"`` the ``lut`` call. Check functions receive ``OpParams`` (``params.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _tvm
from ..ops import PREFIX as OP_PREFIX
from ..ops import REGISTRY, absorbing
from .params import OpParams, params_of, with_epilogue

PREFIX = "canonqnn"   # pattern names in TVM's registry: "canonqnn.conv2d", ...
ROOT, EPILOGUE = "root", "epilogue"
# Producers a lookup table that follows them belongs to (``CanonicalOp.absorbs_table``).
LUT_PRODUCERS = absorbing("absorbs_table")

Check = Callable[[OpParams], bool]


@dataclass(frozen=True)
class PatternSpec:
    """A pattern: the canonical ops it matches, producer first."""

    name: str
    ops: tuple[str, ...]

    @property
    def fused(self) -> bool:
        return len(self.ops) > 1

    def dpl(self) -> tuple[Any, dict[str, Any]]:
        """The DPL pattern and its annotations."""
        root_op = REGISTRY[self.ops[0]]
        variadic = root_op.args[0].startswith("*")
        root = _tvm.dpl_call(OP_PREFIX + root_op.name, None if variadic else len(root_op.args))
        if not self.fused:
            return root, {ROOT: root}
        lut = REGISTRY[self.ops[1]]
        epilogue = _tvm.dpl_call_on(OP_PREFIX + lut.name, root, len(lut.args) - 1)
        return epilogue, {ROOT: root, EPILOGUE: epilogue}


def specs() -> list[PatternSpec]:
    """Every pattern, highest priority first: fused groups before single ops."""
    groups = [PatternSpec(f"{op}_lut", (op, "lut")) for op in LUT_PRODUCERS]
    return groups + [PatternSpec(name, (name,)) for name in REGISTRY]


def match_params(context: Any) -> OpParams:
    """The ``OpParams`` of a match, from TVM's ``PatternCheckContext`` (the root op's, with the
    lookup table's as ``epilogue`` for a fused group)."""
    annotated = context.annotated_expr
    root = params_of(annotated[ROOT])
    if EPILOGUE in annotated:
        return with_epilogue(root, params_of(annotated[EPILOGUE]))
    return root


def _check_function(spec: PatternSpec, check: Check | None) -> Callable[[Any], bool]:
    def check_match(context: Any) -> bool:
        if spec.fused and _tvm.leaks_intermediates(context):
            return False  # the producer's result is also read elsewhere: not one unit
        return True if check is None else bool(check(match_params(context)))

    return check_match


def fusion_patterns(prefix: str = PREFIX, ops: Sequence[str] | None = None,
                    check: Check | None = None) -> list[Any]:
    """``FusionPattern``s named ``<prefix>.<pattern>``, highest priority first, ready for
    ``FuseOpsByPattern``.

    ``ops`` selects patterns by name (``"conv2d"``, ``"conv2d_lut"``, ...; default all);
    ``check(params)`` decides each match from its ``OpParams`` (default: accept).
    """
    return [_tvm.fusion_pattern(*entry) for entry in _entries(prefix, ops, check)]


def _entries(prefix: str, ops: Sequence[str] | None,
             check: Check | None) -> list[tuple[str, Any, dict[str, Any], Any]]:
    """``(name, pattern, annotations, check function)`` per selected pattern, highest
    priority first."""
    chosen = specs()
    if ops is not None:
        known = {s.name for s in chosen}
        unknown = sorted(set(ops) - known)
        if unknown:
            raise ValueError(f"unknown pattern(s) {unknown}; known: {sorted(known)}")
        chosen = [s for s in chosen if s.name in set(ops)]
    return [(f"{prefix}.{spec.name}", *spec.dpl(), _check_function(spec, check))
            for spec in chosen]


_REGISTERED: list[str] = []


def register() -> list[str]:
    """Register every pattern in TVM's pattern registry under ``canonqnn.`` (idempotent), so
    that ``FuseOpsByPattern(get_patterns_with_prefix("canonqnn"))`` partitions a canonical
    module one canonical op (or fused group) per composite function."""
    if not _REGISTERED:
        entries = _entries(PREFIX, None, None)
        _tvm.register_fusion_patterns(list(reversed(entries)))  # registry: later = higher
        _REGISTERED.extend(name for name, *_ in entries)
    return list(_REGISTERED)
