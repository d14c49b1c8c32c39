"""canonqnn.tables.xnnpack (AVX2+FMA3 hosts) and canonqnn.tables.xnnpack_avx512 (AVX-512F hosts)
against ExecuTorch's XNNPACK delegate: every entry of every table function.

The class of this host (the probe, ``canonqnn.frontends.torch.runtime.profile``) is checked
against ExecuTorch running here. A smaller class is checked against ExecuTorch running in a
child whose CPUID is masked to it (tests/support/cpuid_mask.py: an AVX-512 host's child picks
the AVX2 kernels), where this host offers CPUID faulting; otherwise, and for a larger class,
against a recording of ExecuTorch made on (or masked to) that class
(tests/fixtures/xnnpack/<class>.json: the int8 tables of the cases below and digests of the
float kernels' outputs; ``PYTHONPATH=tests:tests/frontends/torch python
tests/tables/test_xnnpack_tables.py record [xnnpack_avx2]`` writes this host's class's, or the
named class's from a masked child). A class with neither is skipped, named.

The output scales are ones where the table differs from the same function computed exactly in
float64 (checked; found by placing a rounding boundary between the two values), so a table that
is merely close would fail; the AVX-512 sigmoid and silu scales also separate the two classes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from _pt2e import executorch_method, quiet, real_values, run_executorch, stored
from canonqnn import tables
from canonqnn.frontends.torch import runtime as torch_runtime
from canonqnn.qparams import INT8_CODES, QParams
from canonqnn.tables import NotEvaluable, xnnpack
from support import cpuid_mask

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures" / "xnnpack"
FAMILIES = {"xnnpack_avx2": "x86_avx2", "xnnpack_avx512": "x86_avx512"}  # -> fixture name
HOST = torch_runtime.profile().tables  # this host's class, or "unverified"
# The classes a child of this host can be masked to (cpuid_mask's names), smaller than HOST's.
MASKS = {"xnnpack_avx2": "x86-avx2"} if HOST == "xnnpack_avx512" else {}
SLOPE = 0.1

# function -> (torch function, the same in float64)
FUNCTIONS = {
    "sigmoid": (torch.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (torch.tanh, np.tanh),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                   (x + 0.044715 * x ** 3)))),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "leaky_relu": (lambda x: F.leaky_relu(x, SLOPE), lambda x: np.where(x < 0, SLOPE * x, x)),
}
# class -> function -> (input scale, zp, output scale, zp). tanh, gelu and hardswish are the
# same kernels in both classes.
_SHARED = {"tanh": (0.0431162, -58, 0.007843134924769402, -1),
           "gelu": (0.156786, 0, 0.050171516835689545, -126),
           "gelu_tanh": (0.0470358, 0, 0.023591937497258186, -121),
           "hardswish": (0.0470358, 0, 0.009044765494763851, -113),
           "leaky_relu": (0.0470358, 0, 0.018814319744706154, -105)}
CASES = {
    "xnnpack_avx2": {"sigmoid": (0.0470358, 0, 0.0014197495765984058, -128),
                     "silu": (0.0470358, 0, 0.012509847059845924, -117), **_SHARED},
    "xnnpack_avx512": {"sigmoid": (0.0470358, 0, 0.0014777244068682194, -128),
                       "silu": (0.0470358, 0, 0.012762786820530891, -117), **_SHARED},
}
ALL = [(family, name) for family in CASES for name in FUNCTIONS]


def _params(case):
    s_in, z_in, s_out, z_out = case
    return (QParams.make(float(np.float32(s_in)), z_in),
            QParams.make(float(np.float32(s_out)), z_out))


def _table(family, name):
    in_qp, out_qp = _params(CASES[family][name])
    return tables.kernel_table("torch", name, in_qp, out_qp, family,
                               **({"alpha": SLOPE} if name == "leaky_relu" else {}))


class _Functions(nn.Module):
    """Each function of its own int8 input, between the case's parameters: dq -> f -> q."""

    def __init__(self, cases):
        super().__init__()
        self.cases = cases

    def forward(self, *xs):
        q, outs = torch.ops.quantized_decomposed, []
        for x, (name, (s_in, z_in, s_out, z_out)) in zip(xs, self.cases.items()):
            real = q.dequantize_per_tensor(q.quantize_per_tensor(x, s_in, z_in, -128, 127,
                                                                 torch.int8),
                                           s_in, z_in, -128, 127, torch.int8)
            y = q.quantize_per_tensor(FUNCTIONS[name][0](real), s_out, z_out, -128, 127,
                                      torch.int8)
            outs.append(q.dequantize_per_tensor(y, s_out, z_out, -128, 127, torch.int8))
        return tuple(outs)


