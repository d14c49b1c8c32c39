"""Reading canonical modules in tests: the canonical op calls of ``main``, in order."""

from __future__ import annotations

from canonqnn import _tvm
from canonqnn.ops import lookup


def canonical_calls(mod) -> list[tuple[str, dict, object]]:
    """(op name, attributes, call) of every canonical op in ``main``, in order."""
    out = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = lookup(binding.value)
            if op is not None:
                out.append((op.name, _tvm.attrs_dict(binding.value), binding.value))
    return out


def lut_tables(mod) -> list[tuple[object, dict]]:
    """(table, attributes) of every canonical ``lut`` in ``main``, in order."""
    return [(_tvm.const_value(call.args[1]), attrs)
            for name, attrs, call in canonical_calls(mod) if name == "lut"]
