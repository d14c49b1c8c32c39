"""Build a canonical (or fake-quant) module and run it: legalization + ``tvm.compile``.

``build`` returns a ``Built`` that runs with inputs keyed by the model's input names and
returns outputs keyed by its output names, converting dtypes at the boundary exactly as the
module's recorded interface says. ``Built.export`` writes a shared library that
``tvm.runtime.load_module`` loads; ``load_built`` reads it back with its interface.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _tvm, budget, extras, numerics, progress
from .. import ops as _ops  # noqa: F401  (registers the canonical ops' legalizations)
from ..errors import CanonqnnError, VerificationError, first_line
from ..io import IO_FUNCTION, ModelIO, checked_inputs, interface, random_inputs, replacing
from . import executorch_float, integrity, isa, layout, pipeline, remote, runtime, schedule, targets
from .form_tuning import choose_forms
from .forms.choice import chosen
from .report import LUT_KERNEL, KernelReport, from_fused_module, kernel_of_bindings
from .tuning import apply_tuning, tune_cpu

KERNELS_FUNCTION = "canonqnn_kernels"  # a built library's kernel report (JSON string)
TARGET_FUNCTION = "canonqnn_target"  # the TVM target it was built for (JSON string)


@dataclass
class Built:
    """A compiled module with its interface."""

    module: Any  # the VM executable (after build) or the loaded runtime module
    io: ModelIO
    target: str
    kernels: KernelReport | None = None
    tuning: tuple[int, int] | None = None  # (kernels tuned by this build, found tuned) if tuned
    forms: tuple[int, int] | None = None  # (convs whose forms it measured, found measured)
    verification: Any = None  # a reference.Verification when built with verify=True
    device: Any = None  # a remote.Device the library was loaded on (load_built(device=...))

    def __post_init__(self) -> None:
        self._vm: Any = None  # made at the first run: code of another architecture never loads here
        self._foreign = [] if self.device else targets.foreign_instructions(self.target)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._foreign:
            raise CanonqnnError(f"this build for {self.target} uses instructions this host's "
                                f"CPU lacks ({', '.join(self._foreign)}): it cannot run here "
                                f"(run it on a device with --rpc, docs/devices.md)")
        budget.check_run(self.io, self.kernels)  # before inputs are converted or outputs made
        cpu = self.device.cpu() if self.device else None
        if self._vm is None:
            self._vm = runtime.virtual_machine(self.module, cpu)
        feed = checked_inputs(self.io, inputs)
        args = [runtime.to_device(feed[info.name], cpu) for info in self.io.inputs]
        result = runtime.to_numpy(runtime.call(self._vm, "main", args, cpu is not None))
        values = [result] if len(self.io.outputs) == 1 else list(result)
        return {info.name: np.asarray(v) for info, v in zip(self.io.outputs, values)}

    def export(self, path: str | os.PathLike) -> str:
        """Write a shared library (``tvm.runtime.load_module`` loads it) with an integrity
        record ``load_built`` checks (``canonqnn.build.integrity``). A path ending ``.tar`` gets
        TVM's gzipped tar of the object files instead, which ``tvm.runtime.load_module`` (or
        ``load_built``) links where it is loaded; a build for another architecture is written
        only so, as this host has no linker for it. The tar carries no record: gzip's own
        CRC-32 and length refuse a damaged one before anything is linked."""
        path = os.fspath(path)
        arch = targets.target_arch(self.target)
        fcompile = None
        if not targets.is_host_arch(self.target) and not path.endswith(".tar"):
            fcompile = remote.cross_compiler(arch)
            if fcompile is None:
                raise CanonqnnError(f"cannot write the library {path}: "
                                    f"{remote.cross_compiler_hint(arch)}; or write it as a "
                                    f".tar of object files (the {arch} machine links it when "
                                    f"it loads it)")
        try:  # written and sealed beside it, then moved onto it: never seen half-written
            with replacing(path) as temp:
                runtime.export_library(self.module, temp, fcompile)
                if not path.endswith(".tar"):
                    integrity.seal(temp)
        except CanonqnnError:
            raise
        except Exception as exc:  # noqa: BLE001  (TVM's linker step)
            raise CanonqnnError(f"cannot write the library {path}: {first_line(exc)}") from None
        return path


def fuse(mod: Any, target: Any = None, *, channels_last: bool = True,
         legalize_only: bool = False) -> Any:
    """Legalize ``mod`` (canonical ops -> integer TIR) and fuse its kernels as the build does:
    convs run channels-last where that is faster (``canonqnn.build.layout``; ``channels_last=False``
    keeps every conv NCHW, to compare), and lookup tables and adds of operands of one shape
    count as elementwise, so they fuse into the kernel that produces their input
    (``legalize_only``: stop before fusion)."""
    return pipeline.fuse_kernels(mod, targets.as_target(target), elementwise_kernel,
                             quantize_by_reciprocal=numerics.quantizes_by_reciprocal(mod),
                             before_legalize=layout.channels_last if channels_last else None,
                             float_legalize=executorch_float.legalizations(mod),
                             fuse=not legalize_only)


ADD_KERNEL = "canonqnn_add"  # the primfunc name hint of the add op's legalization


def elementwise_kernel(name: str, func: Any) -> bool:
    """Whether a kernel counts as elementwise for fusion: a lookup table (TVM calls its
    gather opaque), or an add whose operands and result have one shape (TVM calls it a
    broadcast, as it reads a batch of one at index 0, and a conv fuses only an elementwise
    consumer: a residual add would be a kernel of its own, one more pass over the tensor)."""
    if name.startswith(LUT_KERNEL):
        return True
    shapes = {tuple(int(d) for d in param.shape) for param in func.params}
    return name.startswith(ADD_KERNEL) and len(shapes) == 1


def inspect_kernels(mod: Any, target: Any = None) -> KernelReport:
    """The kernels ``build`` would compile ``mod`` into, without compiling them."""
    return from_fused_module(fuse(mod, target))


def kernel_of_vars(mod: Any, target: Any = None) -> dict[str, str]:
    """For each variable bound in ``mod``'s ``main`` that a kernel of its build computes (by
    name), that kernel's name as ``inspect_kernels`` gives it, without compiling."""
    target = targets.as_target(target)
    legalized = fuse(mod, target, legalize_only=True)
    kernels = kernel_of_bindings(legalized, pipeline.fuse_ops(legalized, target, fuse_tir=False))
    return {_tvm.var_name(var): kernel for var, kernel in kernels.items()}


