"""The targets canonqnn builds for: LLVM CPUs, the host's by default, others cross-compiled;
and what code for one needs of the CPU it runs on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import tvm

from .._tvm import host_cores
from .runtime import quiet_native_log


def host_target() -> Any:
    """The host CPU: ``mcpu`` from LLVM's own detection (``"native"`` is ignored by 0.27)."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": str(cpu)})


def current_llvm_target() -> Any:
    """The LLVM target a pass is running under (``with target``), or None outside one."""
    target = tvm.target.Target.current(allow_none=True)
    return target if target is not None and target.kind.name == "llvm" else None


def current_target_features() -> Callable[[str], bool] | None:
    """``has_feature(name)`` of the target a pass is running under (``with target``), or None
    outside one (a legalization then writes the target-independent form)."""
    target = current_llvm_target()
    return None if target is None else target_features(target)


def target_features(target: Any) -> Callable[[str], bool]:
    """``has_feature(name)`` of an LLVM target (LLVM's feature names: ``avx2``, ...)."""
    has = tvm.get_global_func("target.target_has_feature")
    return lambda name: bool(has(name, target))


def as_target(target: Any) -> Any:
    """A TVM target canonqnn can build for: the host's CPU by default; a string is TVM's JSON
    form or the ``kind -key=value`` form older TVMs took (0.27 refuses it). Anything TVM cannot
    make a target of, another kind than ``llvm`` or an ``mcpu`` LLVM does not know for the
    target's triple raises ``CanonqnnError``. Another CPU, or another architecture
    (``mtriple``: cross-compiled), builds; ``foreign_instructions`` says whether the code runs
    here."""
    from ..errors import CanonqnnError, first_line

    if target is None:
        return host_target()
    shown = target if isinstance(target, str) else str(target)
    if not isinstance(target, tvm.target.Target):
        try:
            with quiet_native_log():  # (TVM logs what it guesses, e.g. a CUDA version)
                target = tvm.target.Target(_target_config(target))
        except Exception as exc:  # noqa: BLE001  (TVM raises ValueError or its own errors)
            raise CanonqnnError(f"target {shown!r}: TVM cannot make a target of it: "
                                f"{first_line(exc)}") from None
    if target.kind.name != "llvm":
        raise CanonqnnError(f"target {shown!r}: canonqnn builds for the host CPU with TVM's "
                            f"llvm target, not {target.kind.name}")
    codegen = tvm.target.codegen
    cpu = dict(target.attrs).get("mcpu")
    with quiet_native_log():  # (LLVM logs an unknown CPU before it is refused here)
        archlist = codegen.llvm_get_cpu_archlist(target) if cpu is not None else []
    if cpu is not None and str(cpu) not in archlist:
        known = (f"this host's: {codegen.llvm_get_system_cpu()}" if is_host_arch(target)
                 else f"for {target_arch(target)}")
        raise CanonqnnError(f"target {shown!r}: LLVM knows no CPU {str(cpu)!r} ({known})")
    return target


def target_arch(target: Any) -> str:
    """The CPU architecture of an LLVM target (``x86_64``, ``aarch64``): its triple's first
    part, the host's when it names no ``mtriple``."""
    target = tvm.target.Target(target) if isinstance(target, str) else target
    host = str(tvm.target.codegen.llvm_get_system_triple())
    return str(dict(target.attrs).get("mtriple", host)).split("-")[0]


def is_host_arch(target: Any) -> bool:
    """Whether code for ``target`` is of this host's architecture (else: cross-compiled)."""
    return target_arch(target) == target_arch(host_target())


def foreign_instructions(target: Any) -> list[str]:
    """The instruction sets code for ``target`` may use that this host's CPU lacks (code built
    for another CPU stops on an illegal instruction here): the target's architecture itself
    where it is not the host's."""
    codegen = tvm.target.codegen
    target = tvm.target.Target(target) if isinstance(target, str) else target
    if not is_host_arch(target):
        return [target_arch(target)]
    return sorted(f for f in set(codegen.llvm_get_cpu_features(target))
                  - set(codegen.llvm_get_cpu_features(host_target()))
                  if f.startswith(INSTRUCTION_SET_FEATURES))


# LLVM x86 feature names of instruction sets (its other features are tuning hints such as
# ``slow-3ops-lea``, which code runs without).
INSTRUCTION_SET_FEATURES = ("avx", "sse", "ssse", "fma", "f16c", "bmi", "amx", "gfni",
                            "vaes", "vpclmulqdq", "sha", "adx", "aes", "popcnt", "lzcnt",
                            "movbe", "xop", "tbm", "sm3", "sm4")


def _target_config(target: Any) -> Any:
    """``"llvm -mcpu=znver3 -mattr=+avx2,+fma"`` as the dict TVM 0.27 takes; other values
    (JSON text, dicts) as they are."""
    if not isinstance(target, str) or target.strip().startswith("{") or " -" not in target:
        return target
    kind, *options = target.split()
    config: dict[str, Any] = {"kind": kind}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not option.startswith("-") or not key or not sep:
            raise ValueError(f"{option!r} is not -key=value")
        config[key] = value.split(",") if key in ("mattr", "keys", "libs") else \
            int(value) if value.lstrip("-").isdigit() else value
    return config


def cpu_cores(target: Any) -> int:
    """The cores a CPU target's code runs on: its ``num-cores``, else this machine's."""
    cores = target.attrs.get("num-cores") if target.attrs else None
    return int(cores) if cores else host_cores()


def target_config(target: Any) -> dict[str, Any]:
    """A target (a ``Target`` or its JSON text) as a plain dict: TVM's JSON form of it."""
    target = tvm.target.Target(target) if isinstance(target, str) else target
    return json.loads(str(target))


def described(target: Any) -> str:
    """A target as people write one: ``llvm -mcpu=znver3``, ``llvm -mtriple=aarch64-linux-gnu
    -mcpu=neoverse-n1 -mattr=+neon,+dotprod`` (its kind and the attributes it was given; TVM's
    derived ``feature.*`` left out), which ``as_target`` reads back."""
    config = target_config(target)
    parts = [str(config.get("kind", "?"))]
    for key, value in config.items():
        if key in ("kind", "tag", "keys") or key.startswith("feature.") or \
                value in ("", [], None):
            continue
        shown = ",".join(map(str, value)) if isinstance(value, list) else value
        parts.append(f"-{key}={shown}")
    return " ".join(parts)
