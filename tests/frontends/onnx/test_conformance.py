"""Conformance: single-op quantized ONNX cases through load -> canonicalize -> build -> run.

Cases (enumerated by ``_conformance_cases``): every model of the shared corpus
``../shared/conformance/onnx-ops`` (migraphx 55, onnx2c 13, onnx_backend 29, patched 23) and the
onnx package's own node cases of QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (45, all variants), 165 in all.

- Graph inputs that are quantization parameters (the scale / zero-point operands of a
  Q/DQ/QLinear/Integer op, and the int32 bias of QLinearConv/QGemm) are bound as constants with
  ``load(bind=...)`` from the case's inputs; every other input (data, weights) stays a runtime
  input.
- In-scope cases must give exactly the stored reference (same dtype, shape and bits; float
  DequantizeLinear outputs compared bit for bit) and canonicalize must leave no float island.
  The few whose stored reference is known to be wrong are compared with onnxruntime instead
  (``ORT_REFERENCE``).
- Everything else (``REFUSED``) must raise a ``CanonqnnError`` of the listed type whose message
  names the node and op and gives the listed reason: never another exception, never numbers.

Originals of the migraphx tests that put com.microsoft contrib ops (QLinearAdd,
QLinearAveragePool, ...) in the default ONNX domain: canonqnn **accepts** them, the op name being
unambiguous (``frontends/onnx/_context.py: DOMAINS``); they run on the data and references of
their ``patched/`` copies and must match them bit for bit. The three originals that also declare
the wrong output type are refused with ``InvalidModelError`` (the declared interface contradicts
what the op computes); see ``test_default_domain_contrib_originals``.

Without the corpus (a checkout with no ``../shared``) its tests skip, saying why, and only the
onnx package cases run; CI sets ``CANONQNN_REQUIRE_CORPUS=1``, which makes them fail instead.
"""

from __future__ import annotations

import copy
import functools
import re

import numpy as np
import onnx
import pytest

import _conformance_cases as cases
import canonqnn
from canonqnn.build import build
from canonqnn.errors import CanonqnnError, InvalidModelError, UnsupportedError
from canonqnn.frontends.onnx import load

# ------------------------------------------------------------------------------------------------
# Cases whose stored reference is known to be wrong or inconsistent with onnxruntime: compared
# with onnxruntime 1.31 (CPU, default options) run on the same inputs instead. The test also
# checks that the stored reference still differs from onnxruntime (else the entry is stale).
ORT_REFERENCE = {
    "onnx2c/test_qgemm_int8_bias_per_output":
        "output_0.pb adds the bias C[2] per row (C[:, None]); ONNX/numpy broadcasting, which "
        "onnxruntime follows, adds it per column (2 of 4 values differ by 1)",
    "onnx2c/test_qlinearaveragepool_int8_padded_include_pad":
        "output_0.pb rounds exact .5 ties half away from zero in float64; onnxruntime computes "
        "in float32 and rounds half to even (3 of 4 values differ by 1)",
    "onnx2c/test_qlinearaveragepool_uint8_basic":
        "same tie rule: the float32 value is exactly 124.5 (onnxruntime: 124), the float64 one "
        "124.50000004 (output_0.pb: 125); 1 of 4 values differs",
}

