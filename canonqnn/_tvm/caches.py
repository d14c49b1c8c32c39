"""The scope of one conversion (``converting``) and the caches that live as long as it."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import gc
from collections.abc import Callable
from typing import Any


def identity(obj: Any) -> int:
    """A key for a TVM object in a Python dict, equal for every Python handle of the same
    object. Dicts keyed by the objects themselves compare keys through ``Expr.__eq__``, which
    reads the expression's type through the FFI (about 2 us a lookup). A dict keyed by it must
    keep ``obj`` alive (an address is reused once the object is freed): ``remembered``."""
    return obj.__chandle__()


def remembered(table: dict, obj: Any, compute: Callable[[Any], Any]) -> Any:
    """``compute(obj)``, computed once for each TVM object while ``table`` lives (keyed by
    ``identity``; the entry keeps ``obj`` alive, so its key stays its own)."""
    key = identity(obj)
    known = table.get(key)
    if known is None:
        known = table[key] = (obj, compute(obj))
    return known[1]


@dataclasses.dataclass
class _Caches:
    constants: dict = dataclasses.field(default_factory=dict)  # (dtype, shape, bytes) -> const
    shapes: dict = dataclasses.field(default_factory=dict)  # remembered(): expr -> shape
    types: dict = dataclasses.field(default_factory=dict)  # (shape, dtype) -> tensor type
    memo: dict = dataclasses.field(default_factory=dict)  # conversion_memo()


def conversion_memo() -> dict | None:
    """A dict that lives as long as the running ``converting`` scope (None outside one), for
    what other modules compute once per conversion (parsed quantize/dequantize calls and
    their parameters: ``qdq``; parameters read from ONNX initializers)."""
    caches = _CACHES.get()
    return None if caches is None else caches.memo


_CACHES: contextvars.ContextVar[_Caches | None] = contextvars.ContextVar("converting",
                                                                        default=None)


@contextlib.contextmanager
def converting() -> Any:
    """The scope of one import or canonicalization (nested scopes are the outer one's).

    Within it, equal small constants made by ``const`` are one object: a quantized graph
    repeats the same few scales and zero points in every quantize, dequantize and canonical
    op; shared, the module holds (and its JSON writes) each once, allocated once. Constants are
    immutable, so sharing them changes no value. Tensor types are one object for each shape
    and dtype (``tensor_type``): the JSON of a module holds each once (types were half of its
    nodes). ``shape_of`` reads each expression's type once: converters and rules ask for the
    same shapes many times. And Python's cyclic garbage
    collector is paused (in every thread; resumed, if it ran, when the scope ends): a
    conversion keeps many small objects until it ends (parsed parameters, these caches), which
    the collector rescanned again and again - 15-19 % of importing or canonicalizing a
    50k-node graph, measured - while a conversion makes almost no cyclic garbage (none per
    node: a walk breaks its one cycle when it ends, ``_tvm.mutator``; a TFLite import
    leaves a few hundred objects of TVM's converter tables), freed when the collector
    resumes. ``tests/_tvm/test_constants.py`` checks the scope leaves no cycle per table or walk."""
    if _CACHES.get() is not None:
        yield
        return
    token, collecting = _CACHES.set(_Caches()), gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _CACHES.reset(token)
        if collecting:
            gc.enable()
