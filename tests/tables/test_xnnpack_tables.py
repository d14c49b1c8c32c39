"""canonqnn.tables.xnnpack against ExecuTorch's XNNPACK delegate: every entry of every table
function, on hosts whose XNNPACK runs the float kernels the module reproduces (the probe says
which; tests/numerics/test_profiles.py checks that x86-64 hosts with AVX2 and without AVX-512
are such hosts). The output scales are ones where the table differs from the same function
computed exactly in float64 (checked; found by placing a rounding boundary between the two
values), so a table that is merely close would fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from _pt2e import executorch_method, quiet, real_values, run_executorch, stored
from canonqnn.frontends.torch import runtime as torch_runtime
from canonqnn.qparams import INT8_CODES, QParams
from canonqnn.tables import NotEvaluable, xnnpack

pytestmark = pytest.mark.skipif(
    torch_runtime.profile().tables != "xnnpack_avx2",
    reason="this host's XNNPACK runs float kernels canonqnn does not reproduce (profile "
           "xnnpack: its tables are float islands, tests/numerics/test_profiles.py)")

SLOPE = 0.1
# function -> (torch function, the same in float64, input scale, zp, output scale, zp)
CASES = {
    "sigmoid": (torch.sigmoid, lambda x: 1 / (1 + np.exp(-x)),
                0.0470358, 0, 0.0014197495765984058, -128),
    "tanh": (torch.tanh, np.tanh, 0.0431162, -58, 0.007843134924769402, -1),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
             0.156786, 0, 0.050171516835689545, -126),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                   (x + 0.044715 * x ** 3))),
                  0.0470358, 0, 0.023591937497258186, -121),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6,
                  0.0470358, 0, 0.009044765494763851, -113),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x)), 0.0470358, 0, 0.012509847059845924, -117),
    "leaky_relu": (lambda x: F.leaky_relu(x, SLOPE), lambda x: np.where(x < 0, SLOPE * x, x),
                   0.0470358, 0, 0.018814319744706154, -105),
}


def _params(case):
    s_in, z_in, s_out, z_out = case[2:]
    return QParams.make(float(np.float32(s_in)), z_in), QParams.make(float(np.float32(s_out)),
                                                                       z_out)


def _table(name):
    in_qp, out_qp = _params(CASES[name])
    return xnnpack.table(name, in_qp, out_qp, **({"alpha": SLOPE} if name == "leaky_relu"
                                                 else {}))


class _Functions(nn.Module):
    """Each function of its own int8 input, between the case's parameters: dq -> f -> q."""

    def forward(self, *xs):
        q, outs = torch.ops.quantized_decomposed, []
        for x, (fn, _, s_in, z_in, s_out, z_out) in zip(xs, CASES.values()):
            real = q.dequantize_per_tensor(q.quantize_per_tensor(x, s_in, z_in, -128, 127,
                                                                 torch.int8),
                                           s_in, z_in, -128, 127, torch.int8)
            y = q.quantize_per_tensor(fn(real), s_out, z_out, -128, 127, torch.int8)
            outs.append(q.dequantize_per_tensor(y, s_out, z_out, -128, 127, torch.int8))
        return tuple(outs)


@pytest.fixture(scope="module")
def executorch_tables():
    """The int8 code ExecuTorch computes for every input code, per function."""
    import torch.ao.quantization.fx._decomposed

    quiet()
    codes = INT8_CODES.astype(np.int8).reshape(1, -1)
    inputs = [real_values(codes, np.float32(c[2]), c[3]) for c in CASES.values()]
    program = torch.export.export(_Functions(), tuple(torch.from_numpy(x) for x in inputs))
    outs = run_executorch(executorch_method(program), *inputs)
    return {name: stored(out.reshape(-1), np.float32(c[4]), c[5])
            for (name, c), out in zip(CASES.items(), outs)}


@pytest.mark.parametrize("name", list(CASES))
def test_table_equals_executorch_on_every_code(name, executorch_tables):
    want, got = executorch_tables[name], _table(name)
    assert np.array_equal(got, want), f"{np.sum(got != want)} of 256 entries differ"


@pytest.mark.parametrize("name", list(CASES))
def test_table_is_not_the_exactly_computed_function(name):
    """At these parameters the float64 function quantizes otherwise: the comparison above
    tells XNNPACK's kernels from the mathematical function."""
    in_qp, out_qp = _params(CASES[name])
    x = xnnpack.dequantize(INT8_CODES, in_qp.scalar_scale, in_qp.scalar_zp).astype(np.float64)
    exact = np.clip(np.rint(CASES[name][1](x) / out_qp.scalar_scale) + out_qp.scalar_zp,
                    -128, 127)
    assert np.sum(exact != _table(name)) >= 1


def test_functions_xnnpack_has_no_table_kernel_for_are_refused():
    with pytest.raises(NotEvaluable, match="no int8 table kernel computing 'elu'"):
        xnnpack.table("elu", QParams.make(0.05, 0), QParams.make(0.05, 0))
    with pytest.raises(NotEvaluable, match="int8 tables only"):
        xnnpack.table("sigmoid", QParams.make(0.05, 0, dtype="int16"), QParams.make(0.05, 0))
