"""A saved canonical module (``.canonqnn.json``) checked after TVM parses it, before anything
builds or runs it: the file may have been edited by hand or damaged.

What is checked: TVM's well-formedness (every expression's type inferred again), each
operator call's recorded type against the one its operator infers now (an op retargeted to
another), every canonical op's attributes (``CanonicalOp.check_attrs``: names, rounding,
activation range, finite numbers, positive scales), tensor dtypes canonqnn builds, constants
TVM can read, and the recorded interface against ``main``'s parameters and result.
"""

from __future__ import annotations

from typing import Any

from . import _tvm
from .errors import InvalidModelError, first_line
from .io import module_io
from .ops import lookup

# dtypes a module canonqnn writes holds: quantized tensors, accumulators, float islands,
# shape and index tensors. Others (int4, uint1, custom types) have no kernel here.
DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                    "float16", "float32", "float64", "bool"})


def check_module(mod: Any, where: str) -> None:
    """Raise ``InvalidModelError`` naming ``where``, the binding and the op when ``mod`` is
    not a module canonqnn could have written."""
    functions = _tvm.relax_functions(mod)
    if "main" not in functions:
        raise InvalidModelError(f"{where}: the module has no main function")
    for name, func in functions.items():
        for param in _tvm.function_params(func):
            _check_dtypes(where, f"parameter {_tvm.var_name(param)!r}", _tvm.ty(param))
        for var, value in _tvm.function_bindings(func):
            binding = f"binding {_tvm.var_name(var)!r} of {name}"
            _check_dtypes(where, binding, _tvm.ty(var))
            if _tvm.is_const(value):
                _check_constant(where, binding, value)
            if not _tvm.call_of_op(value):
                continue
            for arg in value.args:
                if _tvm.is_const(arg):
                    _check_constant(where, binding, arg)
            op = _tvm.op_name(value)
            try:
                inferred = _tvm.inferred_type(value)
            except Exception as exc:  # noqa: BLE001  (the op's inference rejects its arguments)
                raise InvalidModelError(f"{where}: {binding} (op {op}): {first_line(exc)}") \
                    from None
            if not _tvm.same_type(inferred, _tvm.ty(var)):
                raise InvalidModelError(f"{where}: {binding} (op {op}) is recorded as "
                                        f"{_tvm.ty(var)}, but its op gives {inferred}")
            canonical = lookup(value)
            if canonical is not None:
                try:
                    canonical.check_attrs(_tvm.attrs_dict(value))
                except (TypeError, ValueError) as exc:
                    raise InvalidModelError(f"{where}: {binding}: {exc}") from None
    problem = _tvm.well_formed_problem(mod)  # what the per-binding checks do not cover
    if problem:
        raise InvalidModelError(f"{where}: not a valid module: {problem}")
    _check_interface(mod, where, functions["main"])


def _check_dtypes(where: str, what: str, t: Any) -> None:
    for dtype in _tvm.tensor_dtypes(t):
        if dtype not in DTYPES:
            raise InvalidModelError(f"{where}: {what} has dtype {dtype}, which canonqnn does "
                                    f"not build (it builds {', '.join(sorted(DTYPES))})")


def _check_constant(where: str, binding: str, const: Any) -> None:
    try:
        value = _tvm.const_value(const)
    except Exception as exc:  # noqa: BLE001  (TVM cannot convert a damaged tensor)
        raise InvalidModelError(f"{where}: a constant of {binding} is unreadable: "
                                f"{first_line(exc)}") from None
    if str(value.dtype) not in DTYPES:
        raise InvalidModelError(f"{where}: a constant of {binding} has dtype {value.dtype}")


def _check_interface(mod: Any, where: str, main: Any) -> None:
    try:
        io = module_io(mod)
    except Exception as exc:  # noqa: BLE001  (the recorded JSON is damaged)
        raise InvalidModelError(f"{where}: the recorded interface is unreadable: {exc}") \
            from None
    try:
        params = [_tvm.tensor_types(p) for p in _tvm.function_params(main)]
        results = _tvm.tensor_types(main.body)
    except (AttributeError, TypeError, ValueError):  # a symbolic dimension, a non-tensor
        raise InvalidModelError(f"{where}: main's parameters and result are not tensors of "
                                "static shapes, as canonqnn writes them") from None
    if io is None:
        return
    if len(io.inputs) != len(params):
        raise InvalidModelError(f"{where}: the recorded interface has {len(io.inputs)} "
                                f"inputs, main takes {len(params)}")
    for info, param in zip(io.inputs, params):
        _same(where, f"input {info.name!r}", (info.dtype, tuple(info.shape)), param)
    if len(io.outputs) != len(results) or not io.outputs:
        raise InvalidModelError(f"{where}: the recorded interface has {len(io.outputs)} "
                                f"outputs, main returns {len(results)}")
    for info, result in zip(io.outputs, results):
        _same(where, f"output {info.name!r}", (info.dtype, tuple(info.shape)), [result])


def _same(where: str, what: str, recorded: tuple, actual: list) -> None:
    if len(actual) != 1 or (recorded[0], tuple(recorded[1])) != actual[0]:
        raise InvalidModelError(f"{where}: the recorded interface says {what} is "
                                f"{recorded[0]} {list(recorded[1])}, the module has "
                                f"{', '.join(f'{d} {list(s)}' for d, s in actual)}")

