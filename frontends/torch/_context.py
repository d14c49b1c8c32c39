"""Converter registry and the per-import context of the PyTorch frontend.

A converter is ``fn(ctx, node, args) -> Value`` (``Converter``) registered with
``@torch_op("aten.conv2d.default", ...)``: ``node`` is the ``torch.fx.Node`` and ``args`` its
positional arguments with every node replaced by its ``Value`` (literals stay literals). It
returns None where the form TVM's converter writes is the one (``_generic``). ``Value`` is
every frontend's (``frontends._base``); a PyTorch one uses ``expr``, ``const``, ``step`` and
``padded`` (a zero padding a conv takes as its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from canonqnn import _tvm
from canonqnn._tvm import relax

from .._base import ArgsConverter, Registry, Source, Unsupported, Value
from .._base import ImportContext as BaseContext

if TYPE_CHECKING:
    from torch.fx import Node  # noqa: F401  (named in Converter; torch loads on first use)

# The program's dtype names as numpy / Relax name them.
TORCH_DTYPES = {"torch.float32": "float32", "torch.int8": "int8", "torch.uint8": "uint8",
                "torch.int16": "int16", "torch.int32": "int32", "torch.int64": "int64",
                "torch.bool": "bool", "torch.float64": "float64", "torch.float16": "float16"}


def dtype_name(dtype: Any) -> str:
    """``torch.int8`` -> ``"int8"`` (the name of a dtype no frontend reads, as torch spells it)."""
    return TORCH_DTYPES.get(str(dtype), str(dtype))


# ``fn(ctx, node, args) -> Value | None``
Converter = ArgsConverter["ImportContext", "Node"]
REGISTRY: Registry[Converter] = Registry()
CONVERTERS: dict[str, Converter] = REGISTRY.converters
# The arithmetic of XNNPACK's int8 kernels, which ExecuTorch runs PT2E programs on.
SOURCE = Source("PyTorch", "torch", "xnnpack")


def torch_op(*targets: str) -> Callable[[Converter], Converter]:
    return REGISTRY.op(*targets)


class ImportContext(BaseContext):
    """What converters need: the block builder, constants and shapes."""

    def expr(self, value: Value) -> Any:
        """The Relax expression of ``value``, materializing a constant or a padding on first
        use."""
        if value.expr is None and value.padded is not None:
            inner, (top, left, bottom, right) = value.padded
            rank = len(self.shape(inner))
            widths = [0, 0] * (rank - 2) + [top, bottom, left, right]
            value.expr = self.emit(relax.op.nn.pad(self.expr(inner), widths))
        elif value.expr is None:
            value.expr = _tvm.const(np.ascontiguousarray(value.const))
        return value.expr

    def value(self, expr: Any, step: float | None = None) -> Value:
        return Value(expr=self.emit(expr), step=step)

    @staticmethod
    def constant(value: Any, what: str) -> np.ndarray:
        if not isinstance(value, Value) or value.const is None:
            raise Unsupported(f"{what} must be a constant tensor of the program (a parameter, "
                              "buffer or constant), not computed at run time")
        return value.const

    def shape(self, value: Value) -> tuple[int, ...]:
        if value.const is not None:
            return tuple(value.const.shape)
        return _tvm.shape_of(self.expr(value))
