"""The one walk that rewrites the calls of a module's Relax functions, and the sweep of the
bindings it leaves unused: the rule engine (``canonqnn.rewrites``) and the build's layout pass
(``canonqnn.build.layout``) both rewrite through it.

The walk is TVM's ``PyExprMutator`` (TVM's DPL rewriters are quadratic in graph size): each
call is offered, its arguments already rewritten, to the rewrite given for the function, with
the variable its binding defines. The sweep is one reverse pass over the bindings (linear,
unlike ``relax.analysis.remove_all_unused``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax

from .caches import identity
from .types import items

# ``rewrite(var, call)``: the expression to bind instead of ``call`` (None keeps it); ``var``
# is the variable of the binding being walked (None for a call bound otherwise).
Rewrite = Callable[[Any, Any], Any]
# ``bound(var, new_var)``, after each binding whose call was replaced: the variable that now
# stands for ``var``.
Bound = Callable[[Any, Any], None]


@relax.expr_functor.mutator
class _CallMutator(relax.expr_functor.PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.rewrite: Rewrite | None = None
        self.bound: Bound | None = None
        self.var: Any = None
        self.replaced = False  # the call of the binding being walked was
        self.changed = False

    def visit_var_binding_(self, binding: Any) -> None:
        self.var, self.replaced = binding.var, False
        super().visit_var_binding_(binding)
        # (only a replaced binding's variable is renamed: TVM's remap lookup of any other
        # variable would record a null name for it)
        if self.replaced and self.bound is not None:
            self.bound(binding.var, self.get_var_remap(binding.var))
        self.var = None  # (a call bound otherwise has no variable)

    def visit_call_(self, call: Any) -> Any:
        call = self.visit_expr_post_order(call)
        assert self.rewrite is not None  # set by CallWalk.rewrite for the walk
        new = self.rewrite(self.var, call)
        if new is None:
            return call
        self.changed = self.replaced = True
        return new


class CallWalk:
    """Rewrites of the calls of one module's Relax functions, function by function
    (``rewrite``), and the module they make (``module``). What a rewrite emits goes through
    ``builder``: bindings before the call's, and kernels (``emit_te``), which the module
    gets too; ``lookup_binding`` reads what the walk bound."""

    def __init__(self, mod: Any) -> None:
        self._mod = mod
        self._mutator: Any = None  # made at the first rewrite: a walk may find nothing to do
        self.changed = False
        # Set with the mutator: the builder rewrites emit through, and ``lookup_binding(var)``,
        # the value bound to ``var`` in what was walked so far (None: not bound there). Read
        # once: each read through TVM's wrapper of the mutator is a slow attribute lookup.
        self.builder: Any = None
        self.lookup_binding: Callable[[Any], Any] | None = None

    def rewrite(self, gv: Any, func: Any, rewrite: Rewrite, bound: Bound | None = None) -> bool:
        """Walk ``func`` (the module's function ``gv``), offering each call to ``rewrite``
        and the new variable of each binding it replaced to ``bound``. When a call was
        replaced, the function without the bindings left unused replaces ``gv``'s. Whether
        one was."""
        mutator = self._mutator
        if mutator is None:
            mutator = self._mutator = _CallMutator(self._mod)
            self.builder, self.lookup_binding = mutator.builder_, mutator.lookup_binding
        mutator.rewrite, mutator.bound, mutator.changed = rewrite, bound, False
        try:
            new = mutator.visit_expr(func)
        finally:
            # A rewrite's state usually refers back to this walk, and TVM's object holds the
            # mutator: a cycle only the cyclic collector frees (with the module walked).
            mutator.rewrite = mutator.bound = None
        if mutator.changed:
            mutator.builder_.update_func(gv, remove_dead_bindings(new))
            self.changed = True
        return mutator.changed

    def module(self) -> Any:
        """The module with every rewritten function (the one given when none was)."""
        return self._mutator.builder_.get() if self.changed else self._mod


def remove_dead_bindings(func: Any) -> Any:
    """Drop unused dataflow bindings in one reverse walk (linear, unlike remove_all_unused)."""
    seq, key = func.body, identity
    live = {key(var) for var in items(relax.analysis.free_vars(seq.body))}
    blocks = []
    for block in reversed(items(seq.blocks)):
        kept = []
        dataflow = isinstance(block, relax.DataflowBlock)
        for binding in reversed(items(block.bindings)):
            var = binding.var
            if dataflow and isinstance(var, relax.DataflowVar) and key(var) not in live:
                continue
            kept.append(binding)
            value = binding.value
            live.update([key(value)] if isinstance(value, relax.Var)
                        else map(key, items(relax.analysis.free_vars(value))))
        blocks.append(type(block)(kept[::-1]))
    new = relax.Function(func.params, relax.SeqExpr(blocks[::-1], seq.body), func.ret_ty,
                         func.is_pure, func.attrs)
    return relax.BlockBuilder().normalize(new)