# Not run to numbers: (case-id regex, kind, error type, message regex, why). Every case matching
# no pattern is in scope. Kinds: "out of scope" (outside canonqnn's int8/uint8 op set),
# "invalid" (not valid ONNX), "gap" (in scope per the corpus survey but not supported yet).
REFUSED = [
    (r"dynamicquantizelinear\w*_expanded$", "out of scope", UnsupportedError,
     r"output scale must be a constant",
     "DynamicQuantizeLinear (and its function expansion: ReduceMin/Max, Div, Round, Cast ...)"),
    (r"_blocked", "out of scope", UnsupportedError,
     r"blocked quantization \(block_size=2\) is not supported",
     "blocked quantization (ai.onnx 21+ block_size)"),
    (r"quantizelinear_(u?int4|u?int2|e4m3fn\w*|e5m2|float4e2m1)$", "out of scope",
     UnsupportedError,
     r"dtype TensorProto\.(U?INT4|U?INT2|FLOAT8E4M3FN|FLOAT8E5M2|FLOAT4E2M1) is not supported",
     "4-bit, 2-bit, float8 and float4 quantization"),
    (r"matmulinteger_int8_uint8_one_zp_zero_vec_test2?$", "out of scope", UnsupportedError,
     r"A zero point of shape \[4, 3\]: only a scalar \(per-tensor\) zero point",
     "per-element a_zero_point (shape of A, [4, 3]); not even per-row"),
    (r"qlinearmatmul_N_D_perchannel_test$", "out of scope", UnsupportedError,
     r"shape \(2, 3, 1\): only scalar or 1-D per-axis quantization parameters",
     "N-D QLinearMatMul scales/zero points (a: [2, 3, 1], b: [2, 1, 5])"),
    (r"migraphx/quantizelinear_test$", "invalid", InvalidModelError,
     r"graph output 'out' is declared int8, but node '#0' \(op QuantizeLinear\) computes uint8",
     "no zero point means a uint8 output, but the model declares int8 (onnx.checker agrees)"),
    (r"migraphx/quantizelinear_int32_test$", "invalid", InvalidModelError,
     r"graph output 'out' is declared int8, but node '#0' \(op QuantizeLinear\) computes uint8",
     "the same int8/uint8 output conflict (and int32 input to QuantizeLinear, not supported)"),
    (r"migraphx/convinteger_no_bias_uint8_test$", "invalid", InvalidModelError,
     r"graph output '3' is declared of shape \[1, 2, 28, 28\], but node '#0' \(op ConvInteger\) "
     r"computes \[1, 1, 28, 28\]", "the declared output has 2 channels, the 1 filter gives 1"),
    (r"migraphx/(qlinearaveragepool_1d|qlinearaveragepool_nt_cip|qlinearconcat_3d)_test$",
     "invalid", InvalidModelError,
     r"graph output '\w+' is declared \w+, but node '#0' \(op \w+\) computes u?int8",
     "default-domain contrib original declaring the wrong output type (its patched copy passes)"),
    (r"qlinearaveragepool_3d_test$", "gap", UnsupportedError,
     r"3-D pooling \(rank-5 input\) is not supported",
     ("3-D average pooling: canonqnn's pooling ops are 2-D (1-D runs as 2-D) and onnxruntime's "
      "float32 window-sum order cannot be reproduced with them; needs a canonqnn.avg_pool3d op")),
    (r"qlinearaveragepool_2d_dilations_test$", "gap", UnsupportedError,
     r"dilated average pooling is not supported",
     ("dilations (not a com.microsoft QLinearAveragePool attribute; the corpus has no "
      "input or reference for it, onnxruntime rejects the model)")),
]

NODE_AND_OP = re.compile(r"node '[^']*' \(op [^)]+\)")
CORPUS_COUNTS = {"migraphx": 55, "onnx2c": 13, "onnx_backend": 29, "patched": 23}
ONNX_PACKAGE_COUNT = 45
QDQ_ONLY = {"QuantizeLinear", "DequantizeLinear"}


def refusal(case_id: str):
    matches = [r for r in REFUSED if re.search(r[0], case_id)]
    assert len(matches) <= 1, f"{case_id} matches several REFUSED patterns"
    return matches[0] if matches else None


ALL_IDS = cases.all_case_ids()
IN_SCOPE = [c for c in ALL_IDS if refusal(c) is None]
REFUSED_IDS = [c for c in ALL_IDS if refusal(c) is not None]


# ------------------------------------------------------------------------------------------------
# The pipeline, cached per case (the islands and exactness tests share one build).
# The numerics profile each case's reference was computed with: the other projects' expected
# outputs are exact arithmetic, and no migraphx case multiplies uint8 by a runtime int8 operand,
# the one product whose onnxruntime result depends on the host; a case compared with onnxruntime
# live (ORT_REFERENCE) follows this host's onnxruntime (probed).
def reference_profile(case_id: str) -> str | None:
    return None if case_id in ORT_REFERENCE else "exact"


@functools.cache
def canonical(case_id: str):
    case = cases.get_case(case_id)
    bind, _ = cases.split_inputs(case)
    return canonqnn.canonicalize(load(case.model, bind=bind), numerics=reference_profile(case_id))


@functools.cache
def built(case_id: str):
    return build(canonical(case_id)[0])


def run(case_id: str) -> dict[str, np.ndarray]:
    _, runtime = cases.split_inputs(cases.get_case(case_id))
    return built(case_id).run(runtime)


def assert_bit_exact(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str):
    assert sorted(got) == sorted(want), f"outputs {sorted(got)} vs {what} {sorted(want)}"
    for name, ref in want.items():
        out = got[name]
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), \
            f"{name}: {out.dtype}{list(out.shape)} vs {what} {ref.dtype}{list(ref.shape)}"
        if ref.dtype.kind == "f":  # bitwise, so that -0.0 / NaN payloads count too
            bits = f"u{ref.dtype.itemsize}"
            same = np.array_equal(out.view(bits), ref.view(bits))
        else:
            same = np.array_equal(out, ref)
        if not same:
            bad = np.flatnonzero(out.reshape(-1) != ref.reshape(-1))
            diff = np.abs(out.astype(np.float64) - ref.astype(np.float64)).max()
            pytest.fail(f"{name}: {bad.size}/{ref.size} values differ from {what} (max |diff| "
                        f"{diff}), first at flat index {bad[:5].tolist()}")


