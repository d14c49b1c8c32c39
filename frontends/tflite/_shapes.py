"""The static shapes of a model converted with dynamic dimensions.

Keras leaves a model's batch dimension unknown. TensorFlow's converter writes what it knows of
each tensor's shape in ``shape_signature`` (-1 for an unknown dimension) and, in ``shape``, the
signature with every -1 written as 1. That is the tensor's shape at batch 1 only where the -1
is the batch alone: where the converter flattened the batch together with other dimensions it
is not. A Keras Dense on a sequence is written ``SHAPE -> GATHER -> REDUCE_PROD -> PACK ->
RESHAPE`` to ``[-1, features]`` rows (declared ``[1, 1]``), then a FULLY_CONNECTED to
``[-1, units]`` (declared ``[1, units]``, 16 rows at run time), then a RESHAPE back.

The interpreter ignores those declared shapes: it computes every operator's output shape
again when it allocates. So does ``resolve``, once, from the model's static input shapes, for
the tensors whose signature is dynamic: RESHAPE's target from its shape tensor (the shape
arithmetic evaluated as the importer folds it, ``_fold``) or its ``new_shape`` option, -1
resolved; the other operators' outputs from their inputs' shapes. An operator with no shape
rule here keeps its declared output shape when its inputs have theirs (then the 1s are the
batch's); when an input's shape changed and the output's signature is dynamic, the model is
refused naming the operator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from .._base import Registry
from ._context import SOURCE, Unsupported
from ._fold import FOLDERS, slice_ranges
from .reader import Model, Operator

Shape = tuple[int, ...]
Rule = Callable[[Operator, list[Shape | None], list[np.ndarray | None]], list[Shape] | None]
_RULES: Registry[Rule] = Registry()
RULES = _RULES.converters
rule = _RULES.op  # @rule("ADD", ...): the shape rule of those operators

SAME_SHAPE = ("QUANTIZE", "DEQUANTIZE", "NEG", "RSQRT", "SQRT", "GELU", "LOGISTIC", "TANH",
              "HARD_SWISH", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "ELU",
              "SOFTMAX", "LOG_SOFTMAX", "EXP", "LOG", "ABS", "SQUARE", "SIN", "COS", "FLOOR",
              "CEIL", "ROUND", "SIGN", "CAST", "LOGICAL_NOT", "ZEROS_LIKE", "ONES_LIKE",
              "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION")
BROADCAST = ("ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "POW",
             "FLOOR_DIV", "FLOOR_MOD", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL",
             "NOT_EQUAL", "LOGICAL_AND", "LOGICAL_OR", "SELECT_V2", "PRELU")


def signatures(model: Model) -> list[Shape | None]:
    """Each tensor's ``shape_signature`` (None where the file has none)."""
    if model.schema is None:
        return [None] * len(model.tensors)
    g = model.schema.Subgraphs(0)
    result: list[Shape | None] = []
    for i in range(len(model.tensors)):
        t = g.Tensors(i)
        if t.ShapeSignatureIsNone():
            result.append(None)
        else:
            values = t.ShapeSignatureAsNumpy()
            result.append(() if isinstance(values, int) else tuple(int(v) for v in values))
    return result


def resolve(model: Model) -> Model:
    """``model`` with the shapes its dynamic tensors have when its inputs have their declared
    (static) shapes (module doc); the model itself when no tensor is dynamic."""
    sigs = signatures(model)
    if not any(s is not None and -1 in s for s in sigs):
        return model
    tensors = model.tensors
    shapes: list[Shape] = [t.shape for t in tensors]
    values: dict[int, np.ndarray] = {t.index: t.data for t in tensors
                                     if t.data is not None and not t.quantized}
    for op in model.operators:
        try:
            _resolve_op(op, model, sigs, shapes, values)
        except Unsupported as exc:
            raise SOURCE.unsupported([(op.label, op.kind, str(exc))]) from None
    if all(shape == t.shape for shape, t in zip(shapes, tensors)):
        return model
    return replace(model, tensors=[t if shapes[t.index] == t.shape else
                                   replace(t, shape=shapes[t.index]) for t in tensors])


