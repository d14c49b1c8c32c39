"""Fold elementwise float functions of one int8 tensor into a lookup table.

    q(g(dq(x)))  ->  canonqnn.lut(x, table)

``g`` is any graph of float elementwise Relax ops whose only non-constant leaf is ``dq(x)``
(read any number of times: ``x * sigmoid(x)`` folds too) and whose intermediate values have no
other users (the result itself may have: they keep the float value, the quantize becomes the
table). Constants are float constants or dequantized constants (``x / dq(c)`` in a QDQ
model whose quantizer quantized the divisor); they may vary along one axis of ``x`` (PRelu
slopes per channel), and the table then has one row per channel.

The table is ``g`` evaluated on the 256 dequantized codes of ``x`` with the source runtime's
own float arithmetic (``canonqnn.tables``), then quantized as the runtime quantizes, so it is
exact wherever that arithmetic is reproducible (docs/spec.md, ``## lut``).

Sources whose runtime computes each elementwise builtin as one kernel (``tables.kernels``:
TFLite, and XNNPACK for PyTorch programs; the module is the one the numerics profile's
``tables`` choice names, ``tables.FAMILIES``) have no float chain to follow: there the chain
must be exactly the form the frontend writes for one of those kernels (``KERNEL_OPS`` of ``dq(x)``,
or the hard-swish or ELU composite), and the table is that kernel's (``tables.kernel_table``); any
other chain declines. Those chains may be int16 -> int16 too (TFLite's 16x8 LEAKY_RELU,
LOGISTIC, TANH): the table then has an entry per int16 code.

Chains of relu/clip only are left to the requantize rule (an integer clamp, an earlier phase).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from canonqnn import _tvm, tables
from canonqnn.numerics.functions import HARD_SWISH_OFFSET, HARD_SWISH_SLOPE
from canonqnn.ops import lut as lut_op
from canonqnn.qdq import QUANTIZE, QdqCall, read_quantize

from ._engine import Context, Decline, Rule
from ._match import dequantized, per_tensor_int8, sixteen_bit

CLAMPS = frozenset({"relax.nn.relu", "relax.clip"})
# The profiles' ``tables`` choices canonqnn.tables computes (the source's default module, or the
# one ``tables.FAMILIES`` names).
TABLE_FAMILIES = ("x86", "tflite", *tables.FAMILIES)
# Float elementwise Relax ops: a chain through one of them is this rule's pattern, folded when
# the source runtime has an evaluator for every op of the chain and declined (named) otherwise.
ELEMENTWISE = frozenset({f"relax.{name}" for name in (
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "clip",
    "cos", "cosh", "divide", "equal", "erf", "exp", "floor", "floor_divide", "floor_mod",
    "greater", "greater_equal", "isfinite", "isinf", "isnan", "less", "less_equal",
    "log", "log_add_exp", "logical_and", "logical_not", "logical_or", "maximum", "minimum",
    "mod", "multiply", "negative", "not_equal", "power", "round", "rsqrt", "sigmoid", "sign",
    "sin", "sinh", "sqrt", "square", "subtract", "tan", "tanh", "trunc", "where",
    "nn.gelu", "nn.gelu_tanh", "nn.leakyrelu", "nn.prelu", "nn.relu", "nn.relu6", "nn.selu",
    "nn.silu", "nn.softplus")})
FLOAT_RESULT = ("float32", "bool")
# Common names of the composites the ONNX importer writes (``function`` is documentary; hard
# swish is recognised by its structure, ``_is_hard_swish``).
NAMES = {"multiply(x, sigmoid(x))": "silu"}
# Kernel sources: the single Relax op of dq(x) the frontend writes for each kernel.
KERNEL_OPS = {"relax.sigmoid": "sigmoid", "relax.tanh": "tanh", "relax.nn.gelu": "gelu",
              "relax.nn.gelu_tanh": "gelu_tanh", "relax.nn.leakyrelu": "leaky_relu",
              "relax.rsqrt": "rsqrt", "relax.nn.silu": "silu"}


@dataclass
class _Graph:
    """The float subgraph ``g`` between the dequantize leaves and the quantize root."""

    root: Any
    ops: dict[Any, Any] = field(default_factory=dict)         # var -> elementwise call
    leaves: dict[Any, QdqCall] = field(default_factory=dict)  # var -> dequantize of an int8
    consts: dict[Any, QdqCall] = field(default_factory=dict)  # var -> dequantize of a constant
    uses: Counter = field(default_factory=Counter)            # uses of each var inside g


def _collect(ctx: Context, root: Any, dtypes: tuple[str, ...]) -> _Graph | None:
    """``g`` below ``root``, or None when something in it is not an elementwise op, a
    constant or a dequantize of one of ``dtypes`` (then the chain is not this rule's
    pattern)."""
    graph, stack, seen = _Graph(root), [root], set()
    while stack:
        expr = stack.pop()
        if expr in seen or _tvm.is_const(expr):
            continue
        seen.add(expr)
        parsed = dequantized(ctx, expr, dtypes)
        if parsed is not None:
            (graph.consts if _tvm.is_const(parsed.operand) else graph.leaves)[expr] = parsed
            continue
        value = ctx.value(expr)
        if value is expr or _tvm.op_name(value) not in ELEMENTWISE:
            return None  # a function parameter, or an op that is not elementwise
        graph.ops[expr] = value
        for arg in value.args:
            if _tvm.is_tensor(arg):
                graph.uses[arg] += 1
                stack.append(arg)
    return graph


def _check(ctx: Context, graph: _Graph, dtype: str) -> Decline | None:
    """Why ``g`` cannot become a table (None when it can)."""
    for var, call in graph.ops.items():
        if _tvm.dtype_of(var) not in FLOAT_RESULT:
            return Decline(f"{_tvm.op_name(call)} computes {_tvm.dtype_of(var)}; a table is "
                           "built from float32 arithmetic", var)
        if var is graph.root:
            continue  # other users keep the float value; the quantize still becomes the table
        if ctx.uses(var) > graph.uses[var]:
            return Decline(f"the result of {_tvm.op_name(call)} is also used outside the "
                           "function the table would replace; the chain stays float", var)
    inputs = {(p.operand, _qp_key(p)) for p in graph.leaves.values()}
    if len(inputs) != 1:
        return Decline(f"the float chain reads {len(inputs)} quantized tensors; a table maps "
                       "exactly one", graph.root)
    x = next(iter(graph.leaves.values()))
    return per_tensor_int8(x, "input", graph.root, (dtype,))


def _qp_key(parsed: QdqCall) -> tuple:
    qp = parsed.qparams
    return (qp.dtype, qp.axis, qp.scale.tobytes(), qp.zero_point.tobytes())


def _const_shape(call: Any, index: int, value: np.ndarray, rank: int) -> tuple[int, ...]:
    """The shape a constant argument broadcasts with, in the rank of ``x``."""
    if _tvm.op_name(call) == "relax.nn.prelu" and index == 1:  # 1-D slope along an axis
        shape = [1] * rank
        shape[int(_tvm.attrs_dict(call)["axis"]) % rank] = value.size
        return tuple(shape)
    return tuple(value.shape)


def _constants(graph: _Graph) -> list[tuple[Any, int, Any]]:
    """(call, argument index, constant expression) of every constant argument of ``g``."""
    return [(call, index, arg) for call in graph.ops.values()
            for index, arg in enumerate(call.args) if _tvm.is_const(arg)]


def _table_axis(graph: _Graph, x_shape: tuple[int, ...]) -> int | Decline:
    """The one axis of ``x`` the constants vary along (-1 for none)."""
    rank = len(x_shape)
    shapes = [_const_shape(call, index, _tvm.const_value(arg), rank)
              for call, index, arg in _constants(graph)]
    shapes += [tuple(_tvm.shape_of(parsed.operand)) for parsed in graph.consts.values()]
    axes: set[int] = set()
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + shape
        if len(shape) > rank or any(d not in (1, n) for d, n in zip(padded, x_shape)):
            return Decline(f"a constant of shape {list(shape)} does not broadcast to the "
                           f"input shape {list(x_shape)}", graph.root)
        axes.update(i for i, d in enumerate(padded) if d != 1)
    if len(axes) > 1:
        return Decline(f"constants vary along axes {sorted(axes)} of the input; a table can "
                       "vary along one axis only", graph.root)
    return axes.pop() if axes else -1


def _evaluate(source: str, family: str, graph: _Graph, values: np.ndarray,
              rank: int) -> np.ndarray:
    """``g`` on ``values`` laid out as [256, 1, ..., 1] (constants broadcast behind the
    leading axis; per-axis attributes are passed as negative axes), as ``source`` computes it
    under the profile's tables ``family``."""
    memo = {leaf: values.reshape((-1,) + (1,) * rank) for leaf in graph.leaves}
    memo.update({var: tables.dequantize(source, _tvm.const_value(parsed.operand), parsed.qparams)
                 for var, parsed in graph.consts.items()})
    return _value_of(graph.root, (source, family), graph, memo, rank)


