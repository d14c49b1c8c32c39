"""Validation of an ONNX model before it is imported: ``check_model(proto)``.

Refuses what is not a valid model (``InvalidModelError``, ``InvalidQuantizationError``) or uses
tensors canonqnn cannot hold (``UnsupportedError``), naming the node (``'name'`` or ``'#k'``,
its index), its op and the reason, before any of it reaches TVM. It checks:

1. the model: IR version, opset imports (one per domain; one for the default domain when nodes
   use it);
2. the interface: the graph has outputs; graph inputs and outputs are tensors of a defined
   type with positive dimensions and a size that can exist;
3. names: UTF-8 text (a damaged file may hold other bytes); single assignment: one writer per
   tensor, no node writing a graph input or an initializer, no initializer defined twice;
4. each node: arity and attributes against its schema, window attributes of convolutions and
   pooling, Quantize/DequantizeLinear parameters (axis, per-axis length, zero point type,
   scales), using the types strict ONNX shape inference gives;
5. ``onnx.checker`` (whatever 1-4 do not name: attribute types, required attributes, tensor
   data sizes, topological order, subgraphs), then strict shape inference's own verdict and
   the declared outputs against what it computes.

Everything is linear in the model size. onnx.checker and shape inference run on a copy that
the onnx package accepts for what canonqnn deliberately accepts: com.microsoft contrib ops
written in the default domain, graph inputs/outputs without a declared shape, and initializers
with external data.
"""

from __future__ import annotations

import re

import onnx
from onnx import TensorProto, helper

from canonqnn import budget
from canonqnn.errors import InvalidModelError

from ._context import dtype_name, unsupported_error
from ._node_checks import (
    CONTRIB_DOMAIN,
    DEFAULT_DOMAINS,
    Types,
    check_nodes,
    known_op,
    node_label,
    shape_text,
    tensor_type,
)

# A graph input or output of 2 GiB or more is refused: canonqnn converts inference models whose
# largest activations are megabytes, and such a size only comes from garbled dimensions
# (2^31, 2^62, products that overflow int64) that would otherwise fail deep inside a build.
MAX_TENSOR_BYTES = 2**31
# What onnx.checker and shape inference raise about a model (their C++ errors arrive as these).
ONNX_ERRORS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, RuntimeError,
               ValueError, TypeError)
VALUE_KINDS = {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional",
               "sparse_tensor_type": "a sparse tensor"}


def check_model(proto: onnx.ModelProto) -> None:
    """Raise a CanonqnnError naming the first problem found in ``proto``; return if it is a
    valid model."""
    graph = proto.graph
    opsets = _check_opsets(proto)
    constants = _check_names(proto)
    _check_default_domain(graph, opsets)
    _check_interface(graph, constants)
    copy = _checkable_copy(proto)
    types, inference_error = _infer_types(copy, graph)
    # input types are checked only when inference failed: else it has checked them already
    check_nodes(graph, opsets, types, check_types=bool(inference_error))
    _run_checker(copy, graph)
    if inference_error:
        raise _onnx_failure(graph, "ONNX shape inference fails", inference_error)
    _check_declared_outputs(graph, types)
    _check_result_sizes(graph, types)


# ------------------------------------------------------------------------------ model level
def _check_opsets(proto: onnx.ModelProto) -> dict[str, int]:
    if proto.ir_version > onnx.IR_VERSION:
        raise InvalidModelError(f"IR version {proto.ir_version} is newer than the installed "
                                f"onnx package reads (up to {onnx.IR_VERSION})")
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        label = "the default (ai.onnx)" if domain == "" else repr(domain)
        if domain in opsets:
            raise InvalidModelError(f"opset_import lists {label} domain twice (versions "
                                    f"{opsets[domain]} and {entry.version})")
        if entry.version < 1:
            raise InvalidModelError(f"opset_import gives {label} domain version {entry.version}")
        opsets[domain] = entry.version
    return opsets


