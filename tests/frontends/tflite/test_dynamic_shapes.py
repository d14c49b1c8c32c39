"""Models converted with a dynamic batch: TensorFlow's converter writes each tensor's
``shape_signature`` (-1 where unknown) and, as its ``shape``, the signature with every -1 as 1,
which is wrong where the batch was flattened with other dimensions (a Keras Dense on a sequence:
``SHAPE -> GATHER -> REDUCE_PROD -> PACK -> RESHAPE`` to rows declared ``[1, 1]``, then a
FULLY_CONNECTED declared ``[1, units]``). canonqnn computes those shapes from the static inputs
as the interpreter does (``frontends/tflite/_shapes.py``) and matches its reference kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from canonqnn.errors import UnsupportedError
from canonqnn.frontends.tflite import _shapes
from canonqnn.frontends.tflite.reader import read_model
from canonqnn.testing.tflite_writer import GraphWriter

SEQ, FEATURES, UNITS = 4, 6, 5
RNG = np.random.default_rng(11)


def _int32(g: GraphWriter, name: str, values) -> int:
    values = np.asarray(values, np.int32)
    return g.tensor(name, values.shape, "int32", values)


def _shape_of_rows(g: GraphWriter, x: int) -> tuple[int, int]:
    """The converter's shape arithmetic of a Dense on ``[batch, SEQ, FEATURES]``: the rows
    target ``[batch * SEQ, FEATURES]`` and the output target ``[batch, SEQ, UNITS]``."""
    shape = g.tensor("shape", (3,), "int32")
    g.op("SHAPE", [x], [shape], outType=2)  # (TensorType INT32)
    lead = g.tensor("lead", (2,), "int32")
    g.op("GATHER", [shape, _int32(g, "i01", [0, 1])], [lead], axis=0, batchDims=0)
    last = g.tensor("last", (1,), "int32")
    g.op("GATHER", [shape, _int32(g, "i2", [2])], [last], axis=0, batchDims=0)
    rows, depth = g.tensor("rows", (), "int32"), g.tensor("depth", (), "int32")
    g.op("REDUCE_PROD", [lead, _int32(g, "ax0", [0])], [rows], keepDims=False)
    g.op("REDUCE_PROD", [last, _int32(g, "ax0b", [0])], [depth], keepDims=False)
    target = g.tensor("target", (2,), "int32")
    g.op("PACK", [rows, depth], [target], valuesCount=2, axis=0)
    back = g.tensor("back", (3,), "int32")
    g.op("CONCATENATION", [lead, _int32(g, "units", [UNITS])], [back], axis=0,
         fusedActivationFunction="NONE")
    return target, back


def dense_on_sequence(rows_shape=(1, 1), rows_signature=(-1, -1)) -> bytes:
    """The form TensorFlow 2.21 writes for ``keras.layers.Dense`` on a sequence with the batch
    dimension left unknown."""
    g = GraphWriter()
    x = g.tensor("x", (1, SEQ, FEATURES), "int8", scale=0.04, zero_point=3,
                 shape_signature=(-1, SEQ, FEATURES))
    target, back = _shape_of_rows(g, x)
    rows = g.tensor("rows_x", rows_shape, "int8", scale=0.04, zero_point=3,
                    shape_signature=rows_signature)
    g.op("RESHAPE", [x, target], [rows])
    w_scale = RNG.uniform(0.005, 0.02, UNITS).astype(np.float32)
    w = g.tensor("w", (UNITS, FEATURES), "int8",
                 RNG.integers(-127, 128, (UNITS, FEATURES)).astype(np.int8), w_scale,
                 np.zeros(UNITS, np.int64))
    b = g.tensor("b", (UNITS,), "int32", RNG.integers(-500, 500, UNITS).astype(np.int32),
                 np.float32(0.04) * w_scale, np.zeros(UNITS, np.int64))
    y_rows = g.tensor("y_rows", (1, UNITS), "int8", scale=0.03, zero_point=-2,
                      shape_signature=(-1, UNITS))
    g.op("FULLY_CONNECTED", [rows, w, b], [y_rows], fusedActivationFunction="NONE",
         keepNumDims=False)
    y = g.tensor("y", (1, SEQ, UNITS), "int8", scale=0.03, zero_point=-2,
                 shape_signature=(-1, SEQ, UNITS))
    g.op("RESHAPE", [y_rows, back], [y])
    return g.finish([x], [y])


def test_the_rows_of_a_dense_on_a_sequence_are_computed_from_the_static_input():
    m = _shapes.resolve(read_model(dense_on_sequence()))
    shapes = {t.name: t.shape for t in m.tensors}
    assert shapes["rows_x"] == (SEQ, FEATURES)   # declared [1, 1]
    assert shapes["y_rows"] == (SEQ, UNITS)      # declared [1, UNITS]
    assert shapes["y"] == (1, SEQ, UNITS)


def test_a_dense_on_a_sequence_with_a_dynamic_batch_matches_the_reference_kernels():
    result = canonqnn.parity(dense_on_sequence(), runs=3)
    assert result.float_islands == [], result.summary()
    assert result.exact, result.summary()
    assert result.outputs[0].elements == 3 * SEQ * UNITS


def new_shape_option(declared=(1, FEATURES), signature=(-1, FEATURES)) -> bytes:
    """RESHAPE by its ``new_shape`` option (no shape tensor), the -1 standing for the batch
    and the sequence together."""
    g = GraphWriter()
    x = g.tensor("x", (1, SEQ, FEATURES), "int8", scale=0.05, zero_point=-4,
                 shape_signature=(-1, SEQ, FEATURES))
    y = g.tensor("y", declared, "int8", scale=0.05, zero_point=-4, shape_signature=signature)
    g.op("RESHAPE", [x], [y], newShape=[-1, FEATURES])
    return g.finish([x], [y])


def test_a_reshape_by_its_new_shape_option_takes_the_shape_the_option_computes():
    result = canonqnn.parity(new_shape_option(), runs=2)
    assert result.exact, result.summary()
    assert result.outputs[0].elements == 2 * SEQ * FEATURES


def test_a_computed_shape_contradicting_the_signature_is_refused_naming_the_operator():
    # The option computes [SEQ, FEATURES]; the signature says its last dimension is 3.
    with pytest.raises(UnsupportedError, match=r"#0.*RESHAPE.*signature is \[-1, 3\]"):
        canonqnn.load(new_shape_option(declared=(1, 3), signature=(-1, 3)))


def test_an_operator_without_a_shape_rule_after_a_changed_shape_is_refused():
    g = GraphWriter()
    x = g.tensor("x", (1, SEQ, FEATURES), "int8", scale=0.05, zero_point=0,
                 shape_signature=(-1, SEQ, FEATURES))
    rows = g.tensor("rows", (1, FEATURES), "int8", scale=0.05, zero_point=0,
                    shape_signature=(-1, FEATURES))
    g.op("RESHAPE", [x], [rows], newShape=[-1, FEATURES])
    pads = g.tensor("pads", (2, 2), "int32", np.array([[0, 0], [1, 1]], np.int32))
    y = g.tensor("y", (1, FEATURES + 2), "int8", scale=0.05, zero_point=0,
                 shape_signature=(-1, FEATURES + 2))
    g.op("PAD", [rows, pads], [y])
    with pytest.raises(UnsupportedError, match=r"#1.*PAD.*dynamic shape"):
        canonqnn.load(g.finish([x], [y]))


def test_a_model_without_dynamic_dimensions_is_read_as_declared():
    g = GraphWriter()
    x = g.tensor("x", (1, SEQ, FEATURES), "int8", scale=0.05, zero_point=0)
    y = g.tensor("y", (SEQ, FEATURES), "int8", scale=0.05, zero_point=0)
    g.op("RESHAPE", [x], [y], newShape=[-1, FEATURES])
    m = read_model(g.finish([x], [y]))
    assert _shapes.resolve(m) is m


def test_a_static_reshape_output_that_cannot_hold_the_input_is_refused_naming_the_operator():
    g = GraphWriter()
    x = g.tensor("x", (1, SEQ, FEATURES), "int8", scale=0.05, zero_point=0)
    y = g.tensor("y", (1, FEATURES), "int8", scale=0.05, zero_point=0)
    g.op("RESHAPE", [x], [y], newShape=[1, FEATURES])
    with pytest.raises(UnsupportedError, match=r"#0.*RESHAPE.*\[1, 6\] does not hold the 24"):
        canonqnn.load(g.finish([x], [y]))


def test_a_dynamic_reshape_whose_target_cannot_hold_the_input_is_refused():
    g = GraphWriter()
    x = g.tensor("x", (1, SEQ, FEATURES), "int8", scale=0.05, zero_point=0,
                 shape_signature=(-1, SEQ, FEATURES))
    y = g.tensor("y", (1, 5), "int8", scale=0.05, zero_point=0, shape_signature=(-1, 5))
    g.op("RESHAPE", [x, _int32(g, "target", [-1, 5])], [y])
    with pytest.raises(UnsupportedError, match=r"#0.*RESHAPE.*24 elements do not reshape to "
                                               r"\[-1, 5\]"):
        canonqnn.load(g.finish([x], [y]))
