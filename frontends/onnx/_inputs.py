"""The graph inputs of an ONNX model as the module takes them: dtype and a static shape.

Exporters (torch.onnx, tf2onnx) leave the first dimension of every input dynamic: a symbol
(``"N"``, ``"batch_size"``) or no value at all. canonqnn builds static shapes, so:

- a shape the caller gives (``input_shapes``, ``--shape``) sets an input's dynamic dimensions,
  and every dimension of another input with the same symbol (one symbol, one size);
- a dynamic batch dimension (dimension 0 of an input of rank 2 or more) no given shape sets
  is 1: every input whose dimension 0 has that symbol gets 1, and the module's interface says
  so in a note (``ModelIO.notes``, printed by the command line);
- any other dynamic dimension is refused, naming the input, the dimension and its symbol.
"""

from __future__ import annotations

from typing import Any

import onnx

from canonqnn.errors import InvalidModelError
from canonqnn.io import TensorInfo

from ._context import dtype_name, unsupported_error

SUPPORTED_INPUT_DTYPES = ("float32", "int8", "uint8", "int16", "uint16", "int32", "int64")
DEFAULT_BATCH = 1


def _dims(vi: onnx.ValueInfoProto) -> list[int | str | None]:
    """Each dimension: its size, its symbol, or None (unknown)."""
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
            for d in vi.type.tensor_type.shape.dim]


def _text(dims: list[Any]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def consumers(graph: onnx.GraphProto, name: str) -> str:
    """`` (consumed by QuantizeLinear node '#0')`` for error messages about a graph input."""
    users = [f"{n.op_type} node {n.name or f'#{i}'!r}" for i, n in enumerate(graph.node)
             if name in n.input]
    return f" (consumed by {', '.join(users)})" if users else ""


def _given(vi: onnx.ValueInfoProto, given: Any) -> tuple[int, ...]:
    """The shape the caller gives ``vi``, checked against the model's static dimensions."""
    shape = tuple(int(d) for d in given)
    tt = vi.type.tensor_type
    declared = [d if isinstance(d, int) else None for d in _dims(vi)]
    if any(d < 1 for d in shape) or (tt.HasField("shape") and (
            len(declared) != len(shape)
            or any(d is not None and d != s for d, s in zip(declared, shape)))):
        raise InvalidModelError(
            f"input {vi.name!r}: the shape {_text(list(shape))} given for it contradicts the "
            f"model's {_text(declared) or 'scalar'} (only its dynamic dimensions can be set, "
            "each to 1 or more)")
    return shape


def _symbols_given(inputs: list[onnx.ValueInfoProto],
                   shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Each symbol a given shape sets, to its size; two sizes for one symbol are refused."""
    sizes: dict[str, tuple[int, str]] = {}
    for vi in inputs:
        if vi.name not in shapes:
            continue
        for dim, size in zip(_dims(vi), shapes[vi.name]):
            if not isinstance(dim, str):
                continue
            first = sizes.setdefault(dim, (size, vi.name))
            if first[0] != size:
                raise InvalidModelError(
                    f"inputs {first[1]!r} and {vi.name!r} share the dimension {dim!r}, but the "
                    f"shapes given set it to {first[0]} and {size}")
    return {symbol: size for symbol, (size, _) in sizes.items()}


def input_infos(graph: onnx.GraphProto, inputs: list[onnx.ValueInfoProto],
                input_shapes: dict[str, Any]) -> tuple[list[TensorInfo], list[str]]:
    """The interface of the graph inputs ``inputs`` (those not bound to constants) and the
    notes saying which dynamic batch dimensions were set to 1 (module doc)."""
    for vi in inputs:
        dtype = dtype_name(vi.type.tensor_type.elem_type)
        if dtype not in SUPPORTED_INPUT_DTYPES:
            reason = f"input dtype {dtype} is not supported{consumers(graph, vi.name)}"
            raise unsupported_error([(vi.name, "graph input", reason)])
    shapes = {vi.name: _given(vi, input_shapes[vi.name]) for vi in inputs
              if vi.name in input_shapes}
    sizes = _symbols_given(inputs, shapes)
    defaulted: dict[str, list[str]] = {}  # batch symbol ("" for none) -> inputs
    for vi in inputs:
        dims = _dims(vi)
        if vi.name in shapes or len(dims) < 2 or isinstance(dims[0], int) or \
                (dims[0] in sizes and dims[0] not in defaulted):  # set by a given shape
            continue
        if dims[0] is not None:
            sizes[dims[0]] = DEFAULT_BATCH
        defaulted.setdefault(dims[0] or "", []).append(vi.name)
    unnamed = set(defaulted.get("", []))
    infos, problems = [], []
    for vi in inputs:
        dims = _dims(vi)
        if vi.name in shapes:
            shape = shapes[vi.name]
        else:
            shape = tuple(d if isinstance(d, int) else
                          DEFAULT_BATCH if axis == 0 and vi.name in unnamed else
                          sizes.get(d) if d is not None else None  # type: ignore[misc]
                          for axis, d in enumerate(dims))
            dynamic = [axis for axis, d in enumerate(shape) if d is None]
            if dynamic:
                problems.append((vi.name, "graph input", _refusal(vi.name, dims, shape, dynamic)))
                continue
        infos.append(TensorInfo(vi.name, dtype_name(vi.type.tensor_type.elem_type),
                                tuple(int(d) for d in shape)))  # type: ignore[arg-type]
    if problems:
        raise unsupported_error(problems)
    shaped = {info.name: info.shape for info in infos}
    return infos, [_note(symbol, names, shaped) for symbol, names in defaulted.items()]


def _refusal(name: str, dims: list[Any], shape: tuple[Any, ...], dynamic: list[int]) -> str:
    which = ", ".join(f"{axis} ({dims[axis] or '?'!r})" for axis in dynamic)
    template = _text([d if d is not None else dims[axis] for axis, d in enumerate(shape)])
    return (f"dimension{'s' * (len(dynamic) > 1)} {which} {'are' if len(dynamic) > 1 else 'is'} "
            "dynamic (only a dynamic batch, dimension 0, defaults to 1); give a static shape: "
            f"--shape {name}={template} with a size for each dynamic dimension "
            "(load(..., input_shapes=...))")


def _note(symbol: str, names: list[str], shapes: dict[str, tuple[int, ...]]) -> str:
    """What the command line prints about a batch dimension set to 1 for the caller."""
    what = f"dynamic batch dimension {symbol!r}" if symbol else "dynamic batch dimension"
    inputs = ", ".join(repr(n) for n in names)
    fix = " ".join(f"--shape {n}={_text(['B', *shapes[n][1:]])}" for n in names)
    return (f"the {what} of input{'s' * (len(names) > 1)} {inputs} was set to "
            f"{DEFAULT_BATCH}; for batch B, give {fix} (load(..., input_shapes=...))")
