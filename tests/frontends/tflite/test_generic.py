"""Operators with no quantized tensor through TVM's TFLite converters
(frontends/tflite/_generic.py): float pre- and post-processing around the quantized layers and
a detector's TFLite_Detection_PostProcess import as named float islands and agree with the
interpreter within the bound docs/parity.md argues for float computed by the model (4 ulps of
the output's largest magnitude); the detections themselves (count, classes, scores) exactly."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from _real_models import ssd_like_tflite
from _tflite import run_tflite
from canonqnn.errors import UnsupportedError
from canonqnn.testing.tflite_writer import GraphWriter

FLOAT_REGION_ULPS = 4  # docs/parity.md, "Float outputs of the model's own float region"


def test_float_pre_and_post_processing_import_through_tvms_converters_as_float_islands():
    """float normalization -> QUANTIZE -> int8 FULLY_CONNECTED -> DEQUANTIZE -> float LOGISTIC,
    EXP, DIV, CONCATENATION (on an NCHW-held tensor's values): the float operators are TVM's
    converters, named as float islands; the quantized layer is canonical; the interpreter's
    float kernels agree within the bound of docs/parity.md."""
    rng = np.random.default_rng(0)
    g = GraphWriter()
    x = g.tensor("x", (1, 2, 2, 8), "float32")
    mean = g.tensor("mean", (8,), "float32", rng.uniform(0, 1, 8).astype(np.float32))
    centred = g.tensor("centred", (1, 2, 2, 8), "float32")
    g.op("SUB", [x, mean], [centred], fusedActivationFunction="NONE")
    q = g.tensor("q", (1, 2, 2, 8), "int8", scale=0.01, zero_point=-3)
    g.op("QUANTIZE", [centred], [q])
    w = g.tensor("w", (6, 32), "int8", rng.integers(-127, 128, (6, 32)), scale=0.02,
                 zero_point=0)
    b = g.tensor("b", (6,), "int32", rng.integers(-500, 500, 6), scale=0.0002, zero_point=0)
    fc = g.tensor("fc", (1, 6), "int8", scale=0.05, zero_point=1)
    g.op("FULLY_CONNECTED", [q, w, b], [fc], fusedActivationFunction="NONE")
    real = g.tensor("real", (1, 6), "float32")
    g.op("DEQUANTIZE", [fc], [real])
    sig, ex = g.tensor("sig", (1, 6), "float32"), g.tensor("ex", (1, 6), "float32")
    g.op("LOGISTIC", [real], [sig])
    g.op("EXP", [real], [ex])
    ratio, out = g.tensor("ratio", (1, 6), "float32"), g.tensor("out", (1, 12), "float32")
    g.op("DIV", [ex, sig], [ratio])
    g.op("CONCATENATION", [sig, ratio], [out], axis=1, fusedActivationFunction="NONE")
    model = g.finish([x], [out])

    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert report.canonical_ops["matmul"] == 1
    islands = {i.op for i in report.float_islands}
    assert {"relax.subtract", "relax.sigmoid", "relax.exp", "relax.divide",
            "relax.concat"} <= islands, report.summary()
    built = canonqnn.build(mod)
    for seed in range(3):
        feed = np.random.default_rng(seed).uniform(0, 1, (1, 2, 2, 8)).astype(np.float32)
        want = run_tflite(model, [feed])[0]
        got = built.run({"x": feed})["out"]
        np.testing.assert_array_max_ulp(got, want, maxulp=4)


def _within_ulps(got: np.ndarray, want: np.ndarray, ulps: int) -> bool:
    unit = np.spacing(np.float32(np.abs(want).max()))
    return bool(np.abs(got.astype(np.float64) - want).max() <= ulps * unit)


@pytest.mark.parametrize("variant", [
    # the default detector (fast NMS, float inputs): by default through
    # test_parity_compares_the_undefined_detection_slots_as_zero, the same backbone's counts
    # through the other variants; this check of it runs under -m slow
    pytest.param({}, marks=pytest.mark.slow), {"use_regular_nms": True},
    {"dtype": "uint8", "quantized_postprocess_inputs": True},  # uint8 boxes, scores, anchors
])
def test_ssd_detector_postprocess_is_tvms_converter_and_matches_the_interpreter(variant):
    """int8 backbone and heads canonical; TFLite_Detection_PostProcess (fast or regular NMS;
    float or uint8 inputs, which it dequantizes) as TVM converts it: the same detection count,
    classes and scores as the interpreter, boxes within the float bound."""
    model = ssd_like_tflite(**variant)
    mod, report = canonqnn.canonicalize(canonqnn.load(model), numerics="tflite-reference")
    assert report.canonical_ops["conv2d"] == 4 and report.canonical_ops["lut"] == 1
    assert report.float_islands, report.summary()
    built = canonqnn.build(mod)
    for seed in range(4):
        feed = np.random.default_rng(seed).uniform(0, 1, (1, 32, 32, 3)).astype(np.float32)
        boxes, classes, scores, count = run_tflite(model, [feed])
        got = list(built.run({"input": feed}).values())
        n = int(count[0])
        assert n > 0 and int(got[3][0]) == n
        np.testing.assert_array_equal(got[1][0, :n], classes[0, :n])
        np.testing.assert_array_equal(got[2][0, :n], scores[0, :n])
        assert _within_ulps(got[0][0, :n], boxes[0, :n], FLOAT_REGION_ULPS)


def test_parity_compares_the_undefined_detection_slots_as_zero():
    """TFLite leaves the entries past the detection count as the buffer held them; parity
    compares them as 0, what the build writes, so classes, scores and count are exact."""
    result = canonqnn.parity(ssd_like_tflite(), runs=3)
    boxes, classes, scores, count = result.outputs
    assert count.exact_fraction == classes.exact_fraction == scores.exact_fraction == 1.0, \
        result.summary()
    assert boxes.max_abs_diff <= FLOAT_REGION_ULPS * np.spacing(np.float32(1.0))


def test_an_operator_with_quantized_tensors_is_never_given_to_tvm():
    """A quantized EXP has no canonqnn converter: refused by name, though TVM converts a float
    one (its converter would compute on the stored integers)."""
    g = GraphWriter()
    x = g.tensor("x", (1, 4), "int8", scale=0.1, zero_point=0)
    y = g.tensor("y", (1, 4), "float32")
    g.op("EXP", [x], [y])
    with pytest.raises(UnsupportedError, match=r"\(op EXP\): quantized: canonqnn has no "
                                                r"converter for it, and TVM's converts it on "
                                                r"float tensors only"):
        canonqnn.load(g.finish([x], [y]))