def executorch_tables(family: str) -> dict[str, np.ndarray]:
    """The int8 code ExecuTorch computes here for every input code, per function of
    ``family``'s cases."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (the q/dq ops)

    quiet()
    cases = CASES[family]
    codes = INT8_CODES.astype(np.int8).reshape(1, -1)
    inputs = [real_values(codes, np.float32(c[0]), c[1]) for c in cases.values()]
    program = torch.export.export(_Functions(cases), tuple(torch.from_numpy(x) for x in inputs))
    outs = run_executorch(executorch_method(program), *inputs)
    return {name: stored(out.reshape(-1), np.float32(c[2]), c[3])
            for (name, c), out in zip(cases.items(), outs)}


# ---------------------------------------------------------------- the float kernels' digests
def float_grid() -> np.ndarray:
    """The probe's grid, then 200,000 float32 bit patterns (seeded; every magnitude, denormals
    and infinities included, NaNs left out)."""
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 200_000, dtype=np.uint64)
    wide = bits.astype(np.uint32).view(np.float32)
    return np.concatenate([torch_runtime._XNNPACK_PROBE, wide[~np.isnan(wide)]])


FLOAT_FUNCTIONS = ("sigmoid", "tanh", "gelu", "hardswish", "silu", "leaky_relu")


def digest(values: np.ndarray) -> str:
    """sha256 of float32 bit patterns, every NaN counted as one pattern."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    bits = np.where(np.isnan(values), np.uint32(0x7FC00000), bits)
    return hashlib.sha256(bits.astype("<u4").tobytes()).hexdigest()


def reproduced_digests(family: str, x: np.ndarray) -> dict[str, str]:
    module = tables.runtime("torch", family)
    with np.errstate(all="ignore"):
        return {name: digest(module.leaky_relu(x, SLOPE) if name == "leaky_relu"
                             else getattr(module, name)(x)) for name in FLOAT_FUNCTIONS}


def executorch_digests(x: np.ndarray) -> dict[str, str]:
    import io

    class Floats(nn.Module):
        def forward(self, v):
            return tuple(FUNCTIONS[name][0](v) for name in FLOAT_FUNCTIONS)

    buffer = io.BytesIO()
    with torch_runtime.quietly():
        torch.export.save(torch.export.export(Floats(), (torch.from_numpy(x),)), buffer)
    run, _ = torch_runtime.executorch_runner(buffer.getvalue(), ["x"])
    return {name: digest(out) for name, out in zip(FLOAT_FUNCTIONS, run({"x": x}))}


def recording(family: str) -> dict | None:
    path = FIXTURES / f"{FAMILIES[family]}.json"
    return json.loads(path.read_text()) if path.exists() else None


def measure() -> dict:
    """What ExecuTorch computes in this process, for this process's class: the contents of a
    recording."""
    from importlib.metadata import version

    if HOST not in FAMILIES:
        raise SystemExit(f"this host's XNNPACK kernels are not a reproduced class ({HOST})")
    return {"executorch": version("executorch"), "family": HOST,
            "tables": {k: v.astype(np.int8).tobytes().hex()
                       for k, v in executorch_tables(HOST).items()},
            "float_digests": executorch_digests(float_grid())}


