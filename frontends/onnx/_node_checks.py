"""The per-node checks of ``validate.check_model``: arity, attributes and input types against
the op's schema, convolution and pooling windows, and Quantize/DequantizeLinear parameters.

Every node is looked at once; the tensor types they need are read on demand (``Types``), so the
pass stays linear and cheap on graphs of 50k nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from canonqnn.errors import InvalidModelError, InvalidQuantizationError
from canonqnn.qparams import check_scale

from ._context import dtype_name

DEFAULT_DOMAINS = ("", "ai.onnx")
CONTRIB_DOMAIN = "com.microsoft"
# Domains the onnx package has schemas for: their nodes are checked against them.
SCHEMA_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")

# Ops with convolution/pooling windows: positions of the data and weight inputs (None: none).
WINDOW_OPS = {"Conv": (0, 1), "ConvInteger": (0, 1), "ConvTranspose": (0, 1),
              "QLinearConv": (0, 3), "MaxPool": (0, None), "AveragePool": (0, None),
              "LpPool": (0, None), "QLinearAveragePool": (0, None)}
GROUPED_OPS = ("Conv", "ConvInteger", "ConvTranspose", "QLinearConv")
# Quantize/DequantizeLinear and what their scale is the scale of
QDQ_OPS = {"QuantizeLinear": "output", "DequantizeLinear": "input"}
ELEMENT_TYPES = frozenset(TensorProto.DataType.values())
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)

TensorType = tuple[int, "tuple | None"]  # (elem_type, dims: int or None each; None: unknown rank)


def node_label(node: onnx.NodeProto, index: int) -> str:
    return f"node {node.name or f'#{index}'!r} (op {node.op_type})"


_KNOWN_OPS: dict[str, bool] = {}


def known_op(op_type: str) -> bool:
    """Whether the onnx package has an ai.onnx operator of this name (in any opset)."""
    if op_type not in _KNOWN_OPS:
        _KNOWN_OPS[op_type] = onnx.defs.has(op_type)
    return _KNOWN_OPS[op_type]


def shape_text(dims: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


class Types:
    """Element type and dimensions of a tensor by name, from the initializers, the declared
    graph inputs and the value infos shape inference wrote (graph outputs: as computed)."""

    def __init__(self, graph: onnx.GraphProto, inferred: onnx.GraphProto) -> None:
        self.initializers = {init.name: init for init in graph.initializer}
        self._infos = {vi.name: vi for vi in
                       (*graph.input, *inferred.value_info, *inferred.output)}
        self._dims: dict[str, tuple | None] = {}

    def __call__(self, name: str) -> TensorType | None:
        elem = self.elem(name)
        return (elem, self.dims(name)) if elem or name in self._infos else None

    def elem(self, name: str) -> int:
        """0: unknown (or not a valid element type: onnx.checker names those)."""
        init = self.initializers.get(name)
        vi = self._infos.get(name) if init is None else None
        elem = init.data_type if init is not None else \
            vi.type.tensor_type.elem_type if vi is not None else 0
        return elem if elem in ELEMENT_TYPES else 0

    def dims(self, name: str) -> tuple | None:
        """None: unknown rank (or no such tensor)."""
        if name not in self._dims:
            init = self.initializers.get(name)
            vi = self._infos.get(name) if init is None else None
            self._dims[name] = (tuple(init.dims) if init is not None else
                                tensor_type(vi.type.tensor_type)[1]
                                if vi is not None and vi.type.HasField("tensor_type") else None)
        return self._dims[name]


def tensor_type(tt: onnx.TypeProto.Tensor) -> TensorType:
    if not tt.HasField("shape"):
        return tt.elem_type, None
    return tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else None
                               for d in tt.shape.dim)


@dataclass(frozen=True)
class _Schema:
    """What the checks read of an onnx OpSchema (its properties are rebuilt on every access)."""

    schema: onnx.defs.OpSchema
    attributes: frozenset[str]
    inputs: tuple[int, int]
    outputs: tuple[int, int]

    @property
    def title(self) -> str:
        return f"{self.schema.name}-{self.schema.since_version}"


def check_nodes(graph: onnx.GraphProto, opsets: dict[str, int], types: Types,
                check_types: bool) -> None:
    """``check_types``: also the input types, which strict shape inference has checked when it
    succeeded (for the ops it has schemas of)."""
    schemas: dict[tuple[str, str], _Schema | str] = {}
    scales: dict[str, int] = {}  # scale of a Q/DQ -> the first node reading it
    for i, node in enumerate(graph.node):
        op_type, domain = node.op_type, node.domain
        domain = "" if domain == "ai.onnx" else domain
        schema: _Schema | str = ""
        if domain in opsets and domain in SCHEMA_DOMAINS:
            if (domain, op_type) not in schemas:
                schemas[domain, op_type] = _schema(op_type, domain, opsets[domain])
            schema = schemas[domain, op_type]
            _check_arity_and_attributes(node, i, schema)
        if domain == "" or domain == CONTRIB_DOMAIN:
            if op_type in WINDOW_OPS:
                _check_window(node, i, types)
            elif op_type in QDQ_OPS:
                inputs = list(node.input)
                _check_qdq(node, i, inputs, types, check_types or domain == CONTRIB_DOMAIN)
                if len(inputs) > 1 and inputs[1] not in scales:
                    scales[inputs[1]] = i
        if check_types and not isinstance(schema, str):
            _check_input_types(node, i, schema, types)
    _check_scales(graph, scales, types.initializers)


def _schema(op_type: str, domain: str, version: int) -> _Schema | str:
    """The op's schema at the model's opset, or why there is none ("" for an op the onnx
    package does not know: a contrib op, left to the importer)."""
    try:
        s = onnx.defs.get_schema(op_type, version, domain)
        return _Schema(s, frozenset(s.attributes), (s.min_input, s.max_input),
                       (s.min_output, s.max_output))
    except onnx.defs.SchemaError:
        pass
    if domain == "" and not known_op(op_type):
        return ""
    try:
        since = onnx.defs.get_schema(op_type, domain=domain).since_version
    except onnx.defs.SchemaError:
        return f"the {domain or 'ai.onnx'} domain has no operator {op_type}"
    return f"{op_type} is not in {domain or 'ai.onnx'} opset {version} (it was added in {since})"


def _check_arity_and_attributes(node: onnx.NodeProto, i: int, schema: _Schema | str) -> None:
    if isinstance(schema, str):
        if schema:
            raise InvalidModelError(f"{node_label(node, i)}: {schema}")
        return
    if node.attribute:
        unknown = {a.name for a in node.attribute} - schema.attributes
        if unknown:
            raise InvalidModelError(f"{node_label(node, i)}: unknown attribute "
                                    f"{min(unknown)!r} (not in the {schema.title} schema)")
    for what, count, (low, high) in (("inputs", len(node.input), schema.inputs),
                                     ("outputs", len(node.output), schema.outputs)):
        if not low <= count <= high:
            bound = f"at most {high}" if count > high else f"at least {low}"
            raise InvalidModelError(f"{node_label(node, i)}: {count} {what}, but "
                                    f"{schema.title} takes {bound}")


def _check_input_types(node: onnx.NodeProto, i: int, schema: _Schema, types: Types) -> None:
    """Input element types against the schema's type constraints (one type per constraint)."""
    formal = schema.schema.inputs
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.schema.type_constraints}
    bound: dict[str, tuple[str, str]] = {}
    for k, name in enumerate(node.input):
        elem = types.elem(name)
        if not elem or not formal:
            continue
        param = formal[min(k, len(formal) - 1)]  # the last one may be variadic
        actual = f"tensor({TensorProto.DataType.Name(elem).lower()})"
        allowed_here = allowed.get(param.type_str, [param.type_str])
        if actual not in allowed_here:
            names = ", ".join(t[7:-1] if t.startswith("tensor(") else t for t in allowed_here)
            raise InvalidModelError(f"{node_label(node, i)}: input {name!r} is "
                                    f"{dtype_name(elem)}, but {schema.title} takes {names} for "
                                    f"{param.name!r}")
        if param.type_str in allowed:
            first = bound.setdefault(param.type_str, (name, actual))
            if first[1] != actual:
                raise InvalidModelError(f"{node_label(node, i)}: inputs {first[0]!r} and "
                                        f"{name!r} have different types ({first[1]}, {actual}), "
                                        f"but {schema.title} takes one type for "
                                        f"{param.type_str}")


