"""The three-format network written as a PT2E PyTorch program (``_three_formats.torch_program``:
the same int8 weights and quantization parameters, float biases as PT2E keeps them, a zero pad
for the stride-2 conv's SAME padding, hardtanh for ReLU6) canonicalizes to the ONNX and TFLite
forms' ops with the same parameters except the rounding (``xnnpack``), and is bit-exact with
ExecuTorch's XNNPACK delegate. Its sigmoid is a lookup table where XNNPACK's float kernels are
the ones canonqnn reproduces (profile ``xnnpack-x86-avx2``); on other hosts (profile
``xnnpack``: tables unverified) it stays a float island the Report names."""

from __future__ import annotations

import numpy as np
import pytest

import _three_formats as net
import canonqnn
from _pt2e import executorch_method, run_executorch
from canonqnn import patterns
from canonqnn.frontends.torch import load
from canonqnn.frontends.torch import runtime as torch_runtime
from test_partition_three_formats import OPS, _comparable, _recorded_params


@pytest.fixture(scope="module")
def forms():
    program = net.torch_program()
    return program, {"torch": canonqnn.canonicalize(load(program)),
                     "onnx_qdq": canonqnn.canonicalize(canonqnn.load(net.qdq_model()))}


def _sequence(mod):
    return tuple(op.removeprefix("canonqnn.") for r in patterns.describe(mod).regions
                 for op in r.ops if op.startswith("canonqnn."))


TABLES = torch_runtime.profile().tables != "unverified"  # this host's class is reproduced


def test_torch_form_has_the_other_formats_ops(forms):
    _, canonical = forms
    torch_mod, report = canonical["torch"]
    assert _sequence(canonical["onnx_qdq"][0]) == OPS
    if TABLES:
        assert report.float_islands == []
        assert _sequence(torch_mod) == OPS
    else:
        assert [i.op for i in report.float_islands] == ["relax.sigmoid"]
        assert "tables=unverified" in report.float_islands[0].reason
        assert _sequence(torch_mod) == tuple(op for op in OPS if op != "lut")


def test_matched_parameters_equal_the_onnx_forms_but_the_rounding(forms):
    _, canonical = forms
    recorded = {name: _recorded_params(mod) for name, (mod, _) in canonical.items()}
    assert {p.rounding for p in recorded["torch"]} - {None} == {"xnnpack"}

    def params(name, epilogue):
        return sorted((dict(_comparable(p), epilogue=epilogue(p)) for p in recorded[name]),
                      key=repr)

    if TABLES:  # the last conv carries the sigmoid table in its epilogue in both forms, and
        # XNNPACK's table equals onnxruntime's entry for entry at these parameters
        def table(p):
            return _comparable(p.epilogue)

        assert params("torch", table) == params("onnx_qdq", table)
        (sigmoid,) = [p.epilogue for p in recorded["torch"] if p.epilogue is not None]
        assert sigmoid.attrs["function"] == "sigmoid"
    else:  # the ONNX form's epilogue (matched first) is a float island in the torch form
        assert params("torch", lambda p: None) == params("onnx_qdq", lambda p: None)


def test_torch_form_is_bit_exact_with_executorch(forms):
    program, canonical = forms
    mod, _ = canonical["torch"]
    (name,) = [i.name for i in canonqnn.io.interface(mod).inputs]
    built, method = canonqnn.build(mod), executorch_method(program)
    rng = np.random.default_rng(5)
    for _ in range(2):
        x = rng.integers(-128, 128, (1, net.H, net.W, net.C_IN)).astype(np.int8)
        (want,) = run_executorch(method, x)
        assert np.array_equal(list(built.run({name: x}).values())[0], want)