def _check_default_domain(graph: onnx.GraphProto, opsets: dict[str, int]) -> None:
    if "" in opsets:
        return
    for i, node in enumerate(graph.node):
        if node.domain in DEFAULT_DOMAINS:
            raise InvalidModelError(f"{node_label(node, i)} is in the default ONNX domain, but "
                                    "the model imports no ai.onnx opset")


def _check_interface(graph: onnx.GraphProto, constants: set[str]) -> None:
    if not graph.output:
        raise InvalidModelError("the graph has no outputs: it computes nothing")
    for what, values in (("graph input", graph.input), ("graph output", graph.output)):
        for vi in values:
            if what == "graph input" and vi.name in constants:
                continue  # a constant listed as an input (IR < 4 writes them so)
            kind = vi.type.WhichOneof("value")
            if kind is None:
                if what == "graph input":
                    raise InvalidModelError(f"graph input {vi.name!r} has no type")
                continue  # an output's type is inferred
            if kind != "tensor_type":
                reason = f"{VALUE_KINDS.get(kind, kind)} is not supported (tensors only)"
                raise unsupported_error([(vi.name, what, reason)])
            _check_tensor_type(vi.name, what, vi.type.tensor_type)


def _check_tensor_type(name: str, what: str, tt: onnx.TypeProto.Tensor) -> None:
    if tt.elem_type == TensorProto.UNDEFINED and what == "graph input":
        raise InvalidModelError(f"graph input {name!r} has an undefined element type "
                                "(elem_type 0)")
    if tt.elem_type not in TensorProto.DataType.values():
        raise InvalidModelError(f"{what} {name!r} has an unknown element type {tt.elem_type}")
    if not tt.HasField("shape"):
        return
    size = _itemsize(tt.elem_type)
    for axis, dim in enumerate(tt.shape.dim):
        if not dim.HasField("dim_value"):
            continue
        if dim.dim_value < 0:
            raise InvalidModelError(f"{what} {name!r}: dimension {axis} is {dim.dim_value} "
                                    "(negative)")
        if dim.dim_value == 0:
            reason = f"dimension {axis} is 0: zero-sized tensors are not supported"
            raise unsupported_error([(name, what, reason)])
        size *= dim.dim_value
        if size >= MAX_TENSOR_BYTES:
            shape = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                     for d in tt.shape.dim]
            raise InvalidModelError(f"{what} {name!r} of shape {shape} would hold at least "
                                    f"{size} bytes: tensors of 2 GiB or more are refused as "
                                    "garbled dimensions")


def _itemsize(elem_type: int) -> int:
    try:
        return max(helper.tensor_dtype_to_np_dtype(elem_type).itemsize, 1)
    except (KeyError, ValueError, TypeError):  # string tensors and the like
        return 1


def _check_names(proto: onnx.ModelProto) -> set[str]:
    """Names are UTF-8 text, and every tensor has one writer: checked on lists of all names,
    located only when that fails. Returns the initializers' names."""
    graph = proto.graph
    initializers = [init.name for init in graph.initializer]
    initializers += [s.values.name for s in graph.sparse_initializer]
    inputs = [vi.name for vi in graph.input]
    outputs: list[str] = []
    ops: list[str] = []
    for node in graph.node:
        outputs += node.output
        ops += (node.op_type, node.domain)
    # protobuf hands over names that are not UTF-8 (a damaged file) as bytes, which nothing
    # downstream expects (a node input that is bytes names no tensor: onnx.checker says so)
    if any(type(name) is bytes for names in (initializers, inputs, outputs, ops,
                                             [vi.name for vi in graph.output],
                                             [o.domain for o in proto.opset_import])
           for name in names):
        _refuse_bytes(proto)
    outputs = [name for name in outputs if name]
    taken = set(initializers) | set(inputs)
    if len(set(initializers)) == len(initializers) and len(set(inputs)) == len(inputs) and \
            len(set(outputs)) == len(outputs) and taken.isdisjoint(outputs):
        return set(initializers)
    for what, names in (("initializer", initializers), ("graph input", inputs)):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise InvalidModelError(f"{what} {name!r} is defined twice")
            seen.add(name)
    producers: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in filter(None, node.output):
            if out in producers:
                j = producers[out]
                writer = "this node" if j == i else node_label(graph.node[j], j)
                raise InvalidModelError(f"{node_label(node, i)}: output {out!r} is also written "
                                        f"by {writer} (a tensor has one writer)")
            if out in taken:
                kind = "a graph input" if out in inputs else "an initializer"
                raise InvalidModelError(f"{node_label(node, i)}: output {out!r} is also {kind} "
                                        "(a tensor has one writer)")
            producers[out] = i
    return set(initializers)


