"""Functions and modules: their bindings, parameters and attributes; copies and additions."""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import relax

from .calls import to_python
from .types import is_const, is_tensor, is_var, ty


def function_params(func: Any) -> list[Any]:
    return list(func.params)


def var_name(var: Any) -> str:
    return str(var.name)


def string_function(text: str) -> Any:
    """A Relax function with no parameters that returns ``text`` (survives export_library)."""
    bb = relax.BlockBuilder()
    with bb.function("f", []):
        bb.emit_func_output(tvm.ir.StringImm(text))
    return bb.get()["f"]


def copy_module(mod: Any) -> Any:
    return tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)


def with_function(mod: Any, name: str, func: Any) -> Any:
    mod = copy_module(mod)
    gv = tvm.ir.GlobalVar(name)
    mod[gv] = func.with_attr("global_symbol", name)
    return mod


def module_functions(mod: Any) -> dict[str, Any]:
    return {gv.name_hint: fn for gv, fn in mod.functions_items()}


def relax_functions(mod: Any) -> dict[str, Any]:
    return {name: fn for name, fn in module_functions(mod).items()
            if isinstance(fn, relax.Function)}


def function_attr(func: Any, key: str) -> Any:
    """A function attribute as a Python value, or None."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or key not in attrs:
        return None
    return to_python(attrs[key])


def callee_function(mod: Any, call: Any) -> Any:
    """The function a call invokes when it calls a module function (or a local function
    bound in ``main``), else None."""
    if not isinstance(call, relax.Call):
        return None
    if isinstance(call.op, tvm.ir.GlobalVar):
        return mod[call.op]
    if isinstance(call.op, relax.Function):
        return call.op
    return None


def function_bindings(func: Any) -> list[tuple[Any, Any]]:
    """``(var, value)`` of every binding in a function body, in order."""
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings]


def function_result(func: Any) -> Any:
    """The expression a Relax function returns."""
    return func.body.body


def tuple_item(expr: Any) -> tuple[Any, int] | None:
    """``(tuple, index)`` of a ``TupleGetItem``, else None."""
    if isinstance(expr, relax.TupleGetItem):
        return expr.tuple_value, int(expr.index)
    return None


def call_bindings(func: Any) -> tuple[list[tuple[Any, Any]], dict[Any, list[Any]]]:
    """``([(var, call)], users)`` of a Relax function: its bindings of calls in order, and
    for each variable the variables of the bindings that read it (``None`` for the function's
    result)."""
    bindings: list[tuple[Any, Any]] = []
    users: dict[Any, list[Any]] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call):
                bindings.append((binding.var, value))
            read = [value] if isinstance(value, relax.Var) else relax.analysis.free_vars(value)
            for var in read:
                users.setdefault(var, []).append(binding.var)
    for var in relax.analysis.free_vars(func.body.body):
        users.setdefault(var, []).append(None)
    return bindings, users


def tuple_fields(expr: Any) -> list[Any]:
    return list(expr.fields) if isinstance(expr, relax.Tuple) else []


def single_call_module(call: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """A module whose ``main`` computes ``call`` alone: each variable argument (or variable
    field of a tuple argument, as concat takes) becomes a parameter. Returns the module and
    ``(parameter name, original variable)`` pairs."""
    params, names = [], []

    def parameter(arg: Any, name: str) -> Any:
        if isinstance(arg, relax.Var):
            param = relax.Var(name, arg.ty)
            params.append(param)
            names.append((name, arg))
            return param
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([parameter(f, f"{name}_{i}") for i, f in enumerate(arg.fields)])
        return arg

    args = [parameter(arg, f"arg{k}") for k, arg in enumerate(call.args)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.Call(call.op, args, call.attrs, call.ty_args))
        bb.emit_func_output(out)
    return bb.get(), names


def calls_module(bindings: list[tuple[Any, Any]]) -> Any:
    """A module whose ``main`` computes the calls of ``bindings`` (``(variable, call)`` in
    order, a later call may read an earlier one's variable) and returns the last one's value:
    every other variable they read becomes a parameter (a conv and the residual add after
    it, timed together)."""
    own = {var for var, _ in bindings}
    params: list[Any] = []
    values: dict[Any, Any] = {}
    for _, call in bindings:
        for arg in call.args:
            if isinstance(arg, relax.Var) and arg not in own and arg not in values:
                values[arg] = relax.Var(f"arg{len(params)}", arg.ty)
                params.append(values[arg])
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = None
            for var, call in bindings:
                args = [values.get(a, a) if isinstance(a, relax.Var) else a for a in call.args]
                out = values[var] = bb.emit(relax.Call(call.op, args, call.attrs,
                                                       call.ty_args))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def normalize_outputs(bb: Any, expr: Any) -> list[Any]:
    """The tensors a converter's result stands for, each bound to a variable; a shape or any
    other non-tensor result raises TypeError."""
    if isinstance(expr, relax.Tuple):
        fields = list(expr.fields)
    else:
        expr = bb.normalize(expr)
        if isinstance(ty(expr), relax.TupleType):
            bound = bb.emit(expr)
            fields = [relax.TupleGetItem(bound, i) for i in range(len(ty(expr).fields))]
        else:
            fields = [expr]
    out = []
    for field_ in fields:
        field_ = bb.normalize(field_)
        if not is_tensor(field_):
            raise TypeError(f"result of type {type(ty(field_)).__name__}, not a tensor")
        out.append(field_ if is_const(field_) or is_var(field_) else bb.emit(field_))
    return out


def well_formed_problem(mod: Any) -> str | None:
    """Why ``mod`` is not a well-formed Relax module (TVM's check, which also infers every
    expression's type again), or None."""
    try:
        ok = relax.analysis.check_well_formed(mod)
    except Exception as exc:  # noqa: BLE001  (TVM raises its own error types)
        text = str(exc).strip()
        _, sep, reason = text.partition("resulted in the error:")
        lines = (reason if sep else text).strip().splitlines()
        return lines[0] if lines else type(exc).__name__
    return None if ok else "TVM's well-formedness check fails"


def map_nodes(root: Any, node_type: type, replace: Any) -> Any:
    """``root`` (an IR value: a TIR statement, ...) with every node of ``node_type`` replaced
    by ``replace(node)``, children first; what no replacement touches is shared, not copied."""
    return tvm_ffi.structural_map(root, [(node_type, replace)])
