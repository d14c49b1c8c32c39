"""canonqnn.maximum / minimum / where against onnxruntime (DequantizeLinear -> Max/Min ->
QuantizeLinear in float, and the com.microsoft QLinearWhere kernel), their numpy references and
their TVM legalizations. Operands are all 256 codes against all 256 codes (broadcast), so
every requantized value of both operands is compared; one module, one build.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _ort import F32, MS, MultiOp, assert_bit_exact, count_ties, run_graph, run_node, scalar
from canonqnn.ops import select
from canonqnn.qparams import QParams

# set -> ((a_scale, a_zp), (b_scale, b_zp), (out_scale, out_zp))
PARAMS = {
    "random": ((0.0371, -17), (0.0213, 9), (0.029, 4)),
    "ties": ((3 * 2.0 ** -5, 4), (2.0 ** -4, 1), (2.0 ** -4, -3)),  # a: 1.5 * (q - 4), .5 ties
    "saturating": ((0.1, 0), (0.013, 20), (0.03, 0)),
    "a_shares_output_params": ((0.029, 4), (0.0213, 9), (0.029, 4)),
    # multiplying by f32(1 / out_scale) instead of dividing changes some codes here
    "division_sensitive": ((0.041813600808382034, -89), (0.0213, 9),
                           (0.07620466500520706, -22)),
}
SETS = list(PARAMS)
OPS = ("Max", "Min", "Where")
ACT = (-3, 50)


def qparams(name: str, shift: int = 0) -> tuple[QParams, QParams, QParams]:
    return tuple(QParams.make(F32(s), z - shift) for s, z in PARAMS[name])


def _calls(a, b, cond):
    calls = []
    for name in SETS:
        qa, qb, qo = qparams(name)
        calls += [select.extremum(select.MAXIMUM, a, b, qa, qb, qo),
                  select.extremum(select.MINIMUM, a, b, qa, qb, qo),
                  select.where(cond, a, b, qa, qb, qo)]
    qa, qb, qo = qparams("random")
    calls += [select.extremum(select.MAXIMUM, a, b, qa, qb, qo, act=ACT),
              select.where(cond, a, b, qa, qb, qo, act=ACT)]
    return calls


@pytest.fixture(scope="module")
def module():
    return MultiOp(_calls, {"a": ((1, 256), "int8"), "b": ((256, 1), "int8"),
                            "cond": ((256, 256), "bool")})


def codes(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype)


@pytest.fixture(scope="module")
def feeds():
    cond = np.random.default_rng(5).integers(0, 2, (256, 256)).astype(bool)
    return dict(a=codes(np.int8).reshape(1, 256), b=codes(np.int8).reshape(256, 1), cond=cond)


@pytest.fixture(scope="module")
def results(module, feeds):
    return module.references(**feeds), module.tvm(**feeds)


def ort_select(op: str, a, b, cond, params, shift: int = 0) -> np.ndarray:
    """onnxruntime on stored data of a's dtype; zero points given in int8 terms + shift."""
    (sa, za), (sb, zb), (so, zo) = params
    dt = a.dtype
    consts = dict(sa=scalar(sa, F32), za=scalar(za + shift, dt), sb=scalar(sb, F32),
                  zb=scalar(zb + shift, dt), so=scalar(so, F32), zo=scalar(zo + shift, dt))
    if op == "Where":
        return run_node("QLinearWhere", ["C", "A", "sa", "za", "B", "sb", "zb", "so", "zo"],
                        dict(C=cond, A=a, B=b), consts, dt, domain=MS)
    nodes = [helper.make_node("DequantizeLinear", ["A", "sa", "za"], ["DA"]),
             helper.make_node("DequantizeLinear", ["B", "sb", "zb"], ["DB"]),
             helper.make_node(op, ["DA", "DB"], ["F"]),
             helper.make_node("QuantizeLinear", ["F", "so", "zo"], ["Y"])]
    return run_graph(nodes, dict(A=a, B=b), consts, dt)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", SETS)
def test_selection_matches_onnxruntime_on_all_code_pairs(name, op, results, feeds):
    i = SETS.index(name) * 3 + OPS.index(op)
    oracle = ort_select(op, feeds["a"], feeds["b"], feeds["cond"], PARAMS[name])
    assert_bit_exact(oracle, results[0][i], results[1][i], f"{op} {name}")
    if name == "ties":
        (sa, za), _, (so, _) = PARAMS[name]
        assert count_ties((codes(np.int8).astype(np.float64) - za) * sa / so) == 128
    if name == "saturating":  # a's requantized codes saturate at both ends
        assert (op == "Min" or (oracle == 127).any()) and (op == "Max" or (oracle == -128).any())


@pytest.mark.parametrize("op", ["Max", "Where"])
def test_activation_clamp_equals_clipping_onnxruntime(op, results, feeds):
    i = len(SETS) * 3 + ["Max", "Where"].index(op)
    oracle = np.clip(ort_select(op, feeds["a"], feeds["b"], feeds["cond"], PARAMS["random"]),
                     *ACT)
    assert (oracle == ACT[0]).sum() > 100 and (oracle == ACT[1]).sum() > 100
    assert_bit_exact(oracle, results[0][i], results[1][i], f"{op} clamped")


@pytest.mark.parametrize("op", OPS)
def test_uint8_data_shifted_to_int8_matches_onnxruntime(op, module, feeds):
    qa, qb, qo = qparams("random")
    au, bu = (codes(np.uint8).reshape(shape) for shape in ((1, 256), (256, 1)))
    oracle = ort_select(op, au, bu, feeds["cond"], PARAMS["random"], shift=128)
    shifted = dict(a=(au.astype(np.int32) - 128).astype(np.int8),
                   b=(bu.astype(np.int32) - 128).astype(np.int8), cond=feeds["cond"])
    i = SETS.index("random") * 3 + OPS.index(op)
    expected = (oracle.astype(np.int32) - 128).astype(np.int8)
    assert_bit_exact(expected, module.references(**shifted)[i], module.tvm(**shifted)[i], op)



def test_module_prints_and_parses_back_structurally_equal(module):
    import tvm

    parsed = tvm.script.from_source(module.mod.script(show_meta=True))
    tvm.ir.assert_structural_equal(parsed, module.mod)
