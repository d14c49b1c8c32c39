"""Ops with no canonical int8 form: they stay float islands, with the reason named.

Each entry says why the op is declined; docs/declined-ops.md says what a canonical form for it
would take.
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn.ops import Q31_ROUNDINGS
from canonqnn.qdq import QUANTIZE, read_quantize

from ._engine import Context, Decline, Rule
from ._match import output

DECLINED = {
    "relax.nn.layer_norm": (
        "layer normalization has no canonical int8 op: the per-row mean, variance and "
        "1/sqrt need 32-bit sums and a reciprocal square root that the source runtime "
        "computes in float (see docs/declined-ops.md)"),
}


# Source operators a frontend writes as float ops (the output quantize records the operator,
# ``source_op``): the island ends at that quantize, named after the operator.
DECLINED_SOURCE_OPS = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (
        "TFLite's int8 LSTM keeps its gates, cell and hidden state in int16 fixed point "
        "(Q3.12 gates, gemmlowp sigmoid and tanh, a power-of-two cell scale) and no canonical "
        "op computes that: imported as float ops unrolled over the time steps, its stored "
        "values rounded to their int16/int8 grids (within 1 LSB of TFLite, docs/parity.md)"),
    "SVDF": (
        "TFLite's int8 SVDF stores its feature activations as int16 and no canonical op "
        "computes its int16 state: imported as float ops from the zero state, the int16 "
        "activation rounded to its grid (within 1 LSB of TFLite, docs/parity.md)"),
}


SIXTEEN_BIT = ("16-bit quantization: onnxruntime computes the ops between 16-bit "
               "DequantizeLinear and QuantizeLinear in float, and so does the build "
               "(docs/parity.md)")
TFLITE_SIXTEEN_BIT = ("TFLite 16x8: canonqnn implements the int16 kernels of CONV_2D, "
                      "DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD, MEAN, SOFTMAX, LOGISTIC, TANH, "
                      "LEAKY_RELU, QUANTIZE and data movement (RESHAPE, TRANSPOSE, PAD, "
                      "STRIDED_SLICE, GATHER, GATHER_ND) only; this int16 op runs in float "
                      "between its dequantize and quantize (docs/declined-ops.md)")


def name_island(ctx: Context, call: Any):
    """A Decline naming why the chain at ``call`` stays float, or None: never a match."""
    parsed = read_quantize(call)
    if parsed is not None and parsed.qparams.dtype == "int16":
        operand = ctx.value(parsed.operand)
        reason = TFLITE_SIXTEEN_BIT if ctx.rounding in Q31_ROUNDINGS else SIXTEEN_BIT
        return Decline(reason, parsed.operand) if _tvm.op_name(operand) else None
    out = output(call)
    if out is None:
        return None
    declined = DECLINED.get(_tvm.op_name(ctx.value(out.operand)) or "") or \
        DECLINED_SOURCE_OPS.get(ctx.source_op() or "")
    return None if declined is None else Decline(declined, out.operand)


def never_folds(ctx: Context, match: Any) -> Any:
    raise AssertionError("the islands rule only names float islands")  # (name_island never matches)


RULES = (
    Rule("declined", QUANTIZE, (name_island,), never_folds,
         "q(layer_norm(...)), a recurrent layer's output: float island, reason named",
         phase="epilogue"),
)
