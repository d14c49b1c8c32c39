"""The user-level flow: load any supported model file, and parity against its source runtime.

This is the layer above the core that knows formats and rules (``canonqnn.frontends``,
``canonqnn.rewrites``); the CLI is a thin shell over it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _tvm, budget, isolated, source_runtimes
from .builder import build, inspect_kernels, load_built
from .errors import CanonqnnError, InvalidModelError, ParityError, first_line
from .io import ModelIO, checked_inputs, module_io, random_inputs  # noqa: F401  (public here too)
from .io import nonfinite_inputs
from .numerics import get as get_profile


def is_tflite(model: Any) -> bool:
    """Whether ``model`` (path or bytes) is a TFLite flatbuffer (its ``TFL3`` identifier)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        head = bytes(model[:8])
    elif isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        with open(model, "rb") as f:
            head = f.read(8)
    else:
        return False
    return head[4:8] == b"TFL3"


def is_torch_program(model: Any) -> bool:
    """Whether ``model`` is a ``torch.export.ExportedProgram`` or a path to one saved with
    ``torch.export.save`` (``.pt2``)."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model).endswith(".pt2")
    return any(c.__name__ == "ExportedProgram" and c.__module__.startswith("torch.")
               for c in type(model).__mro__)


def _optional_frontend(name: str, models: str) -> Any:
    """The frontend ``name``, which needs the extra of the same name."""
    import importlib

    try:
        return importlib.import_module(f".frontends.{name}", __package__)
    except ImportError as exc:
        raise CanonqnnError(f"{models} need the {name} extra: pip install "
                            f"'canonqnn[{name}]' ({exc})") from None


def _torch_frontend() -> Any:
    return _optional_frontend("torch", "PyTorch programs")


def _tflite_frontend() -> Any:
    return _optional_frontend("tflite", "TFLite models")


def load(model: Any, **options: Any) -> Any:
    """A fake-quant module from an ONNX or TFLite model, a PT2E-quantized PyTorch
    ExportedProgram (or its ``.pt2`` file), or a saved canonqnn module (``.json``)."""
    if isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(".json"):
        if options:
            raise CanonqnnError(f"options {sorted(options)} apply to models, not to a saved "
                                "canonical module: convert the model again with them")
        mod = load_module(model)
        budget.check_module(mod, os.fspath(model))
        return mod
    if is_torch_program(model):
        if options:
            raise CanonqnnError(f"options {sorted(options)} apply to ONNX and TFLite models, "
                                "not to PyTorch programs (their shapes are static and the "
                                "whole program is converted)")
        return _torch_frontend().load(model)
    if is_tflite(model):
        onnx_only = sorted(set(options) - {"outputs"})
        if onnx_only:
            raise CanonqnnError(f"options {onnx_only} apply to ONNX models only (TFLite "
                                "models have static shapes and constant parameters)")
        return _tflite_frontend().load(model, **options)
    from .frontends import onnx as onnx_frontend

    return onnx_frontend.load(model, **options)


def save_module(mod: Any, path: str | os.PathLike) -> None:
    """Write ``mod`` to ``path`` whole or not at all (``io.write_file``)."""
    from .io import write_file

    write_file(path, _tvm.save_json(mod))


def load_module(path: str | os.PathLike) -> Any:
    from . import ops  # noqa: F401  (canonical ops must be registered before parsing)

    from .module_check import check_module

    try:
        with open(path, encoding="utf-8") as f:
            mod = _tvm.load_json(f.read(), root_type="ir.IRModule")
    except FileNotFoundError:
        raise InvalidModelError(f"{path}: no such file") from None
    except Exception as exc:  # noqa: BLE001
        raise InvalidModelError(f"{path}: not a canonqnn module file ({exc})") from None
    check_module(mod, os.fspath(path))
    return mod


def canonical_module(model: Any, **options: Any) -> Any:
    """``model`` canonicalized: a Relax module is taken as it is, a saved module (``.json``)
    as saved, and an ONNX or TFLite model is imported and canonicalized."""
    if hasattr(model, "functions_items"):
        return model
    mod = load(model, **options)
    if isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(".json"):
        return mod
    from .rewrites import canonicalize

    mod = canonicalize(mod)[0]
    budget.check_module(mod, _source_name(model))
    return mod


def _source_name(model: Any) -> str:
    """How a refusal names ``model``: its path, or nothing for one given in memory."""
    return os.fspath(model) if isinstance(model, (str, os.PathLike)) else ""


def inspect_built(model: Any, target: Any = None, **options: Any):
    """The kernels a build of ``model`` consists of, with their input/output dtypes, and every
    non-int8 tensor passed between canonical kernels (``KernelReport``).

    ``model`` is a library written by ``canonqnn build`` (``.so``: read from the library), or
    anything ``canonical_module`` takes (fused as ``build`` would, without compiling).
    """
    if isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(".so"):
        kernels = load_built(model).kernels
        if kernels is None:
            raise CanonqnnError(f"{os.fspath(model)}: the library records no kernel report "
                                "(built by an older canonqnn); inspect the model instead")
        return kernels
    return inspect_kernels(canonical_module(model, **options), target)


# ---------------------------------------------------------------- parity
@dataclass
class OutputParity:
    name: str
    exact_fraction: float
    max_abs_diff: float  # in units of the output's quantization step (LSB)
    elements: int


@dataclass
class ParityResult:
    outputs: list[OutputParity]
    canonical_ops: dict[str, int]
    float_islands: list[dict[str, str]]
    reference: str
    target: str
    runs: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return all(o.exact_fraction == 1.0 for o in self.outputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "outputs": [o.__dict__ for o in self.outputs],
            "canonical_ops": self.canonical_ops,
            "float_islands": self.float_islands,
            "reference": self.reference,
            "target": self.target,
            "runs": self.runs,
            "exact": self.exact,
            **self.extra,
        }

    def summary(self) -> str:
        lines = [f"reference: {self.reference}", f"target: {self.target}",
                 f"runs: {self.runs}"]
        if "numerics" in self.extra:
            lines.append(f"numerics: {self.extra['numerics']} (this host's runtime: "
                         f"{self.extra['runtime_numerics']})")
        if "nonfinite_inputs" in self.extra:
            lines.append("inputs holding NaN or infinity (given, not made by canonqnn; runtimes "
                         "may quantize them differently): " + ", ".join(
                             f"{name}: {n['nan']} NaN, {n['inf']} inf"
                             for name, n in self.extra["nonfinite_inputs"].items()))
        if "numerics_differences" in self.extra:
            lines.append("  the module was converted for other numerics than the runtime's: "
                         "values may differ where")
            lines += [f"    {d}" for d in self.extra["numerics_differences"]]
        for o in self.outputs:
            lines.append(f"output {o.name}: exact {100 * o.exact_fraction:.4f}% of "
                         f"{o.elements} values, max |diff| {o.max_abs_diff:g} LSB")
        lines.append("canonical ops: " + (", ".join(f"{k} x{v}" for k, v in
                                                    sorted(self.canonical_ops.items())) or "none"))
        if self.float_islands:
            lines.append(f"float islands ({len(self.float_islands)}):")
            lines += [f"  {i['op']}: {i['reason']}" for i in self.float_islands]
        else:
            lines.append("float islands: none")
        for other in self.extra.get("also_compared", []):
            lines.append(f"also compared (not the specification): {other['reference']}")
            lines += [f"  output {o['name']}: exact {100 * o['exact_fraction']:.4f}%, max |diff| "
                      f"{o['max_abs_diff']:g} LSB" for o in other["outputs"]]
        if "first_divergence_summary" in self.extra:
            lines.append(self.extra["first_divergence_summary"])
        lines.append("PARITY: " + ("bit-exact" if self.exact else "DIFFERS"))
        return "\n".join(lines)


def ort_session(model: Any, threads: int | None = None) -> tuple[Any, str]:
    """An onnxruntime CPU session of ``model`` in this process, as parity runs it
    (``source_runtimes.ort_session``), and its description."""
    return source_runtimes.ort_session(_oracle_model(model).SerializeToString(), threads)


def _oracle_model(model: Any) -> Any:
    """A copy of ``model`` as onnxruntime gets it: IR 10 at most (the newest it runs), and with
    the data of its tensors stored in external files read into it from the model's folder
    (``_external_data``): given bytes, onnxruntime would read them from the working
    directory, where a file of the same name may hold other values."""
    import onnx

    from .frontends.onnx import read_model

    proto, folder = read_model(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    copy.ir_version = min(copy.ir_version, 10)
    _external_data(copy, folder)
    return copy


def _external_data(proto: Any, folder: str) -> None:
    """Read the data of ``proto``'s tensors stored in external files into it. Their files must
    be regular files inside ``folder`` (the model's): a relative path that stays there after
    ``..`` and symbolic links are resolved. Refusals name the tensor (``InvalidModelError``)."""
    from onnx.external_data_helper import (ExternalDataInfo, load_external_data_for_tensor,
                                           uses_external_data)

    from .frontends.onnx.importer import stored_tensors

    for tensor in stored_tensors(proto):  # (read_model refused any of a model in memory)
        if not uses_external_data(tensor):
            continue
        where = f"tensor {tensor.name!r}: its data file"
        location = ExternalDataInfo(tensor).location
        root = os.path.realpath(folder)
        resolved = os.path.realpath(os.path.join(root, location.replace("\0", "")))
        if not location or "\0" in location or os.path.isabs(location) or \
                os.path.commonpath([root, resolved]) != root:
            raise InvalidModelError(f"{where} {location!r} is not inside the model's folder "
                                    f"{folder!r}")
        if not os.path.isfile(resolved):
            raise InvalidModelError(f"{where} {location!r} is not a file in {folder!r}")
        try:
            load_external_data_for_tensor(tensor, root)
        except Exception as exc:  # noqa: BLE001  (onnx's own checks: ValidationError, ...)
            raise InvalidModelError(f"{where} {location!r} cannot be read: "
                                    f"{first_line(exc)}") from None


def _compare(name: str, ref: np.ndarray, got: np.ndarray, lsb: float | None) -> tuple[int, float]:
    if ref.shape != got.shape:
        raise ParityError(f"output {name!r}: shape {got.shape} differs from the source "
                          f"runtime's {ref.shape}")
    ref, got = ref.reshape(-1), got.reshape(-1)
    same, worst = 0, [0.0]
    # in chunks: float64 copies of whole outputs (exact for every int32 and float32 value)
    # would hold 16 bytes per element of each output at once
    for start in range(0, ref.size, _COMPARE_CHUNK):
        a, b = ref[start:start + _COMPARE_CHUNK], got[start:start + _COMPARE_CHUNK]
        equal = (a == b) | (np.isnan(a) & np.isnan(b))  # NaN where both have NaN is the same
        with np.errstate(invalid="ignore"):  # inf - inf: where equal, set to 0 below
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        diff[equal] = 0.0
        same += int(np.count_nonzero(equal))
        worst.append(float(np.nan_to_num(diff, nan=np.inf).max()))  # NaN against a number
    largest = float(np.max(worst))
    return same, largest / lsb if lsb else largest


_COMPARE_CHUNK = 1 << 20


@dataclass
class SourceRuntime:
    """A runtime the model's own numerics come from, in a child process (``isolated``): a
    crash there is a ``ParityError``. ``run(feed)`` gives the outputs in the order of the
    module's recorded outputs; ``None`` when the runtime cannot run the model (said in
    ``description``)."""

    description: str
    run: Any
    child: isolated.Child | None = None

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


def _isolated_runtime(description: str, child: isolated.Child) -> SourceRuntime:
    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return child(feed)
        except isolated.Failed as exc:
            raise ParityError(f"the source runtime ({child.name}) failed on this input: "
                              f"{exc}") from None

    return SourceRuntime(description, run, child)


def _not_compared(description: str, exc: ParityError) -> str:
    """The description of a runtime only compared beside the specification, which failed."""
    if isinstance(exc, isolated.Crashed):
        return (f"{description}: crashed on this model ({exc.how}); the crash is in that "
                "runtime, not in canonqnn")
    if isinstance(exc, isolated.Failed):  # at setup
        return f"{description}: cannot run this model: {exc}"
    return f"{description}: {exc}"


def expose_onnx_tensors(model: Any, names: list[str]) -> tuple[Any, list[str]]:
    """The model (IR 10) with the tensors ``names`` as graph outputs, and those of them it has:
    onnxruntime returns graph outputs only."""
    import onnx

    proto = _oracle_model(model)
    inferred = onnx.shape_inference.infer_shapes(proto)
    typed = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output,
                                 *inferred.graph.input)}
    outputs = {o.name for o in proto.graph.output}
    wanted = [n for n in dict.fromkeys(names) if n in typed]
    proto.graph.output.extend(typed[n] for n in wanted if n not in outputs)
    return proto, wanted


def ort_runtime(proto: Any, names: list[str], threads: int | None = None) -> SourceRuntime:
    """onnxruntime (``source_runtimes.ort_session``) on ``proto`` (IR <= 10, with ``names`` among
    its graph outputs and its external data read in: ``expose_onnx_tensors``) in a child
    process."""
    from onnx.external_data_helper import uses_external_data

    from .frontends.onnx.importer import stored_tensors

    for tensor in stored_tensors(proto):
        if uses_external_data(tensor):  # onnxruntime would look for it in the working directory
            raise ParityError(f"tensor {tensor.name!r} of the model given to onnxruntime keeps "
                              "its data in an external file: read it in first "
                              "(expose_onnx_tensors)")
    child = isolated.Child("onnxruntime", source_runtimes.onnxruntime_runner,
                           proto.SerializeToString(), names, threads)
    try:
        return _isolated_runtime(child.ready(), child)
    except ParityError:
        child.close()
        raise


def onnx_runtime(model: Any, io: ModelIO, threads: int | None = None) -> SourceRuntime:
    names = [o.name for o in io.outputs]
    model, found = expose_onnx_tensors(model, names)  # a cut module's outputs are inner tensors
    if found != names:
        raise ParityError(f"onnxruntime cannot return {sorted(set(names) - set(found))}")
    return ort_runtime(model, names, threads)


# The TFLite interpreter's op resolvers parity runs: the reference kernels are the
# specification canonqnn reproduces; the optimized ones are reported beside them.
TFLITE_RESOLVERS = (("BUILTIN_REF", "reference kernels"),
                    ("BUILTIN_WITHOUT_DEFAULT_DELEGATES", "optimized kernels"),
                    ("BUILTIN", "default: optimized kernels + XNNPACK delegate"))


def tflite_runtimes(model: Any, io: ModelIO) -> list[SourceRuntime]:
    """The TFLite interpreter with each of ``TFLITE_RESOLVERS``, each in its child process
    (started together: their imports overlap)."""
    import importlib.util

    if importlib.util.find_spec("ai_edge_litert") is None:
        raise ParityError("parity of TFLite models needs the TFLite interpreter: pip install "
                          "'canonqnn[tflite]'")
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    from .frontends.tflite.reader import detection_outputs, read_model

    m = read_model(model)
    names = [o.name for o in io.outputs]
    inner = set(names) - {m.tensors[i].name for i in m.outputs}  # a cut module's outputs
    children = [isolated.Child(f"TFLite interpreter, {what}", source_runtimes.tflite_runner,
                               bytes(model), resolver, names, bool(inner), detection_outputs(m))
                for resolver, what in TFLITE_RESOLVERS]
    return _ready(children, [f"TFLite interpreter (ai-edge-litert), {what} "
                             f"(OpResolverType.{resolver})" for resolver, what in TFLITE_RESOLVERS],
                  "the TFLite interpreter")


def _ready(children: list[isolated.Child], descriptions: list[str],
           runtime: str) -> list[SourceRuntime]:
    """The children as runtimes once set up: the first is the specification (its failure is the
    error), the others are compared beside it (a failure is said in their description). A
    child's factory may describe itself (its ``info``)."""
    runtimes = []
    for k, (description, child) in enumerate(zip(descriptions, children)):
        try:
            info = child.ready()
        except ParityError as exc:
            child.close()
            if k > 0:
                runtimes.append(SourceRuntime(_not_compared(description, exc), None))
                continue
            for other in children:
                other.close()
            if isinstance(exc, isolated.Crashed):
                raise
            raise ParityError(f"{runtime} cannot run this model: {exc}") from None
        runtimes.append(_isolated_runtime(info if isinstance(info, str) else description, child))
    return runtimes