def _value_of(expr: Any, source: tuple[str, str], graph: _Graph, memo: dict, rank: int):
    # (a function of the module: a nested one calling itself would be a reference cycle,
    # garbage only the cyclic collector frees - which a conversion pauses)
    if _tvm.is_const(expr):
        return _tvm.const_value(expr)
    if not _tvm.is_tensor(expr):
        return _tvm.scalar_arg(expr)
    if expr not in memo:
        call = graph.ops[expr]
        attrs = _tvm.attrs_dict(call)
        if "axis" in attrs:
            attrs["axis"] = int(attrs["axis"]) % rank - rank
        memo[expr] = tables.evaluate(source[0], _op_name(call),
                                     [_value_of(a, source, graph, memo, rank)
                                      for a in call.args], attrs, source[1])
    return memo[expr]


def _op_name(call: Any) -> str:
    """The op of a call of ``_Graph.ops`` (each calls an op of ``ELEMENTWISE``)."""
    name = _tvm.op_name(call)
    assert name is not None
    return name


def _describe(graph: _Graph, expr: Any) -> str:
    """What the table computes, e.g. ``sigmoid`` or ``multiply(x, sigmoid(x))``."""
    if expr in graph.leaves:
        return "x"
    if expr in graph.consts or _tvm.is_const(expr):
        value = _tvm.const_value(graph.consts[expr].operand if expr in graph.consts else expr)
        text = f"{float(value.reshape(-1)[0]):g}" if value.size == 1 else f"c{list(value.shape)}"
        return f"dq({text})" if expr in graph.consts else text
    if not _tvm.is_tensor(expr):
        return f"{_tvm.scalar_arg(expr):g}"
    call = graph.ops[expr]
    name = _op_name(call).removeprefix("relax.").removeprefix("nn.")
    parts = [_describe(graph, a) for a in call.args]
    parts += [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
              for k, v in sorted(_tvm.attrs_dict(call).items())]
    return f"{name}({', '.join(parts)})"


