"""Kernel forms chosen by measurement (``build --tune``): for each conv, the form of
``forms.conv`` (``conv.layouts``) that ran fastest on this machine, over the one its rules
pick. The rules are measured on one CPU and one set of shapes (docs/build.md); a choice
measured here holds for this CPU and this conv's shape (``form_key``), whatever the weights.

``chosen(choices)`` makes the build's legalization take them (``chosen_form``); the
measurements and their record are ``build.form_tuning``'s.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from ... import _tvm
from .. import targets
from ..isa import isa_for

_CHOSEN: ContextVar[dict[str, str] | None] = ContextVar("canonqnn_chosen_forms", default=None)


def form_key(call: Any) -> str:
    """What a conv's kernel time depends on, as text: its operands' shapes and types, the
    attributes that shape its loops, and the ISA it runs on (under the current target)."""
    a = _tvm.attrs_dict(call)
    has_feature = targets.current_target_features()
    isa = isa_for(has_feature) if has_feature is not None else None
    x, w, bias = call.args[:3]
    return json.dumps({
        "op": _tvm.op_name(call), "x": [_tvm.dtype_of(x), list(_tvm.shape_of(x))],
        "w": [_tvm.dtype_of(w), list(_tvm.shape_of(w))], "bias": _tvm.dtype_of(bias),
        **{name: _tvm.to_python(a[name]) for name in ("strides", "padding", "dilation",
                                                      "groups", "out_dtype")},
        "isa": None if isa is None else isa.name}, sort_keys=True)


@contextlib.contextmanager
def chosen(choices: dict[str, str]) -> Iterator[None]:
    """Within: the legalization of a conv whose ``form_key`` ``choices`` holds takes that
    form (where the conv can take it; else its rules' form)."""
    token = _CHOSEN.set(choices)
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def chosen_form(call: Any) -> str | None:
    """The form chosen for ``call`` (``chosen``), or None."""
    choices = _CHOSEN.get()
    return None if not choices else choices.get(form_key(call))
