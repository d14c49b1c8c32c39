"""TVM's own ONNX importer and converters (``tvm.relax.frontend.onnx``), as the ONNX frontend
reuses them for float ops (and benchmarks compare against ``from_onnx``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


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
