"""The commands: each takes the parsed arguments, prints its result (text, or one JSON
document with ``--json``: ``schemas``) and returns the exit status."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import formats
from ..errors import CanonqnnError
from . import inputs as cli_inputs
from .inputs import checked_file, output_file, parse_inputs

EXIT_DIFFERS = 1


def _emit(args, document: Any, text: str | None) -> None:
    """The command's result: ``document`` as JSON with ``--json``, else ``text`` (nothing
    under ``--quiet`` where the text only says what was written)."""
    if args.json:
        print(json.dumps(document, indent=2))
    elif text is not None:
        print(text)


def _given(args, *options: str) -> list[str]:
    """The flags of ``options`` (argument names) given on the command line."""
    return [f"--{name}" for name in options if getattr(args, name) is not None]


def _load_options(shapes: Sequence[str] | None, outputs: str | None) -> dict:
    options: dict[str, Any] = {"input_shapes": cli_inputs.parse_shapes(shapes)} if shapes else {}
    if outputs is not None:
        names = [n for n in outputs.split(",") if n]
        if not names:
            raise CanonqnnError(f"--outputs {outputs!r}: expected NAME[,NAME...]")
        options["outputs"] = names
    return options


def _canonical(args, model: str):
    """``model`` as a canonical module and its report (``api.convert``), with the command's
    options; the notes of its import printed."""
    from ..api import convert

    mod, report = convert(model, args.numerics, **_load_options(args.shape, args.outputs))
    if formats.file_kind(model) != "module":
        _print_notes(args, mod)
    return mod, report


def _print_notes(args, mod) -> None:
    """What the import chose for the user (``ModelIO.notes``)."""
    from ..io import module_io

    io = module_io(mod)
    for note in io.notes if io is not None else []:
        args.console.note(note)


def cmd_convert(args) -> int:
    from .. import _tvm
    from ..io import write_file

    out = output_file(args.output or os.path.splitext(args.model)[0] + ".canonqnn.json")
    script = output_file(args.script) if args.script else None
    model = checked_file(args.model, "convert")
    mod, report = _canonical(args, model)
    write_file(out, _tvm.save_json(mod))  # whole or not at all: a full disk keeps the old file
    if script:
        write_file(script, _tvm.script(mod))
    text = None if args.quiet else f"{report.summary(explain=args.explain)}\nwrote {out}"
    _emit(args, {"model": model, "output": out, "script": script, "report": report.to_json()},
          text)
    return 0


def cmd_build(args) -> int:
    from ..build import build, remote, targets

    model = args.model
    if args.tune < 0:
        raise CanonqnnError(f"--tune {args.tune}: the number of trials must be 0 or more")
    device = _device(args.rpc)
    if device is not None:
        _for_device(args, device)
    # another architecture's code is linked here by a cross compiler where there is one,
    # else written as object files, linked where it is loaded
    target = targets.as_target(args.target)
    arch = targets.target_arch(target)
    linked = targets.is_host_arch(target) or remote.cross_compiler(arch) is not None
    out = output_file(args.output or os.path.splitext(model)[0] + (".so" if linked else ".tar"))
    if not linked and not out.endswith(".tar"):
        raise CanonqnnError(f"{out}: {remote.cross_compiler_hint(arch)}; or write the build "
                            f"as a .tar of object files (-o MODEL.tar), linked where it is "
                            f"loaded")
    checked_file(model, "build")
    mod, report = _canonical(args, model)
    tuning_dir = args.tuning_dir
    if args.tune and tuning_dir is None:
        tuning_dir = os.path.splitext(out)[0] + ".tuning"  # next to the library, reused
    built = build(mod, args.target, tune=args.tune, tuning_dir=tuning_dir, verify=args.verify,
                  device=device)
    built.export(out)
    document = {"model": model, "output": out, "target": targets.target_config(built.target),
                "report": report.to_json(), "device": None, "verification": None,
                "tuning": None, "conv_forms": None}
    lines = [report.summary(), f"target: {targets.described(built.target)}"]
    if device is not None:
        document["device"] = {"address": device.address, "machine": device.machine}
        lines.append(f"device: {device.address} ({device.machine or 'a plain TVM server'}): "
                     + ("verified there" if args.verify else "loaded and ran there"))
    if built.verification is not None:
        document["verification"] = built.verification.to_json()
        lines.append(built.verification.summary())
    if built.tuning is not None:
        tuned, reused = built.tuning
        why = _untuned_reason(args.tune, tuned, reused)
        document["tuning"] = {"directory": tuning_dir, "trials": args.tune, "tuned": tuned,
                              "reused": reused, "reason": why or None}
        lines.append(f"tuning: {tuned} kernels tuned ({args.tune} trials), {reused} reused "
                     f"from {tuning_dir}" + (f" ({why})" if why else ""))
    if built.forms is not None:
        measured, recorded = built.forms
        foreign = targets.foreign_instructions(built.target) if args.tune else []
        why = f"none measured: this CPU lacks {', '.join(foreign)}" if foreign else ""
        if args.tune and device is not None:
            why = "none measured: conv forms are timed on this machine only, not on a device"
        document["conv_forms"] = {"measured": measured, "reused": recorded,
                                  "reason": why or None}
        lines.append(f"conv forms: {measured} conv shapes measured, {recorded} reused from "
                     f"{tuning_dir}" + (f" ({why})" if why else ""))
    lines.append(f"wrote {out}")
    _emit(args, document, None if args.quiet else "\n".join(lines))
    return 0


def _untuned_reason(trials: int, tuned: int, reused: int) -> str:
    """Why a tuning build tuned no kernel with MetaSchedule, or ""."""
    if tuned:
        return ""
    if not trials:
        return "no trials: --tune TRIALS tunes"
    if reused:
        return "every kernel MetaSchedule tunes has a record already"
    return ("no kernel of this module is one MetaSchedule tunes: integer reductions on the "
            "CPU's dot-product instructions keep canonqnn's schedule, float ones TVM's")


def cmd_run(args) -> int:
    from ..build import load_built

    if args.reference and args.rpc:
        raise CanonqnnError("--reference runs the numpy reference here; --rpc runs a built "
                            "library on a device: give one of them")
    if not args.reference:
        ignored = _given(args, "numerics", "shape", "outputs", "target")
        if ignored:
            verb = "apply" if len(ignored) > 1 else "applies"
            raise CanonqnnError(f"{', '.join(ignored)} {verb} to --reference only: a built "
                                "library runs as it was built (build it again to change it)")
    out = output_file(args.output or "outputs.npz")
    feeds = parse_inputs(args.input) or {}
    library = checked_file(args.library, "run --reference" if args.reference else "run")
    islands: list[str] = []
    outputs: dict[str, Any]
    if args.reference:
        outputs = _run_reference(args, library, feeds, islands)
    else:
        outputs = load_built(library, _device(args.rpc)).run(feeds)
    from ..io import replacing

    with replacing(out) as temp, open(temp, "wb") as f:  # a file object: savez adds no suffix
        np.savez(f, **outputs)
    described = [{"name": name, "dtype": str(value.dtype), "shape": list(value.shape)}
                 for name, value in outputs.items()]
    lines = [f"{o['name']}: {o['dtype']} {o['shape']}" for o in described]
    if islands:
        lines.append("float islands computed by TVM (no reference): "
                     + ", ".join(sorted(set(islands))))
    lines.append(f"wrote {out}")
    _emit(args, {"input": library, "output": out, "reference": args.reference,
                 "outputs": described, "islands_run_by_tvm": sorted(set(islands))},
          None if args.quiet else "\n".join(lines))
    return 0


def _run_reference(args, model: str, feeds: dict[str, np.ndarray],
                   islands: list[str]) -> dict[str, np.ndarray]:
    """The numpy reference interpreter on a model or canonical module; float islands (no
    reference) run on TVM alone, their ops listed in ``islands``."""
    from ..build import build
    from ..io import checked_inputs, interface
    from ..ops import reference

    mod, _ = _canonical(args, model)
    run_on_tvm = reference.tvm_island(lambda one: build(one, args.target))

    def island(var, call, values):
        islands.append(str(call.op.name))
        return run_on_tvm(var, call, values)

    with np.errstate(all="ignore"):  # NaN or infinity given as input: computed, not warned of
        return reference.evaluate(mod, checked_inputs(interface(mod), feeds), island).outputs


def cmd_inspect(args) -> int:
    from .. import _tvm

    model = checked_file(args.model, "inspect --built" if args.built else "inspect")
    if args.built:
        from ..api import inspect_built

        kernels = inspect_built(model, args.target, **_load_options(args.shape, args.outputs))
        _emit(args, kernels.to_json(), kernels.summary())
        return 0
    if args.target is not None:
        raise CanonqnnError("--target applies to inspect --built only")
    mod, report = _canonical(args, model)
    _emit(args, report.to_json(), f"{_tvm.script(mod)}\n{report.summary()}")
    return 0


def cmd_parity(args) -> int:
    from ..oracle.parity import parity

    if args.seed < 0:  # numpy's generators take none
        raise CanonqnnError(f"--seed {args.seed}: the seed must be 0 or more")
    model = checked_file(args.model, "parity")
    feeds = parse_inputs(args.input)
    options = _load_options(args.shape, args.outputs)
    result = parity(model, feeds, runs=args.runs, seed=args.seed, target=args.target,
                    numerics=args.numerics, device=_device(args.rpc), **options)
    _emit(args, result.to_json(), result.summary())
    return 0 if result.exact else EXIT_DIFFERS


def cmd_view(args) -> int:
    from ..view import view_of

    if args.seed < 0:
        raise CanonqnnError(f"--seed {args.seed}: the seed must be 0 or more")
    given = _given(args, "input") + (["--runs"] if args.runs != 1 else []) + \
        (["--seed"] if args.seed != 0 else [])
    if given and not args.parity:
        raise CanonqnnError(f"{', '.join(given)} apply to view --parity only")
    serving = _given(args, "port") + (["--no-browser"] if args.no_browser else []) + \
        (["--host"] if args.host != "localhost" else [])
    if serving and args.export:
        raise CanonqnnError(f"{', '.join(serving)} apply to serving, not to --export")
    model = checked_file(args.model, "view --parity" if args.parity else "view")
    export = output_file(args.export) if args.export else None
    if export is None:
        from .. import extras

        extras.require("view")  # before the conversion, not after it
    view = view_of(model, parity=args.parity, target=args.target, numerics=args.numerics,
                   inputs=parse_inputs(args.input), runs=args.runs, seed=args.seed,
                   **_load_options(args.shape, args.outputs))
    document: dict[str, Any] = {
        "model": view.label,
        "graphs": [{"id": g["id"], "nodes": len(g["nodes"])} for g in view.graphs["graphs"]],
        "parity": view.parity.to_json() if view.parity is not None else None}
    found = [view.parity.summary()] if view.parity is not None and not args.quiet else []
    if export is not None:
        files = view.export(export)
        lines = found + ([] if args.quiet else [f"wrote {f}" for f in files])
        _emit(args, {**document, "files": files}, "\n".join(lines) if lines else None)
        return 0
    if found and not args.json:
        print(found[0], flush=True)
    from ..view.server import serve

    stdout = sys.stdout  # (the server's own lines are sent to stderr while it runs)

    def announce(url: str) -> None:
        if args.json:
            print(json.dumps({**document, "url": url}), file=stdout, flush=True)
        else:
            print(f"Model Explorer: {url}\n(Ctrl+C to stop)", file=stdout, flush=True)

    serve(view, host=args.host, port=args.port, open_browser=not args.no_browser,
          announce=announce)
    return 0


def cmd_ops(args) -> int:
    from ..ops import REGISTRY

    names = args.name or list(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise CanonqnnError(f"no canonical op {', '.join(map(repr, unknown))} (the ops: "
                            f"{', '.join(REGISTRY)})")
    ops = [REGISTRY[n] for n in names]
    document = [{"name": op.name, "family": op.family, "summary": op.summary,
                 "args": list(op.args), "attrs": list(op.attrs),
                 "roundings": list(op.roundings) if "rounding" in op.attrs else [],
                 "layout": op.layout, "weight_layout": op.weight_layout,
                 "constraints": op.constraints} for op in ops]
    lines = []
    for op in ops:
        lines += [f"relax.canonqnn.{op.name}  [{op.family}]", f"  {op.summary}",
                  f"  args:  {', '.join(op.args)}", f"  attrs: {', '.join(op.attrs)}"]
        if "rounding" in op.attrs:
            lines.append(f"  roundings: {', '.join(op.roundings)}")
        layouts = [f"{what} {value}" for what, value in (("activations", op.layout),
                                                         ("weights", op.weight_layout))
                   if value]
        if layouts:
            lines.append("  layout: " + ", ".join(layouts))
        lines.append(f"  constraints: {op.constraints}")
    _emit(args, document, "\n".join(lines))
    return 0


def cmd_patterns(args) -> int:
    from .. import patterns

    if args.model is None:
        given = _given(args, "shape", "outputs", "numerics")
        if given:
            raise CanonqnnError(f"{', '.join(given)}: given no model, patterns lists the "
                                "registered patterns; give a model for them to apply to")
        specs = patterns.specs()
        _emit(args, [{"pattern": f"{patterns.PREFIX}.{s.name}", "ops": list(s.ops)}
                     for s in specs],
              "\n".join(f"{patterns.PREFIX}.{s.name}  matches {' -> '.join(s.ops)}"
                        for s in specs))
        return 0
    mod, _ = _canonical(args, checked_file(args.model, "patterns"))
    found = patterns.matches(patterns.partition(mod, merge=False))
    _emit(args, [{"pattern": name, "op": p.op, "summary": p.summary()} for name, p in found],
          "\n".join(f"{name}: {p.summary()}" for name, p in found) or
          "no canonqnn.* pattern matches in this module (it holds no canonical op)")
    return 0


def cmd_demo(args) -> int:
    from ..testing.demo import run_demo

    result = run_demo(args.workdir, say=None if args.json or args.quiet else print)
    _emit(args, result.to_json(), None)
    return 0 if result.parity.exact else EXIT_DIFFERS


# ------------------------------------------------------------------ devices (--rpc)
_OPEN_DEVICES: list[Any] = []  # the devices of the command being run


def _device(address: str | None):
    """The device ``--rpc`` names (a session with it), or None to run on this host. Its session
    ends with the command (``release_devices``): a server serves one session at a time."""
    if address is None:
        return None
    from ..build import remote

    device = remote.connect(address)
    _OPEN_DEVICES.append(device)
    return device


def release_devices() -> None:
    while _OPEN_DEVICES:
        _OPEN_DEVICES.pop().release()


def _for_device(args, device) -> None:
    """``build --rpc``'s defaults: the device's CPU, and the numerics of the model's runtime
    there (where its format can ask the device; else this host's, said in a note)."""
    from ..build import remote
    from ..oracle.parity import device_numerics

    if args.target is None:
        args.target = remote.device_target(device)
    if args.numerics is None and formats.file_kind(args.model) != "module":
        args.numerics = device_numerics(args.model, device)
        if args.numerics is None:
            args.console.note("the numerics of this model's runtime on the device are not "
                              "probed there yet: converted for this host's (--numerics to "
                              "choose)")