def _kernel_function(graph: _Graph) -> tuple[str, dict] | None:
    """(kernel function, its parameters) when ``g`` is the form written for one kernel."""
    if len(graph.ops) == 1 and not graph.consts:
        call = graph.ops[graph.root]
        function = KERNEL_OPS.get(_op_name(call))
        if function is not None and len(call.args) == 1 and call.args[0] in graph.leaves:
            params = {}
            if function == "leaky_relu":
                params["alpha"] = float(_tvm.attrs_dict(call)["alpha"])
            return function, params
    if _is_hard_swish(graph):
        return "hardswish", {}
    if _is_elu(graph):
        return "elu", {}
    return None


def _call(graph: _Graph, expr: Any, op: str) -> Any:
    """The call of ``op`` computing ``expr`` inside ``g``, else None."""
    found = graph.ops.get(expr) if _tvm.is_tensor(expr) else None
    return found if _tvm.op_name(found) == op else None


def _scalar(expr: Any, value: float) -> bool:
    """``expr`` is the float32 scalar constant ``value``."""
    if not _tvm.is_const(expr) or _tvm.dtype_of(expr) != "float32":
        return False
    v = _tvm.const_value(expr)
    return v.size == 1 and float(v.reshape(())) == value


def _is_hard_swish(graph: _Graph) -> bool:
    """``g`` is x * clip(x * HARD_SWISH_SLOPE + HARD_SWISH_OFFSET, 0, 1), the form every
    frontend writes for hard swish (``frontends._base.hard_swish``)."""
    if graph.consts or len(graph.ops) != 4:
        return False
    gated = _call(graph, graph.root, "relax.multiply")
    x = gated.args[0] if gated is not None else None
    clip = None if x not in graph.leaves else _call(graph, gated.args[1], "relax.clip")
    if clip is None or (_tvm.scalar_arg(clip.args[1]), _tvm.scalar_arg(clip.args[2])) != (0, 1):
        return False
    shifted = _call(graph, clip.args[0], "relax.add")
    scaled = None if shifted is None else _call(graph, shifted.args[0], "relax.multiply")
    return (scaled is not None and scaled.args[0].same_as(x)
            and _scalar(shifted.args[1], HARD_SWISH_OFFSET)
            and _scalar(scaled.args[1], HARD_SWISH_SLOPE))