def stored_references(case: cases.Case) -> dict[str, dict[str, np.ndarray]]:
    refs = case.refs
    if "ref" in refs:  # onnxruntime default and ORT_DISABLE_ALL (identical in this corpus)
        return {k: v for k, v in refs.items() if k in ("ref", "ref_alt")}
    return refs  # output_pb (onnx2c, onnx backend, onnx package) or ref_onnxref


# ------------------------------------------------------------------------------------------------
def test_corpus_present():
    cases.require_corpus()


def test_case_inventory():
    """The enumeration finds every case, and every table entry still names real cases."""
    counts = {}
    for case_id in ALL_IDS:
        counts[case_id.split("/")[0]] = counts.get(case_id.split("/")[0], 0) + 1
    assert counts.pop("onnx_pkg") == ONNX_PACKAGE_COUNT
    if cases.corpus_available():
        assert counts == CORPUS_COUNTS
        for pattern, *_ in REFUSED:
            assert any(re.search(pattern, c) for c in ALL_IDS), f"stale REFUSED entry {pattern}"
        assert set(ORT_REFERENCE) <= set(IN_SCOPE)


@pytest.mark.parametrize("case_id", IN_SCOPE)
def test_no_float_islands(case_id):
    _, report = canonical(case_id)
    assert not report.float_islands, report.summary()
    if not set(cases.get_case(case_id).op_types) <= QDQ_ONLY:
        assert report.canonical_ops, f"nothing folded into a canonical op:\n{report.summary()}"


@pytest.mark.parametrize("case_id", IN_SCOPE)
def test_bit_exact(case_id):
    case = cases.get_case(case_id)
    got = run(case_id)
    if case_id in ORT_REFERENCE:
        ort = cases.run_onnxruntime(case.model, case.inputs)
        assert_bit_exact(got, ort, "onnxruntime")
        for kind, ref in stored_references(case).items():
            assert any(not np.array_equal(ref[k], ort[k]) for k in ref), \
                f"{kind} now agrees with onnxruntime: remove {case_id} from ORT_REFERENCE"
        return
    refs = stored_references(case)
    assert refs, "no stored reference"
    for kind, ref in refs.items():
        assert_bit_exact(got, ref, kind)


@pytest.mark.parametrize("case_id", REFUSED_IDS)
def test_refused_with_clear_error(case_id):
    _, _, error, message, why = refusal(case_id)
    case = cases.get_case(case_id)
    with pytest.raises(CanonqnnError) as info:  # any other exception propagates: a failure
        bind, runtime = cases.split_inputs(case)
        mod, _ = canonqnn.canonicalize(load(case.model, bind=bind))
        build(mod).run(runtime)
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    text = str(info.value)
    assert NODE_AND_OP.search(text), f"message names no node/op: {text}"
    assert re.search(message, text), f"reason not given ({why}): {text}"


def test_default_domain_contrib_originals():
    """Originals with contrib ops in the default domain: accepted unless their declared output
    type is wrong (3), or a gap (3-D pooling, dilations); the accepted ones run in
    ``test_bit_exact``."""
    cases.require_corpus()
    originals = [c for c in ALL_IDS if c.startswith("migraphx/") and any(
        n.domain == "" and not onnx.defs.has(n.op_type)
        for n in cases.get_case(c).model.graph.node)]
    patched = {c.split("/")[-1] for c in ALL_IDS if c.startswith("patched/migraphx_msdomain/")}
    assert {c.split("/")[-1] for c in originals} == patched
    outcome = {}
    for case_id in originals:
        entry = refusal(case_id)
        outcome.setdefault("accepted" if entry is None else entry[1], []).append(case_id)
    assert len(outcome["accepted"]) == 15
    assert len(outcome["invalid"]) == 3
    assert len(outcome["gap"]) + len(outcome.get("out of scope", [])) == 2


# ------------------------------------------------------------------------------------------------
# The binding policy and opset limit, on small variations of package cases.
def _package_case(name: str) -> cases.Case:
    return cases.get_case(f"onnx_pkg/{name}")


def test_runtime_scale_must_be_bound():
    case = _package_case("test_qlinearmatmul_2D_uint8_float32")
    with pytest.raises(UnsupportedError, match=r"\(op QLinearMatMul\): A scale must be a "
                                                r"constant"):
        load(case.model)


def test_runtime_qgemm_bias_must_be_bound():
    cases.require_corpus()
    case = cases.get_case("onnx2c/test_qgemm_uint8_scalar_bias")
    bind, _ = cases.split_inputs(case)
    bind.pop("C")
    with pytest.raises(UnsupportedError, match=r"\(op QGemm\): bias must be a constant"):
        load(case.model, bind=bind)


def test_opset_beyond_importer_is_refused():
    model = copy.deepcopy(_package_case("test_quantizelinear").model)
    model.opset_import[0].version = 29
    bind, _ = cases.split_inputs(_package_case("test_quantizelinear"))
    with pytest.raises(UnsupportedError, match=r"opset 29 is not supported .*10-28"):
        load(model, bind=bind)
