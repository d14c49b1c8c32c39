"""Patterns for backend authors: one DPL pattern per canonical op, whatever the source format.

Importing this package registers every pattern in TVM's BYOC registry under ``canonqnn.``, as
TVM's own backends do, so the usual flow works on any canonical module::

    from tvm.relax.backend.pattern_registry import get_patterns_with_prefix
    import canonqnn.patterns
    mod = relax.transform.FuseOpsByPattern(get_patterns_with_prefix("canonqnn"))(mod)

A backend builds its own set with its own name and check, reading typed parameters::

    def npu_accepts(p: canonqnn.patterns.OpParams) -> bool:
        return p.rounding == "rne_f32" and (p.weight is None or p.weight.symmetric)

    npu = canonqnn.patterns.fusion_patterns("npu", ops=["conv2d", "add"], check=npu_accepts)
    mod = canonqnn.patterns.partition(mod, npu)      # FuseOpsByPattern + MergeCompositeFunctions
    print(canonqnn.patterns.describe(mod).summary())

``docs/pattern-authors.md`` documents the patterns, the parameters and what stays stable.
"""

from __future__ import annotations

from .params import OpParams, Quant, WeightQuant, params_of
from .regions import (
    Partition,
    Region,
    composite_calls,
    composite_params,
    describe,
    matches,
    partition,
)
from .table import (
    EPILOGUE,
    PREFIX,
    ROOT,
    PatternSpec,
    fusion_patterns,
    match_params,
    register,
    specs,
)

register()

__all__ = ["EPILOGUE", "PREFIX", "ROOT", "OpParams", "Partition", "PatternSpec", "Quant",
           "Region", "WeightQuant", "composite_calls", "composite_params", "describe",
           "fusion_patterns", "match_params", "matches", "params_of", "partition", "register",
           "specs"]