def _ints(node: onnx.NodeProto) -> dict[str, list[int] | int]:
    return {a.name: (list(a.ints) if a.type == AttributeProto.INTS else a.i)
            for a in node.attribute if a.type in (AttributeProto.INTS, AttributeProto.INT)}


def _input(node: onnx.NodeProto, at: int | None) -> str:
    return node.input[at] if at is not None and at < len(node.input) else ""


def _check_window(node: onnx.NodeProto, i: int, types: Types) -> None:
    """Strides, dilations, kernel and pads of a convolution or pooling window; groups."""
    attrs = _ints(node)
    where = node_label(node, i)
    for key, low, rule in (("strides", 1, "positive"), ("dilations", 1, "positive"),
                           ("kernel_shape", 1, "positive"), ("pads", 0, "non-negative")):
        values = attrs.get(key, [])
        if isinstance(values, list) and any(v < low for v in values):
            raise InvalidModelError(f"{where}: {key} {values} must be {rule}")
    x_at, w_at = WINDOW_OPS[node.op_type]
    x, w = types.dims(_input(node, x_at)), types.dims(_input(node, w_at))
    rank = len(w) if w is not None else len(x) if x is not None else 0
    spatial = rank - 2 if rank > 2 else None  # (no window in a lower rank: inference says so)
    for key, per_axis in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 2)):
        values = attrs.get(key)
        if not isinstance(values, list):
            continue
        if spatial is None:
            spatial = len(values) // per_axis
        if len(values) != per_axis * spatial:
            raise InvalidModelError(f"{where}: {key} {values} has {len(values)} values, but "
                                    f"a {spatial}-D window takes {per_axis * spatial}")
    if node.op_type in GROUPED_OPS:
        _check_groups(node.op_type, where, attrs, x, w)


