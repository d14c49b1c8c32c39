"""The single writer (and reader) of ``dequantize`` / ``quantize`` in the fake-quant form.

Conventions fixed here, for every frontend and rule:
- scales are float32 constants, zero points int8 constants (int32 for int32 tensors such as
  a bias), both 0-d per tensor or 1-d per channel;
- the axis is explicit and non-negative (per tensor: axis 0, which Relax ignores);
- uint8 never appears inside a module: boundary conversions shift it to int8 (q - 128).

Facts about a quantized tensor that its int8 form cannot show ride on the quantize and
dequantize calls themselves, written and read here only: ``source_dtype`` ("uint8" when the int8
tensor holds the source's uint8 data - 128: onnxruntime's uint8 kernels compute otherwise than
its int8 ones; "int64" on an int32 bias that the source stores as int64, as TFLite's 16x8
layers do: their accumulator is then int64, and Relax's dequantize takes no int64) and, on a
quantize, ``source_op`` (the source operator producing the tensor:
TFLite's FULLY_CONNECTED rounds otherwise than its BATCH_MATMUL, both a matmul here) and
``source_tensor`` (the name of the source model's tensor it computes, which parity reads back
from the source runtime to find the first diverging layer). Relax's
quantize attributes are a fixed C++ type, so the facts are the call's span note
(``_tvm.with_note``), which survives renaming, CSE, JSON and TVM's normalizing passes, not a
table keyed by variable names.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _tvm
from .errors import InvalidQuantizationError
from .qparams import SIGNED, QParams, check_scale

QUANTIZE = "relax.quantize"
DEQUANTIZE = "relax.dequantize"
FACTS = "canonqnn.facts:"  # the span note's prefix


def _qparam_consts(qp: QParams) -> tuple[Any, Any]:
    memo = _tvm.conversion_memo()  # (a frontend reads one QParams for a Q/DQ pair)
    known = memo.get(("qparam_consts", id(qp))) if memo is not None else None
    if known is not None:
        return known[1]
    if qp.dtype not in ("int8", "int16", "int32"):
        raise InvalidQuantizationError(f"{qp.dtype} tensors must be normalized to "
                                       f"{SIGNED.get(qp.dtype, ('int8',))[0]} first")
    scale = _tvm.const(check_scale(qp.scale, "quantization"), "float32")
    zp = _tvm.const(qp.zero_point.astype(qp.dtype), qp.dtype)
    if memo is not None:
        memo[("qparam_consts", id(qp))] = (qp, (scale, zp))  # (qp kept: its id stays its own)
    return scale, zp


def _axis(qp: QParams, ndim: int) -> int:
    if qp.per_tensor:
        return 0
    axis = qp.axis if qp.axis is not None else 0
    if not 0 <= axis < max(ndim, 1):
        raise InvalidQuantizationError(f"quantization axis {qp.axis} out of range for rank {ndim}")
    return axis


def dequantize(q: Any, qp: QParams, *, source_dtype: str = "int8") -> Any:
    """``scale * (q - zp)`` as float32; ``source_dtype`` "uint8": ``q`` holds uint8 data."""
    scale, zp = _qparam_consts(qp)
    call = _tvm.dequantize(q, scale, zp, _axis(qp, len(_tvm.shape_of(q))))
    return _with_facts(call, source_dtype, None)


def quantize(x: Any, qp: QParams, *, source_dtype: str = "int8", source_op: str | None = None,
             source_tensor: str | None = None) -> Any:
    """``saturate(RNE(x / scale) + zp)`` to ``qp.dtype``; ``source_dtype`` "uint8": the result
    holds uint8 data of the source; ``source_op``: the source operator computing it;
    ``source_tensor``: the source model's name of the result."""
    scale, zp = _qparam_consts(qp)
    call = _tvm.quantize(x, scale, zp, _axis(qp, len(_tvm.shape_of(x))), qp.dtype)
    return _with_facts(call, source_dtype, source_op, source_tensor)


SOURCE_DTYPES = ("int8", "uint8", "uint16", "int64")


def source_dtype(dtype: str) -> str:
    """The ``source_dtype`` fact of a tensor the source model stores as ``dtype`` (only a type
    held as another is a fact: unsigned ones shifted, an int64 bias as int32; a signed one is
    the tensor's own type)."""
    return dtype if dtype in ("uint8", "uint16", "int64") else "int8"


