"""Parity: a model's source runtime and the canonical TVM build on the same inputs, compared.

The driver converts the model (``canonqnn.api.load``, ``canonqnn.rewrites.canonicalize``),
builds it, and runs the source runtimes its format's oracle makes (``canonqnn.formats``,
``oracle.source``) beside the build; where the specification runtime differs, ``divergence``
finds the first diverging layer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import budget, formats, progress
from ..api import _is_module_file, _source_name, load
from ..build import build
from ..build.builder import upload
from ..build.targets import described, target_config
from ..errors import CanonqnnError, ParityError
from ..io import ModelIO, checked_inputs, module_io, nonfinite_inputs, random_inputs
from ..numerics import get as get_profile
from ..numerics import source_profile
from .source import SourceRuntime, not_compared


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
    # the canonical module compared and its conversion report (not in ``to_json``)
    module: Any = field(default=None, repr=False)
    report: Any = field(default=None, repr=False)

    @property
    def exact(self) -> bool:
        return all(o.exact_fraction == 1.0 for o in self.outputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "outputs": [o.__dict__ for o in self.outputs],
            "canonical_ops": self.canonical_ops,
            "float_islands": self.float_islands,
            "reference": self.reference,
            "target": target_config(self.target),
            "runs": self.runs,
            "exact": self.exact,
            **self.extra,
        }

    def summary(self) -> str:
        lines = [f"reference: {self.reference}", f"target: {described(self.target)}",
                 f"runs: {self.runs}"]
        if "numerics" in self.extra:
            where = "the device's" if "device" in self.extra else "this host's"
            lines.append(f"numerics: {self.extra['numerics']} ({where} runtime: "
                         f"{self.extra['runtime_numerics']})")
        lines += [f"note: {note}" for note in self.extra.get("notes", [])]
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


def _run_and_compare(io: ModelIO, built: Any, runtimes: list[SourceRuntime],
                     feeds: list[dict[str, np.ndarray]]) -> tuple[list, list, dict, Any]:
    """Per runtime, the values equal to the build's and the largest difference (in LSB) per
    output; the values compared per output; the first input on which the specification runtime
    (the first) differs. A runtime only compared beside it that fails stops being compared."""
    same = [{o.name: 0 for o in io.outputs} for _ in runtimes]
    worst = [{o.name: 0.0 for o in io.outputs} for _ in runtimes]
    total = {o.name: 0 for o in io.outputs}
    differing_feed = None
    runtime_names = "the source runtime" + ("s" if len(runtimes) > 1 else "")
    with progress.step(f"running the build and {runtime_names} on {len(feeds)} inputs",
                       len(feeds)) as done:
        for feed in feeds:
            _compare_one(io, built.run(feed), feed, runtimes, same, worst, total)
            if differing_feed is None and any(same[0][name] < count
                                              for name, count in total.items()):
                differing_feed = feed
            done()
    return same, worst, total, differing_feed


def _compare_one(io: ModelIO, got: dict[str, np.ndarray], feed: dict[str, np.ndarray],
                 runtimes: list[SourceRuntime], same: list[dict], worst: list[dict],
                 total: dict) -> None:
    """Compare the build's outputs ``got`` on ``feed`` with every runtime's, into the tallies."""
    for k, runtime in enumerate(runtimes):
        if runtime.run is None:
            continue
        try:
            refs = runtime.run(feed)
        except ParityError as exc:
            if k == 0:
                raise
            runtime.description = not_compared(runtime.description, exc)
            runtime.run = None
            continue
        for info, ref in zip(io.outputs, refs):
            n_same, max_diff = _compare(info.name, np.asarray(ref), got[info.name], info.lsb)
            same[k][info.name] += n_same
            worst[k][info.name] = max(worst[k][info.name], max_diff)
            if k == 0:
                total[info.name] += int(np.asarray(ref).size)


def device_numerics(model: Any, device: Any) -> str | None:
    """The numerics profile of ``model``'s source runtime on ``device`` (its format's oracle
    asks the device), or None where it cannot: the format's oracle does not run on devices, or
    the device's server does not say what it is (a plain TVM server)."""
    probe = getattr(formats.of(model).implementation(), "device_profile", None)
    if probe is None or device.machine is None:
        return None
    return probe(device).name


def _device_oracle(model: Any, fq: Any, device: Any) -> formats.Format:
    """The format of ``model`` (its FQ module ``fq``) where its oracle can run on a device."""
    io = module_io(fq)
    if io is None:
        raise CanonqnnError("module has no recorded interface")
    fmt = formats.get(io.source)
    if getattr(fmt.implementation(), "device_runtimes", None) is None:
        raise CanonqnnError(f"parity on a device (--rpc) compares with the source runtime "
                            f"there: {fmt.models} are not run on a device yet")
    return fmt


