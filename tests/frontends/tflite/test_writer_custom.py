"""GraphWriter's custom operators: the FlexBuffer options the kernel reads, the reader's
``CUSTOM:<name>`` kind, and the SSD-style detector of ``tests/_real_models.py`` run by the
TFLite interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import tflite
from flatbuffers import flexbuffers

import _real_models as real
from _tflite import run_tflite
from canonqnn.frontends.tflite.reader import read_model
from canonqnn.testing.tflite_writer import GraphWriter

OPTIONS = dict(max_detections=5, max_classes_per_detection=1, detections_per_class=5,
               nms_score_threshold=0.5, nms_iou_threshold=0.5, num_classes=3, y_scale=10.0,
               x_scale=10.0, h_scale=5.0, w_scale=5.0, use_regular_nms=False)


def _postprocess_model() -> bytes:
    """A float RELU in front of the custom op: builtin and custom operator codes side by
    side."""
    g = GraphWriter()
    box = g.tensor("box", (1, 64, 4), "float32")
    relu = g.tensor("relu", (1, 64, 4), "float32")
    cls = g.tensor("cls", (1, 64, 4), "float32")
    anchors = g.tensor("anchors", (64, 4), "float32", real.ssd_anchors(8, 1))
    outs = [g.tensor(n, s, "float32") for n, s in
            [("boxes", (1, 5, 4)), ("classes", (1, 5)), ("scores", (1, 5)), ("num", (1,))]]
    g.op("RELU", [box], [relu])
    g.custom_op(real.SSD_POSTPROCESS, [relu, cls, anchors], outs, OPTIONS)
    return g.finish([box, cls], outs)


def _last_operator(data: bytes) -> tuple[tflite.OperatorCode, tflite.Operator]:
    m = tflite.Model.GetRootAsModel(data, 0)
    graph = m.Subgraphs(0)
    op = graph.Operators(graph.OperatorsLength() - 1)
    return m.OperatorCodes(op.OpcodeIndex()), op


def test_custom_op_round_trips_through_the_reader():
    data = _postprocess_model()
    model = read_model(data)
    assert [o.kind for o in model.operators] == ["RELU", "CUSTOM:TFLite_Detection_PostProcess"]
    op = model.operators[1]
    assert (op.inputs, op.outputs, op.options) == ([1, 2, 3], [4, 5, 6, 7], None)
    code, raw = _last_operator(data)
    assert code.BuiltinCode() == code.DeprecatedBuiltinCode() == tflite.BuiltinOperator.CUSTOM
    assert code.CustomCode() == b"TFLite_Detection_PostProcess"
    assert raw.CustomOptionsFormat() == tflite.CustomOptionsFormat.FLEXBUFFERS
    assert flexbuffers.Loads(raw.CustomOptionsAsNumpy().tobytes()) == OPTIONS
    with pytest.raises(ValueError, match="custom_op"):
        GraphWriter().op("CUSTOM", [], [])


def test_tvm_reads_the_options_as_the_kernel_does():
    """TVM's DETECTION_POSTPROCESS converter decodes custom options with its own partial
    FlexBuffer reader (flat maps of scalars, one-byte key offsets)."""
    from tvm.relax.frontend.tflite.tflite_flexbuffer import FlexBufferDecoder

    _, raw = _last_operator(real.ssd_like_tflite())
    blob = raw.CustomOptionsAsNumpy().tobytes()
    assert FlexBufferDecoder(blob).decode() == flexbuffers.Loads(blob)


@pytest.mark.parametrize("kwargs", [{}, {"use_regular_nms": True},
                                    {"dtype": "uint8", "quantized_postprocess_inputs": True}],
                         ids=["fast_nms", "regular_nms", "uint8_inputs"])
def test_ssd_like_model_runs_in_the_interpreter(kwargs):
    data = real.ssd_like_tflite(**kwargs)
    kinds = [o.kind for o in read_model(data).operators]
    assert kinds[0] == "QUANTIZE" and kinds[-1] == "CUSTOM:TFLite_Detection_PostProcess"
    assert ("DEQUANTIZE" in kinds) != bool(kwargs.get("quantized_postprocess_inputs"))
    _, raw = _last_operator(data)
    threshold = flexbuffers.Loads(raw.CustomOptionsAsNumpy().tobytes())["nms_score_threshold"]
    counts = []
    for seed in range(3):
        feed = np.random.default_rng(seed).random((1, real.SSD_SIZE, real.SSD_SIZE, 3),
                                                  np.float32)
        boxes, classes, scores, num = run_tflite(data, [feed])
        assert [boxes.shape, classes.shape, scores.shape, num.shape] == \
            [(1, 10, 4), (1, 10), (1, 10), (1,)]
        n = int(num[0])
        counts.append(n)
        # entries past num_detections are whatever the kernel's buffers held: not compared
        boxes, classes, scores = boxes[0, :n], classes[0, :n], scores[0, :n]
        assert np.all(scores > threshold) and np.all(np.diff(scores) <= 0)
        assert set(classes.tolist()) <= {0.0, 1.0, 2.0}
        assert np.all(boxes[:, 2:] > boxes[:, :2]) and np.all(np.abs(boxes) < 1.5)
    assert all(0 < n <= 10 for n in counts)


def test_int8_tensors_cannot_feed_the_postprocess():
    with pytest.raises(ValueError, match="uint8"):
        real.ssd_like_tflite(quantized_postprocess_inputs=True)
