"""PyTorch frontend: a PT2E-quantized ``torch.export.ExportedProgram`` (or a ``.pt2`` file) into
the fake-quant Relax form. Needs the ``torch`` extra."""

from .importer import load, read_program

__all__ = ["load", "read_program"]
