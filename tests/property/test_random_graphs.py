"""Random chains and DAGs of quantized ops, written as QDQ ONNX models (``_graphs.graphs``):
canonicalized they leave no float island, and built they match onnxruntime (the settings
``canonqnn.parity`` uses) bit for bit, except the outputs of ops with a documented bound
(``_menu.TOLERANCES``): their differences must be within that bound, and each one where the
exact value lies within float32 error of a rounding boundary (``_boundaries``).

The default run draws a few graphs (derandomized: the same ones on every run) and shrinks a
failing one. The large run, ``pytest -m slow tests/property`` (examples:
CANONQNN_RANDOM_GRAPHS_EXAMPLES, default 500), is a sweep: it keeps going after a failure and
reports every failing graph at the end. A failure prints the graph (ops with their parameters)
and saves the model for ``canonqnn parity MODEL``. See docs/random-graphs.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings

import canonqnn
from _boundaries import activation_values, outliers
from _draft import GraphSpec
from _graphs import DTYPES, KINDS, active_menu, graphs, menu_status, support
from _menu import MENU
from canonqnn.frontends.onnx.oracle import ort_session

DEFAULT_EXAMPLES = 16
SLOW_EXAMPLES = int(os.environ.get("CANONQNN_RANDOM_GRAPHS_EXAMPLES", "500"))
FAILURES_DIR = os.path.join(tempfile.gettempdir(), "canonqnn-random-graphs")


@dataclass
class Stats:
    """What a run covered, and the mismatches of ops with a tolerance (per op kind)."""

    graphs: int = 0
    ops: Counter = field(default_factory=Counter)
    dtypes: Counter = field(default_factory=Counter)
    canonical_ops: Counter = field(default_factory=Counter)
    tolerated: dict = field(default_factory=dict)  # kind -> [mismatches, elements, max_lsb]
    failures: list = field(default_factory=list)  # messages (sweep mode)
    seconds: float = 0.0

    def tolerate(self, kind: str, mismatches: int, elements: int, worst: int) -> None:
        tally = self.tolerated.setdefault(kind, [0, 0, 0])
        tally[0] += mismatches
        tally[1] += elements
        tally[2] = max(tally[2], worst)

    def failure_kinds(self) -> Counter:
        """Failures grouped by their first line with numbers and names blanked out."""
        return Counter(re.sub(r"\b(t|v|lv)?\d+\b", "#", f.splitlines()[0])[:160]
                       for f in self.failures)

    def to_json(self) -> dict:
        return {"graphs": self.graphs, "dtypes": dict(self.dtypes), "ops": dict(self.ops),
                "canonical_ops": dict(self.canonical_ops), "tolerated": self.tolerated,
                "failures": len(self.failures), "failure_kinds": dict(self.failure_kinds()),
                "seconds": round(self.seconds, 1)}


def fail(spec: GraphSpec, message: str) -> None:
    os.makedirs(FAILURES_DIR, exist_ok=True)
    data = spec.model.SerializeToString()
    path = os.path.join(FAILURES_DIR, hashlib.sha1(data).hexdigest()[:12] + ".onnx")
    with open(path, "wb") as f:
        f.write(data)
    raise AssertionError(f"{message}\n\n{spec.describe()}\n\nmodel: {path}\n"
                         f"reproduce: canonqnn parity {path}")


def compare(spec: GraphSpec, name: str, ref: np.ndarray, got: np.ndarray, stats: Stats,
            feed: dict[str, np.ndarray]) -> None:
    if ref.shape != got.shape or ref.dtype != got.dtype:
        fail(spec, f"output {name}: canonqnn gives {got.dtype}{list(got.shape)}, onnxruntime "
                   f"{ref.dtype}{list(ref.shape)}")
    diff = np.abs(ref.astype(np.int64) - got.astype(np.int64))
    bad = int(np.count_nonzero(diff))
    tolerance = spec.tolerance(name)
    if tolerance is not None and int(diff.max(initial=0)) <= tolerance.max_lsb:
        kind = next(op.kind for op in spec.ops if name in op.outputs)
        if bad:
            exact = tolerance.exact(spec.model, name, activation_values(spec.model, feed))
            wrong = outliers(exact, ref.astype(np.int64), got.astype(np.int64))
            if wrong:
                fail(spec, f"output {name}: {len(wrong)} of {bad} differing values are not at a "
                           f"rounding boundary ({tolerance.source}); " + "; ".join(wrong[:6]))
        stats.tolerate(kind, bad, diff.size, int(diff.max(initial=0)))
        return
    if bad:
        where = [tuple(int(i) for i in ix) for ix in np.argwhere(diff)[:6]]
        samples = ", ".join(f"{ix}: ort {ref[ix]} canonqnn {got[ix]}" for ix in where)
        bound = f" (bound {tolerance.max_lsb} LSB)" if tolerance else ""
        fail(spec, f"output {name}: {bad} of {diff.size} values differ from onnxruntime, max "
                   f"{int(diff.max())} LSB{bound}; {samples}")


def check_graph(spec: GraphSpec, stats: Stats) -> None:
    """Canonicalize (no float island), build, and compare with onnxruntime on two inputs."""
    names = [t.name for t in spec.outputs] + list(spec.extra_outputs)
    feeds = spec.feeds()
    try:
        session, _ = ort_session(spec.model)
        refs = [session.run(names, feed) for feed in feeds]
    except Exception as exc:  # noqa: BLE001  (onnxruntime raises its own types)
        fail(spec, f"onnxruntime rejects the generated model (a generator bug): {exc}")
    try:
        mod, report = canonqnn.canonicalize(canonqnn.load(spec.model))
    except canonqnn.CanonqnnError as exc:
        fail(spec, f"canonqnn cannot import or canonicalize it: {exc}")
    if report.float_islands:
        fail(spec, "float islands left (every generated op must become canonical):\n"
                   + report.summary())
    try:
        built = canonqnn.build(mod)
        outputs = [built.run(feed) for feed in feeds]
    except Exception as exc:  # noqa: BLE001  (TVM raises its own types)
        fail(spec, f"canonqnn cannot build or run it: {type(exc).__name__}: {exc}")
    for feed, got, ref_values in zip(feeds, outputs, refs):
        for name, ref in zip(names, ref_values):
            compare(spec, name, np.asarray(ref), np.asarray(got[name]), stats, feed)
    stats.graphs += 1
    stats.ops.update(spec.kinds)
    stats.dtypes[spec.dtype] += 1
    stats.canonical_ops.update(report.canonical_ops)


def run(examples: int, stats: Stats, *, sweep: bool = False) -> Stats:
    """``examples`` random graphs; ``sweep`` records failures and goes on (no shrinking)."""
    menus = {dtype: active_menu(dtype) for dtype in DTYPES}
    phases = [Phase.generate] if sweep else [Phase.generate, Phase.shrink]

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              phases=phases, suppress_health_check=list(HealthCheck))
    @given(spec=graphs(menus))
    def check(spec: GraphSpec) -> None:
        for kind in spec.kinds:
            event(f"op {kind}")
        try:
            check_graph(spec, stats)
        except AssertionError as exc:
            if not sweep:
                raise
            stats.failures.append(str(exc))

    started = time.perf_counter()
    check()
    stats.seconds = time.perf_counter() - started
    return stats


def test_random_qdq_graphs_are_canonical_and_match_onnxruntime():
    stats = run(DEFAULT_EXAMPLES, Stats())
    assert stats.graphs >= DEFAULT_EXAMPLES


@pytest.mark.slow
def test_many_random_qdq_graphs_are_canonical_and_match_onnxruntime(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("large run: pytest -m slow tests/property")
    stats = run(SLOW_EXAMPLES, Stats(), sweep=True)
    summary = {"examples": SLOW_EXAMPLES, "menu": menu_status(), **stats.to_json()}
    print(json.dumps(summary, indent=1))
    if os.environ.get("CANONQNN_RANDOM_GRAPHS_REPORT"):
        with open(os.environ["CANONQNN_RANDOM_GRAPHS_REPORT"], "w") as f:
            json.dump({**summary, "failure_messages": stats.failures}, f, indent=1)
    assert not stats.failures, (f"{len(stats.failures)} of {SLOW_EXAMPLES} graphs fail:\n"
                                + "\n".join(f"{n} x {k}" for k, n in
                                            stats.failure_kinds().most_common())
                                + "\n\nfirst:\n" + stats.failures[0])


def test_every_menu_entry_is_supported_today_or_pending_with_a_reason():
    """The ops supported today pass their one-op probe in both dtypes; a pending entry is
    active exactly when its probe canonicalizes (so new ops join the draw as they land)."""
    for kind in MENU:
        for dtype in DTYPES:
            reason = support(kind.name, dtype)
            if not kind.pending:
                assert reason is None, f"{kind.name} ({dtype}): {reason}"
            assert (kind in active_menu(dtype)) == (reason is None)
    assert set(KINDS) >= {"Conv", "MatMul", "Gemm", "Add", "Mul", "Concat", "ReduceMean"}
