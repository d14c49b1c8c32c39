"""The build's layout pass: convs run channels-last where that is faster, and chains of them
pass NHWC activations to each other without transposing (docs/build.md, "Layout").

The canonical ops pattern authors see stay NCHW: the pass runs inside ``builder.fuse``,
before the canonical ops are legalized. Of the convs ``channels_last_form`` names on the
target and the residual adds between them (operands and result of one shape: an add computes
the same in any layout), the pass keeps those whose results are read only by other kept ones,
or are small (at most ``SMALL_PLANE`` outputs a channel: a transpose of them costs little),
and, for a depthwise conv or an add, whose inputs come from kept ones or are small. Each kept
conv is legalized here into its NHWC kernel (``legalize_channels_last``, of
``forms.channels_last``): a 1x1 conv reads its input NHWC from the kept one that produced
it, else NCHW (its pack interleaves it); a depthwise conv and an add read it NHWC, transposed
where no kept one produced it. The NCHW result of a kept one is its NHWC output transposed,
left for consumers that read it NCHW (unused ones are removed)."""

from __future__ import annotations

from typing import Any

from .. import _tvm
from ..ops import _registry, conv, elementwise
from .forms.channels_last import ChannelsLast, channels_last_form, legalize_channels_last

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
SMALL_PLANE = 49  # 7x7: 1,024 channels of it transposed in ~15 us (AVX512-VNNI, one thread)
ELEMENTWISE = "elementwise"  # a kept add: any layout, so NHWC where its operands are


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


def plan(func: Any) -> dict[Any, ChannelsLast | str]:
    """``{variable: how}`` of the bindings of ``func`` that run channels-last (module doc):
    the convs ``channels_last_form`` names and the residual adds (``ELEMENTWISE``: both
    operands and the result of one 4-D shape) that a kept conv feeds, less those that would
    transpose a large tensor, until none would."""
    bindings, users = _tvm.call_bindings(func)
    forms: dict[Any, ChannelsLast | str] = {}
    inputs: dict[Any, list[Any]] = {}
    for var, call in bindings:
        op = _registry.lookup(call)
        if op is conv.CONV2D and (how := channels_last_form(call)):
            forms[var], inputs[var] = how, [call.args[0]]
        elif op is elementwise.ADD and _same_planes(var, call.args):
            forms[var], inputs[var] = ELEMENTWISE, list(call.args)
    kept = set(forms)

    def plane(value: Any) -> int:
        _, _, h, w = _tvm.shape_of(value)
        return h * w

    def reads_nhwc(var: Any) -> bool:  # (a pointwise conv packs an NCHW input itself)
        how = forms[var]
        return how == ELEMENTWISE or getattr(how, "form", None) == "depthwise"

    changed = True
    while changed:
        changed = False
        for var in list(kept):
            leaves = any(user not in kept for user in users.get(var, []))
            enters = reads_nhwc(var) and any(
                value not in kept and plane(value) > SMALL_PLANE for value in inputs[var])
            # an add gains nothing channels-last unless a channels-last conv feeds it
            idle = forms[var] == ELEMENTWISE and not any(v in kept for v in inputs[var])
            if (leaves and plane(var) > SMALL_PLANE) or enters or idle:
                kept.discard(var)
                changed = True
    return {var: forms[var] for var in kept}


def _same_planes(var: Any, args: Any) -> bool:
    shape = _tvm.shape_of(var)
    return len(shape) == 4 and all(_tvm.shape_of(arg) == shape for arg in args)


def _rewrite(bb: Any, var: Any, call: Any, kept: dict[Any, ChannelsLast | str],
             twins: dict[Any, Any]) -> tuple[Any, Any] | None:
    how = kept.get(var) if var is not None else None
    if how is None:
        return None

    def nhwc(value: Any) -> Any:  # the value NHWC: its twin, else transposed in
        twin = twins.get(value)
        return bb.emit(_tvm.permute_dims(value, TO_NHWC)) if twin is None else twin

    if how == ELEMENTWISE:  # the same op on the NHWC operands
        y_nhwc = bb.emit(_tvm.make_call(call.op, [nhwc(arg) for arg in call.args],
                                        _tvm.attrs_dict(call)))
        return _tvm.permute_dims(y_nhwc, TO_NCHW), y_nhwc
    assert isinstance(how, ChannelsLast)
    x = call.args[0]
    x_nhwc = twins.get(x)
    if x_nhwc is None and how.form == "depthwise":
        x_nhwc = nhwc(x)
    y_nhwc = legalize_channels_last(bb, call, x if x_nhwc is None else x_nhwc, how,
                                    nchw_input=x_nhwc is None)
    return _tvm.permute_dims(y_nhwc, TO_NCHW), y_nhwc