# PyTorch programs: ExecuTorch's XNNPACK delegate is the specification; eager PyTorch (float
# between quantize and dequantize) is reported beside it, its distance bounded in docs/parity.md.
TORCH_RUNNERS = (("ExecuTorch (XNNPACK)", "executorch_runner"),
                 ("PyTorch eager", "torch_eager_runner"))


def torch_runtimes(model: Any, io: ModelIO) -> list[SourceRuntime]:
    """ExecuTorch and eager PyTorch on the program, each in its child process."""
    import importlib.util
    import io as bytes_io

    if importlib.util.find_spec("executorch") is None:
        raise ParityError("parity of PyTorch programs needs ExecuTorch: pip install "
                          "'canonqnn[torch]'")
    program = _torch_frontend().read_program(model)
    import torch

    buffer = bytes_io.BytesIO()
    torch.export.save(program, buffer)
    names = [i.name for i in io.inputs]
    children = [isolated.Child(what, getattr(source_runtimes, runner), buffer.getvalue(), names)
                for what, runner in TORCH_RUNNERS]
    return _ready(children, [what for what, _ in TORCH_RUNNERS], "ExecuTorch")


def _run_and_compare(io: ModelIO, built: Any, runtimes: list[SourceRuntime],
                     feeds: list[dict[str, np.ndarray]]) -> tuple[list, list, dict, Any]:
    """Per runtime, the values equal to the build's and the largest difference (in LSB) per
    output; the values compared per output; the first input on which the specification runtime
    (the first) differs. A runtime only compared beside it that fails stops being compared."""
    same = [{o.name: 0 for o in io.outputs} for _ in runtimes]
    worst = [{o.name: 0.0 for o in io.outputs} for _ in runtimes]
    total = {o.name: 0 for o in io.outputs}
    differing_feed = None
    for feed in feeds:
        got = built.run(feed)
        for k, runtime in enumerate(runtimes):
            if runtime.run is None:
                continue
            try:
                refs = runtime.run(feed)
            except ParityError as exc:
                if k == 0:
                    raise
                runtime.description = _not_compared(runtime.description, exc)
                runtime.run = None
                continue
            for info, ref in zip(io.outputs, refs):
                n_same, max_diff = _compare(info.name, np.asarray(ref), got[info.name], info.lsb)
                same[k][info.name] += n_same
                worst[k][info.name] = max(worst[k][info.name], max_diff)
                if k == 0:
                    total[info.name] += int(np.asarray(ref).size)
                    if n_same < np.asarray(ref).size and differing_feed is None:
                        differing_feed = feed
    return same, worst, total, differing_feed


