"""A conv's input unfolded along its columns (``forms.unfold``: row loops, stride-2 reads as
int16 pairs) equals its definition, ``u[n, c * kw + kx, y, j] = x[n, c, y, j * sw + kx - pl]``
with the zero point outside the row, on every geometry the conv forms give it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from canonqnn._tvm import te
from canonqnn.build import pipeline, targets
from canonqnn.build.forms import unfold

# (shape, kw, sw, pl, pr)
GEOMETRIES = {
    "resnet_stem_7_s2_p3": ((1, 3, 6, 224), 7, 2, 3, 3),
    "odd_width_s2": ((2, 1, 3, 13), 5, 2, 2, 1),
    "odd_left_pad_s2": ((1, 2, 2, 10), 4, 2, 3, 0),
    "stride_1_wide_row_in_chunks": ((1, 3, 2, 150), 5, 1, 2, 2),
    "no_padding_s1": ((1, 4, 2, 9), 3, 1, 0, 0),
}


def _expected(x: np.ndarray, kw: int, sw: int, pl: int, ow: int, x_zp: int) -> np.ndarray:
    n, c, h, w = x.shape
    padded = np.full((n, c, h, w + pl + kw + sw * ow), x_zp, np.int8)
    padded[..., pl:pl + w] = x
    out = np.empty((n, c, kw, h, ow), np.int8)
    for kx in range(kw):
        out[:, :, kx] = padded[..., kx:kx + sw * (ow - 1) + 1:sw]
    return out.reshape(n, c * kw, h, ow)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_unfolded_columns_equal_their_definition(name, parallel):
    shape, kw, sw, pl, pr = GEOMETRIES[name]
    ow = (shape[3] + pl + pr - kw) // sw + 1
    x_zp = -37
    x = te.placeholder(shape, "int8", name="x")
    u = unfold.te_unfold_columns(x, kw, sw, pl, ow, x_zp, parallel)
    lib = pipeline.compile_kernel(te.create_prim_func([x, u]), targets.host_target())
    values = np.random.default_rng(5).integers(-128, 128, shape).astype(np.int8)
    got = tvm.runtime.tensor(np.zeros(tuple(int(d) for d in u.shape), np.int8))
    lib["main"](tvm.runtime.tensor(values), got)
    np.testing.assert_array_equal(got.numpy(), _expected(values, kw, sw, pl, ow, x_zp),
                                  err_msg=name)
