"""Rewrite rules: fake-quant chains -> canonical ``relax.canonqnn.*`` ops.

    mod, report = canonqnn.rewrites.canonicalize(fq_mod)

Phases run in order (``PHASE_ORDER``), each to a fixed point; every rule names its phase, and
within a phase the first rule (in ``RULE_MODULES`` order) that folds a chain wins. Rules import
only the canonqnn core.
"""

from __future__ import annotations

from typing import Any

from . import (
    compute,
    dynamic,
    elementwise,
    epilogue,
    indexing,
    islands,
    lut,
    movement,
    pool,
    prologue,
    reduce,
    resize,
    select,
    softmax,
)
from ._engine import PHASE_ORDER, Decline, FloatIsland, Phase, Report, Rule, report_of, run_phases

# Within a phase, rules are tried in this module order (the first that folds a chain wins;
# the first that declines names the island's reason).
RULE_MODULES = (compute, dynamic, elementwise, pool, softmax, resize, reduce, select, indexing,
                movement, lut, epilogue, prologue, islands)

DEFAULT_PHASES = tuple(
    Phase(name, tuple(rule for module in RULE_MODULES for rule in module.RULES
                      if rule.phase == name))
    for name in PHASE_ORDER)


def canonicalize(mod: Any, phases: tuple[Phase, ...] = DEFAULT_PHASES, *,
                 numerics: Any = None) -> tuple[Any, Report]:
    """Fold every fake-quant chain a rule covers; returns the module and a ``Report``.

    ``numerics`` names the profile (``canonqnn.numerics.PROFILES``) whose arithmetic the
    canonical ops reproduce; default: the one the module records, else the probed profile of
    the model's source runtime on this host. The module records it."""
    return run_phases(mod, phases, numerics)


def rules() -> list[Rule]:
    return [rule for phase in DEFAULT_PHASES for rule in phase.rules]


__all__ = ["DEFAULT_PHASES", "PHASE_ORDER", "RULE_MODULES", "Decline", "FloatIsland", "Phase",
           "Report", "Rule", "canonicalize", "report_of", "rules"]