def parity(model: Any, inputs: list[dict[str, np.ndarray]] | dict[str, np.ndarray] | None = None,
           *, runs: int = 3, seed: int = 0, target: Any = None,
           input_shapes: dict[str, Any] | None = None, numerics: Any = None,
           outputs: list[str] | None = None, device: Any = None,
           layers: bool = False) -> ParityResult:
    """Run the source runtime and the canonical TVM build on the same inputs and compare.

    The source runtimes are the format's (``canonqnn.formats``): onnxruntime for ONNX models,
    the TFLite interpreter's reference kernels for TFLite models (its optimized kernels are
    compared too, in ``extra``), ExecuTorch's XNNPACK delegate for PyTorch programs.
    ``inputs``: one dict (or a list of dicts) keyed by input name; default ``runs`` seeded
    random inputs.
    ``numerics``: the profile to convert for (default: the source runtime's on this host,
    probed); the result names it and, where it is not the runtime's, how the two differ.
    ``outputs``: compare these tensors of the model (it is cut there, ``load``) instead of its
    outputs.
    ``device``: a device (``canonqnn.build.remote.connect``) to run both on: the build, for
    ``target`` (default: the device's CPU), and the source runtime installed there, whose
    numerics the module is converted for by default (ONNX and TFLite models).
    ``layers``: also compare every canonical op whose tensor the source runtime exposes with
    that tensor (``extra["layers"]``, ``divergence.layer_differences``), on the first input
    where the outputs differ, else the first input.
    """
    from ..rewrites import canonicalize

    if _is_module_file(model):
        raise CanonqnnError(f"{os.fspath(model)}: a canonical module file: parity runs the "
                            "model in its source runtime and needs the model it was converted "
                            "from (.onnx, .tflite, .pt2)")
    options = {k: v for k, v in (("input_shapes", input_shapes), ("outputs", outputs)) if v}
    fq = load(model, **options)
    on_device = device_profile = None
    if device is not None:
        on_device = _device_oracle(model, fq, device)
        device_profile = on_device.function("device_profile")(device)
        if numerics is None:
            numerics = device_profile.name
    mod, report = canonicalize(fq, numerics=numerics)
    estimate = budget.check_module(mod, _source_name(model))
    io = module_io(mod)
    if io is None:
        raise CanonqnnError("module has no recorded interface")
    assert report.numerics is not None  # canonicalize records the profile it converted for
    module_profile = get_profile(report.numerics)
    if not io.outputs:
        raise CanonqnnError("the model has no outputs: parity would compare nothing")
    given = None if inputs is None else [inputs] if isinstance(inputs, dict) else list(inputs)
    if given is None and runs < 1:
        raise CanonqnnError(f"parity needs at least one run, not {runs}")
    if given is not None and not given:
        raise CanonqnnError("parity needs at least one input, not an empty list")
    fmt = formats.get(io.source)  # (of a saved module too: the model it was converted from)
    budget.check_parity(io, estimate, len(given) if given is not None else runs,
                        fmt.parity_runtimes)
    if given is None:
        feeds = [random_inputs(io, seed + i) for i in range(runs)]
    else:
        feeds = [checked_inputs(io, feed) for feed in given]  # the runtimes see the same data
    with progress.step(f"preparing {fmt.runtime or 'the source runtime'}"):
        if on_device is not None:
            from ..build import remote

            target = target or remote.device_target(device)
            runtimes = on_device.function("device_runtimes")(model, io, module_profile, device)
        else:
            runtimes = fmt.function("runtimes")(model, io, module_profile)
    try:
        built = build(mod, target)
        if device is not None:
            built = upload(built, device)
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
    if device is not None:
        extra["device"] = {"address": device.address, "machine": device.machine}
    if io.notes:  # e.g. an ONNX input's dynamic batch dimension set to 1
        extra["notes"] = io.notes
    if nonfinite := nonfinite_inputs(feeds):
        extra["nonfinite_inputs"] = nonfinite
    runtime_profile = device_profile or source_profile(io.source)
    extra["runtime_numerics"] = runtime_profile.name
    if module_profile.name != runtime_profile.name:
        extra["numerics_differences"] = module_profile.differences(runtime_profile) or [
            "none in the arithmetic choices the profiles name"]
    if also:
        extra["also_compared"] = also
    if differing_feed is not None or layers:
        from .divergence import evaluate, first_divergence, layer_differences

        # on a device, each layer built alone runs there, and the source runtime's tensors
        # come from the runtime there
        if device is not None:
            tensors = getattr(fmt.implementation(), "device_runtime_tensors", None)
            source_tensors = tensors(model, module_profile, device) if tensors else None
        else:
            tensors = getattr(fmt.implementation(), "runtime_tensors", None)
            source_tensors = tensors(model, module_profile) if tensors else None

        def build_one(one: Any) -> Any:
            alone = build(one, target)
            return upload(alone, device) if device is not None else alone

        compared = differing_feed if differing_feed is not None else feeds[0]
        with progress.step("running the numpy reference layer by layer"):
            evaluated = evaluate(mod, compared, build_one, source_tensors)
    if differing_feed is not None:
        with progress.step("searching the first layer where the build and the runtime differ"):
            found = first_divergence(mod, built, differing_feed, build_one, source_tensors,
                                     evaluated)
        extra["first_divergence"] = found.to_json() if found else None
        extra["first_divergence_summary"] = found.summary() if found else (
            "first diverging layer: none found (every canonical op equals its reference and "
            "the runtime's recorded tensors; the difference is in a float island or after "
            "the last canonical op)")
    if layers:
        extra["layers"] = [layer.to_json() for layer in layer_differences(evaluated)]
    return ParityResult(per_runtime[0], dict(report.canonical_ops), islands,
                        runtimes[0].description, built.target, len(feeds), extra, mod, report)
