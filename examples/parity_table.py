"""Parity of the example networks in all 8 onnxruntime quantization settings.

    python examples/parity_table.py [--runs N]

Quantizes a ResNet-style and a MobileNet-V1-style CNN with onnxruntime's quantize_static
(QDQ/QOperator x uint8/int8 activations x per-tensor/per-channel int8 weights), converts each
to canonical ops, builds it, and compares with onnxruntime on N seeded random inputs.
"""

from __future__ import annotations

import argparse
import itertools

import canonqnn
from canonqnn import models


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    archs = {"resnet": models.resnet_like, "mobilenet_v1": models.mobilenet_v1_like}
    print(f"{'model':<14}{'format':<11}{'act':<5}{'weights':<13}{'exact':>16}  max|d|  islands")
    all_exact, references = True, set()
    for arch, fmt, act, per_channel in itertools.product(archs, ["qdq", "qoperator"],
                                                          ["u8", "s8"], [False, True]):
        model = models.quantize(archs[arch](), fmt=fmt, activation=act, per_channel=per_channel)
        result = canonqnn.parity(model, runs=args.runs, seed=1000)
        out = result.outputs[0]
        same = round(out.exact_fraction * out.elements)
        all_exact &= result.exact
        references.add(result.reference)
        print(f"{arch:<14}{fmt:<11}{act:<5}{'per-channel' if per_channel else 'per-tensor':<13}"
              f"{same:>8}/{out.elements:<7}  {out.max_abs_diff:<6g}  {len(result.float_islands)}")
    for reference in sorted(references):
        print(f"reference: {reference}")
    return 0 if all_exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
