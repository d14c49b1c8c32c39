"""Every rule sits in exactly one phase, the one it names, and no rule is left out."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import canonqnn.rewrites as rewrites
from canonqnn.rewrites import DEFAULT_PHASES, PHASE_ORDER, RULE_MODULES, Rule


def _rules_by_module() -> dict[str, list[Rule]]:
    """Every ``Rule`` object bound at the top level of a module of the package, by module."""
    found: dict[str, list[Rule]] = {}
    for info in pkgutil.iter_modules(rewrites.__path__):
        module = importlib.import_module(f"canonqnn.rewrites.{info.name}")
        for value in vars(module).values():
            items = value if isinstance(value, tuple) else (value,)
            rules = [r for r in items if isinstance(r, Rule)]
            if rules:
                found.setdefault(module.__name__, []).extend(rules)
    return found


def _rules_defined_anywhere() -> list[Rule]:
    return [rule for rules in _rules_by_module().values() for rule in rules]


def test_phases_run_in_the_declared_order():
    assert tuple(p.name for p in DEFAULT_PHASES) == PHASE_ORDER


def test_every_rule_sits_in_exactly_the_phase_it_names():
    placed = [(phase.name, rule) for phase in DEFAULT_PHASES for rule in phase.rules]
    rules = [rule for _, rule in placed]
    assert len(rules) == len({id(r) for r in rules}), "a rule is placed twice"
    assert all(rule.phase == name for name, rule in placed)
    defined = {id(r): r for r in _rules_defined_anywhere()}
    missing = [r.name for key, r in defined.items() if key not in {id(x) for x in rules}]
    assert not missing, f"rules defined but in no phase: {missing}"


def test_rule_modules_cover_every_module_that_defines_rules():
    assert set(_rules_by_module()) == {m.__name__ for m in RULE_MODULES}


def test_rule_names_are_unique_within_a_phase_root():
    for phase in DEFAULT_PHASES:
        names = [(rule.root, rule.name) for rule in phase.rules]
        assert len(names) == len(set(names))


def test_a_rule_naming_no_known_phase_is_refused():
    with pytest.raises(ValueError, match="phase 'late' is not one of compute"):
        Rule("x", "relax.quantize", (lambda ctx, call: None,), lambda ctx, m: m, phase="late")


def test_a_rule_without_match_steps_is_refused():
    def step(ctx, call):
        return None

    with pytest.raises(ValueError, match="non-empty tuple of steps"):
        Rule("x", "relax.quantize", step, lambda ctx, m: m, phase="compute")
