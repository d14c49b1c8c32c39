"""One network from three formats, one partition: the patterns see only the canonical form.

``_three_formats`` writes the same MobileNet-style network (NHWC int8 input, transpose, conv
3x3/2 + ReLU6, depthwise 3x3 + ReLU6, pointwise, residual add, pointwise + sigmoid, global
average pool, flatten, fully connected) as ONNX QDQ, ONNX QOperator and TFLite, with the same
weights and quantization parameters. After canonicalization the registered ``canonqnn``
patterns, and a backend's restricted set, claim the same ops in the same order from all three,
with the same parameters: only the rounding differs (``rne_f32`` for ONNX, ``q31_double`` for
TFLite). Each model is bit-exact with its own runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

import _three_formats as net
import canonqnn
from canonqnn import patterns
from canonqnn.frontends.tflite import runtime as tflite_runtime

FORMATS = tuple(net.FORMATS)
# TFLite: the rounding of the interpreter's default configuration on this host (its probe)
ROUNDING = {"onnx_qdq": "rne_f32", "onnx_qoperator": "rne_f32",
            "tflite": tflite_runtime.profile().rounding}
OPS = ("transpose", "conv2d", "conv2d", "conv2d", "add", "conv2d", "lut", "global_avg_pool2d",
       "reshape", "matmul")
NPU_OPS = ["conv2d", "conv2d_lut", "matmul", "add"]


@pytest.fixture(scope="module")
def canonical():
    """``format -> (canonical module, report)``."""
    return {name: canonqnn.canonicalize(canonqnn.load(write()))
            for name, write in net.FORMATS.items()}


def _regions(mod, pattern_set=None, merge=False):
    return patterns.describe(patterns.partition(mod, pattern_set, merge=merge)).regions


def _same_for_all(per_format: dict):
    """The value every format gives; fails naming the first item where one differs."""
    first = per_format[FORMATS[0]]
    for name in FORMATS[1:]:
        other = per_format[name]
        if other == first:
            continue
        if isinstance(first, (list, tuple)) and isinstance(other, (list, tuple)):
            at = next((i for i, (a, b) in enumerate(zip(first, other)) if a != b),
                      min(len(first), len(other)))
            item = lambda seq, at=at: seq[at] if at < len(seq) else "(missing)"  # noqa: E731
            pytest.fail(f"{name} differs from {FORMATS[0]} at item {at}: {item(other)} != "
                        f"{item(first)}")
        pytest.fail(f"{name} differs from {FORMATS[0]}: {other} != {first}")
    return first


def test_the_three_formats_canonicalize_without_float_islands(canonical):
    for name, (_, report) in canonical.items():
        assert report.float_islands == [], (name, report.summary())


def test_the_three_formats_canonicalize_to_the_same_op_sequence(canonical):
    sequences = {name: tuple(op.removeprefix("canonqnn.")
                             for r in patterns.describe(mod).regions for op in r.ops)
                 for name, (mod, _) in canonical.items()}
    assert _same_for_all(sequences) == OPS


def test_registered_patterns_claim_the_same_regions_in_the_same_order(canonical):
    unmerged = _same_for_all({name: _regions(mod) for name, (mod, _) in canonical.items()})
    # one composite per canonical op, with the sigmoid in the last convolution's epilogue
    assert [(r.backend, r.composites) for r in unmerged] == [
        ("canonqnn", ("canonqnn.transpose",)), ("canonqnn", ("canonqnn.conv2d",)),
        ("canonqnn", ("canonqnn.conv2d",)), ("canonqnn", ("canonqnn.conv2d",)),
        ("canonqnn", ("canonqnn.add",)), ("canonqnn", ("canonqnn.conv2d_lut",)),
        ("canonqnn", ("canonqnn.global_avg_pool2d",)), ("canonqnn", ("canonqnn.reshape",)),
        ("canonqnn", ("canonqnn.matmul",))]
    assert unmerged[5].ops == ("canonqnn.conv2d", "canonqnn.lut")

    merged = _same_for_all({name: _regions(mod, merge=True)
                            for name, (mod, _) in canonical.items()})
    assert len(merged) == 1 and merged[0].backend == "canonqnn"
    assert merged[0].composites == tuple(c for r in unmerged for c in r.composites)
    assert merged[0].ops == tuple("canonqnn." + op for op in OPS)


def test_a_restricted_backend_claims_the_same_ops_from_each_format(canonical):
    npu = patterns.fusion_patterns("npu", ops=NPU_OPS)
    for merge in (False, True):
        partitions = {name: patterns.describe(patterns.partition(mod, npu, merge=merge))
                      for name, (mod, _) in canonical.items()}
        regions = _same_for_all({name: p.regions for name, p in partitions.items()})
        counts = _same_for_all({name: p.counts() for name, p in partitions.items()})
        assert counts["offloaded"] == 7 and counts["host_canonical"] == 3
        assert counts["host_other"] == 0
        assert counts["backend_functions"] == (2 if merge else 6)
        host = [r.ops for r in regions if not r.offloaded]
        assert host == [("canonqnn.transpose",), ("canonqnn.global_avg_pool2d",),
                        ("canonqnn.reshape",)]
        offloaded = [r.composites for r in regions if r.offloaded]
        backbone = ("npu.conv2d", "npu.conv2d", "npu.conv2d", "npu.add", "npu.conv2d_lut")
        assert offloaded == ([backbone, ("npu.matmul",)] if merge else
                             [(c,) for c in backbone] + [("npu.matmul",)])


def _recorded_params(mod) -> list[patterns.OpParams]:
    """The ``OpParams`` every match of the full pattern set hands to a check, in call order."""
    seen: list[patterns.OpParams] = []

    def record(params: patterns.OpParams) -> bool:
        seen.append(params)
        return True

    patterns.partition(mod, patterns.fusion_patterns("npu", check=record), merge=False)
    return seen


def _comparable(p: patterns.OpParams | None):
    """Everything a check can read, except the rounding; arrays as (dtype, shape, values)."""
    if p is None:
        return None

    def array(a):
        a = np.asarray(a)
        return str(a.dtype), a.shape, a.tolist()

    weight = None if p.weight is None else (array(p.weight.scale), array(p.weight.zero_point),
                                            p.weight.per_channel)
    attrs = {k: v for k, v in p.attrs.items() if k != "rounding"}
    return dict(op=p.op, inputs=p.inputs, output=p.output, weight=weight, clamp=p.clamp,
                layout=p.layout, weight_layout=p.weight_layout, input_shapes=p.input_shapes,
                output_shape=p.output_shape, output_dtype=p.output_dtype, attrs=attrs,
                constants={k: array(v) for k, v in p.constants.items()},
                epilogue=_comparable(p.epilogue))


def test_matched_parameters_agree_across_formats_except_the_rounding(canonical):
    recorded = {name: _recorded_params(mod) for name, (mod, _) in canonical.items()}
    for name, params in recorded.items():
        roundings = {p.rounding for p in params} - {None}
        assert roundings == {ROUNDING[name]}, name
    _same_for_all({name: [p.op for p in params] for name, params in recorded.items()})
    comparable = _same_for_all({name: [_comparable(p) for p in params]
                                for name, params in recorded.items()})
    assert sorted(c["op"] for c in comparable) == sorted(
        ["transpose", "conv2d", "conv2d", "conv2d", "add", "conv2d", "global_avg_pool2d",
         "reshape", "matmul"])
    relu6 = [c for c in comparable if c["op"] == "conv2d"
             and c["output"] == patterns.Quant(*net.RELU6)]
    assert len(relu6) == 2 and all(c["clamp"] == (-128, 127) for c in relu6)
    sigmoid = next(c["epilogue"] for c in comparable if c["epilogue"] is not None)
    assert sigmoid["attrs"]["function"] == "sigmoid"


@pytest.mark.parametrize("name", FORMATS)
def test_each_format_is_bit_exact_with_its_runtime(name):
    result = canonqnn.parity(net.FORMATS[name](), runs=2)
    assert result.exact, result.summary()
