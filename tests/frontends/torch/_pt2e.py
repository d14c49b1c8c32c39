"""PT2E-quantized test programs: small PyTorch networks quantized as users quantize them
(``torch.export`` -> ``prepare_pt2e`` with ExecuTorch's XNNPACK quantizer -> calibration ->
``convert_pt2e`` -> ``torch.export``), and ExecuTorch's XNNPACK delegate run on them in this
process (parity runs it in a child; the tests that compare many inputs call it directly)."""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import warnings

import numpy as np
import torch
from torch import nn

IMAGE = (2, 3, 24, 24)


class CNN(nn.Module):
    """conv + BN + relu, depthwise + relu6, 1x1 conv, residual add, global pooling, linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, groups=16, padding=1)
        self.relu6 = nn.ReLU6()  # hardtanh: the quantizer shares its input's parameters
        self.pw = nn.Conv2d(16, 16, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 64)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        z = self.pw(self.relu6(self.dw(y))) + y
        return z, self.fc(self.pool(z).flatten(1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """A narrow MobileNet-V2: stem, inverted residual blocks (strided and residual), head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6())
        self.blocks = nn.Sequential(InvertedResidual(16, 16, 1, 1), InvertedResidual(16, 24, 2, 4),
                                    InvertedResidual(24, 24, 1, 4), InvertedResidual(24, 32, 2, 4))
        self.head = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU6())
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        y = self.head(self.blocks(self.stem(x)))
        return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))  # as torchvision


class EncoderBlock(nn.Module):
    """A transformer encoder block: attention (linear projections, matmuls, softmax),
    layer norms and a GELU feed-forward."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
        y = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return y + self.ff2(nn.functional.gelu(self.ff1(self.ln2(y))))


class GatedUpsample(nn.Module):
    """conv_transpose upsampling, concat with a skip path, a sigmoid gate."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, 2, 1)
        self.up = nn.ConvTranspose2d(8, 8, 4, 2, 1)
        self.skip = nn.Conv2d(3, 8, 3, padding=1)
        self.gate = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = torch.cat([self.up(torch.relu(self.down(x))), self.skip(x)], dim=1)
        return y * torch.sigmoid(self.gate(y))


NETWORKS = {"cnn": (CNN, IMAGE), "mobilenet_v2": (MobileNetV2, (1, 3, 32, 32)),
            "encoder": (EncoderBlock, (2, 8, 32)), "gated_upsample": (GatedUpsample, IMAGE)}


def quiet():
    """torch, torchao and ExecuTorch warn about their own APIs on every call."""
    warnings.filterwarnings("ignore", module=r"(torch|torchao|executorch|copyreg)(\.|$)")
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("torch").setLevel(logging.ERROR)


def quantize(model: nn.Module, shape, *, per_channel: bool = True, seed: int = 0,
             calibration: int = 4) -> torch.export.ExportedProgram:
    """``model`` PT2E-quantized with the XNNPACK quantizer, calibrated on seeded normal data."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quiet()
    generator = torch.Generator().manual_seed(seed)
    example = torch.randn(shape, generator=generator)
    model = model.eval()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=per_channel))
    prepared = prepare_pt2e(torch.export.export(model, (example,)).module(), quantizer)
    with torch.no_grad():
        for _ in range(calibration):
            prepared(torch.randn(shape, generator=generator))
    return torch.export.export(convert_pt2e(prepared), (example,))


@functools.cache
def network(name: str, *, per_channel: bool = True, seed: int = 0) -> torch.export.ExportedProgram:
    """One of ``NETWORKS``, its weights (and BatchNorm statistics) seeded, quantized (once per
    test session: the tests only read it)."""
    cls, shape = NETWORKS[name]
    torch.manual_seed(seed)
    model = cls()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # non-trivial statistics, folded by prepare_pt2e
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return quantize(model, shape, per_channel=per_channel, seed=seed)


def save(program: torch.export.ExportedProgram, folder) -> str:
    path = os.path.join(folder, "model.pt2")
    torch.export.save(program, path)
    return path


def executorch_method(program: torch.export.ExportedProgram):
    """The program lowered to ExecuTorch's XNNPACK delegate, loaded: ``method.execute``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    pte = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pte")
        with open(path, "wb") as f:
            f.write(pte.buffer)
        return Runtime.get().load_program(path).load_method("forward")


def run_executorch(method, *inputs: np.ndarray) -> list[np.ndarray]:
    outs = method.execute([torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
    return [np.asarray(o) for o in outs]


class _QdqProgram(nn.Module):
    """``fn`` of int8 inputs, each read through dequantize with its (scale, zero point), its
    result quantized with ``out`` (then dequantized, as convert_pt2e writes a graph output)."""

    def __init__(self, fn, inputs, out):
        super().__init__()
        self.fn, self.inputs, self.out = fn, inputs, out

    def forward(self, *xs):
        q = torch.ops.quantized_decomposed
        real = [q.dequantize_per_tensor(q.quantize_per_tensor(x, s, z, -128, 127, torch.int8),
                                        s, z, -128, 127, torch.int8)
                for x, (s, z) in zip(xs, self.inputs)]
        s, z = self.out
        y = q.quantize_per_tensor(self.fn(*real), s, z, -128, 127, torch.int8)
        return q.dequantize_per_tensor(y, s, z, -128, 127, torch.int8)


def qdq_program(fn, inputs: list[tuple[float, int]], out: tuple[float, int],
                shapes: list[tuple[int, ...]]) -> torch.export.ExportedProgram:
    """A program computing ``fn`` between chosen quantization parameters (what convert_pt2e
    writes around an annotated op, with parameters a test picks instead of calibrating)."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (the q/dq ops)

    quiet()
    example = tuple(torch.zeros(shape) for shape in shapes)
    return torch.export.export(_QdqProgram(fn, inputs, out), example)


def real_values(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Float inputs that quantize (by the reciprocal of ``scale``) to exactly ``q``."""
    return ((q.astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale)) \
        .astype(np.float32)


def stored(real: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """The int8 values a dequantized output holds (checked exact)."""
    q = np.rint(real.astype(np.float64) / np.float64(np.float32(scale))).astype(np.int64) \
        + zero_point
    assert np.array_equal(real_values(q, scale, zero_point), real), "not a dequantized output"
    return q.astype(np.int8)
