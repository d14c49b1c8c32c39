"""Every op with no canonqnn converter goes through TVM's own ExportedProgram converter:
float arithmetic between dequantize and quantize (the rules fold what they recognise; the
Report names the rest as float islands), and data movement."""

from __future__ import annotations

from typing import Any

from canonqnn import _tvm

from ._context import ImportContext, Unsupported, Value
from ._tvm_torch import TorchConverters


class FloatOps:
    def __init__(self, bb: Any) -> None:
        self._tvm = TorchConverters(bb)

    def takes(self, node: Any) -> bool:
        return node.op == "call_function" and self._tvm.takes(node.target.__name__)

    def convert(self, ctx: ImportContext, node: Any,
                inputs: dict[Any, Value]) -> Value | list[Value]:
        """The node's result; several (``unbind``, ``split``) as a list, which ``getitem``
        nodes index."""
        exprs = {n: ctx.expr(v) for n, v in inputs.items()}
        try:
            result = self._tvm.convert(node, exprs)
            outputs = _tvm.normalize_outputs(ctx.bb, result)
        except Exception as exc:  # noqa: BLE001  (TVM's converters assert; name the node)
            raise Unsupported(f"TVM's converter failed: {type(exc).__name__}: {exc}") from None
        values = [Value(expr=o) for o in outputs]
        return values[0] if len(values) == 1 and not _several(node) else values


def _several(node: Any) -> bool:
    """Whether the op returns a tuple of tensors (its schema says so)."""
    returns = getattr(getattr(node.target, "_schema", None), "returns", [])
    return len(returns) != 1 or "[]" in str(returns[0].type)
