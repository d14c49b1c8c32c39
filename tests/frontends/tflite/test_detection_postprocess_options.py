"""``TFLite_Detection_PostProcess`` with its custom options as the object detection API's
exports write them (frontends/tflite/_detection.py): the COCO SSD-MobileNet ``detect.tflite``
(2018) omits ``detections_per_class`` and ``use_regular_nms``, which TFLite's kernel defaults
(100, fast NMS) and TVM's converter requires; its box encodings and class predictions are
uint8 and its anchors a uint8 constant with their own scale. The import fills the defaults and
matches the interpreter (reference and default kernels) as tests/frontends/tflite/
test_generic.py checks detectors: the same count, classes and scores, boxes within the float
bound of docs/parity.md, the entries past the count 0."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
from flatbuffers import flexbuffers

import canonqnn
from _real_models import SSD_POSTPROCESS
from _tflite import run_tflite
from canonqnn.errors import CanonqnnError, InvalidModelError, UnsupportedError
from canonqnn.frontends.tflite.reader import read_model
from canonqnn.testing.tflite_writer import GraphWriter, converter_flexbuffer

FLOAT_REGION_ULPS = 4  # docs/parity.md, "Float outputs of the model's own float region"
F32 = lambda value: float(np.float32(value))  # noqa: E731  (a TensorFlow float attribute)

# The attributes of the 2018 export (export_tflite_ssd_graph_lib.append_postprocessing_op of
# the time) in the order it sets them; the converter drops ``_output_types`` (a list of types)
COCO_2018 = {"_output_quantized": True, "max_detections": 10, "max_classes_per_detection": 1,
             "nms_score_threshold": F32(1e-8), "nms_iou_threshold": F32(0.6),
             "num_classes": 90, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0,
             "w_scale": 5.0}
# Later exports: every key the kernel reads, and the flag the converter adds
EVERY_KEY = {**COCO_2018, "_support_output_type_float_in_quantized_op": True,
             "detections_per_class": 100, "use_regular_nms": False}


def _anchors(count: int, seed: int) -> np.ndarray:
    """[count, 4] anchors (y, x, h, w) in [0, 1], as SSD's anchor generator spreads them."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.02, 0.98, (count, 2))
    sizes = rng.uniform(0.05, 0.95, (count, 2))
    return np.concatenate([centres, sizes], axis=1).astype(np.float32)


def coco_postprocess(options: dict | bytes, anchors: int = 192, classes: int = 91,
                     anchor_zero_point: int = 0, max_detections: int = 10,
                     score_dtype: str = "uint8", anchor_dtype: str = "uint8") -> bytes:
    """The post-process of the quantized COCO detector, its inputs graph inputs: uint8 box
    encodings [1, A, 4] and class predictions [1, A, classes] (a LOGISTIC's 1/256 grid,
    background first), a uint8 anchors constant quantized over its range."""
    g = GraphWriter()
    box = g.tensor("box_encodings", (1, anchors, 4), "uint8", scale=0.0625, zero_point=130)
    quant = dict(scale=1 / 256, zero_point=0 if score_dtype == "uint8" else -128) \
        if score_dtype != "float32" else {}
    cls = g.tensor("class_predictions", (1, anchors, classes), score_dtype, **quant)
    real = _anchors(anchors, 7)
    if anchor_dtype == "uint8":
        scale = np.float32(real.max() / (255 - anchor_zero_point))
        stored = np.clip(np.round(real / scale) + anchor_zero_point, 0, 255)
        anchor = g.tensor("anchors", (anchors, 4), "uint8", stored, scale, anchor_zero_point)
    else:
        anchor = g.tensor("anchors", (anchors, 4), "float32", real)
    outs = [g.tensor(SSD_POSTPROCESS + suffix, shape, "float32") for suffix, shape in
            [("", (1, max_detections, 4)), (":1", (1, max_detections)),
             (":2", (1, max_detections)), (":3", (1,))]]
    blob = options if isinstance(options, bytes) else converter_flexbuffer(options)
    g.custom_op(SSD_POSTPROCESS, [box, cls, anchor], outs, blob)
    return g.finish([box, cls], outs)


