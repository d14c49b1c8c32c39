"""docs/models.md: which whole models convert, what stays float and why, and how close they are.

    python tests/e2e/models_table.py            # print the table
    python tests/e2e/models_table.py --write    # rewrite docs/models.md

Each row builds its model in code (``tests/_real_models.py``, ``canonqnn.testing.onnx_models``,
``canonqnn.testing.tflite_models``), converts it, builds it and compares it with its runtime on
seeded inputs: "bit-exact", or within the bound docs/parity.md argues for the model's own float
region (the table states the bound, never a host's measurement, so it reads the same on every
CPU but for the x86 class in the profile names), or the error that refuses it.
``tests/e2e/test_models_table.py`` keeps the file current.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "frontends" / "tflite"),
                str(HERE.parent / "frontends" / "torch")]

import _real_models as real  # noqa: E402
import canonqnn  # noqa: E402
from canonqnn.errors import CanonqnnError  # noqa: E402
from canonqnn.testing import onnx_models as models  # noqa: E402

DOC = HERE.parents[1] / "docs" / "models.md"
RUNS = 3
# docs/parity.md, "Float outputs of the model's own float region" / "Dynamic quantization
# after a float region": ulps of the output's largest magnitude.
BOUNDS = {"float region": 4, "dynamic after float": 2 ** 15}
# "16-bit activations (ONNX QDQ)": steps of the 16-bit output
# "Recurrent layers": steps of the softmax output after the recurrent layer
STEP_BOUNDS = {"16-bit steps": 4, "recurrent float island": 11}


@dataclass(frozen=True)
class Row:
    family: str
    fmt: str
    make: Callable[[], object]
    check: str = "exact"  # or a key of BOUNDS
    outputs: tuple[str, ...] | None = None  # cut the model there (load(outputs=...))


def _tflite(name: str, **kw):
    def make():
        from canonqnn.testing import tflite_models

        return tflite_models.ARCHITECTURES[name](**kw)
    return make


def _recurrent():
    import test_recurrent  # the recurrent models are written beside their tests

    return test_recurrent


def _converter(name: str):
    """A model of TensorFlow's converter (tests/fixtures/tflite_converter)."""
    return lambda: (HERE.parent / "fixtures" / "tflite_converter" / f"{name}.tflite").read_bytes()


def _pt2e(name: str):
    def make():
        import _pt2e  # the PT2E networks are written beside their tests

        _pt2e.quiet()
        return _pt2e.network(name)
    return make


def _yolo(nms: bool = False):
    return real.quantized_yolo(nms)


