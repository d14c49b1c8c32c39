"""The numpy reference interpreter of a whole canonical module: the executable spec of a model.

Each canonical op is evaluated by its numpy reference (``CanonicalOp.reference``), in graph
order; the few Relax ops a canonical module keeps around them (the boundary quantize /
dequantize, the uint8 shifts, tuples) by their definitions below. A float island (a float op
no rule folded) has no specification beyond what TVM computes for it, so a module holding one
is refused with the op named.

``verify`` runs a build and the interpreter on the same inputs and names every canonical op
whose TVM kernel, built alone on the interpreter's values of its inputs, differs from its
reference: a TVM or LLVM miscompile is caught on the host where it happens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _tvm, numerics
from .._tvm import relax
from ..errors import CanonqnnError
from ..io import interface, random_inputs
from ._registry import lookup


class NotEvaluable(CanonqnnError):
    """The module holds an op the reference interpreter has no definition for."""


def _quantize(x, scale, zp, axis: int, out_dtype: str, reciprocal: bool = False) -> np.ndarray:
    """relax.quantize: ``clip(round_half_even(f32(x / scale)) + zp)`` in float32; with
    ``reciprocal`` (the module's profile says so) ``x * f32(1 / scale)`` for ``x / scale``."""
    scale, zp = _along(np.asarray(scale, np.float32), axis, x.ndim), _along(zp, axis, x.ndim)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scaled = x.astype(np.float32) * (np.float32(1) / scale).astype(np.float32) \
            if reciprocal else x.astype(np.float32) / scale
        v = np.rint(scaled.astype(np.float32)) + zp.astype(np.float32)
        info = np.iinfo(out_dtype)
        return np.clip(v, info.min, info.max).astype(out_dtype)  # NaN casts with a warning


def dequantize(q, scale, zp, axis: int, out_dtype: str = "float32") -> np.ndarray:
    """relax.dequantize: ``f32(q - zp) * scale``."""
    scale, zp = _along(np.asarray(scale, np.float32), axis, q.ndim), _along(zp, axis, q.ndim)
    diff = (q.astype(np.int64) - zp.astype(np.int64)).astype(np.int32).astype(np.float32)
    return (diff * scale).astype(np.float32)


def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim == 0 or values.size == 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def _integer(fn: Callable) -> Callable:
    """An elementwise op on integer tensors, wrapping like the machine's integers."""
    def run(args: list, attrs: dict) -> np.ndarray:
        a, b = args
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            raise NotEvaluable("float arithmetic (a float island)")
        return fn(a, b).astype(np.result_type(a, b))
    return run


def _astype(args: list, attrs: dict) -> np.ndarray:
    (x,), dtype = args, np.dtype(attrs["dtype"])
    if x.dtype.kind == "f" and dtype.kind in "iu":
        raise NotEvaluable("float to integer conversion (a float island)")
    return x.astype(dtype)


def _relax_quantize(args: list, attrs: dict, reciprocal: bool = False) -> np.ndarray:
    x, scale, zp = args
    return _quantize(x, scale, zp, attrs["axis"], attrs["out_dtype"], reciprocal=reciprocal)


def _relax_dequantize(args: list, attrs: dict) -> np.ndarray:
    q, scale, zp = args
    return dequantize(q, scale, zp, attrs["axis"])


RELAX_OPS: dict[str, Callable[[list, dict], np.ndarray]] = {
    "relax.quantize": _relax_quantize,
    "relax.dequantize": _relax_dequantize,
    "relax.astype": _astype,
    "relax.add": _integer(np.add),
    "relax.subtract": _integer(np.subtract),
    "relax.reshape": lambda args, a: args[0].reshape([int(d) for d in args[1]]),
    "relax.permute_dims": lambda args, a: np.transpose(args[0], a["axes"]),
}


@dataclass
class Evaluation:
    """The interpreter's outputs (keyed by output name) and the value of every bound variable."""

    outputs: dict[str, np.ndarray]
    values: dict[Any, Any] = field(repr=False, default_factory=dict)


Island = Callable[[Any, Any, list], np.ndarray]


def evaluate(mod: Any, inputs: dict[str, np.ndarray], island: Island | None = None) -> Evaluation:
    """Run ``mod``'s ``main`` on ``inputs`` (keyed by the model's input names, in its external
    dtypes) with the numpy reference of every op.

    A float island has no reference: with ``island(var, call, arg_values)`` it is computed by
    that function (``tvm_island``: TVM alone on that op), else ``NotEvaluable`` names it."""
    io = interface(mod)
    func = mod["main"]
    relax_ops = RELAX_OPS
    if numerics.quantizes_by_reciprocal(mod):
        relax_ops = {**RELAX_OPS, "relax.quantize": lambda args, a: _relax_quantize(
            args, a, reciprocal=True)}
    env: dict[Any, Any] = {}
    for param, info in zip(_tvm.function_params(func), io.inputs):
        if info.name not in inputs:
            raise CanonqnnError(f"missing input {info.name!r}")
        env[param] = np.asarray(inputs[info.name]).astype(info.dtype, copy=False)
    for var, value in _tvm.function_bindings(func):
        env[var] = _value(value, env, var, island, relax_ops)
    result = _value(func.body.body, env, None, island, relax_ops)
    values = list(result) if isinstance(result, tuple) else [result]
    return Evaluation({o.name: np.asarray(v) for o, v in zip(io.outputs, values)}, env)


def _value(expr: Any, env: dict, var: Any, island: Island | None = None,
           relax_ops: dict[str, Callable[[list, dict], np.ndarray]] = RELAX_OPS) -> Any:
    if isinstance(expr, relax.Var):
        return env[expr]
    if _tvm.is_const(expr):
        return _tvm.const_value(expr)
    if isinstance(expr, relax.Tuple):
        return tuple(_value(f, env, None) for f in expr.fields)
    if isinstance(expr, relax.TupleGetItem):
        return _value(expr.tuple_value, env, None)[expr.index]
    if isinstance(expr, relax.ShapeExpr):
        return [int(d) for d in expr.values]
    if not isinstance(expr, relax.Call):  # a scalar argument (PrimValue, FloatImm, IntImm)
        value = getattr(expr, "value", expr)
        return getattr(value, "value", value)
    args = [_value(a, env, None) for a in expr.args]
    op = lookup(expr)
    if op is not None:
        return np.asarray(op.run_reference(expr, args))
    name = _tvm.op_name(expr) or type(expr).__name__
    where = f" (bound to {_tvm.var_name(var)})" if var is not None else ""
    fn = relax_ops.get(name)
    try:
        if fn is None:
            raise NotEvaluable("no reference (a float island, computed only by TVM)")
        return fn(args, _tvm.attrs_dict(expr))
    except NotEvaluable as exc:
        if island is not None and var is not None:
            return island(var, expr, args)
        raise NotEvaluable(f"{name}{where}: {exc}") from None


def build_alone(call: Any, build_one: Callable[[Any], Any]) -> Callable[[Callable], np.ndarray]:
    """``call`` built alone by ``build_one``; the result runs it, given a function from each of
    its variable arguments to a value."""
    alone, names = _tvm.single_call_module(call)
    runner = build_one(alone)

    def run(value_of: Callable) -> Any:
        results = list(runner.run({n: value_of(arg) for n, arg in names}).values())
        return results[0] if len(results) == 1 else tuple(results)  # a tuple-valued op

    return run


def tvm_island(build_one: Callable[[Any], Any]) -> Island:
    """An ``island`` function: the op built alone by ``build_one`` (once per op) and run on
    its arguments."""
    runners: dict[Any, Any] = {}

    def run(var: Any, call: Any, args: list) -> np.ndarray:
        if var not in runners:
            runners[var] = build_alone(call, build_one)
        values: dict[Any, Any] = {}
        for arg, value in zip(call.args, args):
            if isinstance(value, tuple):  # a tuple argument: its fields are the parameters
                values.update(zip(_tvm.tuple_fields(arg), value))
            else:
                values[arg] = value
        return runners[var](values.__getitem__)

    return run


# ---------------------------------------------------------------- verification of a build
@dataclass
class KernelMismatch:
    op: str        # canonical op name
    var: str       # the variable it is bound to
    differing: int
    elements: int


@dataclass
class Verification:
    """A build checked against the reference interpreter on ``runs`` random inputs."""

    runs: int
    outputs_equal: bool
    mismatches: list[KernelMismatch]

    @property
    def ok(self) -> bool:
        return self.outputs_equal and not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "ok": self.ok, "outputs_equal": self.outputs_equal,
                "mismatches": [vars(m) for m in self.mismatches]}

    def summary(self) -> str:
        head = (f"verify: {self.runs} random input(s), outputs "
                f"{'equal' if self.outputs_equal else 'DIFFER'} to the numpy reference")
        lines = [head]
        lines += [f"  kernel {m.op} ({m.var}): {m.differing} of {m.elements} values differ from "
                  f"its reference" for m in self.mismatches]
        if not self.outputs_equal and not self.mismatches:
            lines.append("  every canonical op is right alone: the difference comes from fusing "
                         "them")
        return "\n".join(lines)