def _is_elu(graph: _Graph) -> bool:
    """``g`` is where(x >= 0, x, exp(x) - 1), the form the TFLite frontend writes for ELU."""
    if graph.consts or len(graph.ops) != 4:
        return False
    select = _call(graph, graph.root, "relax.where")
    x = select.args[1] if select is not None else None
    if x not in graph.leaves:
        return False
    nonneg = _call(graph, select.args[0], "relax.greater_equal")
    negative = _call(graph, select.args[2], "relax.subtract")
    exp = None if negative is None else _call(graph, negative.args[0], "relax.exp")
    return (nonneg is not None and nonneg.args[0].same_as(x) and _scalar(nonneg.args[1], 0.0)
            and exp is not None and exp.args[0].same_as(x) and _scalar(negative.args[1], 1.0))


@dataclass(frozen=True)
class LutChain:
    out: QdqCall
    graph: _Graph
    kernel_source: bool  # the source computes tables with its own kernels (tables.kernels)


@dataclass(frozen=True)
class Table:
    x: QdqCall
    out: QdqCall
    table: np.ndarray
    name: str
    axis: int = -1


def _kernel_table(ctx: Context, graph: _Graph, out: QdqCall):
    """``g`` as one of the source's kernels (a source with ``tables.kernels``)."""
    family = ctx.numerics.tables
    runtime = tables.runtime(ctx.source, family).RUNTIME
    found = _kernel_function(graph)
    if found is None:
        kernels = tables.kernels(ctx.source, family)
        assert kernels is not None  # a chain of a kernel source (LutChain.kernel_source)
        names = ", ".join(sorted(kernels))
        return Decline(f"{runtime} has no kernel computing {_describe(graph, graph.root)} "
                       f"(its table kernels: {names}); the chain stays float", graph.root)
    if (why := per_tensor_int8(out, "output", graph.root, (out.qparams.dtype,))) is not None:
        return why
    x = next(iter(graph.leaves.values()))
    source_dtype = x.source_dtype
    if source_dtype != ctx.source_dtype():
        return Decline(f"{runtime} kernels read and write one type; input {source_dtype}, "
                       f"output {ctx.source_dtype()}", graph.root)
    function, params = found
    try:
        table = tables.kernel_table(ctx.source, function, x.qparams, out.qparams, family,
                                    source_dtype=source_dtype, **params)
    except tables.NotEvaluable as exc:
        return Decline(f"{exc}; the chain stays float", graph.root)
    return Table(x, out, table, function)