def mask_unavailable(family: str) -> str | None:
    """Why no child of this host runs ``family``'s kernels, or None."""
    if family not in MASKS:
        return f"{family} is not a class smaller than this host's ({HOST})"
    return cpuid_mask.unavailable(MASKS[family])


@functools.cache
def measured_masked(family: str) -> dict:
    """``measure()`` in a child whose CPUID is masked to ``family`` (which it checks: its
    probe names the class it runs)."""
    env = {**os.environ, **cpuid_mask.environment(MASKS[family]),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "measured.json"
        done = subprocess.run([sys.executable, __file__, "measure", str(out)], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the masked child failed: {done.stderr[-2000:]}")
        data = json.loads(out.read_text())
    assert data["family"] == family, f"the masked child's XNNPACK runs {data['family']}"
    return data


def record(family: str | None = None) -> pathlib.Path:
    """Write the recording of this host's class, or of ``family`` measured in a masked child
    (the module's docstring says how to run it)."""
    if family is None or family == HOST:
        data = measure()
    elif (reason := mask_unavailable(family)) is not None:
        raise SystemExit(f"cannot record {family} here: {reason}")
    else:
        data = measured_masked(family)
    path = FIXTURES / f"{FAMILIES[data['family']]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def _hex(found: dict[str, np.ndarray]) -> dict[str, str]:
    return {k: v.astype(np.int8).tobytes().hex() for k, v in found.items()}


# ---------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def reference_tables():
    """family -> function -> the table the runtime computes: ExecuTorch here for this host's
    class, in a masked child for a smaller one, else the recording."""
    found = {}
    for family in CASES:
        if family == HOST:
            found[family] = _hex(executorch_tables(family))
        elif mask_unavailable(family) is None:
            found[family] = measured_masked(family)["tables"]
        elif (data := recording(family)) is not None:
            found[family] = data["tables"]
    return {family: {k: np.frombuffer(bytes.fromhex(v), np.int8) for k, v in tables_.items()}
            for family, tables_ in found.items()}


def _neither(family: str) -> str:
    return (f"no {family} host here, no child masked to it ({mask_unavailable(family)}) and "
            f"no recording of one (tests/fixtures/xnnpack/{FAMILIES[family]}.json)")


@pytest.mark.parametrize("family,name", ALL)
def test_table_equals_executorch_on_every_code(family, name, reference_tables):
    if family not in reference_tables:
        pytest.skip(_neither(family))
    want, got = reference_tables[family][name], _table(family, name)
    assert np.array_equal(got, want), f"{np.sum(got != want)} of 256 entries differ"


@pytest.mark.parametrize("family", list(CASES))
def test_float_kernels_equal_executorch_bit_for_bit(family):
    """Over the probe grid and 200,000 float32 values of every magnitude: ExecuTorch here for
    this host's class, in a masked child for a smaller one, else the recorded digests."""
    x = float_grid()
    if family == HOST:
        want = executorch_digests(x)
    elif mask_unavailable(family) is None:
        want = measured_masked(family)["float_digests"]
    elif (data := recording(family)) is not None:
        want = data["float_digests"]
    else:
        pytest.skip(_neither(family))
    assert reproduced_digests(family, x) == want


def test_the_recording_of_this_hosts_class_is_what_executorch_computes_here():
    data = recording(HOST) if HOST in FAMILIES else None
    if data is None:
        pytest.skip(f"no recording of this host's class ({HOST})")
    assert data["tables"] == _hex(executorch_tables(HOST))


@pytest.mark.parametrize("family", list(MASKS) or ["xnnpack_avx2"])
def test_the_recording_of_a_masked_class_is_what_executorch_computes_masked(family):
    """The fixture that stands in for a masked child where there is none is what one computes
    (tables and float digests), and the masked child runs that class's kernels."""
    if (reason := mask_unavailable(family)) is not None:
        pytest.skip(reason)
    data = recording(family)
    assert data is not None, f"record it: python {pathlib.Path(__file__).name} record {family}"
    measured = measured_masked(family)
    assert measured["family"] == data["family"] == family
    assert (measured["tables"], measured["float_digests"]) == \
        (data["tables"], data["float_digests"])


@pytest.mark.parametrize("family,name", ALL)
def test_table_is_not_the_exactly_computed_function(family, name):
    """At these parameters the float64 function quantizes otherwise: the comparison above
    tells XNNPACK's kernels from the mathematical function."""
    in_qp, out_qp = _params(CASES[family][name])
    x = xnnpack.dequantize(INT8_CODES, in_qp.scalar_scale, in_qp.scalar_zp).astype(np.float64)
    exact = np.clip(np.rint(FUNCTIONS[name][1](x) / out_qp.scalar_scale) + out_qp.scalar_zp,
                    -128, 127)
    assert np.sum(exact != _table(family, name)) >= 1


@pytest.mark.parametrize("name", ["sigmoid", "silu"])
def test_the_classes_build_different_tables(name):
    """The AVX-512 cases of sigmoid and silu tell the two classes apart (so the recording of
    one checks the reproduction of the other for something)."""
    assert not np.array_equal(_table("xnnpack_avx512", name),
                              tables.kernel_table("torch", name,
                                                  *_params(CASES["xnnpack_avx512"][name]),
                                                  "xnnpack_avx2"))


def test_a_nan_quantizes_to_the_int8_maximum():
    """Inputs of 1e36 per step: on the AVX-512 class sigmoid's range reduction overflows to NaN
    on all but code 0, and the convert's ``minps`` turns a NaN into 32767, so 127. The AVX2
    class's kernel replaces the lanes past its cutoff (0, so 1 - 0 for x >= 0): no NaN, and
    its table is checked against the runtime all the same."""
    if HOST not in FAMILIES:
        pytest.skip(f"this host's XNNPACK kernels are not reproduced ({HOST})")
    from _pt2e import qdq_program

    in_qp, out_qp = QParams.make(float(np.float32(1e36)), 0), QParams.make(1 / 256, -128)
    with np.errstate(all="ignore"):
        y = tables.runtime("torch", HOST).sigmoid(xnnpack.dequantize(INT8_CODES, 1e36, 0))
    assert np.isnan(y).sum() == (255 if HOST == "xnnpack_avx512" else 0)
    program = qdq_program(torch.sigmoid, [(in_qp.scalar_scale, 0)], (1 / 256, -128), [(1, 256)])
    x = real_values(INT8_CODES.astype(np.int8).reshape(1, -1), np.float32(1e36), 0)
    (out,) = run_executorch(executorch_method(program), x)
    want = stored(out.reshape(-1), np.float32(1 / 256), -128)
    assert np.all(want[np.isnan(y)] == 127)
    assert np.array_equal(tables.kernel_table("torch", "sigmoid", in_qp, out_qp, HOST), want)


def test_functions_xnnpack_has_no_table_kernel_for_are_refused():
    for family in CASES:
        with pytest.raises(NotEvaluable, match="no int8 table kernel computing 'elu'"):
            tables.kernel_table("torch", "elu", QParams.make(0.05, 0), QParams.make(0.05, 0),
                                family)
        with pytest.raises(NotEvaluable, match="int8 tables only"):
            tables.kernel_table("torch", "sigmoid", QParams.make(0.05, 0, dtype="int16"),
                                QParams.make(0.05, 0), family)


if __name__ == "__main__" and sys.argv[1:2] == ["record"] and len(sys.argv) <= 3:
    print(record(*sys.argv[2:]))
elif __name__ == "__main__" and sys.argv[1:2] == ["measure"]:  # measured_masked's child
    pathlib.Path(sys.argv[2]).write_text(json.dumps(measure()))
