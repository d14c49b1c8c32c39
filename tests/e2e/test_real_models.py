"""Whole models as public exporters write them (``tests/_real_models.py``): their float pre- and
post-processing and shape subgraphs import, the quantized part folds, and each matches its
runtime: bit-exact where the runtime is integer, within the float bound of docs/parity.md
("Float regions of the model itself") where the model itself computes in float."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from canonqnn import models
from canonqnn.api import ort_session

import _real_models as real

# docs/parity.md: a float output of the model's own float region is within this many units in
# the last place of the output's largest magnitude (TVM's and MLAS's exp / logistic differ in
# their last bits; the cancellation in box corners makes relative error meaningless).
FLOAT_REGION_ULPS = 4


def within_float_bound(ref: np.ndarray, got: np.ndarray) -> float:
    """The difference in units in the last place of ``ref``'s largest magnitude."""
    unit = np.spacing(np.float32(np.abs(ref).max()))
    return float(np.abs(ref.astype(np.float64) - got.astype(np.float64)).max() / unit)


@pytest.fixture(scope="module")
def yolo():
    float_model = real.yolo_like()
    return models.quantize(float_model, fmt="qdq", activation="u8", per_channel=True,
                           nodes_to_exclude=real.yolo_head_nodes(float_model))


def test_yolo_head_imports_as_float_and_the_shape_subgraph_folds(yolo):
    assert {"Shape", "Gather", "Div", "Exp", "Split"} <= {n.op_type for n in yolo.graph.node}
    mod, report = canonqnn.canonicalize(canonqnn.load(yolo))
    assert report.canonical_ops["conv2d"] == 3
    islands = {i.op for i in report.float_islands}
    assert {"relax.divide", "relax.exp", "relax.sigmoid", "relax.concat"} <= islands
    assert all(i.reason for i in report.float_islands)
    # The Shape -> Gather -> Concat target folded to a constant: no integer shape arithmetic.
    text = canonqnn._tvm.script(mod)
    assert "int64" not in text and "R.shape_of" not in text


def test_yolo_matches_onnxruntime_within_the_float_bound(yolo):
    lib = canonqnn.build(canonqnn.canonicalize(canonqnn.load(yolo))[0])
    session, _ = ort_session(yolo)
    for seed in range(4):
        x = {models.INPUT_NAME: models.random_input(seed) * np.float32(1.5)}
        ref = session.run([real.DETECTIONS], x)[0]
        got = lib.run(x)[real.DETECTIONS]
        assert within_float_bound(ref, got) <= FLOAT_REGION_ULPS


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_torch_exported_transformer_is_bit_exact(fmt):
    float_model = real.torch_transformer_like()
    assert {"Shape", "Div", "Erf"} <= {n.op_type for n in float_model.graph.node}
    q = models.quantize(float_model, fmt=fmt, activation="u8", per_channel=True)
    result = canonqnn.parity(q)
    assert all(o.exact_fraction == 1.0 for o in result.outputs), result.outputs
    assert result.canonical_ops["matmul"] == 8
    # Only layer normalization stays float (docs/declined-ops.md).
    assert {i["op"] for i in result.float_islands} == {"relax.nn.layer_norm"}
