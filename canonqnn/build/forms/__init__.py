"""The build's kernel forms: for each canonical call, the kernel it runs as on the target.

A canonical op's own legalization (``CanonicalOp.legalize``) is its meaning written as integer
TE, the plain loop nest any target gets. Where the target has int8 dot-product instructions the
build writes the op in a packed form instead (``forms.dot``, docs/build.md "Int8 kernels"), and
a strided transposed conv as one conv per output phase, a max pool as row loops. ``FORMS``
names each op's chooser: it returns the legalized call in the form it picks, or None where
none applies, and ``legalize`` then falls back to the op's own compute. Importing this
package installs ``legalize`` as the ``FLegalize`` of those ops (over the op's own, at a
higher registration level), so every ``LegalizeOps`` run under a target makes this one
choice. The layout pass runs some convs
channels-last before that (``forms.channels_last``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm

from ...ops import _registry
from . import conv, conv_transpose, matmul, pool


def legalize(bb: Any, call: Any) -> Any:
    """``call`` (a canonical op's) legalized in the form the build picks on the current target:
    its ``FORMS`` chooser's, else the op's own compute."""
    op = _registry.lookup(call)
    assert op is not None  # the build legalizes canonical ops only through here
    choose = FORMS.get(op.name)
    chosen = choose(bb, call) if choose is not None else None
    return op.legalize(bb, call) if chosen is None else chosen


FORMS: dict[str, Callable[[Any, Any], Any]] = {
    "conv2d": conv.form,
    "matmul": matmul.form,
    "max_pool2d": pool.form,
    # its convs (one per output phase, or its definition's one) take the build's forms
    "conv2d_transpose": lambda bb, call: conv_transpose.form(bb, call, legalize),
}

# Above the level canonical ops register their own FLegalize at (``_tvm.register_op``).
LEVEL = 12


def _install() -> None:
    """``legalize`` as the ``FLegalize`` of the ops in ``FORMS`` (idempotent: a level is
    registered once, so the attribute is reset first; the op's own stays ``op.legalize``)."""
    for name in FORMS:
        relax_name = _registry.REGISTRY[name].relax_name
        tvm.ir.Op.get(relax_name).reset_attr("FLegalize")
        tvm.ir.register_op_attr(relax_name, "FLegalize", legalize, level=LEVEL)


_install()
