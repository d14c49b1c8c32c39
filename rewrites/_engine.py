"""The rewrite engine: ordered phases of rules applied by one linear walk each.

A rule (``Rule``) is keyed by the op of the call it starts from (usually ``relax.quantize``):
match steps that only read the graph, then a rewrite that emits. A step returns None for "not
my pattern", a ``Decline`` for "my pattern, but it cannot fold" (the reason and the float op
it concerns: the Report's float islands and near misses), or the match the next step takes.
The walk is ``_tvm.CallWalk`` (a ``PyExprMutator``: TVM's DPL rewriters are quadratic in graph
size), followed by its linear dead-binding sweep; this module keeps the rules' logic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from canonqnn import _tvm, numerics, progress
from canonqnn._tvm import relax
from canonqnn.errors import InvalidQuantizationError
from canonqnn.io import module_io
from canonqnn.ops import UnsupportedRounding, lookup
from canonqnn.qdq import DEQUANTIZE, QUANTIZE, carry_facts, facts_of, read_quantize, source_tensor

MAX_ITERATIONS = 8


@dataclass(frozen=True)
class Decline:
    """A rule recognised its pattern but cannot fold it: ``reason``, at float op ``at``."""

    reason: str
    at: Any = None


# The phases in the order they run, each to a fixed point before the next; every rule names
# the one it belongs to (``Rule.phase``), and ``rewrites.DEFAULT_PHASES`` groups them.
PHASE_ORDER = (
    # Products (conv, matmul) first: the rules after them read their int8 results.
    "compute",
    "elementwise_pool_movement",
    # What the ops before leave of q(act(dq x)): a re-expression or a clamp.
    "requantize",
    # After the products: what is left of a DynamicQuantizeLinear is used elsewhere.
    "dynamic_results",
    # After requantize, so that a lone relu/clip stays an integer clamp rather than a table.
    "lut",
    # Clamps into their producers, pads into convs, the reasons of the islands left.
    "epilogue",
)


Step = Callable[["Context", Any], Any]


@dataclass(frozen=True)
class Rule:
    """How one chain folds: ``match`` steps, then ``rewrite``.

    The first step receives the root call and returns a named match when the rule's pattern
    is there (None: not this rule's pattern). Each later step checks or completes the match:
    it returns the match (or a fuller one) or a ``Decline`` naming why the chain cannot fold.
    Steps only read the graph; ``rewrite`` emits the canonical op(s) for the final match and
    runs only when every step passed."""

    name: str
    root: str
    match: tuple[Step, ...]
    rewrite: Callable[[Context, Any], Any]
    doc: str = ""
    phase: str = ""  # one of PHASE_ORDER
    # The rule can only find its pattern in a function that calls one of these ops (its
    # anchor, e.g. relax.nn.conv2d): a walk skips it elsewhere. Empty: no such op; None: the
    # ``needs`` of the first step, if it says (``unary_step``).
    needs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASE_ORDER:
            raise ValueError(f"rule {self.name}: phase {self.phase!r} is not one of "
                             f"{', '.join(PHASE_ORDER)}")
        # the annotation says tuple; a rule written elsewhere may still pass a list
        if not isinstance(self.match, tuple) or not self.match:  # type: ignore[redundant-expr]
            raise ValueError(f"rule {self.name}: match must be a non-empty tuple of steps")
        if self.needs is None:
            object.__setattr__(self, "needs", tuple(getattr(self.match[0], "needs", ())))

    def attempt(self, ctx: Context, call: Any) -> tuple[Any, str | None]:
        """``(result, step)``: the rewritten expression, a ``Decline`` or None (not the
        pattern), with the name of the step that stopped (None when the rule folded)."""
        found, step_name = call, self.match[0].__name__
        try:
            for step in self.match:
                step_name = step.__name__
                found = step(ctx, found)
                if found is None or isinstance(found, Decline):
                    return found, step_name
            step_name = self.rewrite.__name__
            return self.rewrite(ctx, found), None
        # The op exists, not with this source's rounding or the profile's arithmetic.
        except (UnsupportedRounding, numerics.UnsupportedNumerics) as exc:
            return Decline(str(exc), call.args[0] if call.args else None), step_name
        except InvalidQuantizationError as exc:  # (parameters no op can take: named here)
            tensor = source_tensor(call)
            where = f"tensor {tensor!r}" if tensor else "a quantized tensor"
            raise InvalidQuantizationError(f"the {self.name} computing {where}: {exc}") from None


@dataclass(frozen=True)
class NearMiss:
    """A rule that found its pattern at a float op and declined: at which step, and why."""

    rule: str
    phase: str
    step: str
    reason: str


@dataclass(frozen=True)
class Phase:
    name: str
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class FloatIsland:
    op: str
    var: str
    reason: str


@dataclass
class Report:
    """What canonicalization did: folds per rule, and every float op left, with the reason;
    ``near_misses`` lists, per float island (by variable name), every rule that found its
    pattern there and declined. ``quantized``: whether the module holds any quantization
    (canonical ops, or quantize/dequantize left); a float model's has none. A module
    canonicalized before (``report_of``) has its ops and islands but no record of the rules
    (``rules_recorded`` False)."""

    counts: Counter = field(default_factory=Counter)
    float_islands: list[FloatIsland] = field(default_factory=list)
    canonical_ops: Counter = field(default_factory=Counter)
    numerics: str | None = None  # the profile the module was converted for
    near_misses: dict[str, list[NearMiss]] = field(default_factory=dict)
    quantized: bool = True
    rules_recorded: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "numerics": self.numerics,
            "quantized": self.quantized,
            "rules": dict(self.counts) if self.rules_recorded else None,
            "canonical_ops": dict(self.canonical_ops),
            "float_islands": [{"op": i.op, "var": i.var, "reason": i.reason,
                               "near_misses": [vars(m) for m in self.near_misses.get(i.var, [])]}
                              for i in self.float_islands],
        }

    def explain(self) -> str:
        """Each float island, then every rule that came close to folding it: the phase, the
        step where it declined and the reason."""
        if not self.float_islands:
            return "float islands: none"
        return "\n".join(self._islands(explain=True))

    def _islands(self, explain: bool) -> list[str]:
        lines = []
        for island in self.float_islands:
            lines.append(f"{island.var} = {island.op}: {island.reason}")
            if explain:
                misses = self.near_misses.get(island.var, [])
                lines += [f"  rule {m.rule} ({m.phase}) declined at {m.step}: {m.reason}"
                          for m in misses] or ["  no rule matched a pattern here"]
        return lines

    def summary(self, explain: bool = False) -> str:
        """The profile, the canonical ops, the rules that made them and the float islands with
        their reasons (``explain``: and every rule that came close to folding each)."""
        lines = [f"numerics: {self.numerics}"] if self.numerics else []
        lines.append("canonical ops: " + (", ".join(f"{k} x{v}" for k, v in
                                                sorted(self.canonical_ops.items())) or "none"))
        if not self.rules_recorded:
            lines.append("rules fired: not recorded (a module file keeps the ops the rules "
                         "made, not the rules)")
        else:
            lines.append("rules fired: " + (", ".join(f"{k} x{v}" for k, v in
                                                     sorted(self.counts.items())) or "none"))
        if not self.quantized:
            lines.append(f"nothing was quantized: the model holds no quantize or dequantize, "
                         f"so all its {len(self.float_islands)} ops compute in float (a float "
                         "model; quantize it first, e.g. with onnxruntime.quantization)")
            if not explain:
                return "\n".join(lines)
        if self.float_islands:
            lines.append(f"float islands ({len(self.float_islands)}):")
            lines += [f"  {line}" for line in self._islands(explain)]
        else:
            lines.append("float islands: none")
        return "\n".join(lines)


def report_of(mod: Any) -> Report:
    """The report of a module canonicalized before (a saved module file), recomputed from it:
    its profile, canonical ops and float islands (the reasons that the module shows; a
    rule's decline is not recorded), without the rules."""
    report = Report(rules_recorded=False)
    profile = numerics.recorded(mod)
    report.numerics = profile.name if profile is not None else None
    _collect(mod, report, {}, {})
    return report


class Context:
    """What rules see: bindings (already rewritten), use counts, an emitter."""

    def __init__(self, walk: Any, uses: Counter, source: str,
                 profile: numerics.Profile) -> None:
        self._walk = walk  # the _tvm.CallWalk rewriting the function
        self._uses = uses
        self._values: dict[int, tuple[Any, Any]] = {}  # _tvm.remembered: var -> its value
        self.binding_var: Any = None  # the variable whose value is being rewritten
        self.root: Any = None  # the call being rewritten (a rule's root)
        # The model's format ("onnx", "tflite"), from the interface the frontend recorded:
        # lookup tables are the functions as that format's runtime defines them.
        self.source = source
        # The numerics profile of the run: every host- or runtime-specific arithmetic choice.
        self.profile = profile
        # The profile of the source operator being rewritten (``Profile.for_operator``: a
        # runtime may compute some operators with another engine), and the rounding every
        # canonical op built for it must implement.
        self.numerics = profile
        self.rounding = profile.rounding

    def rewriting(self, var: Any, call: Any) -> None:
        """Rules are about to be offered ``call``, bound to ``var``."""
        self.binding_var = var
        self.root = call
        parsed = read_quantize(call)
        self.numerics = self.profile.for_operator(
            facts_of(call)[1], parsed.qparams.dtype if parsed is not None else None)
        self.rounding = self.numerics.rounding

    def undelegated(self) -> numerics.Profile:
        """The profile of the runtime's other engine, which computes the operator being
        rewritten when its delegate declines it (``Profile.others``); the profile itself when
        the runtime has no other engine."""
        return numerics.get(self.profile.others) if self.profile.others else self.numerics

    def source_dtype(self) -> str:
        """``"uint8"`` when the quantize being rewritten writes uint8 data of the source model,
        shifted by -128 (a parsed dequantize says it of its operand: ``QdqCall``)."""
        return facts_of(self.root)[0]

    def source_op(self) -> str | None:
        """The source operator the frontend recorded on the quantize being rewritten, e.g.
        ``"FULLY_CONNECTED"``; None when none was recorded."""
        return facts_of(self.root)[1]

    def value(self, expr: Any) -> Any:
        """The expression bound to ``expr`` if it is a variable bound in this function."""
        if not isinstance(expr, relax.Var):
            return expr
        # A variable's binding does not change during a walk, and rules ask for the same few
        # many times.
        return _tvm.remembered(self._values, expr, self._bound_value)

    def _bound_value(self, var: Any) -> Any:
        bound = self._walk.lookup_binding(var)
        return var if bound is None else bound

    def call(self, expr: Any, *ops: str) -> Any:
        """The call bound to ``expr`` when it invokes one of ``ops``, else None."""
        value = self.value(expr)
        return value if _tvm.op_name(value) in ops else None

    def uses(self, var: Any) -> int:
        """How many bindings (and the function result) read ``var``."""
        return self._uses[_tvm.identity(var)]

    def single_use(self, expr: Any) -> bool:
        return not isinstance(expr, relax.Var) or self._uses[_tvm.identity(expr)] <= 1

    def emit(self, expr: Any) -> Any:
        return self._walk.builder.emit(expr)


class _PhaseRewrite:
    """One phase's rules offered each call of one function (``_tvm.CallWalk`` walks it), and
    what they did there: rules fired, declines, near misses."""

    def __init__(self, walk: Any, rules: dict[str, list[Rule]], uses: Counter, source: str,
                 profile: numerics.Profile) -> None:
        self.rules = rules
        self.ctx = Context(walk, uses, source, profile)
        self.fired: Counter = Counter()
        self.declines: dict[Any, str] = {}
        self.misses: dict[Any, list[NearMiss]] = {}
        # raised once the walk is over (raising inside it would leave TVM's builder open)
        self.error: InvalidQuantizationError | None = None

    def __call__(self, var: Any, call: Any) -> Any:
        self.ctx.rewriting(var, call)
        for rule in self.rules.get(_tvm.op_name(call) or "", ()):
            try:
                result, step = rule.attempt(self.ctx, call)
            except InvalidQuantizationError as exc:
                # a copy without the traceback, whose frames hold the walk
                self.error = self.error or InvalidQuantizationError(str(exc))
                return None
            if result is None:
                continue
            if isinstance(result, Decline):
                if result.at is not None:
                    self.declines.setdefault(result.at, f"{rule.name}: {result.reason}")
                    miss = NearMiss(rule.name, rule.phase, step or "", result.reason)
                    if miss not in self.misses.setdefault(result.at, []):
                        self.misses[result.at].append(miss)
                continue
            self.fired[rule.name] += 1
            return carry_facts(call, result)
        return None


def _survey(func: Any) -> tuple[Counter, frozenset[str]]:
    """The reads of each variable of ``func`` (keyed by ``_tvm.identity``; ``func`` keeps
    them alive) and the names of the ops ``func`` calls, in one pass."""
    uses: Counter = Counter()
    ops: set[str] = set()
    key = _tvm.identity
    for block in _tvm.items(func.body.blocks):
        for binding in _tvm.items(block.bindings):
            value = binding.value
            if isinstance(value, relax.Var):
                uses[key(value)] += 1
                continue
            ops.add(_tvm.op_name(value) or "")
            uses.update(key(var) for var in _tvm.items(relax.analysis.free_vars(value)))
    uses.update(key(var) for var in _tvm.items(relax.analysis.free_vars(func.body.body)))
    return uses, frozenset(ops)


def _run_phase(mod: Any, phase: Phase, report: Report, declines: dict, misses: dict,
               source: str, profile: numerics.Profile,
               surveys: dict[Any, tuple[Counter, frozenset[str]]]) -> tuple[Any, int]:
    """One walk of ``phase`` over every function; ``surveys`` caches the use counts and ops
    of functions a walk left unchanged (surveying them is a walk of its own). A function
    calling none of the ops the phase's rules start from or need is not walked."""
    fired = 0
    walk = _tvm.CallWalk(mod)
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function):
            continue
        if func not in surveys:
            surveys.clear()  # (only the newest version of a function is read again)
            surveys[func] = _survey(func)
        uses, ops = surveys[func]
        rules: dict[str, list[Rule]] = {}
        for rule in phase.rules:
            if rule.root in ops and (not rule.needs or not ops.isdisjoint(rule.needs)):
                rules.setdefault(rule.root, []).append(rule)
        if not rules:
            continue
        walked = _PhaseRewrite(walk, rules, uses, source, profile)
        walk.rewrite(gv, func, walked)  # (where no rule fired, the function stays as it was)
        if walked.error is not None:
            error = walked.error
            del walk, walked  # (the raise's frame would keep the walk alive)
            raise error
        report.counts.update(walked.fired)
        fired += sum(walked.fired.values())
        for var, found in walked.misses.items():
            known = misses.setdefault(var, [])
            known += [m for m in found if m not in known]
        for var, reason in walked.declines.items():
            # A later phase's reason replaces an earlier one, except the profile's refusal:
            # it names the cause (the arithmetic exists, canonqnn lacks it).
            if numerics.REFUSAL not in declines.get(var, ""):
                declines[var] = reason
    return walk.module(), fired


def run_phases(mod: Any, phases: tuple[Phase, ...],
               profile: numerics.Profile | str | None = None) -> tuple[Any, Report]:
    """Run ``phases`` for the numerics ``profile`` (a name or a ``Profile``; default: the one
    the module records, else the probed profile of its source runtime on this host), which
    the result records."""
    report = Report()
    declines: dict[Any, str] = {}
    misses: dict[Any, list[NearMiss]] = {}
    io = module_io(mod)
    # Lookup tables follow the format's definition of each float function; a module no
    # frontend wrote is read with ONNX's (Relax's ops are ONNX's).
    source = io.source if io is not None else "onnx"
    profile = _resolve_profile(mod, source if io is not None else "relax", profile)
    mod = numerics.record(_tvm.copy_module(mod), profile)
    report.numerics = profile.name
    surveys: dict[Any, tuple[Counter, frozenset[str]]] = {}
    with _tvm.converting(), progress.step("converting to canonical ops"):
        for phase in phases:
            for _ in range(MAX_ITERATIONS):
                mod, fired = _run_phase(mod, phase, report, declines, misses, source,
                                        profile, surveys)
                if not fired:
                    break
    _collect(mod, report, declines, misses)
    return mod, report


def _resolve_profile(mod: Any, source: str,
                     profile: numerics.Profile | str | None) -> numerics.Profile:
    if isinstance(profile, numerics.Profile):
        return profile
    if profile is not None:
        return numerics.get(profile)
    recorded = numerics.recorded(mod)
    if recorded is not None:
        return recorded
    return numerics.source_profile(source)


BOUNDARY_OPS = (QUANTIZE, DEQUANTIZE)


def _collect(mod: Any, report: Report, declines: dict[Any, str],
             misses: dict[Any, list[NearMiss]]) -> None:
    """Count canonical ops and list every float op left, with the best known reason."""
    boundaries = 0
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        users: dict[Any, list[str]] = {}
        for value in bound.values():
            for arg in getattr(value, "args", ()):
                if isinstance(arg, relax.Var):
                    users.setdefault(arg, []).append(_tvm.op_name(value) or "")
        for var, value in bound.items():
            canonical = lookup(value)
            if canonical is not None:
                report.canonical_ops[canonical.name] += 1
                continue
            name = _tvm.op_name(value)
            boundaries += name in BOUNDARY_OPS
            if name is None or (name in BOUNDARY_OPS and not _declined_requantization(
                    name, var, declines, users.get(var))):
                continue
            if _float_tensor(var) or (_tvm.is_tensor(var) and _reads_float(value)):
                reason = declines.get(var) or _default_reason(name, value, bound, users.get(var))
                report.float_islands.append(FloatIsland(name, _tvm.var_name(var), reason))
                if misses.get(var):
                    report.near_misses[_tvm.var_name(var)] = misses[var]
    report.quantized = bool(report.canonical_ops) or boundaries > 0


def _declined_requantization(name: str, var: Any, declines: dict[Any, str],
                             users: list[str] | None) -> bool:
    """Whether ``var`` is a dequantize a rule declined to fold whose value only quantizes
    read: a requantization left to compute in float, which no other float op shows."""
    return (name == DEQUANTIZE and var in declines and users is not None
            and set(users) == {QUANTIZE})


def _float_tensor(expr: Any) -> bool:
    return isinstance(expr, relax.Expr) and _tvm.is_tensor(expr) and \
        _tvm.dtype_of(expr).startswith("float")


def _reads_float(value: Any) -> bool:
    """Whether an op reads a float tensor (an argmax or a comparison of dequantized values
    computes in float though its result is an integer or bool)."""
    return any(_float_tensor(arg) for arg in value.args)


FLOAT_IN_MODEL = "computed in float by the model"


def _default_reason(name: str, value: Any, bound: dict, users: list[str] | None) -> str:
    """Why an op no rule declined is float: the model itself computes it between float ops
    (no quantize/dequantize pair around it), or no rule covers the op."""
    for arg in value.args:
        producer = _tvm.op_name(bound.get(arg)) if isinstance(arg, relax.Var) else None
        if producer and producer not in BOUNDARY_OPS and _float_tensor(arg):
            return f"{FLOAT_IN_MODEL}: it reads the float result of {producer} (no quantize " \
                   "in between)"
    if users and QUANTIZE not in users:
        return f"{FLOAT_IN_MODEL}: its result feeds {sorted(set(users))[0]}, not a quantize"
    return f"no rule folds {name} into a canonical op"