def verify(mod: Any, built: Any, *, runs: int = 2, seed: int = 0,
           build_one: Callable[[Any], Any] | None = None) -> Verification:
    """Compare ``built`` (a ``Built`` of ``mod``) with the reference interpreter on ``runs``
    seeded random inputs, and build every canonical op of ``mod`` alone (``build_one``: a
    function building a module like ``built`` was) on the interpreter's values of its inputs."""
    io = interface(mod)
    island = tvm_island(build_one) if build_one else None
    equal, evaluations = True, []
    for k in range(runs):
        feeds = random_inputs(io, seed + k)
        evaluation = evaluate(mod, feeds, island)
        got = built.run(feeds)
        equal &= all(np.array_equal(got[name], value)
                     for name, value in evaluation.outputs.items())
        evaluations.append(evaluation)
    mismatches = _kernel_mismatches(mod, evaluations, build_one) if build_one else []
    return Verification(runs, equal, mismatches)


def _kernel_mismatches(mod: Any, evaluations: list[Evaluation],
                       build_one: Callable[[Any], Any]) -> list[KernelMismatch]:
    mismatches = []
    for var, call in _tvm.function_bindings(mod["main"]):
        op = lookup(call)
        if op is None:
            continue
        run = build_alone(call, build_one)
        differing = elements = 0
        for evaluation in evaluations:
            got = run(evaluation.values.__getitem__)
            want = evaluation.values[var]
            differing += int(np.count_nonzero(got != want))
            elements += int(want.size)
        if differing:
            mismatches.append(KernelMismatch(op.name, _tvm.var_name(var), differing, elements))
    return mismatches
