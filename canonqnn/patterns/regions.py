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
    for backend, composites, value in _main_regions(mod):
        if backend is None:
            name = _op_label(value)
            if name is not None:
                regions.append(Region(None, (), (name,)))
            continue
        regions.append(Region(backend, tuple(name for name, _ in composites),
                              tuple(op for _, f in composites for op in _ops(f))))
    return Partition(tuple(regions))


def matches(mod: Any) -> list[tuple[str, OpParams]]:
    """``(composite name, OpParams)`` of every match in ``mod["main"]`` after ``partition``
    (merged or not), in order: what a backend's codegen receives."""
    return [(name, composite_params(func)) for backend, composites, _ in _main_regions(mod)
            if backend is not None for name, func in composites]


def composite_calls(func: Any) -> list[tuple[Any, str, Any, list[Any]]]:
    """``(result var, composite name, composite function, arguments)`` of each composite call
    in a backend function (a ``"Codegen"`` function made by ``partition``), in order: what a
    backend's codegen walks."""
    local, out = {}, []
    for var, value in _tvm.function_bindings(func):
        if _tvm.is_function(value):  # composite functions are bound locally, then called
            local[var] = value
            continue
        callee = local.get(getattr(value, "op", None))
        if callee is not None and _tvm.function_attr(callee, "Composite") is not None:
            out.append((var, str(_tvm.function_attr(callee, "Composite")), callee,
                        list(value.args)))
    return out


def _main_regions(mod: Any):
    """``(backend, [(composite name, function)], value)`` per binding of ``main``; backend is
    None for work left to TVM."""
    for _, value in _tvm.function_bindings(mod["main"]):
        func = _tvm.callee_function(mod, value)
        backend = None if func is None else _tvm.function_attr(func, "Codegen")
        composite = None if func is None else _tvm.function_attr(func, "Composite")
        if backend is not None:
            yield str(backend), [(name, f) for _, name, f, _ in composite_calls(func)], value
        elif composite is not None:  # partitioned without merging
            yield str(composite).split(".")[0], [(str(composite), func)], value
        elif func is None:
            yield None, [], value


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
