"""Parity of the example networks in the onnxruntime quantization settings.

    python examples/parity_table.py [--runs N] [--models resnet,transformer,...] [--features]

Quantizes each example network (``canonqnn.testing.onnx_models.ARCHITECTURES``: ResNet,
MobileNet-V1, MobileNet-V3, a transformer encoder layer, a Resize/Concat CNN) with onnxruntime's
quantize_static (QDQ/QOperator x uint8/int8 activations x per-tensor/per-channel int8
weights), converts each to canonical ops, builds it, and compares with onnxruntime on N seeded
random inputs. ``--features`` also compares each new network's ``features`` tensor
(``models.with_features``). A model canonqnn cannot import or build gets a row saying why.

Runs after the base install: pip install . (onnx and onnxruntime only).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import logging

import canonqnn
from canonqnn.errors import CanonqnnError, UnsupportedError
from canonqnn.testing import onnx_models as models


def _why(exc: CanonqnnError) -> str:
    """One line: the unsupported op types with their counts, or the error's first line."""
    if isinstance(exc, UnsupportedError):
        ops = collections.Counter(op for _, op, _ in exc.problems)
        return "unsupported " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
    return str(exc).splitlines()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--models", default=",".join(models.ARCHITECTURES),
                        help="comma-separated names from "
                             "canonqnn.testing.onnx_models.ARCHITECTURES")
    parser.add_argument("--features", action="store_true",
                        help="also compare the features tensor of the networks that have one")
    args = parser.parse_args()
    archs = args.models.split(",")
    unknown = set(archs) - set(models.ARCHITECTURES)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from "
                     f"{', '.join(models.ARCHITECTURES)}")
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    print(f"{'model':<17}{'format':<11}{'act':<5}{'weights':<13}{'output':<10}"
          f"{'exact':>16}  max|d|  islands")
    all_exact, references = True, set()
    for arch, fmt, act, per_channel in itertools.product(archs, ["qdq", "qoperator"],
                                                          ["u8", "s8"], [False, True]):
        float_model = models.ARCHITECTURES[arch]()
        if args.features and arch not in ("resnet", "mobilenet_v1"):
            float_model = models.with_features(float_model)
        model = models.quantize(float_model, fmt=fmt, activation=act, per_channel=per_channel)
        row = f"{arch:<17}{fmt:<11}{act:<5}{'per-channel' if per_channel else 'per-tensor':<13}"
        try:
            result = canonqnn.parity(model, runs=args.runs, seed=1000)
        except CanonqnnError as exc:
            all_exact = False
            print(f"{row}not converted: {_why(exc)}")
            continue
        all_exact &= result.exact
        references.add(result.reference)
        for out in result.outputs:
            same = round(out.exact_fraction * out.elements)
            print(f"{row}{out.name:<10}{same:>8}/{out.elements:<7}  {out.max_abs_diff:<6g}  "
                  f"{len(result.float_islands)}")
            row = " " * len(row)
    for reference in sorted(references):
        print(f"reference: {reference}")
    return 0 if all_exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
