"""PyTorch ExportedProgram (PT2E-quantized) -> fake-quant Relax module (see docs/fq-form.md).

``convert_pt2e`` already writes the fake-quant form: ``quantized_decomposed`` quantize and
dequantize around float aten ops. The importer reads the program's signature (user inputs
become the module's parameters; parameters, buffers and constants are constants, those no
node reads are left out), converts every node in order - quantize and dequantize by
``ops.quant``, every other op by TVM's own ExportedProgram converters (``_generic``) - and
returns the user outputs. Shapes must be static. The module records ``source="torch"`` and
``rounding="xnnpack"``: ExecuTorch runs such programs on XNNPACK's int8 kernels.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from canonqnn import _tvm
from canonqnn.errors import InvalidModelError
from canonqnn.io import TensorInfo

from .._base import GraphImporter
from . import archive, ops  # noqa: F401  (ops registers the converters)
from ._context import CONVERTERS, SOURCE, ImportContext, Unsupported, Value, dtype_name
from ._generic import FloatOps

SUPPORTED_INPUT_DTYPES = ("float32", "int8", "uint8", "int32", "int64")


def read_program(program: Any) -> Any:
    """The ``torch.export.ExportedProgram`` given, or read from a ``.pt2`` file saved with
    ``torch.export.save`` by ``archive.read_program``, which never runs or unpickles anything
    the file holds."""
    import torch

    if isinstance(program, torch.export.ExportedProgram):
        return program
    if not isinstance(program, (str, os.PathLike)):
        raise InvalidModelError(f"not an ExportedProgram or a path: {type(program).__name__}")
    path = os.fspath(program)
    if not os.path.isfile(path):
        raise InvalidModelError(f"{path}: no such file")
    return archive.read_program(path, path)


def kind(node: Any) -> str:
    """How errors and the registry name a node's op: ``aten.conv2d.default``."""
    if node.op != "call_function":
        return node.op
    return "getitem" if node.target is operator.getitem else str(node.target)


def load(program: Any) -> Any:
    """Import a PT2E-quantized ``torch.export.ExportedProgram`` (or a ``.pt2`` path) into the
    fake-quant Relax form."""
    ep = read_program(program)
    importer = TorchImporter(ep)
    importer.prescan()
    inputs, stored = _signature(ep, importer.placeholders)
    for name, array in stored.items():
        importer.values[importer.placeholders[name]] = Value(const=array)
    return importer.build(inputs)


class TorchImporter(GraphImporter[ImportContext, Any, Any]):
    """The import of one program (``frontends._base.GraphImporter``): values by fx node; a node
    with several results holds them as a list, which ``getitem`` nodes index."""

    source = SOURCE

    def __init__(self, ep: Any) -> None:
        super().__init__(ImportContext(_tvm.BlockBuilder()), list(ep.graph.nodes))
        self.ep = ep
        self.float_ops = FloatOps(self.ctx.bb)
        self.placeholders = {n.name: n for n in self.nodes if n.op == "placeholder"}
        self._order = {node: i for i, node in enumerate(self.nodes)}

    def label(self, node: Any) -> str:
        return node.name

    def kind(self, node: Any) -> str:
        return kind(node)

    def where(self, node: Any) -> str:
        return f"node {node.name!r} ({kind(node)})"

    def refusal(self, node: Any) -> tuple[str, str] | None:
        if node.op in ("placeholder", "output"):
            return None
        if node.op != "call_function":
            return node.op, f"{node.op} nodes are not supported (submodules and control flow)"
        if kind(node) not in CONVERTERS and not self.float_ops.takes(node) and \
                node.target is not operator.getitem:
            return kind(node), ("operator is not supported by canonqnn or TVM's "
                                "ExportedProgram importer")
        why = _mutation(node, self._order)
        return None if why is None else (kind(node), why)

    def converts(self, node: Any) -> bool:
        return node.op == "call_function"

    def convert(self, node: Any) -> Value | list[Value]:
        return _convert(self.ctx, node, self.values, self.float_ops)

    def store(self, node: Any, results: Value | list[Value]) -> None:
        self.values[node] = results

    def bind_inputs(self, inputs: Sequence[TensorInfo], params: list[Any]) -> None:
        for info, param in zip(inputs, params):
            self.values[self.placeholders[info.name]] = Value(expr=param)

    def outputs(self) -> tuple[list[Any], list[TensorInfo]]:
        return _outputs(self.ctx, self.ep, self.nodes, self.values)


