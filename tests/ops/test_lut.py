"""canonqnn.lut: the numpy reference, the TVM build and onnxruntime agree on every code, with
one table and with one table per channel; the builder rejects tables that do not fit."""

from __future__ import annotations

import numpy as np
import pytest

from _ort import MS, SingleOp, assert_bit_exact, rand_q, run_node, scalar
from canonqnn import _tvm, tables
from canonqnn.build import pipeline
from canonqnn.ops import lut as lut_op
from canonqnn.qparams import QParams

X_SHAPE = (2, 3, 16, 16)  # every [n, c] plane holds each of the 256 codes once
ALPHA = 0.1


def _all_codes_per_plane(rng) -> np.ndarray:
    codes = np.arange(-128, 128, dtype=np.int8)
    planes = [rng.permutation(codes) for _ in range(X_SHAPE[0] * X_SHAPE[1])]
    return np.stack(planes).reshape(X_SHAPE)


@pytest.fixture(scope="module")
def per_tensor():
    """A leaky-relu table (0.1) between x (0.05, 3) and y (0.03, -20), built for onnxruntime."""
    in_qp, out_qp = QParams.make(0.05, 3), QParams.make(0.03, -20)
    table = tables.build("onnx", lambda v: tables.evaluate(
        "onnx", "relax.nn.leakyrelu", [v], {"alpha": ALPHA}), in_qp, out_qp)
    op = SingleOp(lambda x: lut_op.lut(x, table, in_qp, out_qp, "leakyrelu", -1),
                  {"x": X_SHAPE})
    return op, table, in_qp, out_qp


def test_per_tensor_table_matches_onnxruntime_qlinear_leaky_relu(per_tensor):
    op, _, in_qp, out_qp = per_tensor
    x = _all_codes_per_plane(np.random.default_rng(0))
    consts = dict(xs=scalar(in_qp.scalar_scale, np.float32), xz=scalar(in_qp.scalar_zp, np.int8),
                  ys=scalar(out_qp.scalar_scale, np.float32), yz=scalar(out_qp.scalar_zp, np.int8))
    oracle = run_node("QLinearLeakyRelu", ["X", "xs", "xz", "ys", "yz"], {"X": x}, consts,
                      np.int8, domain=MS, alpha=ALPHA)
    assert_bit_exact(oracle, *op.both(x=x), "QLinearLeakyRelu")


@pytest.mark.parametrize("axis, shape", [(1, (1, 3, 16, 16)), (3, (16, 2, 8, 5))])
def test_per_channel_table_selects_the_row_of_the_channel_for_every_code(axis, shape):
    rng = np.random.default_rng(axis)
    table = rand_q(rng, (shape[axis], 256))
    qp = QParams.make(0.1, 0)
    op = SingleOp(lambda x: lut_op.lut(x, table, qp, qp, "f", axis), {"x": shape})
    # every channel's slice holds each of the 256 codes once
    x = np.moveaxis(np.stack([rng.permutation(np.arange(-128, 128, dtype=np.int8)).reshape(
        np.delete(shape, axis)) for _ in range(shape[axis])]), 0, axis)
    want = np.moveaxis(np.stack([table[c][np.take(x, c, axis).astype(np.int32) + 128]
                                 for c in range(shape[axis])]), 0, axis)
    ref, built = op.both(x=x)
    assert np.array_equal(ref, want) and np.array_equal(built, want)


def test_legalization_is_one_gather_kernel_named_canonqnn_lut(per_tensor):
    op = per_tensor[0]
    names = [name for name in _tvm.module_functions(pipeline.legalize(op.mod)) if name != "main"]
    assert names == ["canonqnn_lut"]


@pytest.mark.parametrize("table_shape, axis, message", [
    ((255,), -1, r"needs an axis \(expected \[256\]"),
    ((3, 256), -1, r"needs an axis"),
    ((4, 256), 1, r"does not match \[3, 256\] \(input dimension 1\)"),
    ((3, 256), 4, r"axis 4 out of range"),
])
def test_builder_rejects_tables_that_do_not_fit(table_shape, axis, message):
    x = _tvm.Var("x", _tvm.tensor_type((1, 3, 2, 2), "int8"))
    qp = QParams.make(0.1, 0)
    with pytest.raises(ValueError, match=message):
        lut_op.lut(x, np.zeros(table_shape, np.int8), qp, qp, "f", axis)
    with pytest.raises(ValueError, match="table must be int8"):
        lut_op.lut(x, np.zeros(256, np.int16), qp, qp, "f")
