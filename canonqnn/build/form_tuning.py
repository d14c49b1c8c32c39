"""The conv forms measured on this machine (``build --tune``), recorded in the tuning directory
(``FORMS_FILE``) and applied by every later build that is given it (``forms.choice``).

Each distinct conv of a module (``choice.form_key``: its shapes, loop attributes and ISA) is
built alone once per form it can take (``forms.conv.layouts``), each form's kernels compiled
and timed on this CPU with the build's thread count, the forms taking turns over
``ROUNDS`` rounds; the fastest (its best time over the rounds) is recorded with every
form's time. A conv with one form is recorded without timing. Only a build whose code runs
on this host's CPU measures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _tvm, progress
from ..errors import CanonqnnError
from ..io import replacing
from ..ops import _registry, conv, elementwise
from . import pipeline, schedule, targets
from .forms import choice
from .forms import conv as conv_forms

FORMS_FILE = "forms.json"
NO_FORM = "none"  # the record of a conv that takes none of the packed forms
ROUNDS = 3          # the forms take turns: a burst of the machine's other work hits them all
CALLS = 5           # calls of a kernel averaged for one time
REPEATS = 4         # times of a kernel a round (its best counted)


def choose_forms(mod: Any, target: Any, work_dir: str, measure: bool,
                 fuse: Callable[..., Any]) -> tuple[dict[str, str], int, int]:
    """``(choices for forms.choice.chosen, convs measured now, convs found recorded)`` for the
    convs of ``mod`` on ``target``: those recorded in ``work_dir``, and with ``measure`` the
    others measured now (``fuse(module, target, channels_last=False)``: the build's fusion,
    each conv NCHW) and recorded. A build whose code may use instructions this host's CPU
    lacks (another architecture, or a newer CPU's extensions) measures nothing."""
    path = os.path.join(work_dir, FORMS_FILE)
    records = _load(path)
    tgt = targets.as_target(target)
    measure = measure and not targets.foreign_instructions(tgt)  # (else: illegal instructions)
    with tgt:
        convs = _convs(mod)
        missing = [key for key in convs if key not in records]
        if measure and missing:
            with progress.step("timing the conv forms on this machine", len(missing)) as done:
                for key in missing:
                    records[key] = _measure(key, convs[key], tgt, fuse)
                    done()
            os.makedirs(work_dir, exist_ok=True)
            with replacing(path) as tmp, open(tmp, "w") as f:
                json.dump(records, f, indent=1, sort_keys=True)
    choices = {key: str(records[key]["form"]) for key in convs if key in records}
    return choices, len(missing) if measure else 0, len(convs) - len(missing)


def _load(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            records = json.load(f)
    except (OSError, ValueError) as exc:
        raise CanonqnnError(f"{path}: not a record of measured forms ({exc}); delete it to "
                            f"measure again") from None
    known = {*conv_forms.LAYOUTS, conv_forms.UNFOLD, NO_FORM}
    if not isinstance(records, dict) or not all(
            isinstance(r, dict) and r.get("form") in known for r in records.values()):
        raise CanonqnnError(f"{path}: not a record of measured forms; delete it to measure "
                            f"again")
    return records


def _convs(mod: Any) -> dict[str, dict[tuple[str, ...], tuple[list[Any], int]]]:
    """For each conv key of ``mod`` (``choice.form_key``), its instances by context: the
    bindings timed for one (the conv, and the residual add after it where the build fuses
    that into the conv's kernel: its only reader, of operands of one shape) and how many
    there are."""
    found: dict[str, dict[tuple[str, ...], tuple[list[Any], int]]] = {}
    for func in _tvm.relax_functions(mod).values():
        bindings, users = _tvm.call_bindings(func)
        calls = dict(bindings)
        for var, call in bindings:
            if _registry.lookup(call) is not conv.CONV2D:
                continue
            group = [(var, call)]
            readers = users.get(var, [])
            if len(readers) == 1 and readers[0] in calls:
                reader = calls[readers[0]]
                if (_registry.lookup(reader) is elementwise.ADD and len({
                        tuple(_tvm.shape_of(a)) for a in (*reader.args, var)}) == 1):
                    group.append((readers[0], reader))
            contexts = found.setdefault(choice.form_key(call), {})
            context = tuple(_tvm.op_name(c) or "" for _, c in group)
            first, count = contexts.get(context, (group, 0))
            contexts[context] = (first, count + 1)
    return found


def _measure(key: str, contexts: dict[tuple[str, ...], tuple[list[Any], int]], target: Any,
             fuse: Callable[..., Any]) -> dict[str, Any]:
    """The record of one conv key: every form it can take timed in each of its contexts,
    weighted by their counts, and the fastest in total."""
    instances = list(contexts.values())
    forms = conv_forms.layouts(instances[0][0][0][1])
    if len(forms) < 2:
        return {"form": forms[0] if forms else NO_FORM, "us": {}}
    runs: dict[str, list[tuple[Callable[[], float], int]]] = {}
    for form in forms:
        for group, count in instances:
            with choice.chosen({key: form}):
                fused = fuse(_tvm.calls_module(group), target, channels_last=False)
            runs.setdefault(form, []).append((_kernel_timer(fused, target), count))
    best: dict[str, float] = {}
    for _ in range(ROUNDS):
        for form, timers in runs.items():
            total = sum(count * run() for run, count in timers)
            best[form] = min(best.get(form, float("inf")), total)
    fastest = min(best, key=best.__getitem__)
    return {"form": fastest, "us": {form: round(t * 1e6, 1) for form, t in best.items()}}


def _kernel_timer(fused: Any, target: Any) -> Callable[[], float]:
    """A function timing one round of the scheduled kernels of ``fused`` (seconds: the sum
    over its kernels of each one's best of ``REPEATS`` times of ``CALLS`` calls, on arguments
    of its shapes)."""
    import tvm

    scheduled = schedule.schedule_cpu(fused, schedule.plan_block, targets.cpu_cores(target),
                                      target)
    rng = np.random.default_rng(0)
    kernels = []
    for _, func in _tvm.module_functions(scheduled).items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        args = [tvm.runtime.tensor(rng.integers(-5, 5, [int(d) for d in param.shape]).astype(
            str(param.dtype))) for param in func.params]
        timer = pipeline.compile_kernel(func, target).time_evaluator(
            "main", tvm.cpu(), number=CALLS, repeat=REPEATS)
        kernels.append((timer, args))
    return lambda: sum(min(timer(*args).results) for timer, args in kernels)
