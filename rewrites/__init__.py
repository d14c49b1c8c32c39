"""Rewrite rules: fake-quant chains -> canonical ``relax.canonqnn.*`` ops.

    mod, report = canonqnn.rewrites.canonicalize(fq_mod)

Phases run in order, each to a fixed point; within a phase the first listed rule that matches
wins. Rules import only the canonqnn core.
"""

from __future__ import annotations

from typing import Any

from . import (compute, dynamic, elementwise, epilogue, indexing, islands, lut, movement, pool,
               prologue, reduce, resize, select, softmax)
from ._engine import Decline, FloatIsland, Phase, Report, Rule, run_phases

DEFAULT_PHASES = (
    Phase("compute", movement.INT8_RULES + compute.RULES + dynamic.COMPUTE_RULES),
    Phase("elementwise_pool_movement",
          elementwise.RULES + pool.RULES + softmax.RULES + resize.RULES + reduce.RULES
          + select.RULES + indexing.RULES + movement.RULES[:3]),
    Phase("requantize", movement.RULES[3:]),
    # After the products: what is left of a DynamicQuantizeLinear is used elsewhere.
    Phase("dynamic_results", dynamic.RESULT_RULES),
    # After requantize, so that a lone relu/clip stays an integer clamp rather than a table.
    Phase("lut", lut.RULES),
    Phase("epilogue", epilogue.RULES + prologue.RULES + islands.RULES),
)


def canonicalize(mod: Any, phases: tuple[Phase, ...] = DEFAULT_PHASES, *,
                 numerics: Any = None) -> tuple[Any, Report]:
    """Fold every fake-quant chain a rule covers; returns the module and a ``Report``.

    ``numerics`` names the profile (``canonqnn.numerics.PROFILES``) whose arithmetic the
    canonical ops reproduce; default: the one the module records, else the probed profile of
    the model's source runtime on this host. The module records it."""
    return run_phases(mod, phases, numerics)


def rules() -> list[Rule]:
    return [rule for phase in DEFAULT_PHASES for rule in phase.rules]


__all__ = ["DEFAULT_PHASES", "Decline", "FloatIsland", "Phase", "Report", "Rule",
           "canonicalize", "rules"]
