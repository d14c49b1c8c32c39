"""canonqnn.qdq: the facts a quantize/dequantize call carries (stored uint8, source operator)
survive what a user may run between import and canonicalization."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import relax

import canonqnn
from _onnx_chains import attention_scores
from canonqnn import _tvm, qdq
from canonqnn.qparams import QParams


def uint8_facts(mod) -> list[str]:
    return [p.source_dtype for _, v in _tvm.function_bindings(mod["main"])
            if (p := qdq.read_dequantize(v) or qdq.read_quantize(v))]


def test_facts_ride_on_the_calls_and_are_read_back():
    x = relax.Var("x", _tvm.tensor_type((4,), "int8"))
    qp = QParams.make(0.1, 3)
    parsed = qdq.read_dequantize(qdq.dequantize(x, qp, source_dtype="uint8"))
    assert (parsed.source_dtype, parsed.source_op) == ("uint8", None)
    q = qdq.quantize(relax.Var("y", _tvm.tensor_type((4,), "float32")), qp,
                     source_op="FULLY_CONNECTED")
    assert (qdq.read_quantize(q).source_dtype, qdq.read_quantize(q).source_op) == \
        ("int8", "FULLY_CONNECTED")
    assert qdq.read_dequantize(qdq.dequantize(x, qp)).source_dtype == "int8"


def test_uint8_facts_survive_json_cse_and_binding_canonicalization():
    # A uint8 x runtime int8 product: the accumulation depends on the uint8 fact.
    mod = canonqnn.load(attention_scores(np.uint8, np.int8))
    assert uint8_facts(mod) == ["uint8", "int8", "uint8"]  # dequantize of A and of B, quantize
    passed = relax.transform.CanonicalizeBindings()(relax.transform.EliminateCommonSubexpr()(
        tvm.ir.load_json(tvm.ir.save_json(mod))))
    assert uint8_facts(passed) == uint8_facts(mod)
    profile = "onnxruntime-1.31-x86-avx2"
    before, after = (re.findall(r'R\.canonqnn\.\w+\(.*', canonqnn.canonicalize(
        m, numerics=profile)[0].script()) for m in (mod, passed))
    assert 'accumulate="u8s8_pair_sat16"' in before[-1] and after == before