def _feeds(anchors: int, classes: int, seed: int, levels: int = 256) -> list[np.ndarray]:
    """Random codes; few score ``levels``: most scores tie (the order the kernel breaks ties
    in is then what is compared)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (1, anchors, 4), dtype=np.uint8),
            rng.integers(0, levels, (1, anchors, classes), dtype=np.uint8)]


def _check(model: bytes, feeds: list[list[np.ndarray]]) -> list[int]:
    built = canonqnn.build(canonqnn.canonicalize(canonqnn.load(model))[0])
    names = [d.name for d in read_model(model).tensors][:2]
    counts = []
    for feed in feeds:
        got = list(built.run(dict(zip(names, feed))).values())
        for reference in (True, False):
            boxes, classes, scores, count = run_tflite(model, feed, reference=reference)
            n = int(count[0])
            assert int(got[3][0]) == n
            np.testing.assert_array_equal(got[1][0, :n], classes[0, :n])
            np.testing.assert_array_equal(got[2][0, :n], scores[0, :n])
            unit = np.spacing(np.float32(np.abs(boxes[0, :n]).max(initial=0)))
            assert np.abs(got[0][0, :n].astype(np.float64) - boxes[0, :n]).max(initial=0) <= \
                FLOAT_REGION_ULPS * unit
            assert not got[0][0, n:].any() and not got[1][0, n:].any() \
                and not got[2][0, n:].any()
        counts.append(n)
    return counts


def test_the_coco_options_are_the_converters_flexbuffer_map():
    """What the test models write, pinned: one map, ints, float32 floats (the map's elements
    32 bits wide: no float64), bools, the keys sorted in the key vector whatever order the
    strings are stored in, no detections_per_class or use_regular_nms in the 2018 set."""
    for attrs in (COCO_2018, dict(sorted(COCO_2018.items(), reverse=True))):
        blob = converter_flexbuffer(attrs)
        assert blob[-2] == (9 << 2) | 2  # FBT_MAP, elements 32 bits
        root = flexbuffers.GetRoot(blob).AsMap
        assert [k.AsKey for k in root.Keys] == sorted(COCO_2018)
        decoded = flexbuffers.Loads(blob)
        assert decoded == COCO_2018
        assert {k: type(v) for k, v in decoded.items()} == \
            {k: type(v) for k, v in COCO_2018.items()}
    assert converter_flexbuffer(COCO_2018) == bytes(flexbuffers.Dumps(COCO_2018))


def test_the_2018_options_failed_in_tvms_converter_and_now_take_the_kernels_defaults():
    model = coco_postprocess(COCO_2018)
    from tvm.relax.frontend.tflite.tflite_flexbuffer import FlexBufferDecoder

    op = read_model(model).operators[0]
    assert "detections_per_class" not in FlexBufferDecoder(
        converter_flexbuffer(COCO_2018)).decode()  # what TVM's converter refused
    from canonqnn.frontends.tflite import _detection

    given = FlexBufferDecoder(_detection.tvm_options(op)).decode()
    # the key strings stored in another order: the same options
    reordered = coco_postprocess(dict(sorted(COCO_2018.items(), reverse=True)))
    assert reordered != model
    assert _detection.tvm_options(read_model(reordered).operators[0]) == \
        _detection.tvm_options(op)
    assert given["detections_per_class"] == 100 and given["use_regular_nms"] is False
    # the kernel keeps a score >= 1e-8, TVM's NMS one > its threshold: the float32 below
    assert np.float32(given["nms_score_threshold"]) == np.nextafter(np.float32(1e-8),
                                                                    np.float32(0))
    assert _check(model, [_feeds(192, 91, seed) for seed in range(3)]) == [10, 10, 10]


@pytest.mark.parametrize("options", [COCO_2018, EVERY_KEY], ids=["coco_2018", "every_key"])
@pytest.mark.parametrize("levels", [256, 3])
def test_coco_form_fast_nms_matches_the_interpreter(options, levels):
    """uint8 boxes, scores and anchors; 91 classes; random scores, or three levels (ties
    everywhere: in each anchor's best class and in the NMS order)."""
    model = coco_postprocess(options)
    counts = _check(model, [_feeds(192, 91, seed, levels) for seed in range(4)])
    assert all(0 < n <= 10 for n in counts)


def test_coco_form_regular_nms_matches_the_interpreter():
    """use_regular_nms: NMS per class, detections_per_class of each (the default 100 when
    absent), the best max_detections of all; tied scores across classes included."""
    options = {**COCO_2018, "use_regular_nms": True, "max_detections": 20}
    model = coco_postprocess(options, max_detections=20)
    feeds = [_feeds(192, 91, seed, levels) for seed in range(2) for levels in (256, 3)]
    assert all(n == 20 for n in _check(model, feeds))
    few = coco_postprocess({**options, "detections_per_class": 2}, max_detections=20)
    _check(few, feeds)


@pytest.mark.slow
def test_the_coco_detectors_size_matches_the_interpreter():
    """1917 anchors, 91 classes (detect.tflite's post-process)."""
    _check(coco_postprocess(COCO_2018, anchors=1917), [_feeds(1917, 91, 0)])


def test_constant_uint8_anchors_dequantize_with_their_zero_point():
    """A nonzero anchors zero point: the kernel reads ``(q - zp) * scale``."""
    model = coco_postprocess(COCO_2018, anchor_zero_point=37)
    _check(model, [_feeds(192, 91, seed) for seed in range(2)])


def test_scores_equal_to_the_threshold_are_kept_as_the_kernel_keeps_them():
    """nms_score_threshold 0.5 on the 1/256 grid: a score of 128/256 is kept (>=)."""
    model = coco_postprocess({**COCO_2018, "nms_score_threshold": 0.5, "max_detections": 20},
                             max_detections=20)
    rng = np.random.default_rng(3)
    feed = [rng.integers(0, 256, (1, 192, 4), dtype=np.uint8),
            rng.integers(0, 129, (1, 192, 91), dtype=np.uint8)]
    _, _, scores, count = run_tflite(model, feed)
    assert int(count[0]) > 0 and np.all(scores[0, :int(count[0])] == 0.5)
    _check(model, [feed])


def test_an_iou_equal_to_the_threshold_suppresses_nothing_as_in_the_kernel():
    """Two float boxes of IoU exactly 0.5 (the threshold): the kernel suppresses an IoU above
    it only, so both are detected."""
    g = GraphWriter()
    box = g.tensor("box", (1, 2, 4), "float32")
    cls = g.tensor("cls", (1, 2, 2), "float32")
    anchors = np.array([[0.5, 0.5, 1.0, 1.0], [0.5, 0.25, 1.0, 0.5]], np.float32)
    anchor = g.tensor("anchors", (2, 4), "float32", anchors)
    outs = [g.tensor(f"out{i}", shape, "float32")
            for i, shape in enumerate([(1, 2, 4), (1, 2), (1, 2), (1,)])]
    g.custom_op(SSD_POSTPROCESS, [box, cls, anchor], outs, converter_flexbuffer(
        {**COCO_2018, "num_classes": 1, "max_detections": 2, "nms_iou_threshold": 0.5}))
    model = g.finish([box, cls], outs)
    feed = [np.zeros((1, 2, 4), np.float32), np.array([[[0, 0.9], [0, 0.8]]], np.float32)]
    assert int(run_tflite(model, feed)[3][0]) == 2
    built = canonqnn.build(canonqnn.canonicalize(canonqnn.load(model))[0])
    got = list(built.run({"box": feed[0], "cls": feed[1]}).values())
    assert int(got[3][0]) == 2
    np.testing.assert_array_equal(got[0][0], [[0, 0, 1, 1], [0, 0, 1, 0.5]])


def _refused(model: bytes, reason: str) -> None:
    with pytest.raises(UnsupportedError, match=r"node '#0' \(op CUSTOM:"
                                               r"TFLite_Detection_PostProcess\): " + reason):
        canonqnn.load(model)


@pytest.mark.parametrize("options, kwargs, reason", [
    ({k: v for k, v in COCO_2018.items() if k != "y_scale"}, {},
     "custom options lack y_scale, which TFLite's kernel reads with no default"),
    ({**COCO_2018, "max_classes_per_detection": 2}, {},
     "max_classes_per_detection 2: TVM's converter writes one class per detection"),
    ({**COCO_2018, "nms_score_threshold": 0.0}, {}, "nms_score_threshold 0.0: TFLite's"),
    ({**COCO_2018, "nms_iou_threshold": 1.0}, {}, r"nms_iou_threshold 1.0: TFLite's"),
    ({**COCO_2018, "max_detections": 200}, {"max_detections": 200},
     "max_detections 200 exceeds the 192 candidate anchors"),
    (COCO_2018, {"anchor_dtype": "float32"},
     "anchors 'anchors' are float32 without quantization; with uint8 boxes TFLite's kernel "
     "reads the anchors' bytes as uint8"),
    (COCO_2018, {"score_dtype": "int8"}, "class predictions 'class_predictions' are int8; "
                                         "TFLite's kernel takes uint8 or float32"),
], ids=["missing_key", "classes_per_detection", "score_threshold_0", "iou_threshold_1",
        "more_detections_than_anchors", "float_anchors", "int8_scores"])
def test_what_cannot_be_converted_as_tflite_runs_it_is_refused(options, kwargs, reason):
    _refused(coco_postprocess(options, **kwargs), reason)


def test_int8_scores_fail_in_the_interpreter_too():
    """(the refusal above is TFLite's own: its kernel fails at Eval on int8 predictions)"""
    model = coco_postprocess(COCO_2018, score_dtype="int8")
    feed = _feeds(192, 91, 0)
    feed[1] = (feed[1].astype(np.int16) - 128).astype(np.int8)
    with pytest.raises(RuntimeError, match="TFLite_Detection_PostProcess"):
        run_tflite(model, feed)


def test_no_custom_options_are_refused():
    g = GraphWriter()
    box = g.tensor("box", (1, 4, 4), "float32")
    cls = g.tensor("cls", (1, 4, 2), "float32")
    anchor = g.tensor("anchors", (4, 4), "float32", _anchors(4, 0))
    outs = [g.tensor(f"out{i}", shape, "float32")
            for i, shape in enumerate([(1, 1, 4), (1, 1), (1, 1), (1,)])]
    g.custom_op(SSD_POSTPROCESS, [box, cls, anchor], outs, None)
    _refused(g.finish([box, cls], outs), r"no custom options \(TFLite's kernel reads")


def test_parity_on_the_coco_form_is_exact_but_for_the_float_boxes():
    result = canonqnn.parity(coco_postprocess(COCO_2018), runs=3)
    boxes, classes, scores, count = result.outputs
    assert count.exact_fraction == classes.exact_fraction == scores.exact_fraction == 1.0, \
        result.summary()
    assert boxes.max_abs_diff <= FLOAT_REGION_ULPS * np.spacing(np.float32(2.0))


def test_damaged_options_are_read_or_refused_with_a_named_error():
    """300 seeded flips of 1-3 bits inside the options: reading raises InvalidModelError (in
    canonqnn's words) or gives options that import or are refused by name, never another
    exception (the flexbuffers library reads out of bounds with its own errors)."""
    base = coco_postprocess(EVERY_KEY)
    blob = converter_flexbuffer(EVERY_KEY)
    at = base.index(blob)
    rng = np.random.default_rng(11)
    outcomes = {"damaged": 0, "read": 0}
    for _ in range(300):
        data = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            data[at + int(rng.integers(len(blob)))] ^= 1 << int(rng.integers(8))
        try:
            read_model(bytes(data))
        except InvalidModelError as exc:
            assert "FlexBuffer" in str(exc) and not re.search(r"\w+Error\b", str(exc)), exc
            outcomes["damaged"] += 1
            continue
        outcomes["read"] += 1
        with contextlib.suppress(CanonqnnError):
            canonqnn.load(bytes(data))
    assert min(outcomes.values()) > 20, outcomes
