"""MetaSchedule tuning of a fused module's kernels, recorded in a JSON database."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import tvm
from tvm import relax

from .. import progress
from . import remote
from .targets import cpu_cores, target_arch


def _tuning_target(target: Any) -> Any:
    """``target`` with ``num-cores`` set, which MetaSchedule requires of a CPU target."""
    config = dict(target.export())
    config["num-cores"] = cpu_cores(target)
    return tvm.target.Target(config)


def _tuning_database(work_dir: str) -> Any:
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(work_dir=work_dir)


def tune_cpu(mod: Any, target: Any, work_dir: str, trials: int,
             tunable: Callable[[Any], bool], device: str | None = None) -> tuple[int, int]:
    """MetaSchedule-tune the kernels of a fused module for which ``tunable(prim_func)`` holds,
    recording into the JSON database in ``work_dir``. Kernels the database already has a
    record for are not tuned again. The trials are spread over the kernels so that each gets at
    least one round when ``trials`` >= 2 per kernel (a kernel left without a record is tuned by
    the next call). ``device``: the ``--rpc`` address of a device to measure the candidates
    on (``remote.tuning_runner``), else this machine. Returns ``(kernels tuned now, kernels
    found tuned)``."""
    from tvm.s_tir import meta_schedule as ms

    os.makedirs(work_dir, exist_ok=True)
    target = _tuning_target(target)
    tasks = [t for t in ms.relax_integration.extract_tasks(mod, target)
             if tunable(t.dispatched[0]["main"])]
    database = _tuning_database(work_dir)
    missing = [t for t in tasks if database.query_tuning_record(
        t.dispatched[0], target, t.task_name) is None]
    if missing and trials > 0:
        runner, export = "local", None
        if device is not None:
            arch = target_arch(target)
            runner = remote.tuning_runner(device, arch)
            export = functools.partial(remote.export_candidate, arch)
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            missing, work_dir=work_dir, seed=0)
        # MetaSchedule logs to stdout, where a command's output goes: its logs go to stderr
        with contextlib.redirect_stdout(sys.stderr), \
                progress.step(f"tuning {len(missing)} kernels with MetaSchedule ({trials} "
                              "trials)"):
            ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir=work_dir,
                          max_trials_global=trials,
                          num_trials_per_iter=max(2, min(64, trials // len(missing))),
                          builder=ms.builder.LocalBuilder(f_build=_build_candidate,
                                                          f_export=export),
                          runner=runner, database=database, cost_model="xgb")
    return (len(missing) if trials > 0 else 0), len(tasks) - len(missing)


def _build_candidate(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default candidate build without its import of every target's tensor
    intrinsics (about 25 s per builder process, and the builder starts new processes for each
    batch); canonqnn's kernels use none."""
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def apply_tuning(mod: Any, target: Any, work_dir: str) -> Any:
    """``mod`` with the kernels the database in ``work_dir`` has records for replaced by their
    best tuned schedules (marked ``tirx.is_scheduled``)."""
    with _tuning_target(target), _tuning_database(work_dir), \
            tvm.transform.PassContext(opt_level=3):
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
