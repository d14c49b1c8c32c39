"""The one place that touches TVM APIs that changed between releases.

Written against apache-tvm 0.27 (Relax only): types are ``expr.ty`` (not ``struct_info``),
constants are ``tvm.ir.expr.GenericConst`` read through ``.value``, TIR lives in ``tvm.tirx``.
Everything else in canonqnn goes through these helpers, so a TVM upgrade edits this file only.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import gc
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, tirx, topi  # noqa: F401  (re-exported for op legalizations)

Expr = relax.Expr
Call = relax.Call
Var = relax.Var
BlockBuilder = relax.BlockBuilder


def _register_errors() -> None:
    """canonqnn's errors raised inside TVM's callbacks (rewrite rules, legalizations) come
    back out of TVM as themselves, not as RuntimeError (those made from a message alone)."""
    from . import errors

    for cls in (errors.CanonqnnError, errors.InvalidModelError, errors.InvalidQuantizationError,
                errors.ParityError, errors.VerificationError):
        tvm_ffi.register_error(cls)


_register_errors()


def host_cores() -> int:
    """The cores this process may run on, SMT siblings counted once."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else \
        range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


# TVM's thread pool runs on half the logical CPUs of an x86 host unless told otherwise (it
# assumes two SMT threads a core): one thread on a 2-core machine without SMT, while the
# kernels are scheduled for every core. Its size is read once, when a first kernel runs.
if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
    os.environ["TVM_NUM_THREADS"] = str(host_cores())


# ---------------------------------------------------------------- types and constants
def ty(expr: Any) -> Any:
    """The Relax type of an expression (``TensorType``, ``TupleType``, ...)."""
    return expr.ty


def is_tensor(expr: Any) -> bool:
    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def dtype_of(expr: Any) -> str:
    return str(expr.ty.dtype)


def ndim_of(expr: Any) -> int:
    """The rank of a tensor expression (known even where its shape is symbolic)."""
    return int(expr.ty.ndim)


def shape_of(expr: Any) -> tuple[int, ...]:
    """Static shape of a tensor expression; raises ``ValueError`` when it is symbolic. Within
    ``converting`` each expression's shape is read once (a type never changes)."""
    caches = _CACHES.get()
    return _read_shape(expr) if caches is None else remembered(caches.shapes, expr, _read_shape)


def _read_shape(expr: Any) -> tuple[int, ...]:
    shape = expr.ty.shape
    if shape is None:
        raise ValueError("tensor has no known shape")
    values = getattr(shape, "values", shape)
    out = []
    for dim in items(values):
        if not isinstance(dim, tirx.IntImm):
            raise ValueError(f"dimension {dim} is not static")
        out.append(dim.value)
    return tuple(out)


_ARRAY_ITEM = tvm_ffi.get_global_func("ffi.ArrayGetItem")
_ARRAY_SIZE = tvm_ffi.get_global_func("ffi.ArraySize")


def items(array: Any) -> list[Any]:
    """The elements of a TVM array (a call's arguments, a shape, ``free_vars``) as a list: one
    FFI call an element, where iterating the array makes three Python calls an element (the
    largest single cost of walking a graph's bindings)."""
    return [_ARRAY_ITEM(array, i) for i in range(_ARRAY_SIZE(array))]


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


def tensor_type(shape: Sequence[int], dtype: str) -> Any:
    """The tensor type of static ``shape`` and ``dtype``; within ``converting``, one object
    for each (a module's JSON then holds each type once: types were most of its nodes)."""
    dims = tuple(int(d) for d in shape)
    caches = _CACHES.get()
    if caches is None:
        return relax.TensorType(list(dims), dtype)
    known = caches.types.get((dims, dtype))
    if known is None:
        known = caches.types[(dims, dtype)] = relax.TensorType(list(dims), dtype)
    return known


def is_var(expr: Any) -> bool:
    return isinstance(expr, relax.Var)


def is_const(expr: Any) -> bool:
    return isinstance(expr, tvm.ir.expr.GenericConst)


def const_value(expr: Any) -> np.ndarray:
    """The numpy value of a constant expression (a copy: through a DLPack view, about 0.3 us
    against 5 for ``Tensor.numpy``, which a conversion calls for every parameter it reads)."""
    tensor = expr.value
    try:
        return np.from_dlpack(tensor).copy()
    except (BufferError, TypeError, ValueError, RuntimeError):  # a dtype numpy lacks
        return tensor.numpy()


def const(value: Any, dtype: str | None = None) -> Any:
    """A Relax constant of ``value``; within ``converting``, one object for every small
    constant of the same dtype, shape and bytes."""
    arr = np.asarray(value, dtype=dtype) if dtype else np.asarray(value)
    caches = _CACHES.get()
    if caches is None or arr.size > SHARED_CONST_MAX:
        return _make_const(arr)
    key = (arr.dtype.str, arr.shape, arr.tobytes())
    constant = caches.constants.get(key)
    if constant is None:
        constant = caches.constants[key] = _make_const(arr)
    return constant


_MAKE_CONST = relax.expr._ffi_api.MakeTensorConst  # what relax.const calls


def _make_const(arr: np.ndarray) -> Any:
    # The type given, so that constants of one shape and dtype share it (``tensor_type``).
    # TVM does not check it against the data: it is the tensor's own shape (a 0-d bool array
    # becomes a [1] tensor through ``tvm.runtime.tensor``).
    tensor = _tensor_of(arr)
    shape = arr.shape if arr.ndim else tuple(tensor.shape)
    return _MAKE_CONST(tensor, tensor_type(shape, arr.dtype.name), None)


