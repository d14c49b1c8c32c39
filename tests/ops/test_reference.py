"""The numpy reference interpreter of a whole canonical module, and build(verify=True)."""

from __future__ import annotations

import numpy as np
import pytest

import canonqnn
from canonqnn import _tvm
from canonqnn.errors import VerificationError
from canonqnn.io import interface, module_io, random_inputs
from canonqnn.ops import reference
from canonqnn.testing import onnx_models as models
from canonqnn.testing import tflite_models
from test_indexing import tile_module

ONNX_EXAMPLES = [(a, f, t) for a in sorted(models.ARCHITECTURES) for f in ("qdq", "qoperator")
                 for t in ("u8", "s8")]
TFLITE_EXAMPLES = [(a, t) for a in sorted(tflite_models.ARCHITECTURES) for t in ("int8", "uint8")]


def _default_subset(cases: list[tuple], variants: int, skip: tuple[str, ...] = ()) -> list:
    """Each architecture once by default (but those in ``skip``), its variant rotating so that
    every variant is covered; the other combinations run under the slow marker (a verified
    build takes 5-20 s)."""
    return [pytest.param(*case, id="-".join(case), marks=() if case[0] not in skip and
                         i % variants == (i // variants) % variants else pytest.mark.slow)
            for i, case in enumerate(cases)]


def assert_verified(mod):
    built = canonqnn.build(mod, verify=True)
    assert built.verification.ok and built.verification.runs == 2, \
        built.verification.summary()


# mobilenet_v3 (15 s) runs bit-exact against onnxruntime in tests/e2e by default
@pytest.mark.parametrize("arch,fmt,activation", _default_subset(ONNX_EXAMPLES, 4,
                                                                ("mobilenet_v3",)))
def test_every_onnx_example_model_builds_equal_to_its_numpy_reference(quantized_model, arch,
                                                                       fmt, activation):
    model = quantized_model(arch, fmt, activation, True)
    assert_verified(canonqnn.canonicalize(canonqnn.load(model))[0])


# the MobileNets (20 s each) run bit-exact against the interpreter in tests/e2e by default
@pytest.mark.parametrize("arch,dtype", _default_subset(TFLITE_EXAMPLES, 2,
                                                       ("mobilenet_v1", "mobilenet_v2")))
def test_every_tflite_example_model_builds_equal_to_its_numpy_reference(arch, dtype):
    model = tflite_models.ARCHITECTURES[arch](dtype=dtype)
    assert_verified(canonqnn.canonicalize(canonqnn.load(model))[0])


def test_verify_names_the_tile_kernel_when_llvm_miscompiles_it(monkeypatch):
    # topi.tile's modulo addressing, which canonqnn.tile replaced, is miscompiled for int8 on
    # every x86 CPU but plain x86-64 (docs/random-graphs.md): verify must name the kernel.
    monkeypatch.setattr(_tvm, "te_tile", lambda x, repeats: _tvm.topi.tile(x, repeats))
    mod = tile_module([(1, 5, 8, 3)], [1, 2, 2, 1])
    with pytest.raises(VerificationError, match=r"kernel tile \(\w+\): \d+ of 960 values"):
        canonqnn.build(mod, target={"kind": "llvm", "mcpu": "haswell"}, verify=True)


def test_reference_interpreter_runs_a_module_without_tvm():
    mod = tile_module([(1, 5, 8, 3)], [1, 2, 2, 1])
    feeds = random_inputs(interface(mod), 3)
    out = reference.evaluate(mod, feeds).outputs["output_0"]
    np.testing.assert_array_equal(out, np.tile(feeds["x0"], [1, 2, 2, 1]))

def test_reference_interpreter_names_a_float_island_it_has_no_reference_for(quantized_model):
    transformer = quantized_model("transformer", "qdq", "u8", True)
    fq, _ = canonqnn.canonicalize(canonqnn.load(transformer))
    with pytest.raises(reference.NotEvaluable, match=r"relax\.nn\.layer_norm .*float island"):
        reference.evaluate(fq, random_inputs(module_io(fq)))
