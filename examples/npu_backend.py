"""A toy NPU backend on canonqnn's patterns: claim, partition, compile, run, check.

The "NPU" here stands for an accelerator that takes int8 layers with their quantization
parameters and nothing else. It accepts

- conv2d (dense or depthwise) and dense (2-D matmul with constant weights), with per-channel
  symmetric weights (all weight zero points 0), constant weights and bias, no dilation, no
  other grouping;
- add of two same-shape tensors (no broadcasting);
- a lookup-table activation after a conv2d (one 256-entry table, not one per channel);
- int8 outputs only, and the rounding modes rne_f32 (onnxruntime's) and q31_double (TFLite's).

Everything else stays with TVM. The flow is TVM's BYOC flow with canonqnn's patterns:

1. ``npu_patterns()``: one ``FusionPattern`` per claimed layer kind, built from canonqnn's DPL
   patterns; the check reads the typed ``OpParams`` of each match and rejects, with a reason,
   what the hardware would not take.
2. ``partition``: ``FuseOpsByPattern`` + ``MergeCompositeFunctions`` (functions tagged
   ``Codegen: "npu"``), then ``RunCodegen``, which calls ``relax.ext.npu`` below.
3. ``relax.ext.npu`` compiles each NPU function into a ``Program`` (one command per composite)
   and registers it as a packed function under the function's symbol; the VM calls it through
   ``call_dps_packed``. The "device" executes each command with canonqnn's numpy reference of
   the op, the executable specification a hardware model would be checked against.
4. ``canonqnn.build`` compiles the rest; the result is compared with onnxruntime (ONNX models)
   or the TFLite interpreter (``--source tflite``).

The NPU programs live in this process (a real backend would serialize them into a runtime
module), so a library exported from such a build needs this module imported to run.

Run:  python examples/npu_backend.py [--model mobilenet_v3|mobilenet_v1] [--runs N]
      python examples/npu_backend.py --source tflite

Runs after the base install: pip install . (ONNX models, the default). ``--source tflite``
needs the tflite extra: pip install ".[tflite]" (the TFLite models are written with flatbuffers
and the tflite schema package, and compared with the interpreter, ai_edge_litert).
"""

from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables

import canonqnn
from canonqnn import formats, numerics
from canonqnn.api import random_inputs
from canonqnn.extras import script_needs
from canonqnn.io import module_io
from canonqnn.ops import REGISTRY
from canonqnn.patterns import (
    OpParams,
    composite_calls,
    composite_params,
    describe,
    match_params,
    specs,
)

BACKEND = "npu"
ROUNDINGS = ("rne_f32", "q31_double")
# The numerics profile a model of each format is converted for (None: its runtime's here)
NUMERICS = {"tflite": "tflite-reference"}

# ---------------------------------------------------------------- 1. what the NPU claims
# (pattern name, the canonqnn pattern it is built from, the layer kind it accepts)
LAYERS = (
    ("npu.conv2d_lut", "conv2d_lut", "conv2d or depthwise"),
    ("npu.depthwise_conv2d", "conv2d", "depthwise"),
    ("npu.conv2d", "conv2d", "conv2d"),
    ("npu.dense", "matmul", "dense"),
    ("npu.add", "add", "add"),
)


def is_kind(kind: str, p: OpParams) -> bool:
    """Whether the match is the layer kind a pattern is for (depthwise and dense convs share
    the canonical conv2d; each NPU pattern takes one of them)."""
    if kind == "depthwise":
        return p.depthwise
    if kind == "conv2d":
        return not p.depthwise
    return True


def rejection(p: OpParams, roundings: tuple[str, ...] = ROUNDINGS) -> str | None:
    """Why the NPU cannot run this layer, or None when it can."""
    if p.rounding not in roundings:
        return f"rounding {p.rounding}"
    if p.output_dtype != "int8":
        return f"{p.output_dtype} output"
    if p.op == "conv2d":
        if not p.depthwise and int(p.attrs["groups"]) != 1:
            return "grouped convolution"
        if list(p.attrs["dilation"]) != [1, 1]:
            return "dilation"
    if p.op == "matmul":
        if len(p.input_shapes[0]) != 2 or np.ndim(p.constants.get("b")) != 2:
            return "not a 2-D matmul with constant weights"
        if p.attrs["accumulate"] != "exact" or float(p.attrs["alpha"]) != 1.0:
            return "scaled or saturating accumulation"
    if p.weight is not None:
        if not p.weight.symmetric:
            return "weight zero points"
        if not {"w", "b"} & set(p.constants) or "bias" not in p.constants:
            return "runtime weights or bias"
    if p.op == "add" and p.constants:
        return "constant operand"
    if p.op == "add" and p.input_shapes[0] != p.input_shapes[1]:
        return "broadcasting"
    if p.epilogue is not None and int(p.epilogue.attrs["axis"]) != -1:
        return "per-channel lookup tables"
    return None