SHARED_CONST_MAX = 64  # elements: scales, zero points, small biases; never weights


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
    node: a walk breaks its one cycle when it ends, ``rewrites._engine``; a TFLite import
    leaves a few hundred objects of TVM's converter tables), freed when the collector
    resumes. ``tests/test_tvm_const.py`` checks the scope leaves no cycle per table or walk."""
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


_ALLOC = tvm.runtime._ffi_api.TVMTensorAllocWithScope  # what tvm.runtime.empty calls
_CPU = tvm.cpu()
_DTYPES: dict[np.dtype, Any] = {}  # numpy dtype -> its tvm_ffi dtype


def _tensor_of(arr: np.ndarray) -> Any:
    """A TVM tensor holding a copy of ``arr``: allocated by TVM, filled through a numpy view
    of it. ``tvm.runtime.tensor`` costs ~15-50 us per call (a checked copy), which made
    constants the largest part of importing and canonicalizing a graph; this costs about 1 us,
    and unlike a numpy copy handed over by DLPack it keeps no numpy array alive beside the
    tensor (two array objects and a separate buffer per constant: 10 MB of a 20k-node graph)."""
    if arr.size == 0 or arr.dtype.kind not in "iuf":
        return tvm.runtime.tensor(np.ascontiguousarray(arr))  # (bool, empty: checked path)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    dtype = _DTYPES.get(arr.dtype)
    if dtype is None:
        dtype = _DTYPES[arr.dtype] = tvm_ffi.dtype(str(arr.dtype))
    tensor = _ALLOC(arr.shape, dtype, _CPU, None)
    np.from_dlpack(tensor)[...] = arr
    return tensor


def make_attrs(**attrs: Any) -> Any:
    return tvm.ir.make_node("ir.DictAttrs", **attrs)


def attrs_dict(call: Any) -> dict[str, Any]:
    """Attributes of a call as plain Python values (lists for arrays)."""
    attrs = call.attrs
    if attrs is None:
        return {}
    if hasattr(attrs, "keys"):  # DictAttrs (canonical ops): its map, read once
        return {str(key): _to_python(value) for key, value in attrs.items()}
    return {name: _to_python(getattr(attrs, name)) for name in _attr_fields(type(attrs))}


@functools.cache
def _attr_fields(cls: type) -> tuple[str, ...]:
    """The fields an attrs class registers (its type info; ``dir`` was a tenth of the time of
    canonicalizing a graph)."""
    names: list[str] = []
    info = getattr(cls, "__tvm_ffi_type_info__", None)
    while info is not None:
        names = [f.name for f in info.fields] + names
        info = info.parent_type_info
    return tuple(names)


def attr(call: Any, name: str) -> Any:
    """One attribute of a call as a plain Python value (``attrs_dict`` lists them all, slowly)."""
    return _to_python(getattr(call.attrs, name))


def _to_python(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tirx.IntImm,)):
        return int(value.value)
    if isinstance(value, (tirx.FloatImm,)):
        return float(value.value)
    if hasattr(value, "items") and hasattr(value, "keys"):  # a Map (annotations)
        return {str(k): _to_python(v) for k, v in value.items()}
    if hasattr(value, "__len__") and not isinstance(value, (str, bytes)):
        return [_to_python(v) for v in value]
    return str(value)


_OP_NAMES: dict[Any, str | None] = {}  # op -> its name (None: a function, not an op)


def op_name(call: Any) -> str | None:
    """``"relax.nn.conv2d"`` for a call to a registered op, else None."""
    if not isinstance(call, relax.Call):
        return None
    op = call.op
    name = _OP_NAMES.get(op, False)
    if name is False:  # (the rewrite walks ask this of every binding, many times)
        name = str(op.name) if isinstance(op, tvm.ir.Op) else None
        if name is not None:  # ops live as long as the process; functions do not
            _OP_NAMES[op] = name
    return name


# ---------------------------------------------------------------- op registration
def register_op(
    name: str,
    description: str,
    infer_type: Callable[[Any, Any], Any],
    legalize: Callable[[Any, Any], Any],
) -> Any:
    """Register (idempotently) a pure Relax op ``name`` with type inference and legalization."""
    try:
        op = tvm.ir.Op.get(name)
    except Exception:  # noqa: BLE001  (TVM raises a generic error for unknown ops)
        tvm.get_global_func("ir.RegisterOp")(name, description)
        op = tvm.ir.Op.get(name)
    tvm.ir.register_op_attr(name, "FInferType", lambda call, ctx: infer_type(call), level=11)
    tvm.ir.register_op_attr(name, "FPurity", True, level=11)
    tvm.ir.register_op_attr(name, "FLegalize", legalize, level=11)
    return op


def with_note(call: Any, note: str) -> Any:
    """``call`` carrying ``note`` in its span (the span's source name). A span is the call's
    own metadata: JSON serialization, common-subexpression elimination, constant folding and
    binding canonicalization keep it (measured, TVM 0.27); printing to TVMScript drops it."""
    noted = relax.Call(call.op, items(call.args), call.attrs, call.ty_args, span=_span(note))
    if isinstance(call.ty, relax.TensorType):  # a type already set stays (``_typed_like``)
        relax.expr._update_type(noted, call.ty)
    return noted


@functools.lru_cache(maxsize=4096)
def _span(note: str) -> Any:
    """One span per note (immutable, so calls share it: a canonical op carries its quantize's)."""
    return tvm.ir.Span(tvm.ir.SourceName(note), 0, 0, 0, 0)


def note_of(call: Any) -> str | None:
    """The note ``with_note`` put on ``call``, or None."""
    span = getattr(call, "span", None)
    return None if span is None else str(span.source_name.name)


def make_call(op: Any, args: Sequence[Any], attrs: dict[str, Any]) -> Any:
    return relax.Call(op, list(args), make_attrs(**attrs))


def install_script_namespace(namespace: str, builders: dict[str, Callable[..., Any]]) -> None:
    """Let ``tvm.script.from_source`` parse ``R.<namespace>.<op>(...)`` calls back."""
    import tvm.relax.script.parser as parser_module

    setattr(parser_module, namespace, types.SimpleNamespace(**builders))


def op_by_name(name: str) -> Any:
    return tvm.ir.Op.get(name)


# ---------------------------------------------------------------- relax ops used by writers
def quantize(x: Any, scale: Any, zero_point: Any, axis: int, out_dtype: str) -> Any:
    return _typed_like(relax.op.quantize(x, scale, zero_point, axis=axis, out_dtype=out_dtype),
                       x, scale, axis, out_dtype)


def dequantize(q: Any, scale: Any, zero_point: Any, axis: int) -> Any:
    return _typed_like(relax.op.dequantize(q, scale, zero_point, axis=axis, out_dtype="float32"),
                       q, scale, axis, "float32")


def _typed_like(call: Any, x: Any, scale: Any, axis: int, dtype: str) -> Any:
    """``call`` (a quantize or dequantize of ``x``) with its result type set: ``x``'s static
    shape, ``dtype`` - shared within ``converting`` (``tensor_type``), which TVM's inference
    would not share. Left to TVM's inference (and its errors) unless the shape is static and
    the scales are one, or one along ``axis``."""
    try:
        shape = shape_of(x)
        scales = shape_of(scale)
    except (AttributeError, ValueError):
        return call
    if scales not in ((), (1,)) and not (0 <= axis < len(shape) and scales == (shape[axis],)):
        return call
    relax.expr._update_type(call, tensor_type(shape, dtype))
    return call


def astype(x: Any, dtype: str) -> Any:
    return relax.op.astype(x, dtype)


def add(a: Any, b: Any) -> Any:
    return relax.op.add(a, b)


def subtract(a: Any, b: Any) -> Any:
    return relax.op.subtract(a, b)


def clip(x: Any, lo: int, hi: int) -> Any:
    return relax.op.clip(x, lo, hi)


def scalar_arg(expr: Any) -> float:
    """The number held by a scalar immediate argument (e.g. ``clip`` bounds)."""
    return float(expr.value)


def clip_float(x: Any, lo: float, hi: float) -> Any:
    return relax.op.clip(x, float(lo), float(hi))


def permute_dims(x: Any, axes: Sequence[int]) -> Any:
    return relax.op.permute_dims(x, [int(a) for a in axes])


def conv2d(x: Any, w: Any, strides: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int, out_dtype: str | None = None) -> Any:
    """``relax.nn.conv2d`` (NCHW/OIHW, padding [top, left, bottom, right]) whose result type
    is set here when both shapes are static and consistent. TVM 0.27 infers a conv2d's type in
    about 0.6 ms (it builds layout maps and an arithmetic analyzer each call): most of the time
    of importing a conv network, and of TVM's own ``from_onnx``. Anything else is left to TVM's
    inference, which raises its errors as before."""
    call = relax.op.nn.conv2d(x, w, strides=list(strides), padding=list(padding),
                              dilation=list(dilation), groups=int(groups), out_dtype=out_dtype)
    try:
        n, c, h, wd = shape_of(x)
        o, i, kh, kw = shape_of(w)
        dtype, w_dtype = dtype_of(x), dtype_of(w)
        (sh, sw), (dh, dw) = strides, dilation
        top, left, bottom, right = padding
    except (AttributeError, ValueError, TypeError):  # symbolic, untyped, other forms
        return call
    out_h = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    if groups < 1 or c != i * groups or o % groups or out_h < 1 or out_w < 1 or \
            dtype != w_dtype:
        return call
    relax.expr._update_type(call, tensor_type((n, o, out_h, out_w), out_dtype or dtype))
    return call


def rewrite_with_twins(mod: Any, plan: Callable[[Any], Any],
                       rewrite: Callable[[Any, Any, Any, Any, dict], Any]) -> Any:
    """``mod`` with each call bound in its Relax functions offered to ``rewrite(bb, var, call,
    decided, twins)``: ``var`` the variable the function binds it to, ``call`` with its
    arguments already rewritten, ``decided`` what ``plan(function)`` returned for the
    function before the walk. None keeps the call; ``(value, twin)`` binds the variable to
    ``value`` (after whatever ``rewrite`` emitted with ``bb``) and records ``twins[new
    variable] = twin``, another form of it later rewrites may read instead. Bindings left
    unused are removed."""

    @relax.expr_functor.mutator
    class Rewriter(relax.expr_functor.PyExprMutator):
        def __init__(self, module: Any) -> None:
            super().__init__(module)
            self.twins: dict[Any, Any] = {}
            self.pending: Any = None
            self.var: Any = None
            self.decided: Any = None
            self.changed = False

        def visit_var_binding_(self, binding: Any) -> None:
            self.pending, self.var = None, binding.var
            super().visit_var_binding_(binding)
            if self.pending is not None:
                self.twins[self.get_var_remap(binding.var)] = self.pending
            self.pending, self.var = None, None  # (a call bound otherwise has no variable)

        def visit_call_(self, call: Any) -> Any:
            call = self.visit_expr_post_order(call)
            found = rewrite(self.builder_, self.var, call, self.decided, self.twins)
            if found is None:
                return call
            self.changed = True
            value, self.pending = found
            return value

    rewriter = Rewriter(mod)
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            changed, rewriter.changed = rewriter.changed, False
            rewriter.decided = plan(func)
            new = rewriter.visit_expr(func)
            if rewriter.changed:  # (the kernels it emitted are in the builder's module)
                rewriter.builder_.update_func(gv, relax.analysis.remove_all_unused(new))
            rewriter.changed = rewriter.changed or changed
    return rewriter.builder_.get() if rewriter.changed else mod


def call_bindings(func: Any) -> tuple[list[tuple[Any, Any]], dict[Any, list[Any]]]:
    """``([(var, call)], users)`` of a Relax function: its bindings of calls in order, and
    for each variable the variables of the bindings that read it (``None`` for the function's
    result)."""
    bindings, users = [], {}
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


# ---------------------------------------------------------------- functions and modules
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


# ---------------------------------------------------------------- kernels written as loops
def te_tile(x: Any, repeats: Sequence[int]) -> Any:
    """``x`` tiled ``repeats`` times per axis, as a TE tensor computed by explicit loops.

    Written as loops over (repeat, index) pairs per axis, so every load and store address is an
    affine function of the loop variables. ``topi.tile`` reads ``x[i % n]`` instead, and LLVM
    22's loop vectorizer miscompiles some such copies (it loads a contiguous run where the
    modulo wraps): for [1, 5, 8, 3] by [1, 2, 2, 1], 240 of 480 elements were wrong for int8 on
    every x86 CPU tried, and for int32/float32 too on znver4/znver5.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    dims = [int(d) for d in x.shape]
    reps = [int(r) for r in repeats]
    out_shape = [d * r for d, r in zip(dims, reps)]

    def body(ins: Any, outs: Any) -> Any:
        with IRBuilder() as ib:
            _tile_loops(T, ins[0], outs[0], dims, reps, [], [])
            return ib.get()

    return te.extern([out_shape], [x], body, dtype=str(x.dtype), name="tile")


def _tile_loops(T: Any, src: Any, dst: Any, dims: list[int], reps: list[int],
                src_index: list[Any], dst_index: list[Any]) -> None:
    """Loops over ``(repeat, index)`` of the next axis and the axes after it."""
    axis = len(src_index)
    if axis == len(dims):
        T.buffer_store(dst, tirx.BufferLoad(src, src_index), dst_index)
        return
    with T.serial(0, reps[axis]) as r, T.serial(0, dims[axis]) as i:
        _tile_loops(T, src, dst, dims, reps, [*src_index, i], [*dst_index, r * dims[axis] + i])


# ---------------------------------------------------------------- build and run
def host_target() -> Any:
    """The host CPU: ``mcpu`` from LLVM's own detection (``"native"`` is ignored by 0.27)."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": str(cpu)})


def as_target(target: Any) -> Any:
    """A TVM target canonqnn can build for: the host's CPU by default; a string is TVM's JSON
    form or the ``kind -key=value`` form older TVMs took (0.27 refuses it). Anything TVM cannot
    make a target of, another kind than ``llvm`` or an ``mcpu`` LLVM does not know for the
    target's triple raises ``CanonqnnError``. Another CPU, or another architecture
    (``mtriple``: cross-compiled), builds; ``foreign_instructions`` says whether the code runs
    here."""
    from .errors import CanonqnnError, first_line

    if target is None:
        return host_target()
    shown = target if isinstance(target, str) else str(target)
    if not isinstance(target, tvm.target.Target):
        try:
            with quiet_native_log():  # (TVM logs what it guesses, e.g. a CUDA version)
                target = tvm.target.Target(_target_config(target))
        except Exception as exc:  # noqa: BLE001  (TVM raises ValueError or its own errors)
            raise CanonqnnError(f"target {shown!r}: TVM cannot make a target of it: "
                                f"{first_line(exc)}") from None
    if target.kind.name != "llvm":
        raise CanonqnnError(f"target {shown!r}: canonqnn builds for the host CPU with TVM's "
                            f"llvm target, not {target.kind.name}")
    codegen = tvm.target.codegen
    cpu = dict(target.attrs).get("mcpu")
    with quiet_native_log():  # (LLVM logs an unknown CPU before it is refused here)
        archlist = codegen.llvm_get_cpu_archlist(target) if cpu is not None else []
    if cpu is not None and str(cpu) not in archlist:
        known = (f"this host's: {codegen.llvm_get_system_cpu()}" if is_host_arch(target)
                 else f"for {target_arch(target)}")
        raise CanonqnnError(f"target {shown!r}: LLVM knows no CPU {str(cpu)!r} ({known})")
    return target


def target_arch(target: Any) -> str:
    """The CPU architecture of an LLVM target (``x86_64``, ``aarch64``): its triple's first
    part, the host's when it names no ``mtriple``."""
    target = tvm.target.Target(target) if isinstance(target, str) else target
    host = str(tvm.target.codegen.llvm_get_system_triple())
    return str(dict(target.attrs).get("mtriple", host)).split("-")[0]


def is_host_arch(target: Any) -> bool:
    """Whether code for ``target`` is of this host's architecture (else: cross-compiled)."""
    return target_arch(target) == target_arch(host_target())


def current_target_features() -> Callable[[str], bool] | None:
    """``has_feature(name)`` of the target a pass is running under (``with target``), or None
    outside one (a legalization then writes the target-independent form)."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return None
    return target_features(target)


def target_features(target: Any) -> Callable[[str], bool]:
    """``has_feature(name)`` of an LLVM target (LLVM's feature names: ``avx2``, ...)."""
    has = tvm.get_global_func("target.target_has_feature")
    return lambda name: bool(has(name, target))


def foreign_instructions(target: Any) -> list[str]:
    """The instruction sets code for ``target`` may use that this host's CPU lacks (code built
    for another CPU stops on an illegal instruction here): the target's architecture itself
    where it is not the host's."""
    codegen = tvm.target.codegen
    target = tvm.target.Target(target) if isinstance(target, str) else target
    if not is_host_arch(target):
        return [target_arch(target)]
    return sorted(f for f in set(codegen.llvm_get_cpu_features(target))
                  - set(codegen.llvm_get_cpu_features(host_target()))
                  if f.startswith(INSTRUCTION_SET_FEATURES))


# LLVM x86 feature names of instruction sets (its other features are tuning hints such as
# ``slow-3ops-lea``, which code runs without).
INSTRUCTION_SET_FEATURES = ("avx", "sse", "ssse", "fma", "f16c", "bmi", "amx", "gfni",
                            "vaes", "vpclmulqdq", "sha", "adx", "aes", "popcnt", "lzcnt",
                            "movbe", "xop", "tbm", "sm3", "sm4")


def _target_config(target: Any) -> Any:
    """``"llvm -mcpu=znver3 -mattr=+avx2,+fma"`` as the dict TVM 0.27 takes; other values
    (JSON text, dicts) as they are."""
    if not isinstance(target, str) or target.strip().startswith("{") or " -" not in target:
        return target
    kind, *options = target.split()
    config: dict[str, Any] = {"kind": kind}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not option.startswith("-") or not key or not sep:
            raise ValueError(f"{option!r} is not -key=value")
        config[key] = value.split(",") if key in ("mattr", "keys", "libs") else \
            int(value) if value.lstrip("-").isdigit() else value
    return config


# FuseOps fuses up to 256 ops into one kernel; a chain of float elementwise ops a model keeps
# (pre- and post-processing) then becomes one PrimFunc with a block and a buffer per op, which
# LLVM compiles in time growing faster than the chain (300 relus: 14.5 s; TVM's own unfused
# build of the model: 0.7 s). Kernels of at most 8 ops compile in about TVM's time (300: 1.1 s;
# 3,000: 3.4 s against TVM's 3.7 s; docs/benchmarks.md) and hold every canonical fusion (an op
# with its requantize, clamp and table).
MAX_FUSE_DEPTH_KEY, MAX_FUSE_DEPTH = "relax.FuseOps.max_depth", 8


def _quantize_by_reciprocal(bb: Any, call: Any) -> Any:
    """``relax.quantize`` as ``clip(RNE(f32(x * f32(1 / scale))) + zp)``: XNNPACK's (and
    PyTorch's) quantize multiplies by the float32 reciprocal of the scale, where TVM's own
    legalization divides (as ONNX's QuantizeLinear)."""
    x, scale, zp = call.args
    attrs = attrs_dict(call)
    axis, out_dtype = int(attrs["axis"]), str(attrs["out_dtype"])
    recip = (np.float32(1) / const_value(scale).astype(np.float32)).astype(np.float32)
    info = np.iinfo(out_dtype)
    lo, hi = (tirx.const(float(v), "float32") for v in (info.min, info.max))

    def compute(data: Any, r: Any, z: Any) -> Any:
        def elem(*i: Any) -> Any:
            k = () if len(r.shape) == 0 else (i[axis],)
            v = tirx.round(data(*i) * r(*k)) + z(*k).astype("float32")
            return te.max(te.min(v, hi), lo).astype(out_dtype)

        return te.compute(data.shape, elem, name="quantize")

    return bb.call_te(compute, x, relax.const(recip), zp, primfunc_name_hint="quantize")


def fuse_kernels(mod: Any, target: Any, elementwise_kernels: Sequence[str] = (),
                 quantize_by_reciprocal: bool = False,
                 before_legalize: Callable[[Any], Any] | None = None) -> Any:
    """TVM's CPU pipeline up to kernel fusion (dispatch, LegalizeOps, AnnotateTIROpPattern,
    FoldConstant, FuseOps, FuseTIR), with the PrimFuncs whose names start with one of
    ``elementwise_kernels`` marked elementwise (op_pattern 0) before fusion;
    ``quantize_by_reciprocal``: ``relax.quantize`` multiplies by the reciprocal of its scale
    (``_quantize_by_reciprocal``); ``before_legalize(mod)``, run under the target just before
    LegalizeOps (the layout pass).

    AnnotateTIROpPattern classifies a table gather as opaque, which stops FuseOps at it; a
    pre-set 0 is overwritten (0 counts as unset), hence a pass after the annotation.
    """
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.MarkElementwiseKernels")
    def mark_elementwise(m: Any, _ctx: Any) -> Any:
        for gv, func in list(m.functions_items()):
            if isinstance(func, tirx.PrimFunc) and gv.name_hint.startswith(
                    tuple(elementwise_kernels)):
                m[gv] = func.with_attr("op_pattern", 0)
        return m

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.BeforeLegalize")
    def before(m: Any, _ctx: Any) -> Any:
        return before_legalize(m) if before_legalize is not None else m

    passes = cpu.library_dispatch_passes(target) + [
        before,
        relax.transform.LegalizeOps(
            {"relax.quantize": _quantize_by_reciprocal} if quantize_by_reciprocal else None),
        relax.transform.AnnotateTIROpPattern(), mark_elementwise,
        relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
    current = tvm.transform.PassContext.current()
    config = {**dict(current.config), MAX_FUSE_DEPTH_KEY: MAX_FUSE_DEPTH}
    with target, tvm.transform.PassContext(opt_level=current.opt_level, config=config,
                                           instruments=list(current.instruments)):
        return tvm.transform.Sequential(passes)(mod)


def compile_fused(mod: Any, target: Any) -> Any:
    """Compile a module returned by ``fuse_kernels`` (TVM's remaining CPU passes)."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.LowerFused")
    def lower(m: Any, _ctx: Any) -> Any:
        with target:
            return tvm.transform.Sequential(cpu.dataflow_lower_passes(target)
                                            + cpu.finalize_passes(target))(m)

    return tvm.compile(mod, target=target, relax_pipeline=lower)


def compile_kernel(func: Any, target: Any) -> Any:
    """One PrimFunc compiled alone as the build compiles it (for timing kernels)."""
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                       target=target).jit()


def schedule_cpu(mod: Any, plan_block: Callable[[list[str], list[int], int], Any],
                 cores: int, target: Any = None) -> Any:
    """``mod`` with every block at the root of each unscheduled PrimFunc scheduled by
    ``plan_block(kinds, extents, cores)`` (a ``canonqnn.schedule.BlockPlan``), except the
    packed int8 reductions (``ops._dot``) and the blocks scheduled with them, which
    ``_tvm_dot`` schedules (tensorized where ``target``, default the host, has the
    instruction).

    Blocks whose loops do not fit the plan's model (symbolic extents, non-loop bindings) stay as
    they are; so does a block where a primitive refuses the plan.
    """
    from tvm.s_tir.schedule import ScheduleError

    from . import _tvm_dot

    has_feature = target_features(as_target(target))
    out = copy_module(mod)
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, tirx.PrimFunc) or function_attr(func, "tirx.is_scheduled"):
            continue
        sch, blocks = _root_blocks(func)
        packed = [b for b in blocks if _tvm_dot.is_packed(sch, b)]
        if packed:  # tensorized, its consumers moved into its tiles: the rest as planned
            done = [sch.get(b).name_hint for b in packed]
            try:
                for block in packed:
                    done += _tvm_dot.schedule(sch, block, cores, has_feature)
                blocks = [b for b in sch.get_child_blocks(sch.get_sblock("root"))
                          if not sch.get(b).name_hint.startswith(tuple(done))]
            except (ScheduleError, ValueError) as exc:
                # the packed arithmetic is exact under any schedule: keep it, planned as the
                # other kernels are, and say so (a slower kernel, not a failed build)
                import warnings

                warnings.warn(f"kernel {gv.name_hint}: the tensorized schedule was refused "
                              f"({str(exc).strip().splitlines()[0]}); it gets the generic one",
                              stacklevel=2)
                sch, blocks = _root_blocks(func)
        for block in blocks:
            try:
                _apply_block_plan(sch, block, plan_block, cores)
            except ScheduleError:
                pass  # the block keeps the primitives applied before the refused one
        out[gv] = sch.mod["main"]
    return out


def _apply_block_plan(sch: Any, block: Any, plan_block: Callable, cores: int) -> None:
    loops = sch.get_loops(block)
    iters = sch.get(block).iter_vars
    extents = [sch.get(loop).extent for loop in loops]
    if not loops or len(iters) != len(loops) or not all(
            isinstance(e, tirx.IntImm) for e in extents):
        return
    kinds = ["S" if int(iv.iter_type) == 0 else "R" if int(iv.iter_type) == 2 else "?"
             for iv in iters]
    plan = plan_block(kinds, [int(e.value) for e in extents], cores)
    if plan.is_noop:
        return
    n_spatial = kinds.index("R") if "R" in kinds else len(kinds)
    reduction = list(loops[n_spatial:])
    outer = list(loops[:n_spatial - plan.inner])
    inner = list(loops[n_spatial - plan.inner:n_spatial])
    blocked = []
    if plan.block > 1:
        o_out, o_in = sch.split(outer[1], [None, plan.block])
        outer[1], blocked = o_out, [o_in]
    if plan.inner or blocked:
        sch.reorder(*outer, *reduction, *blocked, *inner)
    if blocked:
        sch.unroll(blocked[0])
    if plan.parallel:
        lead = outer[:plan.parallel]
        sch.parallel(sch.fuse(*lead) if len(lead) > 1 else lead[0])
    if plan.inner and reduction:
        sch.decompose_reduction(block, reduction[0])


# ---------------------------------------------------------------- MetaSchedule tuning
def _root_blocks(func: Any) -> tuple[Any, list[Any]]:
    from tvm.s_tir import Schedule

    from tvm.s_tir.schedule import ScheduleError

    sch = Schedule(tvm.IRModule({"main": func}))
    try:
        root = sch.get_sblock("root")
    except ScheduleError:  # written as loops (an extern kernel such as te_tile): nothing to plan
        return sch, []
    return sch, sch.get_child_blocks(root)


def root_block_annotations(func: Any) -> list[dict[str, Any]]:
    """The annotations of the blocks at the root of an unscheduled PrimFunc, as Python
    values (``canonqnn.ops._dot`` records its plans there)."""
    sch, blocks = _root_blocks(func)
    return [{str(k): _to_python(v) for k, v in sch.get(b).annotations.items()} for b in blocks]


def _region_dtype(region: Any) -> str:
    return str(region.source.dtype)  # the written buffer


def reduction_dtypes(func: Any) -> set[str]:
    """The dtypes of the buffers a PrimFunc's reduction blocks write (empty: no reduction)."""
    sch, blocks = _root_blocks(func)
    dtypes = set()
    for block in blocks:
        node = sch.get(block)
        if any(int(iv.iter_type) == 2 for iv in node.iter_vars):
            dtypes.update(_region_dtype(region) for region in node.writes)
    return dtypes


def _tuning_target(target: Any) -> Any:
    """``target`` with ``num-cores`` set, which MetaSchedule requires of a CPU target."""
    config = dict(target.export())
    config["num-cores"] = cpu_cores(target)
    return tvm.target.Target(config)


def _tuning_database(work_dir: str) -> Any:
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(work_dir=work_dir)


def tune_cpu(mod: Any, target: Any, work_dir: str, trials: int,
             tunable: Callable[[Any], bool]) -> tuple[int, int]:
    """MetaSchedule-tune the kernels of a fused module for which ``tunable(prim_func)`` holds,
    recording into the JSON database in ``work_dir``. Kernels the database already has a
    record for are not tuned again. The trials are spread over the kernels so that each gets at
    least one round when ``trials`` >= 2 per kernel (a kernel left without a record is tuned by
    the next call). Returns ``(kernels tuned now, kernels found tuned)``."""
    from tvm.s_tir import meta_schedule as ms

    os.makedirs(work_dir, exist_ok=True)
    target = _tuning_target(target)
    tasks = [t for t in ms.relax_integration.extract_tasks(mod, target)
             if tunable(t.dispatched[0]["main"])]
    database = _tuning_database(work_dir)
    missing = [t for t in tasks if database.query_tuning_record(
        t.dispatched[0], target, t.task_name) is None]
    if missing and trials > 0:
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            missing, work_dir=work_dir, seed=0)
        ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir=work_dir,
                      max_trials_global=trials,
                      num_trials_per_iter=max(2, min(64, trials // len(missing))),
                      builder=ms.builder.LocalBuilder(f_build=_build_candidate),
                      database=database, cost_model="xgb")
    return (len(missing) if trials > 0 else 0), len(tasks) - len(missing)


def _build_candidate(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default candidate build without its import of every target's tensor
    intrinsics (about 25 s per builder process, and the builder starts new processes for each
    batch); canonqnn's kernels use none."""
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def apply_tuning(mod: Any, target: Any, work_dir: str) -> Any:
    """``mod`` with the kernels the database in ``work_dir`` has records for replaced by their
    best tuned schedules (marked ``tirx.is_scheduled``)."""
    with _tuning_target(target), _tuning_database(work_dir), \
            tvm.transform.PassContext(opt_level=3):
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)


def cpu_cores(target: Any) -> int:
    """The cores a CPU target's code runs on: its ``num-cores``, else this machine's."""
    cores = target.attrs.get("num-cores") if target.attrs else None
    return int(cores) if cores else host_cores()


def constant_bytes(mod: Any) -> dict[str, int]:
    """Bytes of the distinct constants in ``mod``'s Relax functions, by dtype (what a built
    module carries as weights and parameters)."""
    seen, sizes = set(), {}

    def visit(expr: Any) -> None:
        if is_const(expr) and expr.__hash__() not in seen:
            seen.add(expr.__hash__())
            value = expr.value
            dtype = str(value.dtype)
            count = int(np.prod([int(d) for d in value.shape])) if len(value.shape) else 1
            sizes[dtype] = sizes.get(dtype, 0) + count * np.dtype(dtype).itemsize

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return sizes


def kernel_calls(mod: Any) -> tuple[list[tuple[str, list[Any], Any]], dict[Any, Any]]:
    """The ``call_tir`` bindings of a fused module's ``main``, in order, as
    ``(kernel name, arguments, output var)``, and for each variable that reads a field of
    (or aliases) another variable, the variable it comes from."""
    calls, origin = [], {}
    call_tir = tvm.ir.Op.get("relax.call_tir")
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem):
                origin[binding.var] = origin.get(value.tuple_value, value.tuple_value)
            elif isinstance(value, relax.Var):
                origin[binding.var] = origin.get(value, value)
            elif isinstance(value, relax.Call) and value.op.same_as(call_tir):
                calls.append((value.args[0].name_hint, list(value.args[1].fields), binding.var))
    return calls, origin


def tensor_types(expr: Any) -> list[tuple[str, tuple[int, ...]]]:
    """``(dtype, static shape)`` of a tensor expression, or of each field of a tuple."""
    t = expr.ty
    fields = list(t.fields) if isinstance(t, relax.TupleType) else [t]
    return [(str(f.dtype), tuple(int(d.value) for d in f.shape.values)) for f in fields]


def legalize(mod: Any) -> Any:
    return relax.transform.LegalizeOps()(mod)


def virtual_machine(executable_or_module: Any) -> Any:
    return relax.VirtualMachine(executable_or_module, tvm.cpu())


@contextlib.contextmanager
def quiet_native_log():
    """Silence TVM's C++ log lines (VM export/load prints one warning per function)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def export_library(executable: Any, path: str) -> None:
    with quiet_native_log():
        executable.export_library(path)


def load_library(path: str) -> Any:
    with quiet_native_log():
        return tvm.runtime.load_module(path)


def to_device(array: np.ndarray) -> Any:
    return tvm.runtime.tensor(np.require(array, requirements="C"), tvm.cpu())  # keeps 0-d


def to_numpy(value: Any) -> Any:
    """VM results (a tensor or a nested tuple of tensors) as numpy arrays."""
    if hasattr(value, "numpy"):
        return value.numpy()
    return [to_numpy(v) for v in value]


def from_onnx(model: Any) -> Any:
    from tvm.relax.frontend.onnx import from_onnx as _from_onnx

    return _from_onnx(model, keep_params_in_input=False, sanitize_input_names=False)


def onnx_converter(op_type: str, opset: int) -> Callable[[Any, list, dict], Any] | None:
    """TVM's own ONNX converter of ``op_type`` as ``fn(bb, inputs, attrs) -> expr``, or None
    when TVM's importer has none. ``attrs`` come from ``onnx_attributes``."""
    from tvm.relax.frontend.onnx import onnx_frontend

    converter = onnx_frontend._get_convert_map().get(op_type)
    if converter is None:
        return None
    impl = converter.get_converter(opset)
    return lambda bb, inputs, attrs: impl(bb, inputs, attrs, [{}, {}])


def onnx_attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as TVM's ONNX converters expect them."""
    from tvm.relax.frontend.onnx import onnx_frontend

    attrs = onnx_frontend.ONNXGraphImporter._parse_attr(None, node.attribute)
    attrs["tvm_custom"] = {"name": node.name, "num_outputs": len(node.output)}
    return attrs


def onnx_input_list(items: Sequence[Any]) -> Any:
    """The list type TVM's ONNX converters index (None past the end)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    inputs = onnx_frontend.onnx_input()
    for item in items:
        inputs.append(item)
    return inputs


class TfliteConverters:
    """TVM's own TFLite operator converters (``tvm.relax.frontend.tflite``) for one model, fed
    canonqnn's Relax values: ``kind(i)`` is TVM's name for operator ``i`` of the first subgraph
    (None when TVM has no converter), ``convert(i, exprs, constants)`` its result as bound
    tensors. ``exprs`` maps tensor indices to Relax expressions of their real values (float,
    or integer index data); ``constants`` maps tensor indices to numpy values computed at
    import (TVM reads constants from the model's buffers, which hold no folded results). TVM's
    converters dequantize quantized inputs themselves: here inputs are given as real values
    already (float32, quantized constants too), so their quantization and stored type are
    hidden from them."""

    def __init__(self, model: Any, bb: Any) -> None:
        import tflite
        from tvm.relax.frontend.tflite import tflite_frontend as tf

        class Float32(tflite.Tensor):
            """A quantized tensor seen as the float32 tensor of its real values."""

            def __init__(self, tensor: Any) -> None:
                super().__init__()
                self.Init(tensor._tab.Bytes, tensor._tab.Pos)

            def Type(self) -> int:  # noqa: N802  (the schema's method name)
                return tflite.TensorType.FLOAT32

            def Quantization(self) -> None:  # noqa: N802
                return None

        class RealValued(tf.OperatorConverter):
            constants: dict[int, Any] = {}

            def get_input_tensors(self, op):
                tensors = super().get_input_tensors(op)
                for t in tensors:
                    if t.qnn_params is not None:
                        t.qnn_params, t.tensor = None, Float32(t.tensor)
                return tensors

            def get_tensor_value(self, tensor_wrapper, is_sparse=False):
                if tensor_wrapper.tensor_idx in self.constants:
                    return self.constants[tensor_wrapper.tensor_idx]
                return super().get_tensor_value(tensor_wrapper, is_sparse)

        self._tf = tf
        self._subgraph = model.Subgraphs(0)
        self._converter = RealValued(model, self._subgraph, tf.ExprTable(), bb)
        self._bb = bb

    def kind(self, index: int) -> str | None:
        try:
            kind = self._converter.get_op_code_str(self._subgraph.Operators(index))
        except (NotImplementedError, KeyError):
            return None
        return kind if kind in self._converter.convert_map else None

    def convert(self, index: int, exprs: dict[int, Any], constants: dict[int, Any]) -> list[Any]:
        converter = self._converter
        converter.constants = constants
        for tensor, expr in exprs.items():
            converter.exp_tab.set_expr(self._tf.get_tensor_name(self._subgraph, tensor), expr,
                                       force_override=True)
        op = self._subgraph.Operators(index)
        return normalize_outputs(self._bb, converter.convert_map[self.kind(index)](op=op))


class TorchConverters:
    """TVM's own converters of PyTorch ExportedProgram nodes
    (``tvm.relax.frontend.torch``), one node at a time, fed canonqnn's Relax values:
    ``takes(name)`` whether TVM converts the op (``name`` as TVM keys it, e.g.
    ``"conv2d.default"``), ``convert(node, exprs)`` its result, ``exprs`` mapping each input
    node to its Relax expression."""

    def __init__(self, bb: Any) -> None:
        from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

        self._importer = ExportedProgramImporter()
        self._importer.block_builder = bb

    def takes(self, name: str) -> bool:
        return name in self._importer.convert_map

    def convert(self, node: Any, exprs: dict[Any, Any]) -> Any:
        self._importer.env = dict(exprs)
        return self._importer.convert_map[node.target.__name__](node)


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


def relax_functions(mod: Any) -> dict[str, Any]:
    return {name: fn for name, fn in module_functions(mod).items()
            if isinstance(fn, relax.Function)}


def call_of_op(expr: Any) -> bool:
    """A call of a registered operator (not of a function)."""
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)


def inferred_type(call: Any) -> Any:
    """The type ``call``'s operator infers from its arguments and attributes now."""
    fresh = relax.Call(call.op, list(call.args), call.attrs, list(call.ty_args))
    return ty(relax.BlockBuilder().normalize(fresh))


def same_type(a: Any, b: Any) -> bool:
    return bool(tvm_ffi.structural_equal(a, b))


def tensor_dtypes(t: Any) -> list[str]:
    """The dtypes of a tensor type or of the tensors in a tuple type."""
    if isinstance(t, relax.TupleType):
        return [d for f in t.fields for d in tensor_dtypes(f)]
    return [str(t.dtype)] if isinstance(t, relax.TensorType) else []


def script(mod: Any, show_meta: bool = False) -> str:
    return mod.script(show_meta=show_meta)


def save_json(mod: Any) -> str:
    return tvm.ir.save_json(mod)


def load_json(text: str, root_type: str | None = None) -> Any:
    """``tvm.ir.load_json`` of a graph ``check_json_graph`` accepts."""
    check_json_graph(text, root_type)
    return tvm.ir.load_json(text)


# Node types of TVM's JSON graph whose ``data`` is a literal, not references to other nodes.
JSON_LITERALS = frozenset({"None", "int", "float", "bool", "ffi.String", "ffi.Bytes",
                           "ffi.Tensor", "ffi.Shape", "DataType", "Device"})
# Variables: TVM's printer writes a variable's name where it is used and its type only where
# it is defined, so a reference to one costs one printed node however large its type.
JSON_NAMED = frozenset({"ir.Var", "relax.expr.DataflowVar", "ir.GlobalVar"})
# TVM's loader (and its printer, hashing and passes) recurse once per level of nesting: on an
# 8 MiB stack the loader crashes between 2,000 and 3,000 levels. Modules canonqnn writes nest
# 18 to 20 levels, whatever the model's size (bindings are one flat list): measured on the
# ONNX and TFLite test networks (canonqnn.testing), every model of docs/models.md (detectors,
# LSTM, dynamic and 16-bit quantization) and generated conv and transformer graphs of 1k to
# 50k nodes. 256 is over 12x that and 10x below the crash.
JSON_MAX_DEPTH = 256
# TVM's printer expands shared structure: what hangs off a node referenced twice is printed
# twice, so 80 arrays each holding the previous one twice print 2**80 nodes. The expansion of
# modules canonqnn writes (types and constants are shared on purpose) measured 4.0 to 14.7
# printed nodes per node of the file on the models above, 17.1 on a chain of 48 convs
# sharing one weight, bias and set of scales (the more bindings share, the fewer nodes the
# file has for what is printed). A file may expand to 128 per node (7x the most measured)
# plus a floor for small files: printing it costs at most a few times what printing a real
# module of the same size does, linear in the file.
JSON_EXPANSION_PER_NODE = 128
JSON_EXPANSION_FLOOR = 100_000


def check_json_graph(text: str, root_type: str | None = None) -> None:
    """Raise ValueError unless ``text`` is a graph TVM's ``save_json`` could have written: a
    ``nodes`` list whose references (the integers in a node's ``data``) each name an earlier
    node, and a ``root_index`` naming one (of type ``root_type``, when given). ``load_json``
    follows references without checking them: one back to the root or forward makes a cycle,
    and it crashes the process. The graph must also nest at most ``JSON_MAX_DEPTH`` deep and
    expand to at most ``JSON_EXPANSION_PER_NODE`` printed nodes per node (see there): one pass
    over the nodes, in time and memory linear in the file. (An integer a node stores inline,
    such as a type's ``ndim``, counts as a reference too: a small over-count.)"""
    import json

    try:
        graph = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:  # (the text's own brackets; a graph TVM writes nests two deep)
        raise ValueError("JSON nested too deeply") from None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    root = graph.get("root_index") if isinstance(graph, dict) else None
    if not isinstance(nodes, list) or not nodes or not isinstance(root, int) or \
            isinstance(root, bool) or not 0 <= root < len(nodes):
        raise ValueError("not a TVM JSON graph (a nodes list and a root_index in it)")
    limit = JSON_EXPANSION_PER_NODE * len(nodes) + JSON_EXPANSION_FLOOR
    depth = [0] * len(nodes)
    cost = [0] * len(nodes)  # printed nodes a reference to a node costs: its tree's, saturating
    named = 0  # the trees of the variables, each printed once where it is defined
    root_size = 0
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise ValueError(f"node {index} is not a typed node")
        kind = node["type"]
        deepest, size = 0, 1
        if kind not in JSON_LITERALS:
            for ref in _json_references(node.get("data")):
                if not 0 <= ref < index:
                    raise ValueError(f"node {index} ({kind}) refers to node {ref}: only "
                                     "earlier nodes can be referred to")
                deepest = max(deepest, depth[ref])
                size += cost[ref]
        if deepest >= JSON_MAX_DEPTH:
            raise ValueError(f"node {index} ({kind}) is nested more than {JSON_MAX_DEPTH} "
                             "levels deep (canonqnn writes modules nested about 20 deep)")
        depth[index], size = deepest + 1, min(size, limit + 1)
        cost[index] = 1 if kind in JSON_NAMED else size
        if kind in JSON_NAMED:
            named = min(named + size, limit + 1)
        if index == root:
            root_size = size
    if root_size + named > limit:
        raise ValueError(f"its {len(nodes)} nodes expand to more than {limit} when printed "
                         f"(structure shared over and over; a module canonqnn writes expands "
                         f"to about 20 per node at most)")
    if root_type is not None and nodes[root]["type"] != root_type:
        raise ValueError(f"its root is {nodes[root]['type']}, not {root_type}")


def _json_references(data: Any):
    """The integers anywhere in a node's ``data``, without recursion."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, bool) or item is None or isinstance(item, (str, float)):
            continue
        if isinstance(item, int):
            yield item
        elif isinstance(item, list):
            pending.extend(reversed(item))
        elif isinstance(item, dict):
            pending.extend(reversed(list(item.values())))


# ---------------------------------------------------------------- patterns and partitioning
def dpl_call(op_name_: str, n_args: int | None) -> Any:
    """The DPL pattern of a call to ``op_name_`` with ``n_args`` arbitrary arguments (None:
    any number, for variadic ops)."""
    from tvm.relax.dpl import is_op, wildcard

    if n_args is None:
        return is_op(op_name_)(varg_default_wildcard=True)
    return is_op(op_name_)(*[wildcard() for _ in range(n_args)])


def dpl_call_on(op_name_: str, first: Any, n_rest: int) -> Any:
    """The DPL pattern of a call to ``op_name_`` whose first argument matches ``first``."""
    from tvm.relax.dpl import is_op, wildcard

    return is_op(op_name_)(first, *[wildcard() for _ in range(n_rest)])


def register_fusion_patterns(entries: Sequence[tuple[str, Any, dict[str, Any], Callable]]) -> None:
    """Register ``(name, pattern, annotations, check)`` entries in TVM's BYOC pattern registry
    (later entries take priority). Tuples, not ``FusionPattern`` objects: only tuples are
    removed again at interpreter exit, which keeps Python check functions from outliving
    Python."""
    from tvm.relax.backend.pattern_registry import register_patterns

    register_patterns(list(entries))


def registered_patterns(prefix: str) -> list[Any]:
    """TVM's registered patterns whose names start with ``prefix``, highest priority first."""
    from tvm.relax.backend.pattern_registry import get_patterns_with_prefix

    return list(get_patterns_with_prefix(prefix))


def fusion_pattern(name: str, pattern: Any, annotations: dict[str, Any],
                   check: Callable[[Any], bool]) -> Any:
    return relax.transform.FusionPattern(name, pattern, annotations, check)


def leaks_intermediates(context: Any) -> bool:
    """Whether a match's inner results are also used outside it (fusing would duplicate)."""
    from tvm.relax.backend.utils import has_leaking_intermediate_variables

    return bool(has_leaking_intermediate_variables(context))


def fuse_ops_by_pattern(mod: Any, patterns: Sequence[Any]) -> Any:
    """``FuseOpsByPattern`` with constants bound into the composite functions."""
    return relax.transform.FuseOpsByPattern(list(patterns), bind_constants=True,
                                            annotate_codegen=False)(mod)


def merge_composite_functions(mod: Any) -> Any:
    return relax.transform.MergeCompositeFunctions()(mod)


def run_codegen(mod: Any) -> Any:
    return relax.transform.RunCodegen()(mod)


def function_attr(func: Any, key: str) -> Any:
    """A function attribute as a Python value, or None."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or key not in attrs:
        return None
    return _to_python(attrs[key])


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


def is_function(expr: Any) -> bool:
    return isinstance(expr, relax.Function)
