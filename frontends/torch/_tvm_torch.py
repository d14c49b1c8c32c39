"""TVM's own PyTorch ExportedProgram converters (``tvm.relax.frontend.torch``), as the PyTorch
frontend reuses them for float ops."""

from __future__ import annotations

from typing import Any


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
