"""TVM's dataflow pattern language and BYOC partitioning (``canonqnn.patterns``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tvm import relax


def dpl_call(op_name_: str, n_args: int | None) -> Any:
    """The DPL pattern of a call to ``op_name_`` with ``n_args`` arbitrary arguments (None:
    any number, for variadic ops)."""
    from tvm.relax.dpl import is_op, wildcard

    if n_args is None:
        return is_op(op_name_)(varg_default_wildcard=True)
    return is_op(op_name_)(*[wildcard() for _ in range(n_args)])


def dpl_call_on(op_name_: str, first: Any, n_rest: int) -> Any:
    """The DPL pattern of a call to ``op_name_`` whose first argument matches ``first``."""
    from tvm.relax.dpl import is_op, wildcard

    return is_op(op_name_)(first, *[wildcard() for _ in range(n_rest)])


def register_fusion_patterns(entries: Sequence[tuple[str, Any, dict[str, Any], Callable]]) -> None:
    """Register ``(name, pattern, annotations, check)`` entries in TVM's BYOC pattern registry
    (later entries take priority). Tuples, not ``FusionPattern`` objects: only tuples are
    removed again at interpreter exit, which keeps Python check functions from outliving
    Python."""
    from tvm.relax.backend.pattern_registry import register_patterns

    register_patterns(list(entries))


def registered_patterns(prefix: str) -> list[Any]:
    """TVM's registered patterns whose names start with ``prefix``, highest priority first."""
    from tvm.relax.backend.pattern_registry import get_patterns_with_prefix

    return list(get_patterns_with_prefix(prefix))


def fusion_pattern(name: str, pattern: Any, annotations: dict[str, Any],
                   check: Callable[[Any], bool]) -> Any:
    return relax.transform.FusionPattern(name, pattern, annotations, check)


def leaks_intermediates(context: Any) -> bool:
    """Whether a match's inner results are also used outside it (fusing would duplicate)."""
    from tvm.relax.backend.utils import has_leaking_intermediate_variables

    return bool(has_leaking_intermediate_variables(context))


def fuse_ops_by_pattern(mod: Any, patterns: Sequence[Any]) -> Any:
    """``FuseOpsByPattern`` with constants bound into the composite functions."""
    return relax.transform.FuseOpsByPattern(list(patterns), bind_constants=True,
                                            annotate_codegen=False)(mod)


def merge_composite_functions(mod: Any) -> Any:
    return relax.transform.MergeCompositeFunctions()(mod)


def run_codegen(mod: Any) -> Any:
    return relax.transform.RunCodegen()(mod)