# reason -> the result variables rejected for it (a match can be checked more than once)
REJECTED: dict[str, set[str]] = collections.defaultdict(set)


def npu_patterns(roundings: tuple[str, ...] = ROUNDINGS) -> list[Any]:
    """The NPU's patterns, highest priority first (as ``FuseOpsByPattern`` takes them), for an
    NPU that implements ``roundings``."""
    by_name = {spec.name: spec for spec in specs()}
    patterns = []
    for name, spec_name, kind in LAYERS:
        spec = by_name[spec_name]
        pattern, annotations = spec.dpl()

        def check(context, _kind=kind, _fused=spec.fused) -> bool:
            if _fused and has_leaking_intermediate_variables(context):
                return False  # the conv's result is read elsewhere too
            params = match_params(context)
            if not is_kind(_kind, params):
                return False  # another NPU pattern's layer
            reason = rejection(params, roundings)
            if reason is not None:
                var = context.value_to_bound_var[context.matched_expr]
                REJECTED[f"{params.op}: {reason}"].add(str(var.name))
            return reason is None

        patterns.append(relax.transform.FusionPattern(name, pattern, annotations, check))
    return patterns


# ---------------------------------------------------------------- 3. codegen and device
@dataclass
class Command:
    """One NPU layer: the canonical op's parameters and where its operands live."""

    name: str            # composite name, e.g. "npu.conv2d"
    params: OpParams     # scales, zero points, clamp, rounding, weights, bias, epilogue table
    operands: list[int]  # slots of the runtime operands, in argument order
    output: int


@dataclass
class Program:
    """What ``relax.ext.npu`` produces for one NPU function."""

    symbol: str
    n_inputs: int
    commands: list[Command]
    outputs: list[int]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        slots: dict[int, np.ndarray] = dict(enumerate(inputs))
        for cmd in self.commands:
            slots[cmd.output] = execute(cmd.params, [slots[s] for s in cmd.operands])
        return [slots[s] for s in self.outputs]


def execute(p: OpParams, operands: list[np.ndarray]) -> np.ndarray:
    """The device: canonqnn's numpy reference of the layer, then its table, if any."""
    values, runtime = [], iter(operands)
    for arg in REGISTRY[p.op].args:
        values.append(p.constants[arg] if arg in p.constants else next(runtime))
    y = REGISTRY[p.op].reference(*values, **p.attrs)
    if p.epilogue is not None:
        e = p.epilogue
        y = REGISTRY["lut"].reference(y, e.constants["table"], **e.attrs)
    return y


def compile_function(func: relax.Function) -> Program:
    """One command per composite call, operands numbered by slot (inputs first)."""
    slot_of = {param: k for k, param in enumerate(func.params)}
    commands = []
    for var, name, composite, args in composite_calls(func):
        slot_of[var] = len(slot_of)
        commands.append(Command(name, composite_params(composite),
                                [slot_of[a] for a in args], slot_of[var]))
    result = func.body.body
    outputs = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    return Program(str(func.attrs["global_symbol"]), len(func.params), commands,
                   [slot_of[v] for v in outputs])


PROGRAMS: dict[str, Program] = {}


@tvm.register_global_func(f"relax.ext.{BACKEND}", override=True)
def npu_codegen(functions, _options, _constant_names):
    """TVM's external-codegen hook: compile each NPU function and register it as the packed
    function the VM calls. The runtime is this process, so no runtime module is returned."""
    for func in functions:
        program = compile_function(func)
        PROGRAMS[program.symbol] = program

        def call(*tensors, _program=program):  # destination-passing: inputs, then outputs
            ins, outs = tensors[:_program.n_inputs], tensors[_program.n_inputs:]
            for out, value in zip(outs, _program.run([t.numpy() for t in ins])):
                out.copyfrom(np.ascontiguousarray(value))

        tvm.register_global_func(program.symbol, call, override=True)
    return []