def _resolve_op(op: Operator, model: Model, sigs: list[Shape | None], shapes: list[Shape],
                values: dict[int, np.ndarray]) -> None:
    tensors = model.tensors
    ins = list(op.inputs)
    in_values = [values.get(i) if i >= 0 else None for i in ins]
    computed, why = _computed(op, [shapes[i] if i >= 0 else None for i in ins], in_values)
    changed_input = any(i >= 0 and shapes[i] != tensors[i].shape for i in ins)
    for k, index in enumerate(op.outputs):
        sig = sigs[index]
        if sig is None or -1 not in sig:
            continue  # (a static declared shape stays: the converters check it)
        if computed is None or k >= len(computed):
            if changed_input or why:
                reason = why or "from its inputs' shapes"
                raise Unsupported(f"output {tensors[index].name!r} has a dynamic shape "
                                  f"{list(sig)} canonqnn cannot compute for {op.kind}: {reason}")
            continue  # its inputs have their declared shapes: so has it (its 1s are the batch)
        shape = tuple(int(d) for d in computed[k])
        if len(shape) != len(sig) or any(s not in (-1, d) for s, d in zip(sig, shape)):
            raise Unsupported(f"computes shape {list(shape)} for output "
                              f"{tensors[index].name!r}, whose signature is {list(sig)}")
        shapes[index] = shape
    _evaluate(op, model, shapes, values, in_values)


def _computed(op: Operator, shapes: list[Shape | None], values: list[np.ndarray | None]) \
        -> tuple[list[Shape] | None, str]:
    """The output shapes of ``op`` from its inputs', or None and why not ("" for no rule or
    a malformed operator, which its converter reports)."""
    try:
        if op.kind in SAME_SHAPE:
            return ([shapes[0]] if shapes and shapes[0] is not None else None), ""
        if op.kind in BROADCAST:
            return [_broadcast([s for s in shapes if s is not None])], ""
        fn = RULES.get(op.kind)
        return (None if fn is None else fn(op, shapes, values)), ""
    except Unsupported as exc:
        return None, str(exc)
    except (IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError):
        return None, ""


def _evaluate(op: Operator, model: Model, shapes: list[Shape],
              values: dict[int, np.ndarray], in_values: list[np.ndarray | None]) -> None:
    """The values of shape arithmetic, as the importer folds it (``_fold``)."""
    outs = [replace(model.tensors[i], shape=shapes[i]) for i in op.outputs]
    if op.kind == "SHAPE":
        values[op.outputs[0]] = np.asarray(shapes[op.inputs[0]], dtype=outs[0].dtype)
        return
    present = [(i, v) for i, v in zip(op.inputs, in_values) if i >= 0]
    if op.kind not in FOLDERS or not present or any(
            v is None or model.tensors[i].quantized for i, v in present):
        return
    try:
        arrays = FOLDERS[op.kind](op, list(in_values), outs)
    except (Unsupported, ValueError, IndexError):
        return  # left to the importer, which reports it
    for index, array in zip(op.outputs, arrays):
        array = np.asarray(array)
        if array.size == math.prod(shapes[index]) or not shapes[index]:
            values[index] = array.astype(model.tensors[index].dtype).reshape(
                shapes[index] if shapes[index] else array.shape)


def _broadcast(shapes: Sequence[Shape]) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise Unsupported(f"input shapes {[list(s) for s in shapes]} do not "
                          "broadcast") from None


def _ints(value: np.ndarray | None) -> list[int] | None:
    return None if value is None else [int(v) for v in value.reshape(-1)]


def reshape_target(input_shape: Shape, target: Sequence[int]) -> Shape:
    """RESHAPE's output shape for ``target`` (one -1 at most: the dimension that keeps the
    element count)."""
    size = math.prod(input_shape)
    stretch = [i for i, d in enumerate(target) if d == -1]
    if len(stretch) > 1 or any(d < -1 for d in target):
        raise Unsupported(f"reshape target {list(target)} has more than one -1 or a negative "
                          "dimension")
    known = math.prod(d for d in target if d != -1)
    shape = list(target)
    if stretch:
        if known == 0 or size % known:
            raise Unsupported(f"{size} elements do not reshape to {list(target)}")
        shape[stretch[0]] = size // known
    if math.prod(shape) != size:
        raise Unsupported(f"{size} elements of shape {list(input_shape)} do not reshape to "
                          f"{list(target)}")
    return tuple(shape)