def _refuse_bytes(proto: onnx.ModelProto) -> None:
    graph = proto.graph
    for what, names in (("opset_import domain", [o.domain for o in proto.opset_import]),
                        ("graph input", [vi.name for vi in graph.input]),
                        ("graph output", [vi.name for vi in graph.output]),
                        ("initializer", [init.name for init in graph.initializer]),
                        ("sparse initializer",
                         [s.values.name for s in graph.sparse_initializer])):
        for name in names:
            if type(name) is bytes:
                raise InvalidModelError(f"{what} {name!r} is not UTF-8 text (a damaged file?)")
    for i, node in enumerate(graph.node):
        for text in (node.op_type, node.domain, *node.output):
            if type(text) is bytes:
                raise InvalidModelError(f"node #{i}: {text!r} is not UTF-8 text (a damaged "
                                        "file?)")


# ------------------------------------------------------------------------------ onnx package
def _checkable_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy onnx.checker and shape inference accept for what canonqnn accepts: contrib ops
    in the default domain moved to com.microsoft (the onnx package knows no such op there), and
    initializers with external data made graph inputs of their type and shape (the importer
    reads their data from the model's directory; the checker, given no path, would look in
    the working directory)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    moved = False
    for node in copy.graph.node:
        if node.domain in DEFAULT_DOMAINS and not known_op(node.op_type):
            node.domain, moved = CONTRIB_DOMAIN, True
    if moved and all(o.domain != CONTRIB_DOMAIN for o in copy.opset_import):
        copy.opset_import.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
    external = [init for init in proto.graph.initializer
                if init.data_location == TensorProto.EXTERNAL]
    if external:
        declared = {vi.name for vi in proto.graph.input}
        del copy.graph.initializer[:]
        copy.graph.initializer.extend(init for init in proto.graph.initializer
                                      if init.data_location != TensorProto.EXTERNAL)
        copy.graph.input.extend(helper.make_tensor_value_info(init.name, init.data_type,
                                                              list(init.dims))
                                for init in external if init.name not in declared)
    return copy


def _infer_types(copy: onnx.ModelProto, graph: onnx.GraphProto) -> tuple[Types, str]:
    """Types of the tensors strict shape inference computes (graph outputs: computed, not
    declared), and its error message if it fails (the types are then non-strict inference's).
    The declared output types are removed from ``copy`` for it and put back after."""
    declared = [onnx.ValueInfoProto() for _ in copy.graph.output]
    for saved, vi in zip(declared, copy.graph.output):
        saved.CopyFrom(vi)
        vi.ClearField("type")
    error = ""
    try:
        inferred = _inferred(copy, strict=True)
    except ONNX_ERRORS as exc:
        error = _one_line(exc)
        try:
            inferred = _inferred(copy, strict=False)
        except ONNX_ERRORS:
            inferred = copy
    finally:
        del copy.graph.output[:]
        copy.graph.output.extend(declared)
    return Types(graph, inferred.graph), error


def _inferred(copy: onnx.ModelProto, strict: bool) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(copy, check_type=strict, strict_mode=strict)