def build(mod: Any, target: Any = None, *, tune: int = 0,
          tuning_dir: str | os.PathLike | None = None, verify: bool = False,
          device: remote.Device | None = None) -> Built:
    """Legalize ``mod`` (canonical ops -> integer TIR), fuse, schedule and compile it for
    ``target``.

    ``target`` defaults to the host CPU (``llvm`` with ``mcpu`` from LLVM's own detection).
    Kernels get canonqnn's CPU schedule (``canonqnn.build.schedule``: vectorized, multi-threaded).
    With ``tuning_dir``, kernels the MetaSchedule database there has records for use their tuned
    schedule instead, and ``tune`` > 0 first tunes the kernels it lacks with that many trials in
    total (the ``tune`` extra). Only kernels with an integer reduction (conv, matmul, pooling)
    are tuned: elsewhere the CPU schedule is as good, and a tuned schedule of a float reduction
    may reassociate the sum, where results must stay bit-exact.

    ``verify`` checks the build against the numpy reference interpreter of ``mod``
    (``canonqnn.ops.reference.verify``) and raises ``VerificationError`` naming every canonical op
    whose kernel computes otherwise.

    ``device`` (``remote.connect``): the build is run there, not here: the check of ``verify``
    (the build and each op alone), else one run on random inputs, which shows that the device
    loads and runs it. The ``Built`` returned is this host's (to export).

    ``mod``'s tensors and a run of it must fit the memory budget (``canonqnn.budget``: set it
    with ``budget.limit``), else ``ResourceError`` names the tensor before anything is built.
    """
    budget.check_module(mod)
    if device is not None and tune:
        device.release()  # the tuning's runner measures in sessions of its own
    with progress.step("building with tvm.compile"):
        built = _build(mod, target, tune, tuning_dir, device)

    def runnable(one: Built) -> Built:
        return upload(one, device) if device is not None else one

    if verify:
        from ..ops import reference

        with progress.step("checking the build against the numpy reference"):
            built.verification = reference.verify(
                mod, runnable(built),
                build_one=lambda one: runnable(_build(one, target, 0, None)))
        if not built.verification.ok:
            raise VerificationError(f"the build of {built.target} differs from the numpy "
                                    f"reference:\n{built.verification.summary()}")
    elif device is not None:
        runnable(built).run(random_inputs(built.io, 0))
    return built


