"""A saved canonical module (``.canonqnn.json``) checked after TVM parses it, before anything
builds or runs it: the file may have been edited by hand or damaged.

What is checked: TVM's well-formedness (every expression's type inferred again), each
operator call's recorded type against the one its operator infers now (an op retargeted to
another), every canonical op's attributes (``CanonicalOp.check_attrs``: names, rounding,
activation range, finite numbers, positive scales; quantization parameters single numbers,
one per input where plural), its weights' scale and zero point (constants of one value or one
per output channel) and its bias (one per output channel), tensor dtypes canonqnn builds,
constants TVM can read that hold what their recorded type says, and the recorded interface
against ``main``'s parameters and result. (The file itself, before TVM parses it:
``_tvm.check_json_graph``.)
"""

from __future__ import annotations

from typing import Any

from .. import _tvm
from ..errors import InvalidModelError, first_line
from ..io import module_io
from ._registry import lookup

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
                attrs = _tvm.attrs_dict(value)
                _check_quantization_attrs(f"{where}: {binding}: {op}", value, attrs)
                try:
                    canonical.check_attrs(attrs)
                except (TypeError, ValueError) as exc:
                    raise InvalidModelError(f"{where}: {binding}: {exc}") from None
                _check_channel_arguments(f"{where}: {binding}: {op}", canonical, value, var)
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
    # types are inferred and kernels shaped from the recorded type, values read from the
    # tensor: the two must agree
    held = (str(value.dtype), tuple(value.shape))
    try:
        recorded = _tvm.tensor_types(const)
    except (AttributeError, TypeError, ValueError):  # not a tensor type of a static shape
        recorded = None
    if recorded != [held]:
        says = f"{recorded[0][0]} {list(recorded[0][1])}" if recorded and len(recorded) == 1 \
            else _tvm.ty(const)
        raise InvalidModelError(f"{where}: a constant of {binding} is recorded as {says} but "
                                f"holds {held[0]} {list(held[1])}")


# Quantization parameter attributes by the naming contract of canonical ops (which
# ``patterns.params`` reads them by): ``*_scale``/``*_zp`` (and ``scale``/``zp``) are one
# number, ``*_scales``/``*_zps`` one per input. ``act_min``/``act_max`` are one integer.
def _check_quantization_attrs(where: str, call: Any, attrs: dict[str, Any]) -> None:
    inputs = None
    for name, value in attrs.items():
        if name.endswith(("_scales", "_zps")):
            if inputs is None:
                inputs = sum(len(_tensor_types(where, arg)) for arg in call.args)
            if not isinstance(value, list) or not all(_is_number(v) for v in value):
                raise InvalidModelError(f"{where}: attribute {name} is not a list of numbers")
            if len(value) != inputs:
                raise InvalidModelError(f"{where}: attribute {name} holds {len(value)} values "
                                        f"for {inputs} inputs")
        elif name.endswith(("_scale", "_zp")) or name in ("scale", "zp"):
            if not _is_number(value):
                raise InvalidModelError(f"{where}: attribute {name} is not one number "
                                        f"({_kind(value)})")
        elif name in ("act_min", "act_max") and (type(value) is not int):
            raise InvalidModelError(f"{where}: attribute {name} is not one integer "
                                    f"({_kind(value)})")


def _check_channel_arguments(where: str, op: Any, call: Any, var: Any) -> None:
    """An op with weights (argument ``w`` or ``b``, by the naming contract) takes their scale
    and zero point (``w_scale``, ``w_zp``) as constants of one value or one per output channel,
    and its ``bias`` with one value per output channel: what its legalization and reference
    index by channel. The channels are the output's ``C`` under the op's NCHW ``layout``, else
    its last axis (``N`` of a ``KN`` weight)."""
    if op.args and op.args[0].startswith("*"):  # variadic: no weights
        return
    args = dict(zip(op.args, call.args))
    weight = next((name for name in ("w", "b") if f"{name}_scale" in args), None)
    if weight is None:
        return
    out_shape = _shape(where, var)
    if len(out_shape) < 2:
        raise InvalidModelError(f"{where}: the output has shape {list(out_shape)}, not one "
                                "with channels")
    channels = out_shape[1] if op.layout == "NCHW" else out_shape[-1]
    for name in (f"{weight}_scale", f"{weight}_zp"):
        if not _tvm.is_const(args[name]):
            raise InvalidModelError(f"{where}: argument {name} is not a constant")
        shape = _shape(where, args[name])  # (a constant holds its type's shape: checked)
        if shape not in ((), (1,), (channels,)):
            raise InvalidModelError(f"{where}: argument {name} has shape {list(shape)}: it "
                                    f"holds one value or one per output channel ([{channels}])")
    if "bias" in args and (why := op.accepts(bias_shape=_shape(where, args["bias"]),
                                             channels=channels)) is not None:
        raise InvalidModelError(f"{where}: argument {why}")


def _tensor_types(where: str, expr: Any) -> list[tuple[str, tuple[int, ...]]]:
    try:
        return _tvm.tensor_types(expr)
    except (AttributeError, TypeError, ValueError):
        raise InvalidModelError(f"{where}: an argument or result is not a tensor of a static "
                                "shape") from None


def _shape(where: str, expr: Any) -> tuple[int, ...]:
    """The static shape of one tensor (a tuple's: refused)."""
    types = _tensor_types(where, expr)
    if len(types) != 1:
        raise InvalidModelError(f"{where}: a tuple where one tensor belongs")
    return tuple(types[0][1])


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _kind(value: Any) -> str:
    return f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__


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