def _check_groups(op_type: str, where: str, attrs: dict, x: tuple | None,
                  w: tuple | None) -> None:
    group = attrs.get("group", 1)
    if not isinstance(group, int) or group < 1:
        raise InvalidModelError(f"{where}: group {group} must be a positive integer")
    channels = x[1] if x is not None and len(x) > 1 and not attrs.get("channels_last") else None
    if channels is not None and channels % group:
        raise InvalidModelError(f"{where}: group {group} does not divide the {channels} input "
                                "channels")
    if w is None or len(w) < 2:
        return
    if op_type == "ConvTranspose":  # weights (C, M / group, k...)
        if channels is not None and w[0] is not None and w[0] != channels:
            raise InvalidModelError(f"{where}: the input has {channels} channels, but the "
                                    f"weights of shape {shape_text(w)} take {w[0]}")
        return
    if w[0] is not None and w[0] % group:  # weights (M, C / group, k...)
        raise InvalidModelError(f"{where}: group {group} does not divide the {w[0]} output "
                                "channels of the weights")
    if channels is not None and w[1] is not None and w[1] * group != channels:
        raise InvalidModelError(f"{where}: the input has {channels} channels, but the weights "
                                f"of shape {shape_text(w)} take {w[1]} per group x {group} "
                                "groups")


