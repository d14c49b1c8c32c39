"""The build's layout pass: convs run channels-last where that is faster, and chains of them
pass NHWC activations to each other without transposing (docs/build.md, "Layout").

The canonical ops pattern authors see stay NCHW: the pass runs inside ``builder.fuse``,
before the canonical ops are legalized. Of the convs ``channels_last_form`` names on the
target, the pass keeps those whose results are read only by other kept convs, or are small
(at most ``SMALL_PLANE`` outputs a channel: a transpose of them costs little), and, for a
depthwise conv, whose input comes from a kept conv or is small. Each kept conv is legalized
here into its NHWC kernel (``legalize_channels_last``, of ``forms.channels_last``): a 1x1 conv
reads its input NHWC from the kept conv that produced it, else NCHW (its pack interleaves it);
a depthwise conv reads it NHWC, transposed where no kept conv produced it. The NCHW result of
a kept conv is its NHWC output transposed, left for consumers that read it NCHW (unused ones are
removed).
"""

from __future__ import annotations

from typing import Any

from .. import _tvm
from ..ops import _registry, conv
from .forms.channels_last import ChannelsLast, channels_last_form, legalize_channels_last

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
SMALL_PLANE = 49  # 7x7: 1,024 channels of it transposed in ~15 us (AVX512-VNNI, one thread)


def channels_last(mod: Any) -> Any:
    """``mod`` with the convs ``plan`` keeps run channels-last (on the current target:
    ``builder.fuse`` runs this pass inside it). Each kept conv's NHWC result is its twin: the
    convs after it read that instead of transposing its NCHW result back."""
    walk = _tvm.CallWalk(mod)
    for gv, func in list(mod.functions_items()):
        if not _tvm.is_function(func):
            continue
        kept = plan(func)
        twins: dict[Any, Any] = {}
        pending: dict[Any, Any] = {}

        def rewrite(var: Any, call: Any, kept=kept, twins=twins, pending=pending) -> Any:
            found = _rewrite(walk.builder, var, call, kept, twins)
            if found is None:
                return None
            value, pending[var] = found
            return value

        def bound(var: Any, new_var: Any, twins=twins, pending=pending) -> None:
            if var in pending:  # (the variable of a conv rewritten: the walk renamed it)
                twins[new_var] = pending.pop(var)

        walk.rewrite(gv, func, rewrite, bound)
    return walk.module()


def plan(func: Any) -> dict[Any, ChannelsLast]:
    """``{variable: how}`` of the conv bindings of ``func`` that run channels-last (module
    doc): the convs ``channels_last_form`` names, less those that would transpose a
    large tensor, until none would."""
    bindings, users = _tvm.call_bindings(func)
    forms, inputs = {}, {}
    for var, call in bindings:
        if _registry.lookup(call) is conv.CONV2D and (how := channels_last_form(call)):
            forms[var], inputs[var] = how, call.args[0]
    kept = set(forms)

    def plane(value: Any) -> int:
        _, _, h, w = _tvm.shape_of(value)
        return h * w

    changed = True
    while changed:
        changed = False
        for var in list(kept):
            leaves = any(user not in kept for user in users.get(var, []))
            enters = forms[var].form == "depthwise" and inputs[var] not in kept
            if (leaves and plane(var) > SMALL_PLANE) or (
                    enters and plane(inputs[var]) > SMALL_PLANE):
                kept.discard(var)
                changed = True
    return {var: forms[var] for var in kept}


def _rewrite(bb: Any, var: Any, call: Any, kept: dict[Any, ChannelsLast],
             twins: dict[Any, Any]) -> tuple[Any, Any] | None:
    how = kept.get(var) if var is not None else None
    if how is None or _registry.lookup(call) is not conv.CONV2D:
        return None
    x = call.args[0]
    x_nhwc = twins.get(x)
    if x_nhwc is None and how.form == "depthwise":
        x_nhwc = bb.emit(_tvm.permute_dims(x, TO_NHWC))
    y_nhwc = legalize_channels_last(bb, call, x if x_nhwc is None else x_nhwc, how,
                                    nchw_input=x_nhwc is None)
    return _tvm.permute_dims(y_nhwc, TO_NCHW), y_nhwc
