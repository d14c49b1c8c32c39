"""Partition a canonical module with fusion patterns, and describe the partition.

``partition`` is TVM's BYOC flow: ``FuseOpsByPattern`` (one composite function per match,
constants bound inside) and then ``MergeCompositeFunctions`` (adjacent composites of one
backend become one function with a ``"Codegen"`` attribute). ``describe`` lists, in the order
of ``main``, what runs where: the regions a backend claimed (with their composites and ops) and
the ops left to TVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import _tvm
from ..ops import lookup
from .params import OpParams, params_of, with_epilogue
from .table import PREFIX, register


def partition(mod: Any, patterns: Sequence[Any] | None = None, merge: bool = True) -> Any:
    """Fuse the matches of ``patterns`` (default: every ``canonqnn.`` pattern registered with
    TVM) into composite functions, then merge adjacent ones per backend unless ``merge`` is
    False. A composite ``"npu.conv2d"`` belongs to backend ``npu``."""
    if patterns is None:
        register()
        patterns = _tvm.registered_patterns(PREFIX + ".")
    mod = _tvm.fuse_ops_by_pattern(mod, patterns)
    return _tvm.merge_composite_functions(mod) if merge else mod


@dataclass(frozen=True)
class Region:
    """Consecutive work in ``main``: a backend's function, or one op left to TVM."""

    backend: str | None            # None: TVM (host)
    composites: tuple[str, ...]    # the composite functions a backend region calls
    ops: tuple[str, ...]           # the ops inside, e.g. ("canonqnn.conv2d", "quantize")

    @property
    def offloaded(self) -> bool:
        return self.backend is not None


@dataclass(frozen=True)
class Partition:
    regions: tuple[Region, ...]

    def ops(self, offloaded: bool) -> list[str]:
        return [op for r in self.regions if r.offloaded == offloaded for op in r.ops]

    def counts(self) -> dict[str, int]:
        """Canonical ops offloaded and left to TVM, and TVM's own ops (interface Q/DQ)."""
        host = self.ops(False)
        return {"offloaded": len(self.ops(True)),
                "host_canonical": sum(op.startswith("canonqnn.") for op in host),
                "host_other": sum(not op.startswith("canonqnn.") for op in host),
                "backend_functions": sum(r.offloaded for r in self.regions)}

    def summary(self) -> str:
        c = self.counts()
        lines = [f"offloaded: {c['offloaded']} canonical ops in {c['backend_functions']} "
                 f"backend function(s); host: {c['host_canonical']} canonical ops, "
                 f"{c['host_other']} other ops"]
        for r in self.regions:
            where = r.backend or "host"
            what = ", ".join(r.composites) if r.offloaded else r.ops[0]
            lines.append(f"  {where:>8}  {what}")
        return "\n".join(lines)


def describe(mod: Any) -> Partition:
    """The regions of ``mod["main"]`` after ``partition`` (merged or not)."""
    regions = []
    for _, value in _tvm.function_bindings(mod["main"]):
        func = _tvm.callee_function(mod, value)
        if func is not None:
            backend = _tvm.function_attr(func, "Codegen")
            composite = _tvm.function_attr(func, "Composite")
            if backend is not None:
                composites = tuple(_composites(func))
                regions.append(Region(str(backend), tuple(c for c, _ in composites),
                                      tuple(op for _, ops in composites for op in ops)))
            elif composite is not None:
                regions.append(Region(str(composite).split(".")[0], (str(composite),),
                                      tuple(_ops(func))))
            continue
        name = _op_label(value)
        if name is not None:
            regions.append(Region(None, (), (name,)))
    return Partition(tuple(regions))


def _composites(func: Any) -> list[tuple[str, list[str]]]:
    """``(composite name, its ops)`` for each composite call inside a backend function."""
    return [(name, _ops(composite)) for name, composite in _composite_functions(func)]


def _composite_functions(func: Any) -> list[tuple[str, Any]]:
    """``(composite name, function)`` for each composite call inside a backend function."""
    local = {}
    out = []
    for var, value in _tvm.function_bindings(func):
        if _tvm.is_function(value):
            local[var] = value
            continue
        callee = local.get(getattr(value, "op", None))
        if callee is not None and _tvm.function_attr(callee, "Composite") is not None:
            out.append((str(_tvm.function_attr(callee, "Composite")), callee))
    return out


def matches(mod: Any) -> list[tuple[str, OpParams]]:
    """``(composite name, OpParams)`` of every match in ``mod["main"]`` after ``partition``
    (merged or not), in order: what a backend's codegen receives."""
    out = []
    for _, value in _tvm.function_bindings(mod["main"]):
        func = _tvm.callee_function(mod, value)
        if func is None:
            continue
        if _tvm.function_attr(func, "Codegen") is not None:
            out.extend((name, composite_params(f)) for name, f in _composite_functions(func))
        elif _tvm.function_attr(func, "Composite") is not None:
            out.append((str(_tvm.function_attr(func, "Composite")), composite_params(func)))
    return out


def _ops(func: Any) -> list[str]:
    return [name for _, value in _tvm.function_bindings(func)
            if (name := _op_label(value)) is not None]


def _op_label(value: Any) -> str | None:
    op = lookup(value)
    if op is not None:
        return f"canonqnn.{op.name}"
    name = _tvm.op_name(value)
    return name.removeprefix("relax.") if name else None


def composite_params(func: Any) -> OpParams:
    """The ``OpParams`` of a composite function made by ``partition`` (what a backend's codegen
    compiles): its canonical op, with the lookup table as ``epilogue`` for a fused group."""
    calls = [value for _, value in _tvm.function_bindings(func) if lookup(value) is not None]
    if not calls or len(calls) > 2:
        raise TypeError(f"not a canonqnn composite function: {len(calls)} canonical op calls")
    root = params_of(calls[0])
    return with_epilogue(root, params_of(calls[1])) if len(calls) == 2 else root