def _check_qdq(node: onnx.NodeProto, i: int, inputs: list[str], types: Types,
               check_types: bool) -> None:
    """Axis and per-axis length of Quantize/DequantizeLinear; with ``check_types``, the zero
    point's type (which strict shape inference checks for the default domain)."""
    x, scale, zero_point = (inputs + ["", ""])[:3]
    attrs = _ints(node) if node.attribute else {}
    # per-axis parameters are 1-D with more than one value; exporters write per-tensor ones
    # as [] or [1], the scale one way and the zero point the other
    scale_dims = types.dims(scale)
    if scale_dims is not None and len(scale_dims) == 1 and scale_dims[0] != 1 and \
            not attrs.get("block_size"):
        _check_axis(node, i, attrs.get("axis", 1), types.dims(x), x,
                    [("scales", scale, scale_dims), ("zero points", zero_point,
                                                     types.dims(zero_point))])
    if not check_types:
        return
    dequantize = node.op_type == "DequantizeLinear"
    quantized = types.elem(x) if dequantize else attrs.get("output_dtype", 0)
    zp_type = types.elem(zero_point) if zero_point else 0
    if quantized and zp_type and quantized != zp_type:
        tensor = f"the quantized input {x!r}" if dequantize else "output_dtype"
        raise InvalidQuantizationError(f"{node_label(node, i)}: zero point {zero_point!r} is "
                                       f"{dtype_name(zp_type)}, but {tensor} is "
                                       f"{dtype_name(quantized)}")


def _check_axis(node: onnx.NodeProto, i: int, axis: int, x_dims: tuple | None, x: str,
                params: list[tuple[str, str, tuple | None]]) -> None:
    """The per-axis ``axis`` is in range (never taken modulo the rank) and the 1-D parameters
    have as many values as the input has there."""
    if x_dims is None:
        return
    rank = len(x_dims)
    if not -rank <= axis < rank:
        raise InvalidQuantizationError(f"{node_label(node, i)}: axis {axis} is out of range for "
                                       f"the rank-{rank} input {x!r}")
    for what, name, dims in params:
        if dims is None or len(dims) != 1 or dims[0] == 1:
            continue
        if None not in (dims[0], x_dims[axis]) and dims[0] != x_dims[axis]:
            raise InvalidQuantizationError(
                f"{node_label(node, i)}: {dims[0]} per-axis {what} ({name!r}) along axis "
                f"{axis}, but the input {x!r} of shape {shape_text(x_dims)} has "
                f"{x_dims[axis]} there")


def _check_scales(graph: onnx.GraphProto, scales: dict[str, int],
                  initializers: dict[str, onnx.TensorProto]) -> None:
    """Constant Q/DQ scales are finite and positive (``check_scale``), all read in one go."""
    arrays = {name: _floats(initializers[name]) for name in scales
              if name in initializers and
              initializers[name].data_location != TensorProto.EXTERNAL}
    if not arrays:
        return
    values = np.concatenate([a.reshape(-1) for a in arrays.values()])
    if np.all(np.isfinite(values) & (values > 0)):
        return
    for name, array in arrays.items():
        node = graph.node[scales[name]]
        check_scale(array, f"{node_label(node, scales[name])}: {QDQ_OPS[node.op_type]} scale")


def _floats(init: onnx.TensorProto) -> np.ndarray:
    """The values of a float scale; empty for one of another type or with garbled data (shape
    inference and onnx.checker refuse those)."""
    if init.data_type == TensorProto.FLOAT and init.raw_data:
        raw = init.raw_data
        return np.frombuffer(raw, "<f4") if len(raw) % 4 == 0 else np.zeros(0, np.float32)
    if init.data_type not in FLOAT_TYPES:
        return np.zeros(0, np.float32)
    try:
        return np.asarray(numpy_helper.to_array(init), np.float32)
    except (ValueError, TypeError):
        return np.zeros(0, np.float32)
