"""canonqnn.gather moves TFLite's 16x8 int16 activations as it moves int8 (TFLite's GATHER and
GATHER_ND copy stored values): int16 under the Q31 roundings with zero point 0 only."""

from __future__ import annotations

from canonqnn.ops import UnsupportedRounding
from canonqnn.ops.indexing import GATHER


def test_int16_gather_is_tflites_16x8_only():
    assert GATHER.accepts(x_dtype="int16", rounding="q31_double", zero_points=(0,)) is None
    assert GATHER.accepts(x_dtype="int8", rounding="rne_f32", zero_points=(5,)) is None
    under_rne = GATHER.accepts(x_dtype="int16", rounding="rne_f32", zero_points=(0,))
    assert under_rne is not None and under_rne.error is UnsupportedRounding
    assert str(GATHER.accepts(x_dtype="int16", rounding="q31_double", zero_points=(3,))) == \
        "int16 input is TFLite's 16x8 int16 activations, under the Q31 roundings, zero points 0"
    assert str(GATHER.accepts(x_dtype="uint16")) == "uint16 input (int8 or int16)"
