"""Every canonical op is fully defined once: builder contract, docs entry, reference."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from canonqnn.ops import REGISTRY, movement
from canonqnn.ops._registry import UnsupportedRounding

SPEC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def test_every_registered_op_has_a_spec_section():
    headings = set(re.findall(r"^### (\w+)$", SPEC.read_text(), re.M))
    assert set(REGISTRY) == headings


def test_builders_reject_unknown_rounding_and_misspelled_attributes():
    import numpy as np
    import pytest

    from canonqnn import _tvm
    from canonqnn.ops import movement

    x = _tvm.Var("x", _tvm.tensor_type((1, 4), "int8"))
    attrs = dict(in_scale=0.5, in_zp=0, out_scale=0.25, out_zp=1, act_min=-128, act_max=127,
                 rounding="rne_f32")
    assert movement.REQUANTIZE.call([x], attrs) is not None
    with pytest.raises(ValueError, match="unknown rounding"):
        movement.REQUANTIZE.call([x], dict(attrs, rounding="round_half_up"))
    with pytest.raises(TypeError, match="unexpected"):
        movement.REQUANTIZE.call([x], dict(attrs, out_scales=np.float32(1)))


# ---------------------------------------------------------------- CanonicalOp.check_attrs
def _requantize_attrs(**overrides):
    attrs = dict(in_scale=0.5, in_zp=0, out_scale=0.25, out_zp=1, act_min=-128, act_max=127,
                 rounding="rne_f32")
    attrs.update(overrides)
    return attrs


def _concat_attrs(**overrides):
    attrs = dict(axis=1, in_scales=[0.5, 0.25], in_zps=[0, 1], out_scale=0.25, out_zp=0,
                 rounding="rne_f32", source_dtype="int8")
    attrs.update(overrides)
    return attrs


def test_check_attrs_passes_an_ops_own_attributes_in_range():
    movement.REQUANTIZE.check_attrs(_requantize_attrs())
    movement.REQUANTIZE.check_attrs(_requantize_attrs(act_min=5, act_max=5,
                                                      out_scale=np.float32(1e-30)))
    movement.CONCAT.check_attrs(_concat_attrs())


def test_check_attrs_names_missing_and_unexpected_attributes():
    attrs = _requantize_attrs()
    del attrs["out_zp"]
    with pytest.raises(TypeError, match=r"^relax\.canonqnn\.requantize: missing attrs "
                                        r"\['out_zp'\], unexpected \[\]$"):
        movement.REQUANTIZE.check_attrs(attrs)
    with pytest.raises(TypeError, match=r"missing attrs \[\], unexpected \['extra'\]$"):
        movement.REQUANTIZE.check_attrs(_requantize_attrs(extra=1))


def test_check_attrs_refuses_a_rounding_that_is_none_of_the_modes():
    with pytest.raises(ValueError, match=r"^relax\.canonqnn\.requantize: unknown rounding "
                                         r"'bogus'$") as info:
        movement.REQUANTIZE.check_attrs(_requantize_attrs(rounding="bogus"))
    assert not isinstance(info.value, UnsupportedRounding)  # unknown, not merely unimplemented


def test_check_attrs_refuses_an_empty_activation_range():
    with pytest.raises(ValueError, match=r"empty activation range \[5, 4\]$"):
        movement.REQUANTIZE.check_attrs(_requantize_attrs(act_min=5, act_max=4))


def _value_error(name, value) -> str:
    """What ``check_attrs`` of requantize (concat for ``in_scales``) says of ``name=value``."""
    op, attrs = (movement.CONCAT, _concat_attrs(**{name: value})) if name == "in_scales" else \
        (movement.REQUANTIZE, _requantize_attrs(**{name: value}))
    with pytest.raises(ValueError) as info:
        op.check_attrs(attrs)
    assert str(info.value).startswith(f"{op.relax_name}: "), str(info.value)
    return str(info.value)[len(f"{op.relax_name}: "):]


@pytest.mark.parametrize("name, value", [
    ("in_scale", float("nan")), ("out_scale", float("inf")), ("in_zp", float("-inf")),
    ("in_scales", [0.5, float("nan")]),
], ids=["nan-scale", "inf-scale", "inf-zero-point", "nan-in-list"])
def test_check_attrs_refuses_a_non_finite_number(name, value):
    assert _value_error(name, value) == f"attribute {name} is not finite"


@pytest.mark.parametrize("name, value", [
    ("out_scale", 0.0), ("in_scale", -0.5), ("in_scales", [0.5, 0.0]),
    ("in_scales", [-1.0, 0.5]), ("out_scale", 0), ("in_scales", [1, -1]),
], ids=["zero", "negative", "zero-in-list", "negative-in-list", "integer-zero",
        "integer-negative-in-list"])
def test_check_attrs_refuses_a_scale_that_is_not_positive(name, value):
    assert _value_error(name, value) == f"scale {name} is not positive"