def _mutation(node: Any, order: dict) -> str | None:
    """Why an in-place op cannot be imported, or None. The converters compute every op as a
    new tensor: right unless the op writes the program's state (a parameter or buffer: the
    module is one run from the initial state) or a tensor some later node reads."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.is_mutable:
        return None
    for arg, spec in zip(node.args, schema.arguments):
        if spec.alias_info is None or not spec.alias_info.is_write or \
                not hasattr(arg, "users"):
            continue
        if arg.op == "placeholder":
            return (f"writes {arg.name!r} in place: the program mutates its state (canonqnn "
                    "imports inference programs)")
        if any(order[user] > order[node] for user in arg.users):
            return f"writes {arg.name!r} in place, which a later node reads"
    return None


def _signature(ep: Any, placeholders: dict[str, Any]) \
        -> tuple[list[TensorInfo], dict[str, np.ndarray]]:
    """The user inputs' interface, and every parameter, buffer and constant tensor by the
    name of its placeholder."""
    from torch.export.graph_signature import InputKind

    inputs, stored, problems = [], {}, []
    for spec in ep.graph_signature.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            info = _input_info(placeholders[name], problems)
            if info is not None:
                inputs.append(info)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            tensor = ep.state_dict.get(spec.target)
            if tensor is None:
                tensor = ep.constants.get(spec.target)
            if tensor is None:
                problems.append((name, spec.kind.name.lower(), f"no value stored for "
                                 f"{spec.target!r}"))
            elif placeholders[name].users:  # unused float weights stay in PT2E's signature
                stored[name] = _numpy(tensor, name, problems)
        else:
            problems.append((name, spec.kind.name.lower(), "input kind is not supported"))
    if problems:
        raise SOURCE.unsupported(problems)
    return inputs, stored


def _input_info(node: Any, problems: list) -> TensorInfo | None:
    import torch

    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        problems.append((node.name, "graph input", f"a {type(val).__name__} input (tensors "
                         "only)"))
        return None
    dtype = dtype_name(val.dtype)
    shape = tuple(val.shape)
    if dtype not in SUPPORTED_INPUT_DTYPES:
        problems.append((node.name, "graph input", f"input dtype {dtype} is not supported"))
    elif not all(isinstance(d, int) for d in shape):
        problems.append((node.name, "graph input", f"shape {list(shape)} is not static: "
                         "export without dynamic_shapes"))
    else:
        return TensorInfo(node.name, dtype, shape)
    return None


def _numpy(tensor: Any, name: str, problems: list) -> np.ndarray | None:
    try:
        return tensor.detach().cpu().contiguous().numpy()
    except (TypeError, RuntimeError) as exc:
        problems.append((name, "constant", f"cannot be read: {exc}"))
        return None


def _arg(values: dict, arg: Any) -> Any:
    """A node argument with every node replaced by its Value."""
    from torch import fx

    if isinstance(arg, fx.Node):
        return values[arg]
    if isinstance(arg, (list, tuple)):
        return type(arg)(_arg(values, a) for a in arg)
    return arg


def _convert(ctx: ImportContext, node: Any, values: dict[Any, Any],
             float_ops: FloatOps) -> Value | list[Value]:
    if node.target is operator.getitem:  # one result of an op with several
        results, index = values[node.args[0]], node.args[1]
        if not isinstance(results, list) or not -len(results) <= index < len(results):
            raise Unsupported(f"result {index} of {node.args[0].name!r}, which has none")
        return results[index]
    converter = CONVERTERS.get(kind(node))
    if converter is not None:
        result = converter(ctx, node, [_arg(values, a) for a in node.args])
        if result is not None:  # None: the form TVM's converter writes is the one
            return result
    return float_ops.convert(ctx, node, {n: values[n] for n in node.all_input_nodes})


def _outputs(ctx: ImportContext, ep: Any, nodes: list, values: dict):
    from torch import fx
    from torch.export.graph_signature import OutputKind

    (results,) = nodes[-1].args
    exprs, infos, problems = [], [], []
    for spec, result in zip(ep.graph_signature.output_specs, results):
        if spec.kind != OutputKind.USER_OUTPUT:
            problems.append((spec.arg.name, "graph output", f"a {spec.kind.name.lower()} "
                             "output (the program mutates state; canonqnn imports inference "
                             "programs)"))
            continue
        if not isinstance(result, fx.Node):
            problems.append((str(result), "graph output", "not a tensor computed by the "
                             "program"))
            continue
        value = values[result]
        expr = ctx.expr(value)
        dtype = _tvm.dtype_of(expr)
        lsb = value.step if dtype == "float32" else 1.0
        infos.append(TensorInfo(result.name, dtype, _tvm.shape_of(expr), lsb))
        exprs.append(expr)
    if problems:
        raise SOURCE.unsupported(problems)
    return exprs, infos