def _with_facts(call: Any, source_dtype: str, source_op: str | None = None,
                source_tensor: str | None = None) -> Any:
    if source_dtype not in SOURCE_DTYPES:
        raise ValueError(f"source dtype {source_dtype!r} (int8 or uint8)")
    facts = {k: v for k, v in (("dtype", source_dtype), ("op", source_op),
                               ("tensor", source_tensor)) if v and v != "int8"}
    return _tvm.with_note(call, FACTS + json.dumps(facts, sort_keys=True)) if facts else call


def _facts(call: Any) -> dict[str, str]:
    """The facts ``call`` carries (a dict the caller must not change)."""
    note = _tvm.note_of(call) or ""
    return _parse_facts(note) if note.startswith(FACTS) else {}


@functools.lru_cache(maxsize=4096)
def _parse_facts(note: str) -> dict[str, str]:
    return json.loads(note[len(FACTS):])


def carry_facts(root: Any, result: Any) -> Any:
    """``result`` (a call replacing the quantize ``root``) with ``root``'s facts."""
    note = _tvm.note_of(root)
    if note and note.startswith(FACTS) and _tvm.op_name(result) is not None:
        return _tvm.with_note(result, note)
    return result


def source_tensor(call: Any) -> str | None:
    """The source model's name of the tensor ``call`` computes (a quantize, or the canonical op
    that replaced one), when the frontend recorded it."""
    return _facts(call).get("tensor")


def facts_of(call: Any) -> tuple[str, str | None]:
    """``(source_dtype, source_op)`` a quantize or dequantize call carries, without parsing its
    parameters."""
    facts = _facts(call)
    return facts.get("dtype", "int8"), facts.get("op")


@dataclass(frozen=True)
class QdqCall:
    """A parsed ``quantize``/``dequantize`` call: its tensor operand, its parameters and the
    facts it carries (module doc)."""

    operand: Any
    qparams: QParams
    source_dtype: str = "int8"
    source_op: str | None = None
    source_tensor: str | None = None


def _read(call: Any, op: str) -> QdqCall | None:
    if _tvm.op_name(call) != op:
        return None
    # Within a conversion each call is parsed once: a canonicalization reads the same calls in
    # every rule and phase that looks at them, and converting their constants to numpy
    # dominated its time.
    memo = _tvm.conversion_memo()
    if memo is None:
        return _parse(call, op)
    return _tvm.remembered(memo, call, lambda c: _parse(c, op))


def _parse(call: Any, op: str) -> QdqCall | None:
    data, scale, zp = _tvm.items(call.args)
    if not (_tvm.is_const(scale) and _tvm.is_const(zp)):
        return None
    dtype = str(_tvm.attr(call, "out_dtype")) if op == QUANTIZE else _tvm.dtype_of(data)
    qp = _qparams(scale, zp, _tvm.attr(call, "axis"), data, dtype)
    facts = _facts(call)
    return QdqCall(data, qp, facts.get("dtype", "int8"), facts.get("op"), facts.get("tensor"))


def _qparams(scale: Any, zp: Any, axis: int, data: Any, dtype: str) -> QParams:
    """The parameters of constant ``scale`` and ``zp`` along ``axis`` of ``data``; within a
    conversion, read once for every call sharing the same constants (``_tvm.converting``
    shares equal constants)."""
    memo = _tvm.conversion_memo()
    key = ("qparams", _tvm.identity(scale), _tvm.identity(zp), axis, _tvm.ndim_of(data), dtype)
    known = memo.get(key) if memo is not None else None
    if known is not None:
        return known[2]
    scale_v, zp_v = _tvm.const_value(scale), _tvm.const_value(zp)
    if scale_v.size == 1 and zp_v.size == 1:
        qp = QParams.make(scale_v, zp_v, None, dtype)
    else:
        qp = QParams.make(scale_v, zp_v, axis % max(len(_tvm.shape_of(data)), 1), dtype)
    if memo is not None:
        memo[key] = (scale, zp, qp)  # (the constants kept alive: ``_tvm.identity``)
    return qp


def read_dequantize(call: Any) -> QdqCall | None:
    """The operand and parameters of a ``dequantize`` with constant parameters, else None."""
    return _read(call, DEQUANTIZE)


def read_quantize(call: Any) -> QdqCall | None:
    """The operand and parameters of a ``quantize`` with constant parameters, else None."""
    return _read(call, QUANTIZE)


