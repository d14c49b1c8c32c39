"""The PyTorch frontend: what a PT2E program imports as, and every input it refuses by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import canonqnn
from _pt2e import (
    executorch_method,
    network,
    qdq_program,
    quantize,
    quiet,
    real_values,
    run_executorch,
    save,
    stored,
)
from canonqnn import _tvm, reference
from canonqnn.build import pipeline
from canonqnn.errors import CanonqnnError, InvalidModelError, UnsupportedError
from canonqnn.frontends.torch import load
from canonqnn.io import interface
from canonqnn.qparams import INT8_CODES, QParams
from canonqnn.tables import xnnpack

quiet()
Q = torch.ops.quantized_decomposed


@pytest.fixture(scope="module")
def cnn():
    return network("cnn")


def test_a_program_imports_with_its_inputs_outputs_and_xnnpack_rounding(cnn):
    io = interface(load(cnn))
    assert (io.source, io.rounding) == ("torch", "xnnpack")
    assert [(i.name, i.dtype, i.shape) for i in io.inputs] == [("x", "float32", (2, 3, 24, 24))]
    assert [o.shape for o in io.outputs] == [(2, 16, 24, 24), (2, 64)]
    # a float output's LSB is the scale of the dequantize producing it
    scales = {n.name: n.args[1] for n in cnn.graph.nodes
              if n.target == Q.dequantize_per_tensor.default}
    assert [o.lsb for o in io.outputs] == [pytest.approx(scales[o.name]) for o in io.outputs]


def test_unused_float_parameters_are_left_out(cnn):
    """convert_pt2e keeps the float weights in the signature; only the int8 ones are read."""
    float_weights = sum(p.numel() * 4 for n, p in cnn.named_parameters() if n.endswith("weight"))
    int8_weights = sum(b.numel() for n, b in cnn.named_buffers() if "frozen_param" in n)
    constants = pipeline.constant_bytes(load(cnn))
    assert constants["int8"] >= int8_weights > 0
    assert constants["float32"] < float_weights  # biases and scales only


def test_a_saved_program_loads_as_the_program_itself(cnn, tmp_path):
    path = save(cnn, tmp_path)
    assert _tvm.script(canonqnn.load(path)) == _tvm.script(load(cnn))


@pytest.mark.parametrize("content", [None, b"not a zip archive", b"PK\x03\x04truncated"])
def test_a_missing_or_damaged_file_is_an_invalid_model(tmp_path, content):
    path = tmp_path / "model.pt2"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InvalidModelError, match="model.pt2: (no such file|not a program)"):
        canonqnn.load(path)


def test_options_of_other_formats_are_refused(cnn):
    with pytest.raises(CanonqnnError, match="not to PyTorch programs"):
        canonqnn.load(cnn, outputs=["x"])


class _Dynamic(nn.Module):
    """Dynamic quantization: the parameters are computed from the tensor at run time."""

    def forward(self, x):
        scale, zp = Q.choose_qparams.tensor(x, -128, 127, 1e-5, torch.int8)
        q = Q.quantize_per_tensor.tensor(x, scale, zp, -128, 127, torch.int8)
        return Q.dequantize_per_tensor.tensor(q, scale, zp, -128, 127, torch.int8)


class _Narrow(nn.Module):
    def forward(self, x):
        q = Q.quantize_per_tensor.default(x, 0.1, 0, -127, 127, torch.int8)
        return Q.dequantize_per_tensor.default(q, 0.1, 0, -127, 127, torch.int8)


class _Renorm(nn.Module):
    def forward(self, x):
        return torch.renorm(x, 2, 0, 1.0)


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


@pytest.mark.parametrize("module,node,reason", [
    (_Dynamic, "choose_qparams", "dynamic quantization"),
    (_Narrow, "quantize_per_tensor", r"\[-127, 127\], a narrower range"),
    (_Renorm, "renorm", "not supported by canonqnn or TVM"),
    (_Counter, "count", "mutates its state"),
], ids=["dynamic", "narrow", "renorm", "mutation"])
def test_what_cannot_be_imported_is_refused_naming_node_and_reason(module, node, reason):
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (the q/dq ops)

    program = torch.export.export(module(), (torch.randn(2, 8),))
    with pytest.raises(UnsupportedError, match=reason) as info:
        load(program)
    assert node in str(info.value)


def test_a_dynamic_batch_is_refused_naming_the_input():
    program = torch.export.export(nn.ReLU(), (torch.randn(2, 8),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    with pytest.raises(UnsupportedError, match="input.*not static"):
        load(program)


def test_several_results_of_one_op_are_indexed():
    """unbind gives a tuple; each getitem takes one of its tensors."""

    class Split(nn.Module):
        def forward(self, x):
            a, b = x.unbind(1)
            return a - b

    program = quantize(Split(), (2, 2, 8))
    mod = load(program)
    x = np.random.default_rng(0).standard_normal((2, 2, 8)).astype(np.float32)
    got = canonqnn.build(canonqnn.canonicalize(mod)[0]).run({"x": x})
    want = program.module()(torch.from_numpy(x)).numpy()
    assert np.array_equal(list(got.values())[0], want)


class _Padded(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3, 2)

    def forward(self, x):
        return self.b(nn.functional.pad(torch.relu(self.a(x)), (0, 1, 2, 1)))


def test_a_zero_pad_before_a_conv_becomes_its_padding():
    """PyTorch writes TF-style asymmetric padding as F.pad before the conv, between the
    dequantize and the conv (ExecuTorch pads the int8 values with the zero point): one conv
    with padding [top, left, bottom, right], as ONNX and TFLite write it."""

    program = quantize(_Padded(), (1, 3, 12, 12))
    mod, report = canonqnn.canonicalize(load(program))
    assert dict(report.canonical_ops) == {"conv2d": 2} and report.float_islands == []
    script = _tvm.script(mod)
    assert "padding=[2, 0, 1, 1]" in script and "pad(" not in script


@pytest.mark.slow  # tests/e2e/test_torch_three_formats.py runs a folded pad against ExecuTorch
def test_a_folded_pad_is_bit_exact_with_executorch():
    program = quantize(_Padded(), (1, 3, 12, 12))
    mod, _ = canonqnn.canonicalize(load(program))
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    (want,) = run_executorch(executorch_method(program), x)
    assert np.array_equal(list(canonqnn.build(mod).run({"x": x}).values())[0], want)


ACTIVATIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
               "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "hardswish": F.hardswish,
               "silu": F.silu, "leaky_relu": lambda x: F.leaky_relu(x, 0.2)}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_an_activation_between_quantizers_is_xnnpacks_table(name):
    """Each table function imports as the form its rule folds into one table, XNNPACK's
    (tests/tables/test_xnnpack_tables.py compares those with ExecuTorch)."""
    (s_in, z_in), (s_out, z_out) = (0.05, 3), (0.02, -5)
    program = qdq_program(ACTIVATIONS[name], [(s_in, z_in)], (s_out, z_out), [(1, 256)])
    mod, report = canonqnn.canonicalize(load(program), numerics="xnnpack-x86-avx2")
    assert dict(report.canonical_ops) == {"lut": 1} and not report.float_islands
    (x_name,), (y_name,) = ([t.name for t in ts] for ts in (interface(mod).inputs,
                                                            interface(mod).outputs))
    x = real_values(INT8_CODES.astype(np.int8).reshape(1, -1), np.float32(s_in), z_in)
    y = reference.evaluate(mod, {x_name: x}).outputs[y_name]
    want = xnnpack.table(name, QParams.make(s_in, z_in), QParams.make(s_out, z_out),
                         **({"alpha": 0.2} if name == "leaky_relu" else {}))
    assert np.array_equal(stored(y.reshape(-1), np.float32(s_out), z_out), want)


def test_elu_which_executorch_runs_in_float_is_a_named_float_island():
    program = qdq_program(F.elu, [(0.05, 3)], (0.02, -5), [(1, 8)])
    _, report = canonqnn.canonicalize(load(program), numerics="xnnpack-x86-avx2")
    assert "lut" not in report.canonical_ops
    assert any("XNNPACK has no kernel computing add(" in i.reason for i in report.float_islands)
