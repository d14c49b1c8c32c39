"""Parity of the example TFLite networks with the TFLite interpreter's kernels.

    python examples/tflite_parity.py [--runs N] [--models mobilenet_v1,mobilenet_v2,classifier]
                                     [--size 96] [--numerics tflite-reference]

Writes each network of ``canonqnn.testing.tflite_models`` (MobileNet-V1 0.25, a shortened
MobileNet-V2 0.35 with residual adds, a fully connected classifier) as int8 and as uint8
TFLite models, converts each to canonical ops for a numerics profile (default: the
interpreter's default configuration on this host), builds it, and compares the build on N
seeded random inputs with the interpreter configuration that profile reproduces (the
specification, first), and beside it with the two others (reference kernels, optimized kernels,
default: optimized kernels with the XNNPACK delegate). Each network also outputs its last
feature map. Prints one row per model, runtime and output: exact values and max |diff| in LSB.

Needs the tflite extra: pip install ".[tflite]" (the models are written with flatbuffers and
the tflite schema package, and the interpreter, ai_edge_litert, is the reference).
"""

from __future__ import annotations

import argparse
import itertools
import time

import canonqnn
from canonqnn.errors import CanonqnnError
from canonqnn.extras import script_needs
from canonqnn.oracle.parity import OutputParity

RESOLVERS = {"BUILTIN_REF": "reference", "BUILTIN_WITHOUT_DEFAULT_DELEGATES": "optimized",
             "BUILTIN": "default+XNNPACK"}


def configuration(reference: str) -> str:
    """The short name of the interpreter configuration a parity reference names."""
    return next(short for name, short in RESOLVERS.items()
                if reference.endswith(f"OpResolverType.{name})"))


def main() -> int:
    if status := script_needs("tflite", __file__):
        return status
    # imported after the check: its model writer imports flatbuffers and tflite
    from canonqnn.testing import tflite_models as models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--models", default=",".join(models.ARCHITECTURES))
    parser.add_argument("--size", type=int, default=96, help="input height/width of the CNNs")
    parser.add_argument("--numerics", default=None,
                        help="the profile to convert for (default: this host's interpreter)")
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = set(names) - set(models.ARCHITECTURES)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from "
                     f"{', '.join(models.ARCHITECTURES)}")
    print(f"{'model':<14}{'dtype':<7}{'runtime':<17}{'output':<9}{'exact':>14}  max|d|  "
          "islands  ops  seconds")
    all_exact = True
    for name, dtype in itertools.product(names, ["int8", "uint8"]):
        options = {"dtype": dtype}
        if name != "classifier":
            options["size"] = args.size
        data = models.ARCHITECTURES[name](features=True, **options)
        start = time.perf_counter()
        try:
            result = canonqnn.parity(data, runs=args.runs, seed=1000, numerics=args.numerics)
        except CanonqnnError as exc:
            all_exact = False
            print(f"{name:<14}{dtype:<7}{'-':<17}{'error: ' + str(exc).splitlines()[0]}")
            continue
        seconds = time.perf_counter() - start
        others = result.extra.get("also_compared", [])
        runtimes = [configuration(result.reference)] + [configuration(o["reference"])
                                                        for o in others]
        rows = [result.outputs] + [[OutputParity(**o) for o in other["outputs"]] or None
                                   for other in others]
        all_exact &= result.exact
        ops = sum(result.canonical_ops.values())
        for runtime, outputs in zip(runtimes, rows):
            if outputs is None:
                print(f"{name:<14}{dtype:<7}{runtime:<17}{'cannot run the model':>18}")
                continue
            for o, what in zip(outputs, ("softmax", "features")):
                same = round(o.exact_fraction * o.elements)
                print(f"{name:<14}{dtype:<7}{runtime:<17}{what:<9}{f'{same}/{o.elements}':>14}  "
                      f"{o.max_abs_diff:6g}  {len(result.float_islands):7d}  {ops:3d}  "
                      f"{seconds:7.1f}")
    print("specification (first row of each model): "
          + ("all bit-exact" if all_exact else "NOT all bit-exact"))
    return 0 if all_exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
