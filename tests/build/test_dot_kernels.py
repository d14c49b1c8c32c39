"""Each x86 CPU class gets its own dot-product instruction in the compiled conv and matmul
kernels, never the saturating ``vpmaddubsw``; a CPU without AVX2 gets the plain loop nest.
AArch64 builds (cross-compiled) get ``sdot`` with the dot-product extension, NEON's widening
multiplies and pairwise adds without it.

Builds for other CPUs than the host compile here but do not run (``Built.run`` refuses them);
their arithmetic is checked on this host by ``tests/build/forms/test_dot.py`` (``isa.emulating``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from tvm import relax

import canonqnn
from canonqnn import _tvm
from canonqnn.ops import conv, matmul
from canonqnn.qparams import QParams


def _conv(x, c: int, o: int, groups: int = 1):
    w = np.random.default_rng(o).integers(-128, 128, (o, c // groups, 3, 3)).astype(np.int8)
    return conv.conv2d(
        x, _tvm.const(w, "int8"), np.zeros(o, np.int32), QParams.make(0.1, 3),
        QParams.make(np.full(o, 0.01, np.float32), np.zeros(o, np.int8), axis=0),
        QParams.make(0.2, -5), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
        groups=groups)


def _conv_and_matmul() -> object:
    """Every packed form: convs with short rows (output channels in lanes on 16-lane
    targets) and with 16-wide rows (output pixels in lanes), a depthwise conv, a dense
    matmul, a matmul of two run-time operands."""
    b = np.random.default_rng(0).integers(-128, 128, (16, 24)).astype(np.int8)
    bb = relax.BlockBuilder()
    short = relax.Var("short", _tvm.tensor_type((1, 16, 8, 8), "int8"))
    wide = relax.Var("wide", _tvm.tensor_type((1, 16, 4, 16), "int8"))
    a = relax.Var("a", _tvm.tensor_type((4, 16), "int8"))
    keys = relax.Var("keys", _tvm.tensor_type((2, 16, 8), "int8"))
    with bb.function("main", [short, wide, a, keys]):
        with bb.dataflow():
            outputs = [bb.emit(_conv(short, 16, 32)), bb.emit(_conv(wide, 16, 32)),
                       bb.emit(_conv(wide, 16, 16, groups=16)),
                       bb.emit(matmul.matmul(
                           a, _tvm.const(b, "int8"), np.zeros(24, np.int32),
                           QParams.make(0.1, 0), QParams.make(0.01, 0), QParams.make(0.3, 1))),
                       bb.emit(matmul.matmul(  # both operands at run time
                           a, keys, np.zeros(8, np.int32), QParams.make(0.1, 0),
                           QParams.make(0.01, 0), QParams.make(0.3, 1)))]
            out = bb.emit_output(relax.Tuple(outputs))
        bb.emit_func_output(out)
    return bb.get()


def _assembly(built: canonqnn.build.Built) -> str:
    modules = [built.module.mod, *built.module.mod.imports]
    text = []
    for module in modules:
        with contextlib.suppress(Exception):  # modules without assembly: the VM's own
            text.append(module.inspect_source("asm"))
    return "\n".join(text)


@pytest.mark.parametrize("cpu,instruction,register", [
    ("znver5", "vpdpbusd", "%zmm"),          # AVX512-VNNI
    ("alderlake", "vpdpbusd", "%ymm"),       # AVX-VNNI (256-bit)
    ("skylake-avx512", "vpmaddwd", "%zmm"),  # AVX-512BW without VNNI
    ("znver3", "vpmaddwd", "%ymm"),          # AVX2
])
def test_each_cpu_class_gets_its_dot_product_instruction(cpu, instruction, register):
    built = canonqnn.build(_conv_and_matmul(), {"kind": "llvm", "mcpu": cpu})
    text = _assembly(built)
    lines = [line for line in text.splitlines() if instruction in line]
    assert lines and any(register in line for line in lines)
    assert "vpmaddubsw" not in text  # saturates int16 pair sums: never exact
    # every conv and the constant matmul took a packed form (weights no longer OIHW / KN)
    weights = [k.inputs[1] for k in built.kernels.kernels if "conv2d" in k.name
               or "matmul" in k.name]
    assert len(weights) == 5
    assert sum(len(shape) >= 4 and shape[-1] in (2, 4) for _, shape in weights) == 4


def _instruction_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("\t") and not line.startswith("\t."):
            counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
    return counts


@pytest.mark.parametrize("mattr,instructions,absent", [
    ("+neon,+dotprod", ("sdot",), ()),            # every pair-4 form on sdot
    ("+neon", ("smull", "addp"), ("sdot",)),      # int16 pairs: widening multiply, pairwise add
])
def test_aarch64_builds_get_neon_dot_products(mattr, instructions, absent):
    built = canonqnn.build(_conv_and_matmul(), f"llvm -mtriple=aarch64-linux-gnu -mattr={mattr}")
    counts = _instruction_counts(_assembly(built))
    assert all(counts.get(i, 0) >= 4 for i in instructions), counts
    assert not any(counts.get(i) for i in absent), counts
    weights = [k.inputs[1] for k in built.kernels.kernels if "conv2d" in k.name
               or "matmul" in k.name]
    assert sum(len(shape) >= 4 and shape[-1] in (2, 4) for _, shape in weights) == 4


def test_a_cpu_without_avx2_gets_the_plain_loop_nest():
    text = _assembly(canonqnn.build(_conv_and_matmul(), {"kind": "llvm", "mcpu": "nehalem"}))
    assert "vpmaddwd" not in text and "pmaddwd" not in text and "vpdpbusd" not in text


def test_a_refused_tensorized_schedule_builds_the_packed_kernel_generically(monkeypatch):
    from canonqnn.build import dot_kernels
    from canonqnn.build.forms import dot

    if dot.host_isa() is None:
        pytest.skip("this host's CPU has no int8 dot-product instruction")

    def refuse(*_args):
        raise ValueError("tensorize: no match")

    mod = _conv_and_matmul()
    expected = canonqnn.build(mod)
    monkeypatch.setattr(dot_kernels, "schedule", refuse)
    with pytest.warns(UserWarning, match="tensorized schedule was refused"):
        fallback = canonqnn.build(mod)
    rng = np.random.default_rng(5)
    feed = {info.name: rng.integers(-128, 128, info.shape).astype(np.int8)
            for info in fallback.io.inputs}
    for name, value in expected.run(feed).items():
        np.testing.assert_array_equal(fallback.run(feed)[name], value)
