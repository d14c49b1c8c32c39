"""``TFLite_Detection_PostProcess`` as TFLite's kernel reads it, handed to TVM's converter.

The kernel reads its FlexBuffer options by key, with defaults for the two keys older exports
omit (``detections_per_class`` 100, ``use_regular_nms`` false: the object detection API's
2018 exports, e.g. the COCO SSD-MobileNet ``detect.tflite``, write neither). TVM's converter
requires every key and decodes the options with its own partial FlexBuffer reader, so the
options are read here (``reader``), normalized as the kernel reads them (ints truncated, floats
as float32, the defaults filled) and given to TVM re-encoded, holding only the keys it reads.

Two comparisons differ: the kernel keeps a score ``>= nms_score_threshold`` and suppresses
an IoU ``> nms_iou_threshold``; TVM's NMS keeps a score ``>`` its threshold and suppresses an
IoU ``>=`` its threshold. TVM is given the float32 neighbours (the largest float32 below the
score threshold, the smallest above the IoU threshold), which make its comparisons of float32
values the kernel's. The cases that cannot be made the same are refused (``refusal``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flatbuffers import flexbuffers

from .reader import Operator, Tensor

# Keys the kernel reads with no default (an absent one reads as 0)
REQUIRED_INTS = ("max_detections", "max_classes_per_detection", "num_classes")
REQUIRED_FLOATS = ("nms_score_threshold", "nms_iou_threshold", "y_scale", "x_scale",
                   "h_scale", "w_scale")
# The kernel's defaults for the keys older exports omit (kNumDetectionsPerClass, and fast NMS)
DEFAULTS: dict[str, Any] = {"detections_per_class": 100, "use_regular_nms": False}
REAL_TYPES = ("uint8", "float32")  # the kernel's box and score types (others fail at Eval)


def _int32(value: Any) -> int:
    """``flexbuffers::Reference::AsInt32``: floats truncated, then the low 32 bits."""
    return int(np.int64(int(value)).astype(np.int32))


def _float32(value: Any) -> float:
    return float(np.float32(value))


def options(op: Operator) -> dict[str, Any]:
    """The options as the kernel holds them (``Unsupported`` reasons: ``refusal``)."""
    found = op.custom_options or {}
    scalars = (bool, int, float)
    values: dict[str, Any] = {}
    for key in REQUIRED_INTS + REQUIRED_FLOATS + tuple(DEFAULTS):
        value = found.get(key, DEFAULTS.get(key))
        if not isinstance(value, scalars) or (isinstance(value, float) and
                                              not np.isfinite(value)):
            continue
        if key == "use_regular_nms":
            values[key] = bool(value)
        elif key in REQUIRED_FLOATS:
            values[key] = _float32(value)
        elif abs(value) < 2.0 ** 63:
            values[key] = _int32(value)
    if not values.get("use_regular_nms") and values.get("detections_per_class", 0) <= 0:
        # fast NMS never reads it; TVM's converter requires it positive
        values["detections_per_class"] = DEFAULTS["detections_per_class"]
    return values


def refusal(op: Operator, tensors: list[Tensor]) -> str | None:
    """Why canonqnn does not convert this operator as TFLite runs it, or None."""
    if op.custom_options is None:
        return "no custom options (TFLite's kernel reads its parameters from them)"
    found = op.custom_options
    values = options(op)
    missing = [k for k in REQUIRED_INTS + REQUIRED_FLOATS if k not in found]
    if missing:
        return (f"custom options lack {', '.join(missing)}, which TFLite's kernel reads with "
                "no default")
    unread = [k for k in REQUIRED_INTS + REQUIRED_FLOATS + tuple(DEFAULTS)
              if k in found and k not in values]
    if unread:
        return f"custom options {', '.join(unread)} are not finite numbers"
    if len(op.inputs) != 3 or len(op.outputs) != 4 or min(op.inputs) < 0:
        return "TFLite's kernel takes 3 inputs (boxes, scores, anchors) and 4 outputs"
    box, score, anchor = (tensors[i] for i in op.inputs)
    for what, t in (("box encodings", box), ("class predictions", score)):
        if t.dtype not in REAL_TYPES:
            return (f"{what} {t.name!r} are {t.dtype}; TFLite's kernel takes uint8 or float32 "
                    "(and fails on others)")
        if t.quantized and t.scale.size != 1:
            return f"{what} {t.name!r} are quantized per axis; the kernel reads one scale"
    if len(box.shape) != 3 or box.shape[0] != 1 or box.shape[2] != 4:
        return (f"box encodings of shape {list(box.shape)}: TVM's converter decodes [1, "
                "anchors, 4] (batch 1, no keypoints)")
    if len(score.shape) != 3 or score.shape[:2] != box.shape[:2] or \
            score.shape[2] - values["num_classes"] not in (0, 1):
        return (f"class predictions of shape {list(score.shape)}: TFLite's kernel takes [1, "
                f"{box.shape[1]}, num_classes {values['num_classes']} (+ 1 background)]")
    if len(anchor.shape) != 2 or anchor.shape != (box.shape[1], 4):
        return f"anchors of shape {list(anchor.shape)}: the kernel reads [{box.shape[1]}, 4]"
    if box.dtype == "float32" and anchor.dtype != "float32":
        return f"anchors {anchor.name!r} are {anchor.dtype}; with float32 boxes TFLite's " \
               "kernel requires float32 anchors"
    if box.dtype == "uint8" and not (anchor.dtype == "uint8" and anchor.quantized
                                     and anchor.scale.size == 1):
        return (f"anchors {anchor.name!r} are {anchor.dtype}"
                f"{'' if anchor.quantized else ' without quantization'}; with uint8 boxes "
                "TFLite's kernel reads the anchors' bytes as uint8 with their one scale and "
                "zero point")
    if values["max_classes_per_detection"] != 1:
        return (f"max_classes_per_detection {values['max_classes_per_detection']}: TVM's "
                "converter writes one class per detection")
    regular = values["use_regular_nms"]
    candidates = box.shape[1] * (values["num_classes"] if regular else 1)
    if values["max_detections"] > candidates:
        return (f"max_detections {values['max_detections']} exceeds the {candidates} "
                f"candidate {'anchor-class pairs' if regular else 'anchors'}: TVM's converter "
                "takes max_detections of them")
    if not 0.0 < values["nms_iou_threshold"] < 1.0:
        return (f"nms_iou_threshold {values['nms_iou_threshold']}: TFLite's kernel refuses one "
                "outside (0, 1], and at 1 suppresses nothing where TVM's NMS suppresses "
                "identical boxes")
    if values["nms_score_threshold"] <= 0.0:
        return (f"nms_score_threshold {values['nms_score_threshold']}: TFLite's kernel keeps "
                "and suppresses boxes scoring <= 0 at this threshold, TVM's NMS never "
                "suppresses them")
    return None


def tvm_options(op: Operator) -> bytes:
    """The FlexBuffer map TVM's converter reads: the kernel's options with the comparison
    thresholds moved to their float32 neighbours (module docstring)."""
    values = options(op)
    score = np.float32(values["nms_score_threshold"])
    iou = np.float32(values["nms_iou_threshold"])
    values["nms_score_threshold"] = float(np.nextafter(score, np.float32(-np.inf)))
    values["nms_iou_threshold"] = float(np.nextafter(iou, np.float32(np.inf)))
    del values["max_classes_per_detection"]  # (TVM writes one class per detection)
    return bytes(flexbuffers.Dumps(values))
