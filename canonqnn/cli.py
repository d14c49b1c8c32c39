"""``canonqnn`` command line: convert, build, run, inspect, parity, ops, patterns, demo.

Errors print as ``canonqnn: error: <message>`` (no traceback) and exit with status 2;
``parity`` exits 1 when an output differs. An exception canonqnn did not expect is a bug: one
line ``canonqnn: internal error ...``, status 3 (``--debug`` prints its traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import budget
from .errors import CanonqnnError
from .numerics import PROFILES

EXIT_ERROR, EXIT_DIFFERS = 2, 1
EXIT_BUG = 3  # an exception canonqnn did not expect: a bug, reported in one line
EXIT_INTERRUPTED = 130  # as shells report SIGINT


def _parse_inputs(items: Sequence[str] | None) -> dict[str, np.ndarray] | None:
    """``NAME=FILE.npy`` pairs and/or ``FILE.npz`` archives keyed by input name."""
    from .io import read_arrays

    if not items:
        return None
    feeds: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            path, name = item, ""
        if not path.endswith(".npz") and not name:
            raise CanonqnnError(f"give the input name for {path!r} as NAME={path}")
        arrays = read_arrays(path)
        if isinstance(arrays, dict):
            if not arrays:
                raise CanonqnnError(f"input archive {path!r} holds no arrays")
            feeds.update(arrays)
        else:
            feeds[name] = arrays
    return feeds


def _output_file(path: str) -> str:
    """``path`` if a file can be written there, checked before any work is done."""
    if os.path.isdir(path):
        raise CanonqnnError(f"output {path!r} is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CanonqnnError(f"output {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK) and not os.access(path, os.W_OK):
        raise CanonqnnError(f"output {path!r}: directory {parent!r} is not writable")
    return path


def _parse_shapes(items: Sequence[str] | None) -> dict[str, list[int]] | None:
    """``NAME=1x3x224x224`` pairs fixing dynamic input dimensions."""
    if not items:
        return None
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            sep = ""
        if not sep or not name:
            raise CanonqnnError(f"--shape {item!r}: expected NAME=D1xD2x...")
    return shapes


def _load_options(shapes: Sequence[str] | None, outputs: str | None) -> dict:
    options: dict[str, Any] = {"input_shapes": _parse_shapes(shapes)} if shapes else {}
    if outputs is not None:
        names = [n for n in outputs.split(",") if n]
        if not names:
            raise CanonqnnError(f"--outputs {outputs!r}: expected NAME[,NAME...]")
        options["outputs"] = names
    return options


def _canonical(model: str, shapes: Sequence[str] | None = None, profile: str | None = None,
               outputs: str | None = None):
    from . import numerics
    from .api import load
    from .rewrites import canonicalize

    mod = load(model, **_load_options(shapes, outputs))
    if model.endswith(".json"):
        from .rewrites import Report

        recorded = numerics.recorded(mod)
        if profile is not None and (recorded is None or recorded.name != profile):
            raise CanonqnnError(f"{model} was converted for numerics "
                                f"{recorded.name if recorded else 'unknown'}; convert the model "
                                f"again with --numerics {profile}")
        return mod, Report(numerics=recorded.name if recorded else None)
    _print_notes(mod)
    mod, report = canonicalize(mod, numerics=profile)
    budget.check_module(mod, model)
    return mod, report


def _print_notes(mod) -> None:
    """What the import chose for the user (``ModelIO.notes``), on stderr as compilers print
    notes: stdout stays the command's output (``--json``)."""
    from .io import module_io

    io = module_io(mod)
    for note in io.notes if io is not None else []:
        print(f"canonqnn: note: {note}", file=sys.stderr)


def cmd_convert(args) -> int:
    from . import _tvm
    from .io import write_file

    out = _output_file(args.output or os.path.splitext(args.model)[0] + ".canonqnn.json")
    script = _output_file(args.script) if args.script else None
    mod, report = _canonical(args.model, args.shape, args.numerics, args.outputs)
    write_file(out, _tvm.save_json(mod))  # whole or not at all: a full disk keeps the old file
    if script:
        write_file(script, _tvm.script(mod))
    print(report.summary())
    if args.explain:
        print("why each float island stayed float:")
        print(report.explain())
    print(f"wrote {out}")
    return 0


