"""canonqnn.reduce_max / reduce_min / argmax against onnxruntime's integer kernels (ReduceMax,
ReduceMin, ArgMax on the int8/uint8 data itself), their numpy references and their TVM
legalizations (one module, one build). Data with few distinct values makes ties common, so
which of equal values argmax picks (first, or last with select_last_index) is checked.
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import MultiOp, assert_bit_exact, rand_q, run_node, to_int8
from canonqnn.ops import reduce
from canonqnn.qparams import QParams

QP = QParams.make(0.05, 3)
SHAPE = (2, 5, 4, 7)

# case -> (canonical call, onnxruntime op, attributes)
CASES = {
    "reduce_max_axes_1_3_keepdims": (lambda x: reduce.reduce(reduce.REDUCE_MAX, x, [1, 3], True,
                                                             QP),
                                     "ReduceMax", dict(axes=[1, -1], keepdims=1)),
    "reduce_max_all_axes": (lambda x: reduce.reduce(reduce.REDUCE_MAX, x, [0, 1, 2, 3], False,
                                                    QP),
                            "ReduceMax", dict(keepdims=0)),
    "reduce_min_axis_2": (lambda x: reduce.reduce(reduce.REDUCE_MIN, x, [2], False, QP),
                          "ReduceMin", dict(axes=[2], keepdims=0)),
    "argmax_first_keepdims": (lambda x: reduce.argmax(x, 1, True, False, QP),
                              "ArgMax", dict(axis=1, keepdims=1)),
    "argmax_last": (lambda x: reduce.argmax(x, 3, False, True, QP),
                    "ArgMax", dict(axis=-1, keepdims=0, select_last_index=1)),
    "argmax_first_axis_0": (lambda x: reduce.argmax(x, 0, False, False, QP),
                            "ArgMax", dict(axis=0, keepdims=0)),
}
NAMES = list(CASES)


@pytest.fixture(scope="module")
def module():
    return MultiOp(lambda x: [CASES[name][0](x) for name in NAMES], {"x": (SHAPE, "int8")})


def _oracle(name: str, x: np.ndarray) -> np.ndarray:
    _, op, attrs = CASES[name]
    out_dtype = np.int64 if op == "ArgMax" else x.dtype
    return run_node(op, ["X"], dict(X=x), {}, out_dtype, **attrs)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("data", ["random", "ties"])
def test_reduction_matches_onnxruntime_on_int8(name, data, module):
    rng = np.random.default_rng(3)
    x = rand_q(rng, SHAPE) if data == "random" else rand_q(rng, SHAPE, lo=-128, hi=-126)
    oracle = _oracle(name, x)
    ref, got = module.references(x=x), module.tvm(x=x)
    i = NAMES.index(name)
    assert_bit_exact(oracle, ref[i], got[i], f"{name} {data}")


@pytest.mark.parametrize("name", ["reduce_min_axis_2", "argmax_last"])
def test_reduction_on_uint8_data_shifted_to_int8_matches_onnxruntime(name, module):
    xu = rand_q(np.random.default_rng(4), SHAPE, np.uint8, lo=250, hi=255)
    oracle = _oracle(name, xu)
    if oracle.dtype == np.uint8:
        oracle = to_int8(oracle)
    i = NAMES.index(name)
    assert_bit_exact(oracle, module.references(x=to_int8(xu))[i], module.tvm(x=to_int8(xu))[i],
                     name)


def test_select_last_index_changes_the_answer_on_ties(module):
    """(Otherwise the argmax cases above could not tell first from last.)"""
    x = np.zeros(SHAPE, np.int8)
    first = _oracle("argmax_first_axis_0", x)
    last = run_node("ArgMax", ["X"], dict(X=x), {}, np.int64, axis=0, keepdims=0,
                    select_last_index=1)
    assert (first == 0).all() and (last == SHAPE[0] - 1).all()
    got = module.tvm(x=x)
    assert (got[NAMES.index("argmax_last")] == SHAPE[3] - 1).all()


def test_module_prints_and_parses_back_structurally_equal(module):
    import tvm

    parsed = tvm.script.from_source(module.mod.script(show_meta=True))
    tvm.ir.assert_structural_equal(parsed, module.mod)