# ---------------------------------------------------------------- unsigned boundary
def to_signed(x: Any, dtype: str = "uint8") -> Any:
    """Exact shift of unsigned ``dtype`` data entering a module to its signed type
    (``qparams.SIGNED``: uint8 q - 128, uint16 q - 32768)."""
    signed, shift = SIGNED[dtype]
    return _tvm.astype(_tvm.subtract(_tvm.astype(x, "int32"), _tvm.const(np.int32(shift))),
                       signed)


def to_unsigned(x: Any, dtype: str = "uint8") -> Any:
    """The inverse of ``to_signed``, for tensors leaving a module as ``dtype``."""
    _, shift = SIGNED[dtype]
    return _tvm.astype(_tvm.add(_tvm.astype(x, "int32"), _tvm.const(np.int32(shift))), dtype)


def uint8_to_int8(x: Any) -> Any:
    return to_signed(x, "uint8")


def int8_to_uint8(x: Any) -> Any:
    return to_unsigned(x, "uint8")


# ---------------------------------------------------------------- dynamic quantization
# DynamicQuantizeLinear's parameters are computed at run time, so its FQ form is Relax
# arithmetic (qparams.dynamic_qparams / dynamic_quantize, op for op), written here only. Its
# three results carry the note ``canonqnn.dynamic:<role>``; ``read_dynamic`` finds them and the
# float tensor they quantize, for the rules that fold them into canonqnn.dynamic_* ops.
DYNAMIC = "canonqnn.dynamic:"
DYNAMIC_ROLES = ("q", "scale", "zero_point")


def dynamic_quantize(emit: Any, x: Any) -> tuple[Any, Any, Any]:
    """``(q, scale, zero point)`` of float32 ``x`` as onnxruntime's DynamicQuantizeLinear
    computes them; ``q`` and the zero point are uint8 held as int8 (value - 128), the scale a
    float32 scalar. ``emit`` binds each intermediate."""
    op, f32 = _tvm.relax.op, (lambda v: _tvm.const(np.float32(v)))
    levels = f32(255.0)
    lo = emit(op.minimum(emit(op.min(x)), f32(0.0)))
    hi = emit(op.maximum(emit(op.max(x)), f32(0.0)))
    scale = emit(_note(op.where(emit(op.equal(hi, lo)), f32(1.0),
                                emit(op.divide(emit(op.subtract(hi, lo)), levels))), "scale"))
    zp = emit(op.round(emit(op.clip(emit(op.subtract(f32(0.0), emit(op.divide(lo, scale)))),
                                     0.0, 255.0))))
    lowest = emit(op.negative(zp))
    quotient = emit(op.divide(x, scale))
    quotient = emit(op.where(emit(op.isnan(quotient)), lowest, quotient))
    clamped = emit(op.maximum(emit(op.minimum(quotient, emit(op.subtract(levels, zp)))), lowest))
    q = emit(op.add(emit(op.round(clamped)), zp))

    def int8_held(stored: Any, role: str) -> Any:
        return emit(_note(op.astype(emit(op.subtract(stored, f32(128.0))), "int8"), role))

    return int8_held(q, "q"), scale, int8_held(zp, "zero_point")


def _note(call: Any, role: str) -> Any:
    return _tvm.with_note(call, DYNAMIC + role)


# From each result to ``lo = minimum(min(x), 0)``: the argument index taken at each step.
_PATH_TO_LO = {"q": (0, 0, 1, 0, 0, 1, 0), "zero_point": (0, 0, 0, 0, 1, 0),
               "scale": (2, 0, 1)}


def read_dynamic(call: Any, value_of: Any) -> tuple[str, Any] | None:
    """``(role, x)`` when ``call`` is a result of ``dynamic_quantize(x)``, else None;
    ``value_of(var)`` gives a variable's bound value (None when unbound)."""
    note = _tvm.note_of(call) or ""
    role = note[len(DYNAMIC):] if note.startswith(DYNAMIC) else None
    if role not in _PATH_TO_LO:
        return None
    expr = call
    for index in _PATH_TO_LO[role]:
        args = getattr(expr, "args", ())
        if index >= len(args):
            return None
        expr = value_of(args[index]) if _tvm.is_var(args[index]) else args[index]
        if expr is None:
            return None
    if _tvm.op_name(expr) != "relax.minimum":
        return None
    reduction = value_of(expr.args[0]) if _tvm.is_var(expr.args[0]) else expr.args[0]
    if _tvm.op_name(reduction) != "relax.min":
        return None
    return role, reduction.args[0]