def lut_chain(ctx: Context, call: Any):
    out = read_quantize(call)
    # int16 -> int16: the tables of TFLite's 16x8 kernels (65,536 entries), not float chains
    kernel_source = tables.kernels(ctx.source, ctx.numerics.tables) is not None
    dtypes = ("int8", *sixteen_bit(ctx)) if kernel_source else ("int8",)
    if out is None or out.qparams.dtype not in dtypes:
        return None
    graph = _collect(ctx, out.operand, ("int8", "int32", out.qparams.dtype))
    if graph is None or not graph.leaves or set(map(_tvm.op_name, graph.ops.values())) <= CLAMPS:
        return None  # not a function of a quantized tensor, or a clamp (requantize's)
    if (why := _check(ctx, graph, out.qparams.dtype)) is not None:
        return why
    return LutChain(out, graph, kernel_source)


def table_profile(ctx: Context, m: LutChain):
    """The profile's tables must be ones canonqnn.tables reproduces (``require`` raises the
    profile's refusal otherwise)."""
    ctx.numerics.require("tables", TABLE_FAMILIES, "its lookup-table functions")
    return m


def lut_table(ctx: Context, m: LutChain):
    graph, out = m.graph, m.out
    if m.kernel_source:
        return _kernel_table(ctx, graph, out)
    for var, op in graph.ops.items():
        if not tables.evaluates(ctx.source, _op_name(op), ctx.numerics.tables):
            return Decline(f"{_tvm.op_name(op)} has no {ctx.source} table evaluator in "
                           f"canonqnn/tables (tables {ctx.numerics.tables}); the chain stays "
                           "float", var)
    if (why := per_tensor_int8(out, "output", graph.root)) is not None:
        return why
    x = next(iter(graph.leaves.values()))
    x_shape = _tvm.shape_of(x.operand)
    if _tvm.shape_of(graph.root) != x_shape or _tvm.dtype_of(graph.root) != "float32":
        return Decline(f"the float chain computes {_tvm.dtype_of(graph.root)}"
                       f"{list(_tvm.shape_of(graph.root))} from an input of shape "
                       f"{list(x_shape)}; a table maps each element to one float32", graph.root)
    axis = _table_axis(graph, x_shape)
    if isinstance(axis, Decline):
        return axis
    try:
        real = _evaluate(ctx.source, ctx.numerics.tables, graph,
                         tables.input_values(ctx.source, x.qparams), len(x_shape))
    except tables.NotEvaluable as exc:
        return Decline(f"{exc}; the chain stays float", graph.root)
    layout = [1] * len(x_shape)
    if axis != -1:
        layout[axis] = x_shape[axis]
    real = np.broadcast_to(real, (tables.CODES.size, *layout)).reshape(tables.CODES.size, -1)
    table = tables.quantize(ctx.source, real, out.qparams).T
    table = table[0] if axis == -1 else np.ascontiguousarray(table)
    name = _describe(graph, graph.root)
    name = "hardswish" if _is_hard_swish(graph) else \
        NAMES.get(name, name.removesuffix("(x)") if name.count("(") == 1 else name)
    return Table(x, out, table, name, axis)


def build_lut(ctx: Context, m: Table):
    return lut_op.lut(m.x.operand, m.table, m.x.qparams, m.out.qparams, m.name, m.axis)


RULES = (
    Rule("lut", QUANTIZE, (lut_chain, table_profile, lut_table), build_lut,
         "q(g(dq x)), g elementwise float ops of x and constants -> canonqnn.lut", phase="lut"),
)