ROWS = [
    Row("ResNet-style CNN", "ONNX QDQ u8, per-channel", lambda: models.quantize(
        models.resnet_like(), fmt="qdq", activation="u8", per_channel=True)),
    Row("MobileNet-V3-style", "ONNX QOperator u8", lambda: models.quantize(
        models.mobilenet_v3_like(), fmt="qoperator", activation="u8", per_channel=False)),
    Row("YOLOv8-style detector (float box-decoding head)", "ONNX QDQ u8, head excluded",
        _yolo, "float region"),
    Row("YOLOv8-style detector ending in NonMaxSuppression", "ONNX QDQ u8", lambda: _yolo(True)),
    Row("YOLOv8-style detector ending in NonMaxSuppression, cut before it "
        f"(`--outputs {real.DETECTIONS}`)", "ONNX QDQ u8", lambda: _yolo(True), "float region",
        (real.DETECTIONS,)),
    Row("Transformer encoder as torch.onnx exports it", "ONNX QDQ u8", lambda: models.quantize(
        real.torch_transformer_like(), fmt="qdq", activation="u8", per_channel=True)),
    Row("Transformer encoder as torch.onnx exports it", "ONNX QOperator u8",
        lambda: models.quantize(real.torch_transformer_like(), fmt="qoperator", activation="u8",
                                per_channel=True)),
    Row("MLP", "ONNX quantize_dynamic s8", lambda: real.quantize_dynamic(real.mlp_like())),
    Row("Transformer encoder", "ONNX quantize_dynamic s8",
        lambda: real.quantize_dynamic(real.torch_transformer_like()), "dynamic after float"),
    Row("ResNet-style CNN", "ONNX quantize_dynamic u8 (ConvInteger)",
        lambda: real.quantize_dynamic(models.resnet_like(), "u8"), "dynamic after float"),
    Row("ResNet-style CNN", "ONNX QDQ int16 activations", lambda: real.quantize_16bit(
        models.resnet_like()), "16-bit steps"),
    Row("Transformer encoder", "ONNX QDQ uint16 activations", lambda: real.quantize_16bit(
        models.transformer_encoder_like(), "u16"), "16-bit steps"),
    Row("SSD-style detector ending in TFLite_Detection_PostProcess", "TFLite int8",
        real.ssd_like_tflite, "float region"),
    Row("SSD-style detector, uint8 box and class tensors into the post-processing",
        "TFLite uint8", lambda: real.ssd_like_tflite(dtype="uint8",
                                                     quantized_postprocess_inputs=True),
        "float region"),
    Row("MobileNet-V1 0.25 as today's converter writes it (shape subgraph)", "TFLite int8",
        _tflite("mobilenet_v1", alpha=0.25, size=64, shape_subgraph=True)),
    Row("MobileNet-V1 0.25", "TFLite uint8", _tflite("mobilenet_v1", alpha=0.25, size=64,
                                                     dtype="uint8")),
    Row("MobileNet-V2 0.35", "TFLite int8", _tflite("mobilenet_v2", size=64)),
    Row("Keyword-spotting LSTM (UNIDIRECTIONAL_SEQUENCE_LSTM -> FC -> SOFTMAX)", "TFLite int8",
        lambda: _recurrent().lstm_model(), "recurrent float island"),
    Row("SVDF -> SVDF -> FC", "TFLite int8", lambda: _recurrent().svdf_model(),
        "recurrent float island"),
    Row("MobileNet-V1 (TensorFlow 2.21 converter)", "TFLite int8", _converter("mobilenet_v1")),
    Row("MobileNet-V1 (TensorFlow 2.21 converter)", "TFLite uint8",
        _converter("mobilenet_v1_uint8")),
    Row("MobileNet-V3-style, hard-swish and squeeze-excite (TensorFlow 2.21 converter)",
        "TFLite int8", _converter("mobilenet_v3")),
    Row("ResNet-style CNN (TensorFlow 2.21 converter)", "TFLite int8", _converter("resnet")),
    Row("ResNet-style CNN (TensorFlow 2.21 converter)", "TFLite uint8",
        _converter("resnet_uint8")),
    Row("ResNet-style CNN (TensorFlow 2.21 converter)", "TFLite 16x8",
        _converter("resnet_16x8")),
    Row("SSD-style detector, TFLite_Detection_PostProcess as the COCO models configure it "
        "(TensorFlow 2.21 converter)", "TFLite int8", _converter("ssd")),
    Row("Keras transformer block (TensorFlow 2.21 converter)", "TFLite int8",
        _converter("transformer")),
    Row("16x8 convolution (int16 activations)", "TFLite 16x8", real.tflite_16x8_conv),
    Row("ResNet-style CNN (int16 residual ADDs)", "TFLite 16x8", _tflite("resnet",
                                                                       dtype="int16")),
    Row("ResNet-style classifier (residual ADDs, MEAN -> FULLY_CONNECTED -> SOFTMAX)",
        "TFLite 16x8", _tflite("resnet", dtype="int16", head="mean_softmax")),
    Row("CNN: conv+BN+relu, depthwise+relu6, residual add, pool, linear",
        "PT2E (XNNPACKQuantizer)", _pt2e("cnn")),
    Row("MobileNet-V2 (narrow)", "PT2E (XNNPACKQuantizer)", _pt2e("mobilenet_v2")),
    Row("Transformer encoder block", "PT2E (XNNPACKQuantizer)", _pt2e("encoder")),
    Row("Conv-transpose upsampling with a sigmoid gate", "PT2E (XNNPACKQuantizer)",
        _pt2e("gated_upsample")),
]

# What users of each format run by default, as parity names it
DEFAULT_RUNTIME = {"onnx": "onnxruntime 1.31, default session",
                   "tflite": "TFLite interpreter, default (XNNPACK delegate)",
                   "torch": "ExecuTorch, XNNPACK delegate"}


def _islands(report) -> str:
    if not report.float_islands:
        return "none"
    kinds = collections.Counter(i.op.removeprefix("relax.") for i in report.float_islands)
    reasons = sorted({"the model computes it in float" if "computed in float by the model"
                      in i.reason else i.reason.split(" (")[0] for i in report.float_islands})
    return ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) + " (" + \
        "; ".join(reasons) + ")"


def _ulps(model, mod, outputs) -> float:
    """Largest difference from the model's runtime (onnxruntime, or the TFLite interpreter
    configuration the module's profile reproduces, as parity runs them) over RUNS inputs, in
    ulps of each output's largest magnitude."""
    from canonqnn.frontends.onnx.oracle import expose_tensors, ort_session
    from canonqnn.frontends.tflite.oracle import runtimes as tflite_runtimes
    from canonqnn.io import module_io, random_inputs
    from canonqnn.numerics import recorded

    io, lib = module_io(mod), canonqnn.build(mod)
    names = [o.name for o in io.outputs]
    if io.source == "tflite":
        run = tflite_runtimes(model, io, recorded(mod))[0].run
    else:
        session, _ = ort_session(expose_tensors(model, names)[0])
        run = lambda feed: session.run(names, feed)  # noqa: E731
    worst = 0.0
    for seed in range(RUNS):
        feed = random_inputs(io, seed)
        got = lib.run(feed)
        for name, ref in zip(names, run(feed)):
            unit = np.spacing(np.float32(np.abs(ref).max()))
            worst = max(worst, float(np.abs(ref.astype(np.float64) - got[name]).max() / unit))
    return worst


