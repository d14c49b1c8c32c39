"""A module's interface: inputs are checked against it, converted only where no value changes."""

from __future__ import annotations

import numpy as np
import pytest

from canonqnn.errors import CanonqnnError
from canonqnn.io import ModelIO, TensorInfo, checked_inputs

IO = ModelIO("onnx", [TensorInfo("x", "int8", (2, 3)), TensorInfo("u", "uint8", (2, 3)),
                      TensorInfo("f", "float32", (2, 3))], [TensorInfo("y", "int8", (2, 3))])


def feed(**overrides):
    values = {"x": np.zeros((2, 3), np.int8), "u": np.zeros((2, 3), np.uint8),
              "f": np.zeros((2, 3), np.float32)}
    values.update(overrides)
    return values


def test_values_convert_where_none_changes():
    out = checked_inputs(IO, feed(x=np.full((2, 3), -128, np.int64), u=[[0, 1, 255]] * 2,
                                  f=np.full((2, 3), 0.1, np.float64)))
    assert [out[k].dtype for k in ("x", "u", "f")] == [np.int8, np.uint8, np.float32]
    assert out["x"].min() == -128 and out["u"].max() == 255
    assert out["f"][0, 0] == np.float32(0.1)


@pytest.mark.parametrize("name, value, message", [
    ("x", np.full((2, 3), 0.5, np.float32), "'x' is float32, the model takes int8: converting"),
    ("x", np.full((2, 3), 300, np.int16), r"values 300\.\.300 are outside int8's range"),
    ("u", np.full((2, 3), -100, np.int8), r"values -100\.\.-100 are outside uint8's range"),
    ("f", np.full((2, 3), 1 + 2j), "'f' is complex128, the model takes float32"),
    ("f", np.full((2, 3), "a"), "'f' is <U1, the model takes float32"),
    ("x", np.zeros((3, 2), np.int8), r"'x' has shape \[3, 2\], expected \[2, 3\]"),
])
def test_a_value_that_would_change_is_refused_naming_the_input(name, value, message):
    with pytest.raises(CanonqnnError, match=message):
        checked_inputs(IO, feed(**{name: value}))


def test_missing_and_unknown_inputs_are_named():
    values = feed()
    del values["u"]
    with pytest.raises(CanonqnnError, match=r"missing input 'u' \(expected uint8 \[2, 3\]\)"):
        checked_inputs(IO, values)
    with pytest.raises(CanonqnnError, match=r"unknown input\(s\) \['z'\]"):
        checked_inputs(IO, feed(z=np.zeros(1)))
