"""The command line's arguments: one parser, its subcommands and their options (docs/cli.md)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import budget
from ..numerics import PROFILES

DESCRIPTION = ("Quantized ONNX, TFLite and PT2E models in one canonical integer form for "
               "Apache TVM, built into code that matches the source runtime bit for bit.")
EPILOG = ("Exit status: 0 done, 1 parity found a difference, 2 an error (one line "
          "'canonqnn: error: ...'), 3 a bug in canonqnn, 130 interrupted. Every command "
          "takes --json (its result as one JSON document on stdout), -q/--quiet, -v/--verbose "
          "and --debug. docs/cli.md describes each command, its options and its JSON.")

MODEL_HELP = "model (.onnx, .tflite, .pt2) or canonical module file (.json, from convert)"
INPUT_HELP = ("input values: NAME=FILE.npy for one input, or FILE.npz holding arrays named "
              "after the inputs; repeat for more (default: seeded random values)")


def _common(suppress: bool) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (``suppress``: a subcommand
    leaves the value given before it in place)."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", **default,
                        help="print the result as one JSON document on stdout (docs/cli.md "
                             "gives its schema); no progress is shown")
    common.add_argument("-q", "--quiet", action="store_true", **default,
                        help="no progress and no notes on stderr (errors are still printed)")
    common.add_argument("-v", "--verbose", action="store_true", **default,
                        help="also show what other packages print (onnxruntime, TFLite, "
                             "MetaSchedule, XGBoost, TVM's native log)")
    common.add_argument("--debug", action="store_true", **default,
                        help="show the Python traceback of an unexpected error (a bug)")
    return common


def _model_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--shape", action="append", metavar="NAME=D1xD2x...",
                         help="static shape for a dynamic input of an ONNX model (repeat for "
                              "more inputs)")
    options.add_argument("--outputs", metavar="NAME[,NAME...]",
                         help="convert up to these tensors of the model, which become the "
                              "module's outputs (e.g. before post-processing canonqnn cannot "
                              "import)")
    options.add_argument("--numerics", metavar="PROFILE", choices=sorted(PROFILES),
                         help="numerics profile the canonical ops reproduce (default: the "
                              "source runtime's on this host, probed): "
                              + ", ".join(PROFILES))
    options.add_argument("--max-memory", metavar="SIZE",
                         help="memory budget (e.g. 2G, 512M, 1.5GiB, 4096 bytes): a model "
                              "whose tensors or run need more is refused before anything is "
                              f"allocated (default: ${budget.ENV_VAR}, else half of this "
                              "machine's memory)")
    return options


RPC_METAVAR = "HOST:PORT[:KEY]"


def _compared_inputs(p: argparse.ArgumentParser, runs: int, applies: str = "") -> None:
    """The inputs a command compares the build and the source runtime on (``applies``: when
    they apply, where not always)."""
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy | FILE.npz",
                   help=applies + INPUT_HELP)
    p.add_argument("--runs", type=int, default=runs, metavar="N",
                   help=f"{applies}seeded random inputs compared when none are given "
                        f"(default: {runs})")
    p.add_argument("--seed", type=int, default=0,
                   help=f"{applies}seed of the first random input; run k uses SEED+k "
                        "(default: 0)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="canonqnn", description=DESCRIPTION, epilog=EPILOG,
                                parents=[_common(False)])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, model = _common(True), _model_options()

    c = sub.add_parser("convert", parents=[common, model],
                       help="model -> canonical module file (.json)",
                       description="Convert a model into canonical ops and write the module "
                                   "(a .json file that inspect, build, run --reference and "
                                   "patterns read).")
    c.add_argument("model", help="model (.onnx, .tflite, .pt2)")
    c.add_argument("-o", "--output", help="module file (default: MODEL.canonqnn.json)")
    c.add_argument("--script", metavar="FILE", help="also write the module as TVMScript text")
    c.add_argument("--explain", action="store_true",
                   help="for each float island, every rule that found its pattern there, the "
                        "step where it declined and why")

    b = sub.add_parser("build", parents=[common, model],
                       help="model or canonical module -> shared library",
                       description="Build integer code with tvm.compile.")
    b.add_argument("model", help=MODEL_HELP)
    b.add_argument("-o", "--output", help="library (default: MODEL.so; MODEL.tar of object "
                                          "files for another architecture)")
    b.add_argument("--target", help="TVM target, e.g. 'llvm -mcpu=znver3' (default: this "
                                    "host's CPU); another architecture (-mtriple="
                                    "aarch64-linux-gnu) cross-compiles")
    b.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                   help="tune the kernels MetaSchedule schedules, TRIALS trials in total, and "
                        "time the conv forms on this machine (needs the tune extra); the "
                        "records are kept in --tuning-dir and a later build reuses them "
                        "(default: 0, no tuning)")
    b.add_argument("--verify", action="store_true",
                   help="check the build against the numpy reference of the module on random "
                        "inputs; fails naming every kernel that differs")
    b.add_argument("--tuning-dir", metavar="DIR",
                   help="tuning records to use (default with --tune: OUTPUT.tuning)")
    b.add_argument("--rpc", metavar=RPC_METAVAR,
                   help="build for a device (its CPU, unless --target) and run the build there "
                        "once, or with --verify check it there (docs/devices.md)")

    r = sub.add_parser("run", parents=[common, model],
                       help="run a built library, or the numpy reference of a module",
                       description="Run a library written by build on inputs and write the "
                                   "outputs (.npz, keyed by output name); with --reference, "
                                   "run the numpy reference of a model or module instead. "
                                   "--shape, --outputs, --numerics and --target apply to "
                                   "--reference only.")
    r.add_argument("library", metavar="FILE",
                   help="built library (.so, .tar), or with --reference a model or canonical "
                        "module (.json)")
    r.add_argument("--reference", action="store_true",
                   help="run the numpy reference interpreter of the canonical module instead")
    r.add_argument("--target", help="TVM target of the float islands under --reference "
                                    "(default: this host's CPU)")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy | FILE.npz",
                   help=INPUT_HELP.replace("default: seeded random values",
                                           "needed for every input of the model"))
    r.add_argument("-o", "--output", help="outputs file (default: outputs.npz)")
    r.add_argument("--rpc", metavar=RPC_METAVAR,
                   help="run the library on a device: an RPC server HOST:PORT, or a tracker "
                        "HOST:PORT and the device KEY (docs/devices.md)")

    i = sub.add_parser("inspect", parents=[common, model],
                       help="print the canonical module and its report, or (--built) the "
                            "kernels its build consists of")
    i.add_argument("model", help=MODEL_HELP + "; with --built also a library (.so)")
    i.add_argument("--built", action="store_true",
                   help="list the built kernels with their input/output dtypes and flag "
                        "non-int8 tensors passed between canonical kernels")
    i.add_argument("--target", help="TVM target for --built (default: this host's CPU)")

    pa = sub.add_parser("parity", parents=[common, model],
                        help="compare the TVM build with the source runtime",
                        description="Convert and build the model, run the build and the "
                                    "runtime the model's format runs on (onnxruntime, the "
                                    "TFLite interpreter, ExecuTorch's XNNPACK) on the same "
                                    "inputs, and compare them. Exits 1 when an output differs.")
    pa.add_argument("model", help="model (.onnx, .tflite, .pt2): parity runs it in its source "
                                  "runtime")
    _compared_inputs(pa, runs=3)
    pa.add_argument("--target", help="TVM target (default: this host's CPU, or with --rpc the "
                                     "device's)")
    pa.add_argument("--rpc", metavar=RPC_METAVAR,
                    help="build for a device, run the build and the source runtime there and "
                         "compare (ONNX and TFLite models; docs/devices.md)")

    v = sub.add_parser("view", parents=[common, model],
                       help="see the canonical graph in Model Explorer (the view extra)",
                       description="Show the model's canonical graph in Model Explorer, served "
                                   "on this machine until interrupted: ops nested by layer and "
                                   "by build kernel, float islands coloured with their reasons, "
                                   "and with --parity each op compared with the source "
                                   "runtime's tensor. --export writes the same files instead "
                                   "(Model Explorer's graph JSON; loadable without canonqnn).")
    v.add_argument("model", help=MODEL_HELP)
    v.add_argument("--parity", action="store_true",
                   help="run the model in its source runtime and the build, and show per op "
                        "how many values differ from the runtime's tensor and by how many LSB, "
                        "the first diverging layer outlined (where the runtime exposes the "
                        "tensor: ONNX models)")
    v.add_argument("--export", metavar="FILE.json",
                   help="write Model Explorer's graph JSON here (with --parity, the node data "
                        "beside it: FILE.parity-differing.json, FILE.parity-max-lsb.json) "
                        "instead of serving")
    _compared_inputs(v, runs=1, applies="with --parity: ")
    v.add_argument("--target", help="TVM target whose kernels are shown (default: this host's "
                                    "CPU)")
    v.add_argument("--host", default="localhost",
                   help="address to serve on (default: localhost)")
    v.add_argument("--port", type=int,
                   help="port to serve on (default: the first free one from 8080)")
    v.add_argument("--no-browser", action="store_true",
                   help="do not open the page in a browser (none is opened without a display)")

    o = sub.add_parser("ops", parents=[common], help="list the canonical ops")
    o.add_argument("--name", action="append", metavar="OP",
                   help="only this op (conv2d, add, ...); repeat for more")

    pt = sub.add_parser("patterns", parents=[common, model],
                        help="list the canonqnn.* patterns registered with TVM or, given a "
                             "model, what each matches in it with its parameters")
    pt.add_argument("model", nargs="?", help=MODEL_HELP)

    d = sub.add_parser("demo", parents=[common],
                       help="quantize a small CNN, convert, build and check parity")
    d.add_argument("--workdir", metavar="DIR",
                   help="write the demo's files here and keep them (default: a temporary "
                        "folder, deleted at the end)")
    return p
