"""TFLite's data movement (frontends/tflite/ops/shape.py) between tensors of different
quantization parameters: the kernels copy the stored integers."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from canonqnn.testing.tflite_writer import GraphWriter


def movement_with_other_output_parameters(kind):
    g = GraphWriter()
    x = g.tensor("x", (2, 3, 4, 5), "int8", scale=0.05, zero_point=3)
    extra = {"RESHAPE": [("shape", [6, 20])], "TRANSPOSE": [("perm", [0, 2, 1, 3])],
             "STRIDED_SLICE": [("begin", [0, 1, 0, 0]), ("end", [2, 3, 4, 3]),
                               ("strides", [1, 1, 1, 1])],
             "GATHER": [("indices", [2, 0])]}[kind]
    shapes = {"RESHAPE": (6, 20), "TRANSPOSE": (2, 4, 3, 5), "STRIDED_SLICE": (2, 2, 4, 3),
              "GATHER": (2, 2, 4, 5)}
    constants = [g.tensor(n, (len(v),), "int32", np.array(v, np.int32)) for n, v in extra]
    y = g.tensor("y", shapes[kind], "int8", scale=0.08, zero_point=-7)
    g.op(kind, [x, *constants], [y], **({"axis": 1} if kind == "GATHER" else {}))
    return g.finish([x], [y])


@pytest.mark.parametrize("kind", ["RESHAPE", "TRANSPOSE", "STRIDED_SLICE", "GATHER"])
def test_data_movement_to_other_parameters_copies_the_stored_integers(kind):
    """The kernels copy bytes whatever the output's parameters: no requantization."""
    result = canonqnn.parity(movement_with_other_output_parameters(kind), runs=2,
                             numerics="tflite-reference")
    assert result.exact, result.summary()
    assert "requantize" not in result.canonical_ops, result.summary()
