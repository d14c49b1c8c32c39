"""A float ONNX network as a PyTorch module of the same architecture and weights, and that module
as ExecuTorch runs it int8: PT2E-quantized with the XNNPACK quantizer and lowered to the XNNPACK
delegate (``benchmarks/runtime.py`` times it beside canonqnn's build of the ONNX network).

    module = torch_module(float_onnx)    # torch.nn.Module, NCHW like the ONNX model
    program = pt2e_program(float_onnx)   # torch.export -> prepare_pt2e -> calibrate
                                         # -> convert_pt2e -> torch.export
    pte = executorch_pte(program)        # to_edge_transform_and_lower, XnnpackPartitioner

Each ONNX node becomes the ``torch.nn`` layer a PyTorch author writes for it: Conv ``nn.Conv2d``,
Clip ``nn.Hardtanh`` (``nn.ReLU6`` for 0..6), Relu ``nn.ReLU``, MaxPool/AveragePool their pools,
GlobalAveragePool ``nn.AdaptiveAvgPool2d(1)``, Flatten ``nn.Flatten``, Gemm and a MatMul by a
constant (with the Add of a constant bias that follows it) ``nn.Linear``, LayerNormalization
``nn.LayerNorm``, Gelu ``nn.GELU``; MatMul of two run-time tensors, Add, Mul, Reshape, Transpose
and Softmax their tensor functions. The weights are the ONNX initializers. This covers the op set
of ``canonqnn.testing.onnx_models``' networks; another node raises ``ValueError`` naming it.

The XNNPACK quantizer annotates convolutions, linear layers, additions, multiplications and pools;
what it leaves float (a matmul of two activations, softmax, GELU, layer norm) runs in float32, as
users who quantize with it get. Calibration uses the seeded inputs ``onnx_models.quantize`` uses
(seeds ``seed * 1000 + i``), so both quantizers see the same data.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from .onnx_models import INPUT_NAME, input_shape, random_input

_BINARY: dict[str, Any] = {"Add": torch.add, "Mul": torch.mul, "MatMul": torch.matmul}


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _symmetric(pads: list[int], node: onnx.NodeProto) -> tuple[int, int]:
    if list(pads[:2]) != list(pads[2:]):
        raise ValueError(f"node {node.name!r} ({node.op_type}): asymmetric pads {pads}")
    return int(pads[0]), int(pads[1])


class OnnxModule(nn.Module):
    """The float ONNX graph as torch layers, run in the graph's order."""

    def __init__(self, model: onnx.ModelProto) -> None:
        super().__init__()
        graph = model.graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        self.layers = nn.ModuleList()
        self.steps: list[tuple[Callable[..., Any], list[str], str]] = []
        users: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                users.setdefault(name, []).append(node)
        self.users = users
        self.folded: set[str] = set()  # outputs of Add nodes written as a Linear's bias
        for node in graph.node:
            if node.output[0] not in self.folded:
                self._convert(node)
        self.input_name = graph.input[0].name
        self.output_name = graph.output[0].name

    def _layer(self, layer: nn.Module, source: str, out: str) -> None:
        self.layers.append(layer)
        self.steps.append((layer, [source], out))

    def _weight(self, layer: nn.Module, name: str, value: np.ndarray) -> None:
        with torch.no_grad():
            getattr(layer, name).copy_(torch.from_numpy(np.array(value, np.float32)))

    def _const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name)

    def _convert(self, node: onnx.NodeProto) -> None:  # noqa: C901 (one branch per op)
        op, a, ins, out = node.op_type, _attrs(node), list(node.input), node.output[0]
        x = ins[0]
        if op == "Conv":
            w = self.consts[ins[1]]
            bias = self._const(ins[2]) if len(ins) > 2 and ins[2] else None
            group = int(a.get("group", 1))
            conv = nn.Conv2d(w.shape[1] * group, w.shape[0], tuple(w.shape[2:]),
                             stride=tuple(a.get("strides", [1, 1])),
                             padding=_symmetric(a.get("pads", [0, 0, 0, 0]), node),
                             dilation=tuple(a.get("dilations", [1, 1])), groups=group,
                             bias=bias is not None)
            self._weight(conv, "weight", w)
            if bias is not None:
                self._weight(conv, "bias", bias)
            self._layer(conv, x, out)
        elif op == "Clip":
            lo, hi = (float(self.consts[n].reshape(-1)[0]) for n in ins[1:3])
            self._layer(nn.ReLU6() if (lo, hi) == (0.0, 6.0) else nn.Hardtanh(lo, hi), x, out)
        elif op == "Relu":
            self._layer(nn.ReLU(), x, out)
        elif op == "Gelu":
            approximate = a.get("approximate", b"none")
            self._layer(nn.GELU(approximate=approximate.decode()), x, out)
        elif op in ("MaxPool", "AveragePool"):
            if a.get("ceil_mode", 0):
                raise ValueError(f"node {node.name!r} ({op}): ceil_mode")
            pool = nn.MaxPool2d if op == "MaxPool" else nn.AvgPool2d
            self._layer(pool(tuple(a["kernel_shape"]), tuple(a.get("strides", [1, 1])),
                             _symmetric(a.get("pads", [0, 0, 0, 0]), node)), x, out)
        elif op == "GlobalAveragePool":
            self._layer(nn.AdaptiveAvgPool2d(1), x, out)
        elif op == "Flatten":
            self._layer(nn.Flatten(int(a.get("axis", 1))), x, out)
        elif op == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise ValueError(f"node {node.name!r} (Gemm): transA, alpha or beta")
            w = self.consts[ins[1]]
            self._linear(w if a.get("transB", 0) else w.T, self._const(ins[2]) if len(ins) > 2
                         else None, x, out)
        elif op == "MatMul" and ins[1] in self.consts:
            bias, result = self._bias_after(out)
            self._linear(self.consts[ins[1]].T, bias, x, result)
        elif op == "LayerNormalization":
            gamma = self.consts[ins[1]]
            if a.get("axis", -1) != -1 or gamma.ndim != 1:
                raise ValueError(f"node {node.name!r}: a layer norm over more than the last axis")
            norm = nn.LayerNorm(gamma.shape[0], eps=float(a.get("epsilon", 1e-5)))
            self._weight(norm, "weight", gamma)
            self._weight(norm, "bias", self.consts[ins[2]])
            self._layer(norm, x, out)
        else:
            self.steps.append((self._function(node, op, a, ins), ins[:1] if op in (
                "Reshape", "Transpose", "Softmax") else ins, out))

    def _linear(self, w_oi: np.ndarray, bias: np.ndarray | None, x: str, out: str) -> None:
        linear = nn.Linear(w_oi.shape[1], w_oi.shape[0], bias=bias is not None)
        self._weight(linear, "weight", w_oi)
        if bias is not None:
            self._weight(linear, "bias", bias)
        self._layer(linear, x, out)

    def _bias_after(self, out: str) -> tuple[np.ndarray | None, str]:
        """The constant bias of an Add that alone reads a MatMul's ``out`` (the Linear layer the
        exporter split in two), and that Add's output; else None and ``out``."""
        users = self.users.get(out, [])
        if len(users) == 1 and users[0].op_type == "Add":
            add = users[0]
            other = [n for n in add.input if n != out]
            bias = self._const(other[0]) if len(other) == 1 else None
            if bias is not None and bias.ndim == 1:
                self.folded.add(add.output[0])
                return bias, add.output[0]
        return None, out

    def _function(self, node: onnx.NodeProto, op: str, a: dict[str, Any],
                  ins: list[str]) -> Callable[..., Any]:
        if op == "Reshape":
            shape = [int(d) for d in self.consts[ins[1]]]
            return lambda x: x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)])
        if op == "Transpose":
            perm = [int(p) for p in a["perm"]]
            return lambda x: x.permute(perm)
        if op == "Softmax":
            axis = int(a.get("axis", -1))
            return lambda x: torch.softmax(x, axis)
        if op in ("Add", "Mul", "MatMul"):
            fn = _BINARY[op]
            constant = [self._const(n) for n in ins]
            if op == "Mul" and constant[1] is not None and constant[1].size == 1:
                scale = float(constant[1].reshape(-1)[0])  # a scalar, as PyTorch authors write
                return lambda x, _: x * scale
            names = [None if c is None else f"const_{len(self.steps)}_{i}"
                     for i, c in enumerate(constant)]
            for name, c in zip(names, constant):
                if name is not None and c is not None:
                    self.register_buffer(name, torch.from_numpy(np.array(c)))
            return lambda *xs: fn(*[v if n is None else getattr(self, n)
                                    for n, v in zip(names, xs)])
        raise ValueError(f"node {node.name!r}: no torch layer is written for ONNX {op}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        env: dict[str, Any] = {self.input_name: x}
        for fn, ins, out in self.steps:
            env[out] = fn(*[env.get(n) for n in ins])
        return env[self.output_name]


def torch_module(model: onnx.ModelProto) -> OnnxModule:
    """``model`` (float ONNX, one input ``input``) as a torch module in eval mode."""
    return OnnxModule(model).eval()


def quiet() -> None:
    """torch, torchao and ExecuTorch warn about their own APIs on every call."""
    warnings.filterwarnings("ignore", module=r"(torch|torchao|executorch|copyreg)(\.|$)")
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("torch").setLevel(logging.ERROR)


def pt2e_program(model: onnx.ModelProto, *, seed: int = 0,
                 calibration: int = 16) -> torch.export.ExportedProgram:
    """``model`` as a PyTorch module, PT2E-quantized as users quantize for ExecuTorch: the
    XNNPACK quantizer's symmetric per-channel config, calibrated on ``calibration`` seeded
    inputs (the ones ``onnx_models.quantize`` calibrates onnxruntime's quantizer on)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (  # type: ignore[import-untyped]
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import (  # type: ignore[import-untyped]
        convert_pt2e,
        prepare_pt2e,
    )

    quiet()
    shape = input_shape(model)
    inputs = [torch.from_numpy(random_input(seed * 1000 + i, shape)) for i in range(calibration)]
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True))
    example = (inputs[0],)
    prepared = prepare_pt2e(torch.export.export(torch_module(model), example).module(),
                            quantizer)
    with torch.no_grad():
        for x in inputs:
            prepared(x)
    return torch.export.export(convert_pt2e(prepared), example)


def executorch_pte(program: torch.export.ExportedProgram) -> bytes:
    """``program`` lowered to ExecuTorch's XNNPACK delegate (``to_edge_transform_and_lower``
    with the ``XnnpackPartitioner``): the ``.pte`` file's bytes."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (  # type: ignore[import-untyped]
        XnnpackPartitioner,
    )
    from executorch.exir import to_edge_transform_and_lower  # type: ignore[import-untyped]

    quiet()
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return bytes(lowered.to_executorch().buffer)


__all__ = ["INPUT_NAME", "OnnxModule", "torch_module", "pt2e_program", "executorch_pte"]