def _build(mod: Any, target: Any, tune: int, tuning_dir: str | os.PathLike | None,
           device: remote.Device | None = None) -> Built:
    io = interface(mod)
    tgt = targets.as_target(target)
    tuning = measured = None
    choices: dict[str, str] = {}
    if tune and tuning_dir is None:
        raise CanonqnnError("tuning needs a tuning_dir to keep its database in")
    if tuning_dir is not None:
        tuning_dir = os.fspath(tuning_dir)
        if tune:
            extras.require("tune")  # MetaSchedule's cost model and workers
        elif not os.path.isdir(tuning_dir):
            raise CanonqnnError(f"{tuning_dir}: no tuning database (tune=TRIALS makes one)")
        # (conv forms are timed on this machine only: not on a device yet)
        choices, measured_now, recorded = choose_forms(mod, tgt, tuning_dir,
                                                       bool(tune) and device is None, fuse)
        measured = (measured_now, recorded)
    with chosen(choices):
        fused = fuse(mod, tgt)
    kernels = from_fused_module(fused)
    if tuning_dir is not None:
        tuning = tune_cpu(fused, tgt, tuning_dir, tune, _tunable,
                          device.address if device is not None else None)
        fused = apply_tuning(fused, tgt, tuning_dir)
    fused = schedule.schedule_cpu(fused, schedule.plan_block, targets.cpu_cores(tgt), tgt)
    for name, text in ((IO_FUNCTION, json.dumps(io.to_json())),
                       (KERNELS_FUNCTION, json.dumps(kernels.to_json())),
                       (TARGET_FUNCTION, str(tgt))):
        fused = _tvm.with_function(fused, name, _tvm.string_function(text))
    executable = pipeline.compile_fused(fused, tgt)
    return Built(executable, io, str(tgt), kernels, tuning, measured)


def _tunable(func: Any) -> bool:
    """Integer reductions, except those on the CPU's dot-product instructions: their
    tensorized schedule (``dot_kernels``) is theirs, MetaSchedule has no rule for its
    intrinsics."""
    dtypes = schedule.reduction_dtypes(func)
    packed = any(key in annotations for annotations in schedule.root_block_annotations(func)
                 for key in isa.BLOCK_PLANS)
    return bool(dtypes) and not packed and not any(d.startswith(("float", "bfloat"))
                                                   for d in dtypes)


def upload(built: Built, device: remote.Device) -> Built:
    """``built`` loaded on ``device`` (linked here, uploaded, loaded there), to run there."""
    with tempfile.TemporaryDirectory(prefix="canonqnn-") as folder:
        return load_built(built.export(os.path.join(folder, "model.so")), device)


def load_built(path: str | os.PathLike, device: remote.Device | None = None) -> Built:
    """Load a library written by ``Built.export`` (or ``canonqnn build``); one without its
    integrity record, truncated or modified since is refused before its code is loaded. A
    ``.tar`` (object files) is linked where it is loaded. With ``device`` (``remote.connect``)
    it is uploaded and loaded there, and runs there."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CanonqnnError(f"{path}: no such file")
    if not path.endswith(".tar"):
        integrity.check(path)
    if device is not None:
        module = remote.load(path, device)
    else:
        try:
            module = runtime.load_library(path)
        except Exception as exc:  # noqa: BLE001  (unpacking or linking a .tar: another arch's)
            lines = dict.fromkeys(line.strip() for line in str(exc).splitlines() if line.strip())
            detail = "; ".join(lines)
            raise CanonqnnError(f"{path}: cannot load it here: {detail[:400]}") from None
    vm = runtime.virtual_machine(module, device.cpu() if device else None)
    try:
        io = ModelIO.from_json(str(vm[IO_FUNCTION]()))
        kernels = KernelReport.from_json(str(vm[KERNELS_FUNCTION]()))
        target = str(vm[TARGET_FUNCTION]())  # a library for another CPU: run refuses it
    except Exception as exc:  # noqa: BLE001  (a library not built by canonqnn)
        raise CanonqnnError(f"{path}: not a canonqnn library ({exc})") from None
    return Built(module, io, target, kernels, device=device)
