"""Fold integer clamps into the epilogue of the op that produces their input.

    canonqnn.requantize(y, same params, [lo, hi])  with y = conv2d|matmul|add|mul|sub(...)
        -> that op with act_min/act_max narrowed to [lo, hi]

A relu/clip that a model quantizes on its own (Q/DQ between the op and the activation) becomes
a ``requantize`` that only clamps; when it is the sole consumer of an op that clamps anyway,
the two are one op. Lookup tables stay separate canonical ops (pattern authors match
``conv2d -> lut`` as a group); the build fuses them into the producer's kernel.
"""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm
from canonqnn._tvm import relax
from canonqnn.ops import PREFIX, absorbing, lookup

from ._engine import Context, Rule
from ._match import Refolded, build_refolded

REQUANTIZE = PREFIX + "requantize"
PRODUCERS = absorbing("absorbs_clamp")  # ops that apply their own [act_min, act_max]


def clamped_producer(ctx: Context, call: Any):
    a = _tvm.attrs_dict(call)
    if (a["in_scale"], a["in_zp"]) != (a["out_scale"], a["out_zp"]):
        return None  # a real change of parameters: composing two roundings is not exact
    x = call.args[0]
    producer = ctx.value(x)
    while isinstance(producer, relax.Var):  # an earlier fold may have left an alias
        if not ctx.single_use(x) or ctx.value(producer) is producer:
            return None  # shared, or a function parameter
        x, producer = producer, ctx.value(producer)
    op = lookup(producer)
    if op is None or op.name not in PRODUCERS or not ctx.single_use(x):
        return None
    p = _tvm.attrs_dict(producer)
    if p.get("out_dtype", "int8") == "int32" or "act_min" not in p:  # int8, or int16 (16x8)
        return None
    if (p["out_scale"], p["out_zp"]) != (a["in_scale"], a["in_zp"]):
        return None
    lo, hi = max(p["act_min"], a["act_min"]), min(p["act_max"], a["act_max"])
    if lo > hi:  # the clamp maps everything to one value; leave both ops, they are exact
        return None
    return Refolded(producer, list(producer.args), dict(p, act_min=lo, act_max=hi))


RULES = (
    Rule("epilogue_clamp", REQUANTIZE, (clamped_producer,), build_refolded,
         "requantize(op(...), same params, [lo, hi]) -> op with its clamp narrowed",
         phase="epilogue"),
)