@rule("RESHAPE")
def _reshape(op, shapes, values):
    # The interpreter's order: a 1-D int32 shape tensor, else the new_shape option (where a
    # lone 0 is a scalar, in older models).
    if len(shapes) > 1 and shapes[1] is not None and len(shapes[1]) == 1 and (
            values[1] is None or values[1].dtype == np.int32):
        target = _ints(values[1])
        if target is None:
            return None
    elif op.options is not None and op.options.NewShapeLength() > 0:
        target = [int(d) for d in op.options.NewShapeAsNumpy()]
        if target == [0]:
            target = []
    else:
        return None
    return [reshape_target(shapes[0], target)]


@rule("SQUEEZE")
def _squeeze(op, shapes, values):
    x = shapes[0]
    axes = {int(a) % len(x) for a in op.options.SqueezeDimsAsNumpy()} \
        if op.options is not None and op.options.SqueezeDimsLength() else \
        {i for i, d in enumerate(x) if d == 1}
    return [tuple(d for i, d in enumerate(x) if i not in axes)]


@rule("EXPAND_DIMS")
def _expand_dims(op, shapes, values):
    axis = _ints(values[1])
    if axis is None:
        return None
    x = list(shapes[0])
    x.insert(axis[0] % (len(x) + 1), 1)
    return [tuple(x)]


@rule("FULLY_CONNECTED")
def _fully_connected(op, shapes, values):
    x, w = shapes[0], shapes[1]
    units, depth = w
    if op.options is not None and op.options.KeepNumDims():
        return [(*x[:-1], units)]
    return [(math.prod(x) // depth, units)]


@rule("BATCH_MATMUL")
def _batch_matmul(op, shapes, values):
    a, b = list(shapes[0]), list(shapes[1])
    if op.options is not None and op.options.AdjX():
        a[-1], a[-2] = a[-2], a[-1]
    if op.options is not None and op.options.AdjY():
        b[-1], b[-2] = b[-2], b[-1]
    return [(*_broadcast([tuple(a[:-2]), tuple(b[:-2])]), a[-2], b[-1])]


@rule("TRANSPOSE")
def _transpose(op, shapes, values):
    perm = _ints(values[1])
    return None if perm is None else [tuple(shapes[0][p % len(shapes[0])] for p in perm)]


@rule("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY")
def _reduce(op, shapes, values):
    axes = _ints(values[1])
    if axes is None:
        return None
    x = shapes[0]
    axes_set = {a % len(x) for a in axes}
    if op.options is not None and op.options.KeepDims():
        return [tuple(1 if i in axes_set else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in axes_set)]


@rule("CONCATENATION")
def _concat(op, shapes, values):
    axis = int(op.options.Axis()) % len(shapes[0])
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


@rule("PACK")
def _pack(op, shapes, values):
    axis = int(op.options.Axis()) if op.options is not None else 0
    out = list(shapes[0])
    out.insert(axis % (len(out) + 1), len(shapes))
    return [tuple(out)]


@rule("GATHER")
def _gather(op, shapes, values):
    x, indices = shapes[0], shapes[1]
    if op.options is not None and op.options.BatchDims():
        return None
    axis = int(op.options.Axis()) % len(x) if op.options is not None else 0
    return [(*x[:axis], *indices, *x[axis + 1:])]


@rule("STRIDED_SLICE")
def _strided_slice(op, shapes, values):
    args = [_ints(v) for v in values[1:4]]
    if any(a is None for a in args) or op.options is None:
        return None
    x = shapes[0]
    ranges, shrink = slice_ranges(op.options, x, *(np.asarray(a) for a in args))
    sizes = [len(range(*r)) for r in ranges] + list(x[len(ranges):])
    return [tuple(d for i, d in enumerate(sizes) if not shrink >> i & 1)]