def cmd_build(args) -> int:
    from .build import build, remote, targets

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
    out = _output_file(args.output or os.path.splitext(args.model)[0] +
                       (".so" if linked else ".tar"))
    if not linked and not out.endswith(".tar"):
        raise CanonqnnError(f"{out}: {remote.cross_compiler_hint(arch)}; or write the build "
                            f"as a .tar of object files (-o MODEL.tar), linked where it is "
                            f"loaded")
    mod, report = _canonical(args.model, args.shape, args.numerics, args.outputs)
    tuning_dir = args.tuning_dir
    if args.tune and tuning_dir is None:
        tuning_dir = os.path.splitext(out)[0] + ".tuning"  # next to the library, reused
    built = build(mod, args.target, tune=args.tune, tuning_dir=tuning_dir, verify=args.verify,
                  device=device)
    built.export(out)
    print(report.summary())
    print(f"target: {built.target}")
    if device is not None:
        print(f"device: {device.address} ({device.machine or 'a plain TVM server'}): "
              + ("verified there" if args.verify else "loaded and ran there"))
    if built.verification is not None:
        print(built.verification.summary())
    if built.tuning is not None:
        tuned, reused = built.tuning
        print(f"tuning: {tuned} kernels tuned ({args.tune} trials), {reused} reused "
              f"from {tuning_dir}")
    if built.forms is not None:
        measured, recorded = built.forms
        foreign = targets.foreign_instructions(built.target) if args.tune else []
        why = f" (none measured: this CPU lacks {', '.join(foreign)})" if foreign else ""
        if args.tune and device is not None:
            why = " (none measured: conv forms are timed on this machine only, not on a device)"
        print(f"conv forms: {measured} conv shapes measured, {recorded} reused from "
              f"{tuning_dir}{why}")
    print(f"wrote {out}")
    return 0


def cmd_run(args) -> int:
    from .build import load_built
    from .io import replacing

    out = _output_file(args.output or "outputs.npz")
    feeds = _parse_inputs(args.input) or {}
    if args.reference and args.rpc:
        raise CanonqnnError("--reference runs the numpy reference here; --rpc runs a built "
                            "library on a device: give one of them")
    outputs = (_run_reference(args, feeds) if args.reference
               else load_built(args.library, _device(args.rpc)).run(feeds))
    with replacing(out) as temp, open(temp, "wb") as f:  # a file object: savez adds no suffix
        np.savez(f, **outputs)
    for name, value in outputs.items():
        print(f"{name}: {value.dtype} {list(value.shape)}")
    print(f"wrote {out}")
    return 0


def _device(address: str | None):
    """The device ``--rpc`` names (a session with it), or None to run on this host. Its session
    ends with the command (``main``): a server serves one session at a time."""
    if address is None:
        return None
    from .build import remote

    device = remote.connect(address)
    _OPEN_DEVICES.append(device)
    return device


_OPEN_DEVICES: list[Any] = []  # the devices of the command being run


def _release_devices() -> None:
    while _OPEN_DEVICES:
        _OPEN_DEVICES.pop().release()


def _for_device(args, device) -> None:
    """``build --rpc``'s defaults: the device's CPU, and the numerics of the model's runtime
    there (where its format can ask the device; else this host's, said in a note)."""
    from .build import remote
    from .oracle.parity import device_numerics

    if args.target is None:
        args.target = remote.device_target(device)
    if args.numerics is None and not args.model.endswith(".json"):
        args.numerics = device_numerics(args.model, device)
        if args.numerics is None:
            print("canonqnn: note: the numerics of this model's runtime on the device are not "
                  "probed there yet: converted for this host's (--numerics to choose)",
                  file=sys.stderr)