def evaluate(row: Row) -> list[str]:
    """The row's cells: model, format, converts, canonical ops, float islands, the runtime
    users run and the profile compared with, result."""
    from canonqnn.numerics import recorded

    model = row.make()
    options = {"outputs": list(row.outputs)} if row.outputs else {}
    try:
        mod, report = canonqnn.canonicalize(canonqnn.load(model, **options))
    except CanonqnnError as exc:
        return [row.family, row.fmt, "refused", "", "", "",
                "; ".join(str(exc).splitlines())]
    from canonqnn.io import module_io

    profile = recorded(mod)
    runtime = f"{DEFAULT_RUNTIME[module_io(mod).source]}; `{profile.name if profile else '?'}`"
    ops = ", ".join(f"{k} x{n}" for k, n in sorted(report.canonical_ops.items()))
    if row.check == "exact":
        result = canonqnn.parity(model, runs=RUNS, **options)
        verdict = "bit-exact" if result.exact else \
            "differs: " + ", ".join(f"{o.name} {o.exact_fraction:.4%}" for o in result.outputs)
    elif row.check in STEP_BOUNDS:
        bound = STEP_BOUNDS[row.check]
        worst = max(o.max_abs_diff for o in canonqnn.parity(model, runs=RUNS, **options).outputs)
        verdict = f"within {bound} steps of the output's quantization (docs/parity.md)" \
            if worst <= bound else f"OUTSIDE the {row.check} bound of {bound}"
    else:
        bound = BOUNDS[row.check]
        within = _ulps(model, mod, row.outputs) <= bound
        verdict = f"within {bound} ulps of the largest magnitude ({row.check}, docs/parity.md)" \
            if within else f"OUTSIDE the {row.check} bound of {bound} ulps"
    return [row.family, row.fmt, "yes", ops, _islands(report), runtime, verdict]


HEADER = """# Whole models: what converts, what stays float, how close it is

Generated by `python tests/e2e/models_table.py --write` (kept current by
`tests/e2e/test_models_table.py`). Each model is built in code the way public exporters and
quantizers write it, or read from `tests/fixtures` (TensorFlow's converter); "bit-exact" is
over seeded random inputs against the runtime its users run by default, as `canonqnn parity`
runs it (onnxruntime's default session; the TFLite interpreter's default configuration, with
its XNNPACK delegate on x86-64; ExecuTorch's XNNPACK delegate), converted for the numerics
profile of that runtime on the host the table was computed on (column "runtime; profile":
what users run, and the profile compared; docs/parity.md says what each computes); a bound
is the one docs/parity.md argues for float computed by the model itself.

| model | format | converts | canonical ops | float islands (why) | runtime; profile | against it |
|---|---|---|---|---|---|---|
"""

FOOTER = """
What still refuses, and why (each raises the error naming node, op and reason):

- **TFLite 16x8 models** (int16 activations, integer kernels in the interpreter): CONV_2D,
  DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD, MEAN, SOFTMAX, LOGISTIC, TANH, LEAKY_RELU, QUANTIZE
  and data movement are canonical int16 ops; the other int16 builtins (MUL, SUB, the pools,
  CONCATENATION, ...) stay named float islands; an int32 bias without its
  `quantized_bias_type` and an int16 ADD on TFLite's power-of-two kernel are refused.
- **ONNX `NonMaxSuppression`** (TVM's converter returns a fixed-size padded result,
  onnxruntime a run-time-sized one): the error names the tensors the post-processing reads;
  `--outputs` (`load(outputs=[...])`) converts the model up to them. TFLite's
  `TFLite_Detection_PostProcess` has fixed-size outputs and converts (TVM's converter, a float
  island; the entries past the detection count, which TFLite leaves undefined, are compared
  as 0).
- **TFLite operators with quantized tensors that canonqnn has no converter for** (quantized
  EXP, DIV, ...): TVM's converters compute on float tensors only, so they are refused, named;
  float ones convert through TVM's converters.
- **ONNX QuantizeLinear with a scale computed at run time** (DynamicQuantizeLinear written out
  as its function expansion): use the DynamicQuantizeLinear operator.
"""


def table() -> str:
    lines = ["| " + " | ".join(cell.replace("|", "/") for cell in evaluate(row)) + " |"
             for row in ROWS]
    return HEADER + "\n".join(lines) + "\n" + FOOTER


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC}")
    args = parser.parse_args()
    text = table()
    if args.write:
        DOC.write_text(text)
        print(f"wrote {DOC}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