def parity(model: Any, inputs: list[dict[str, np.ndarray]] | dict[str, np.ndarray] | None = None,
           *, runs: int = 3, seed: int = 0, target: Any = None,
           input_shapes: dict[str, Any] | None = None, numerics: Any = None,
           outputs: list[str] | None = None) -> ParityResult:
    """Run the source runtime and the canonical TVM build on the same inputs and compare.

    The source runtime is onnxruntime for ONNX models and the TFLite interpreter's reference
    kernels for TFLite models (its optimized kernels are compared too, in ``extra``).
    ``inputs``: one dict (or a list of dicts) keyed by input name; default ``runs`` seeded
    random inputs.
    ``numerics``: the profile to convert for (default: the source runtime's on this host,
    probed); the result names it and, where it is not the runtime's, how the two differ.
    ``outputs``: compare these tensors of the model (it is cut there, ``load``) instead of its
    outputs.
    """
    from .numerics import probe
    from .rewrites import canonicalize

    options = {k: v for k, v in (("input_shapes", input_shapes), ("outputs", outputs)) if v}
    mod, report = canonicalize(load(model, **options), numerics=numerics)
    estimate = budget.check_module(mod, _source_name(model))
    io = module_io(mod)
    if io is None:
        raise CanonqnnError("module has no recorded interface")
    module_profile = get_profile(report.numerics)
    if not io.outputs:
        raise CanonqnnError("the model has no outputs: parity would compare nothing")
    given = None if inputs is None else [inputs] if isinstance(inputs, dict) else list(inputs)
    if given is None and runs < 1:
        raise CanonqnnError(f"parity needs at least one run, not {runs}")
    if given is not None and not given:
        raise CanonqnnError("parity needs at least one input, not an empty list")
    budget.check_parity(io, estimate, len(given) if given is not None else runs,
                        {"tflite": 3, "torch": 2}.get(io.source, 1))
    if given is None:
        feeds = [random_inputs(io, seed + i) for i in range(runs)]
    else:
        feeds = [checked_inputs(io, feed) for feed in given]  # the runtimes see the same data
    # onnxruntime with the profile's thread count, on which its float ReduceMean order depends
    if io.source == "tflite":
        runtimes = tflite_runtimes(model, io)
    elif io.source == "torch":
        runtimes = torch_runtimes(model, io)
    else:
        runtimes = [onnx_runtime(model, io, module_profile.threads)]
    try:
        built = build(mod, target)
        same, worst, total, differing_feed = _run_and_compare(io, built, runtimes, feeds)
    finally:
        for runtime in runtimes:
            runtime.close()
    per_runtime = [[OutputParity(o.name, same[k][o.name] / max(total[o.name], 1),
                                 worst[k][o.name], total[o.name]) for o in io.outputs]
                   for k in range(len(runtimes))]
    islands = [{"op": i.op, "var": i.var, "reason": i.reason} for i in report.float_islands]
    also = [{"reference": r.description,
             "outputs": [o.__dict__ for o in outs] if r.run is not None else []}
            for r, outs in zip(runtimes[1:], per_runtime[1:])]
    extra: dict[str, Any] = {"numerics": report.numerics}
    if nonfinite := nonfinite_inputs(feeds):
        extra["nonfinite_inputs"] = nonfinite
    runtime_profile = probe.source_profile(io.source)
    extra["runtime_numerics"] = runtime_profile.name
    if module_profile.name != runtime_profile.name:
        extra["numerics_differences"] = module_profile.differences(runtime_profile) or [
            "none in the arithmetic choices the profiles name"]
    if also:
        extra["also_compared"] = also
    if differing_feed is not None:
        from .divergence import first_divergence, onnx_tensors

        found = first_divergence(mod, built, differing_feed, lambda one: build(one, target),
                                 onnx_tensors(model, module_profile.threads)
                                 if io.source == "onnx" else None)
        extra["first_divergence"] = found.to_json() if found else None
        extra["first_divergence_summary"] = found.summary() if found else (
            "first diverging layer: none found (every canonical op equals its reference and "
            "the runtime's recorded tensors; the difference is in a float island or after "
            "the last canonical op)")
    return ParityResult(per_runtime[0], dict(report.canonical_ops), islands,
                        runtimes[0].description, built.target, len(feeds), extra)


def to_json_text(result: ParityResult) -> str:
    return json.dumps(result.to_json(), indent=2)