# ---------------------------------------------------------------- 2 + 4. partition, build
def partition(mod: Any, roundings: tuple[str, ...] = ROUNDINGS) -> Any:
    """FuseOpsByPattern + MergeCompositeFunctions with the NPU's patterns."""
    return canonqnn.patterns.partition(mod, npu_patterns(roundings))


def offload(mod: Any, roundings: tuple[str, ...] = ROUNDINGS) -> tuple[Any, Any]:
    """The partitioned module's description and the module after the NPU codegen."""
    partitioned = partition(mod, roundings)
    return describe(partitioned), relax.transform.RunCodegen()(partitioned)


def load_model(source: str, model: str, seed: int) -> Any:
    if source == "tflite":
        from canonqnn.testing import tflite_models as tfl

        return tfl.ARCHITECTURES[model](seed=seed, features=True)
    from canonqnn.testing import onnx_models

    float_model = onnx_models.ARCHITECTURES[model](seed)
    if model == "mobilenet_v3":  # its last feature map as a second output: more evidence
        float_model = onnx_models.with_features(float_model)
    return onnx_models.quantize(float_model, fmt="qdq", activation="s8", per_channel=True,
                                seed=seed)


def run(source: str = "onnx", model: str = "mobilenet_v3", runs: int = 3, seed: int = 0,
        roundings: tuple[str, ...] = ROUNDINGS) -> dict[str, Any]:
    """Offload ``model`` to the NPU, build the rest with TVM and compare every output with
    the source runtime on ``runs`` random inputs. Returns the figures the script prints."""
    REJECTED.clear()
    PROGRAMS.clear()
    source_model = load_model(source, model, seed)
    # The NPU implements TFLite's reference kernels' arithmetic (q31_double), as integer-only
    # accelerators do: a TFLite model is converted for them rather than for the interpreter's
    # default configuration on this host
    mod, report = canonqnn.canonicalize(canonqnn.load(source_model),
                                        numerics=NUMERICS.get(source))
    if report.float_islands:
        raise SystemExit(f"float islands: {report.float_islands}")
    described, offloaded = offload(mod, roundings)
    built = canonqnn.build(offloaded)
    io = module_io(mod)
    # the format's specification runtime, as parity runs it (canonqnn.formats)
    runtime = formats.get(io.source).function("runtimes")(
        source_model, io, numerics.get(report.numerics))[0]
    same = total = 0
    for k in range(runs):
        feed = random_inputs(io, seed + k)
        got = built.run(feed)
        for info, ref in zip(io.outputs, runtime.run(feed)):
            same += int(np.sum(np.asarray(ref) == got[info.name]))
            total += int(np.asarray(ref).size)
    return {"partition": described, "rejected": {r: len(v) for r, v in REJECTED.items()},
            "same": same, "total": total, "runtime": runtime.description,
            "device_commands": sum(len(p.commands) for p in PROGRAMS.values()),
            "device_functions": len(PROGRAMS)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("onnx", "tflite"), default="onnx")
    parser.add_argument("--model", default="mobilenet_v3",
                        help="onnx: mobilenet_v3 | mobilenet_v1 | resnet ...; "
                             "tflite: mobilenet_v1 | mobilenet_v2")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--roundings", default=",".join(ROUNDINGS),
                        help="the rounding modes the NPU implements (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.source == "tflite" and (status := script_needs("tflite", __file__)):
        return status
    model = "mobilenet_v1" if args.source == "tflite" and args.model == "mobilenet_v3" \
        else args.model
    result = run(args.source, model, args.runs, roundings=tuple(args.roundings.split(",")))
    print(f"{args.source} {model}")
    print(result["partition"].summary())
    for reason, n in sorted(result["rejected"].items()):
        print(f"  kept on host: {reason} (x{n})")
    counts = result["partition"].counts()
    print(f"offloaded ops: {counts['offloaded']}, host ops: "
          f"{counts['host_canonical'] + counts['host_other']} "
          f"({counts['host_canonical']} canonical, {counts['host_other']} interface)")
    print(f"vs {result['runtime']}: {result['same']}/{result['total']} values exact "
          f"over {args.runs} inputs")
    return 0 if result["same"] == result["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