def _check_result_sizes(graph: onnx.GraphProto, types: Types) -> None:
    """Every node result whose size shape inference knows within the memory budget, before
    anything is made: a ConstantOfShape or Expand of a few bytes can ask for gigabytes, which
    constant folding (or TVM's converters) would allocate at import."""
    for index, node in enumerate(graph.node):
        for name in node.output:
            computed = types(name) if name else None
            if computed is None or computed[1] is None or not computed[0]:
                continue
            elem, dims = computed
            if all(isinstance(d, int) for d in dims):
                budget.check_tensors([budget.Tensor(name, dtype_name(elem), tuple(dims))],
                                     where=f"{node_label(node, index)}: ")


def _check_declared_outputs(graph: onnx.GraphProto, types: Types) -> None:
    """Declared output types and shapes agree with what shape inference computes (where both
    are known: symbolic or unknown dimensions agree with anything)."""
    for vi in graph.output:
        computed = types(vi.name)
        if not vi.type.HasField("tensor_type") or computed is None:
            continue
        (declared_elem, declared_dims), (elem, dims) = tensor_type(vi.type.tensor_type), computed
        if declared_elem and elem and declared_elem != elem:
            raise InvalidModelError(f"graph output {vi.name!r} is declared "
                                    f"{dtype_name(declared_elem)}, but {_producer(graph, vi.name)} "
                                    f"computes {dtype_name(elem)}")
        if declared_dims is not None and dims is not None and not _agree(declared_dims, dims):
            raise InvalidModelError(f"graph output {vi.name!r} is declared of shape "
                                    f"{shape_text(declared_dims)}, but "
                                    f"{_producer(graph, vi.name)} computes {shape_text(dims)}")


def _producer(graph: onnx.GraphProto, name: str) -> str:
    return next((node_label(n, i) for i, n in enumerate(graph.node) if name in n.output),
                "its producer")


def _agree(declared: tuple, computed: tuple) -> bool:
    if len(declared) != len(computed):
        # exporters declare one-element tensors as [] or [1]; onnxruntime accepts either
        longer = declared or computed
        return len(declared) + len(computed) == 1 and longer[0] in (1, None)
    return all(a is None or b is None or a == b for a, b in zip(declared, computed))


def _run_checker(copy: onnx.ModelProto, graph: onnx.GraphProto) -> None:
    """onnx.checker, which requires a shape on every graph input and output: one without is
    given an empty one (the checker does not read it)."""
    for vi in (*copy.graph.input, *copy.graph.output):
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()
    try:
        onnx.checker.check_model(copy)
    except ONNX_ERRORS as exc:
        raise _onnx_failure(graph, "onnx.checker", _one_line(exc)) from None


# Where onnx.checker's and shape inference's messages name a node (an empty name if it has none).
_NAMED_NODE = re.compile(r"\(op_type:(?P<op>[\w.]+)(?:, node name: (?P<name>[^)]*))?\)|"
                         r"[Nn]ame: ?(?P<name2>\S*) OpType: (?P<op2>[\w.]+)")
_NAMED_INPUT = re.compile(r"input '([^']*)'")


def _onnx_failure(graph: onnx.GraphProto, what: str, message: str) -> InvalidModelError:
    """An error of the onnx package, led by the node its message names when that is one node
    of the graph."""
    found = _NAMED_NODE.search(message)
    if found:
        op_type = found["op"] or found["op2"]
        name = found["name"] if found["op"] else found["name2"]
        nodes = [(i, n) for i, n in enumerate(graph.node)
                 if n.op_type == op_type and (name is None or n.name == name)]
        if len(nodes) > 1 and (used := _NAMED_INPUT.search(message)):
            nodes = [(i, n) for i, n in nodes if used[1] in n.input]
        if len(nodes) == 1:
            return InvalidModelError(f"{node_label(nodes[0][1], nodes[0][0])}: {what}: {message}")
    return InvalidModelError(f"{what}: {message}")


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).replace("==> Context:", "in:").split())
