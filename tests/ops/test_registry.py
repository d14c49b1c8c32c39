"""Every canonical op is fully defined once: builder contract, docs entry, reference."""

from __future__ import annotations

import pathlib
import re

from canonqnn.ops import REGISTRY

SPEC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def test_every_registered_op_has_a_spec_section():
    headings = set(re.findall(r"^## (\w+)$", SPEC.read_text(), re.M))
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
