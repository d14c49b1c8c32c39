"""Ops with no canonical int8 form: they stay float islands, with the reason named.

Each entry says why the op is declined; docs/declined-ops.md says what a canonical form for it
would take.
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn.qdq import QUANTIZE

from ._engine import Context, Decline, Rule
from ._match import output

DECLINED = {
    "relax.nn.layer_norm": (
        "layer normalization has no canonical int8 op: the per-row mean, variance and "
        "1/sqrt need 32-bit sums and a reciprocal square root that onnxruntime computes in "
        "float (see docs/declined-ops.md)"),
}


def name_island(ctx: Context, call: Any):
    out = output(call)
    if out is None:
        return None
    reason = DECLINED.get(_tvm.op_name(ctx.value(out.operand)) or "")
    return None if reason is None else Decline(reason, out.operand)


RULES = (
    Rule("declined", QUANTIZE, name_island, "q(layer_norm(...)): float island, reason named"),
)