def _run_reference(args, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The numpy reference interpreter on a model or canonical module; float islands (no
    reference) run on TVM alone, and say so."""
    from .build import build
    from .io import checked_inputs, interface
    from .ops import reference

    if args.library.endswith(".so"):
        raise CanonqnnError("--reference runs a model or a canonical module (.json), not a "
                            "built library")
    mod, _ = _canonical(args.library, args.shape, args.numerics, args.outputs)
    islands: list[str] = []
    run_on_tvm = reference.tvm_island(lambda one: build(one, args.target))

    def island(var, call, values):
        islands.append(str(call.op.name))
        return run_on_tvm(var, call, values)

    with np.errstate(all="ignore"):  # NaN or infinity given as input: computed, not warned of
        outputs = reference.evaluate(mod, checked_inputs(interface(mod), feeds), island).outputs
    if islands:
        print(f"float islands computed by TVM (no reference): {', '.join(sorted(set(islands)))}")
    return outputs


def cmd_inspect(args) -> int:
    from . import _tvm

    if args.built:
        from .api import inspect_built

        kernels = inspect_built(args.model, args.target,
                                **_load_options(args.shape, args.outputs))
        print(json.dumps(kernels.to_json(), indent=2) if args.json else kernels.summary())
        return 0
    mod, report = _canonical(args.model, args.shape, args.numerics, args.outputs)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(_tvm.script(mod))
        print(report.summary())
    return 0


def cmd_parity(args) -> int:
    from .oracle.parity import parity

    if args.seed < 0:  # numpy's generators take none
        raise CanonqnnError(f"--seed {args.seed}: the seed must be 0 or more")
    feeds = _parse_inputs(args.input)
    options = _load_options(args.shape, args.outputs)
    result = parity(args.model, feeds, runs=args.runs, seed=args.seed, target=args.target,
                    numerics=args.numerics, device=_device(args.rpc), **options)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.summary())
    return 0 if result.exact else EXIT_DIFFERS


def cmd_ops(args) -> int:
    from .ops import REGISTRY

    for op in REGISTRY.values():
        print(f"relax.canonqnn.{op.name}  [{op.family}]")
        print(f"  {op.summary}")
        print(f"  args:  {', '.join(op.args)}")
        print(f"  attrs: {', '.join(op.attrs)}")
        if "rounding" in op.attrs:
            print(f"  roundings: {', '.join(op.roundings)}")
        if op.layout or op.weight_layout:
            print("  layout: " + ", ".join(
                f"{what} {value}" for what, value in (("activations", op.layout),
                                                      ("weights", op.weight_layout)) if value))
        print(f"  constraints: {op.constraints}")
    return 0


def cmd_patterns(args) -> int:
    from . import patterns

    if args.model is None:
        for spec in patterns.specs():
            print(f"{patterns.PREFIX}.{spec.name}  matches {' -> '.join(spec.ops)}")
        return 0
    mod, _ = _canonical(args.model, args.shape, args.numerics, args.outputs)
    found = patterns.matches(patterns.partition(mod, merge=False))
    if args.json:
        print(json.dumps([{"pattern": name, "op": p.op, "summary": p.summary()}
                          for name, p in found], indent=2))
    else:
        for name, p in found:
            print(f"{name}: {p.summary()}")
    return 0


def cmd_demo(args) -> int:
    from .testing.demo import run_demo

    return run_demo(args.workdir)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="canonqnn", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true",
                   help="show the Python traceback of an unexpected error (a bug)")
    sub = p.add_subparsers(dest="command", required=True)
    model_options = argparse.ArgumentParser(add_help=False)
    model_options.add_argument("--shape", action="append", metavar="NAME=D1xD2x...",
                               help="static shape for a dynamic model input")
    model_options.add_argument("--outputs", metavar="NAME[,NAME...]",
                               help="convert up to these tensors of the model, which become the "
                                    "module's outputs (e.g. before post-processing canonqnn "
                                    "cannot import)")
    model_options.add_argument("--numerics", metavar="PROFILE", choices=sorted(PROFILES),
                               help="numerics profile the canonical ops reproduce (default: "
                                    "the source runtime's on this host, probed): "
                                    + ", ".join(PROFILES))
    model_options.add_argument("--max-memory", metavar="SIZE",
                               help="memory budget (e.g. 2G, 512M, 1.5GiB, 4096 bytes): a "
                                    "model whose tensors or run need more is refused before "
                                    f"anything is allocated (default: ${budget.ENV_VAR}, else "
                                    "half of this machine's memory)")

    c = sub.add_parser("convert", parents=[model_options],
                       help="model -> canonical module file (.json)")
    c.add_argument("model")
    c.add_argument("-o", "--output", help="output file (default MODEL.canonqnn.json)")
    c.add_argument("--script", help="also write the module as TVMScript text")
    c.add_argument("--explain", action="store_true",
                   help="for each float island, every rule that found its pattern there, the "
                        "step where it declined and why")
    c.set_defaults(func=cmd_convert)

    b = sub.add_parser("build", parents=[model_options],
                       help="model or canonical module -> shared library")
    b.add_argument("model")
    b.add_argument("-o", "--output", help="library path (default MODEL.so; MODEL.tar of object "
                                          "files for another architecture)")
    b.add_argument("--target", help="TVM target (default: host CPU); another architecture "
                                    "(-mtriple=aarch64-linux-gnu) cross-compiles")
    b.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                   help="tune the conv/matmul kernels with MetaSchedule, TRIALS trials in "
                        "total (needs the tune extra); the database is kept in --tuning-dir "
                        "and a later build reuses it")
    b.add_argument("--verify", action="store_true",
                   help="check the build against the numpy reference of the module on random "
                        "inputs; fails naming every kernel that differs")
    b.add_argument("--tuning-dir", metavar="DIR",
                   help="MetaSchedule database to use (default with --tune: OUTPUT.tuning)")
    b.add_argument("--rpc", metavar="HOST:PORT[:KEY]",
                   help="build for a device (its CPU, unless --target) and run the build there "
                        "once, or with --verify check it there (docs/devices.md)")
    b.set_defaults(func=cmd_build)

    r = sub.add_parser("run", parents=[model_options],
                       help="run a built library, or the numpy reference of a module")
    r.add_argument("library", help="built library (.so), or with --reference a model or "
                                   "canonical module (.json)")
    r.add_argument("--reference", action="store_true",
                   help="run the numpy reference interpreter of the canonical module instead")
    r.add_argument("--target", help="TVM target of float islands under --reference (default: "
                                    "host CPU)")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy | FILE.npz")
    r.add_argument("-o", "--output", help="outputs .npz (default outputs.npz)")
    r.add_argument("--rpc", metavar="HOST:PORT[:KEY]",
                   help="run the library on a device: an RPC server HOST:PORT, or a tracker "
                        "HOST:PORT and the device KEY (docs/devices.md)")
    r.set_defaults(func=cmd_run)

    i = sub.add_parser("inspect", parents=[model_options],
                       help="print the canonical module and its report, or (--built) the "
                            "kernels its build consists of")
    i.add_argument("model", help="model, canonical module (.json) or, with --built, a "
                                 "library (.so)")
    i.add_argument("--built", action="store_true",
                   help="list the built kernels with their input/output dtypes and flag "
                        "non-int8 tensors passed between canonical kernels")
    i.add_argument("--target", help="TVM target for --built (default: host CPU)")
    i.add_argument("--json", action="store_true", help="one JSON object on stdout")
    i.set_defaults(func=cmd_inspect)

    pa = sub.add_parser("parity", parents=[model_options],
                        help="compare the TVM build with the source runtime")
    pa.add_argument("model")
    pa.add_argument("--input", action="append", metavar="NAME=FILE.npy | FILE.npz")
    pa.add_argument("--runs", type=int, default=3, help="random inputs when none are given")
    pa.add_argument("--seed", type=int, default=0)
    pa.add_argument("--target", help="TVM target (default: host CPU, or with --rpc the "
                                     "device's)")
    pa.add_argument("--rpc", metavar="HOST:PORT[:KEY]",
                    help="build for a device, run the build and the source runtime there and "
                         "compare (ONNX and TFLite models; docs/devices.md)")
    pa.add_argument("--json", action="store_true", help="one JSON object on stdout")
    pa.set_defaults(func=cmd_parity)

    o = sub.add_parser("ops", help="list the canonical ops")
    o.set_defaults(func=cmd_ops)

    pt = sub.add_parser("patterns", parents=[model_options],
                        help="list the canonqnn.* patterns registered with TVM or, given a "
                             "model, what each matches in it with its parameters")
    pt.add_argument("model", nargs="?", help="model or canonical module (.json)")
    pt.add_argument("--json", action="store_true", help="one JSON array on stdout")
    pt.set_defaults(func=cmd_patterns)

    d = sub.add_parser("demo", help="quantize a small CNN, convert, build and check parity")
    d.add_argument("--workdir", help="keep the demo files here (default: a temp dir)")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if "max_memory" not in vars(args):  # a command that loads no model
            return args.func(args)
        with budget.limit(args.max_memory):  # reads the budget: a bad value is refused first
            return args.func(args)
    except CanonqnnError as exc:
        # each line of a message (an unsupported model lists a node per line) stands alone,
        # as compilers print diagnostics: grep finds every one, none reads as other output
        lines = str(exc).strip().splitlines() or \
            [(type(exc).__doc__ or "refused").strip().splitlines()[0]]
        print("\n".join(f"canonqnn: error: {line}" for line in lines), file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # the reader left (``| head``): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("canonqnn: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001  (anything else is a bug: one line, not a traceback)
        if args.debug:
            traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"canonqnn: internal error (a bug in canonqnn: please report it with the command "
              f"and the model): {type(exc).__name__}: {first}"
              + ("" if args.debug else "; --debug shows the traceback"), file=sys.stderr)
        return EXIT_BUG
    finally:
        _release_devices()


if __name__ == "__main__":
    sys.exit(main())
