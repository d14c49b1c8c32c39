"""Rules of rewrites/indexing.py on hand-written fake-quant modules: what folds into which
canonical op (with which attributes), and what declines with which reason. Numbers against
onnxruntime are in tests/frontends/onnx/test_indexing.py."""

from __future__ import annotations

import numpy as np
import pytest

from _canonical import canonical_calls
from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.qparams import QParams
from canonqnn.rewrites import DEFAULT_PHASES, Phase, canonicalize, indexing
from canonqnn.rewrites.indexing import block_layout, relax_slice_begin

IN = QParams.make(0.05, 3)
OUT = QParams.make(0.037, -4)
SHAPE = (2, 8, 4, 6)
# Only these rules: a later phase's rule may replace a decline reason in the report.
INDEXING_ONLY = (Phase("indexing", indexing.RULES),)


def fake_quant(body, in_qp=IN, out_qp=OUT, shape=SHAPE, extra=(), phases=DEFAULT_PHASES):
    """main(x int8[, extra...]) = q(body(dq(x), extra...)); returns the canonicalized module
    and its report."""
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    params = [x, *(relax.Var(n, _tvm.tensor_type(s, d)) for n, s, d in extra)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            real = bb.emit(qdq.dequantize(x, in_qp))
            y = body(bb, real, *params[1:])
            out = bb.emit_output(bb.emit(qdq.quantize(y, out_qp)))
        bb.emit_func_output(out)
    return canonicalize(bb.get(), phases)


def names(mod) -> list[str]:
    return [name for name, _, _ in canonical_calls(mod)]


def island_reasons(report) -> list[str]:
    return [i.reason for i in report.float_islands]


# ---------------------------------------------------------------- pad
def padded(value, mode="constant", widths=(0, 0, 1, 2, 0, 1, 3, 0)):
    return lambda bb, x: bb.emit(relax.op.nn.pad(x, list(widths), mode, value))


def test_pad_with_the_input_parameters_pads_with_the_quantized_value():
    mod, report = fake_quant(padded(0.3), out_qp=IN)
    ((name, a, _),) = canonical_calls(mod)
    assert name == "pad" and not report.float_islands
    assert a["pad_value"] == 6 + 3  # RNE(0.3 / 0.05) + zp
    assert (a["pad_before"], a["pad_after"], a["mode"]) == ([0, 1, 0, 3], [0, 2, 1, 0],
                                                          "constant")
    assert (a["scale"], a["zp"]) == (IN.scalar_scale, IN.scalar_zp)


def test_pad_with_other_output_parameters_requantizes_then_pads_in_the_output_params():
    mod, _ = fake_quant(padded(0.3))
    (req, _, _), (pad, a, call) = canonical_calls(mod)
    assert (req, pad) == ("requantize", "pad")
    assert a["pad_value"] == round(0.3 / np.float32(0.037)) - 4
    assert (a["scale"], a["zp"]) == (OUT.scalar_scale, OUT.scalar_zp)


@pytest.mark.parametrize("value,expected", [(2.5 * 2.0 ** -4, 2 - 4), (3.5 * 2.0 ** -4, 4 - 4),
                                            (100.0, 127), (-np.inf, -128)],
                         ids=["tie_down_to_even", "tie_up_to_even", "saturates", "minus_inf"])
def test_pad_value_is_quantized_as_quantize_linear(value, expected):
    mod, _ = fake_quant(padded(value), out_qp=QParams.make(2.0 ** -4, -4))
    assert canonical_calls(mod)[-1][1]["pad_value"] == expected


def test_relu_after_pad_clamps_the_pad_value_too():
    mod, _ = fake_quant(lambda bb, x: bb.emit(relax.op.nn.relu(padded(-1.0)(bb, x))))
    (req, r, _), (pad, a, _) = canonical_calls(mod)
    assert (r["act_min"], r["act_max"]) == (-4, 127)
    assert a["pad_value"] == -4  # Q_out(relu(-1.0)) = Q_out(0) = zp


@pytest.mark.parametrize("mode,canonical", [("reflect", "reflect"), ("replicate", "edge"),
                                            ("circular", "wrap")])
def test_value_copying_pad_modes_fold(mode, canonical):
    mod, _ = fake_quant(padded(0.0, mode), out_qp=IN)
    assert [(n, a["mode"]) for n, a, _ in canonical_calls(mod)] == [("pad", canonical)]


def test_reflect_padding_wider_than_the_axis_declines():
    mod, report = fake_quant(padded(0.0, "reflect", widths=(0, 0, 0, 0, 4, 0, 0, 0)),
                             phases=INDEXING_ONLY)
    assert not canonical_calls(mod)
    assert any("reflect padding wider than the axis allows" in r for r in island_reasons(report))


def test_nan_pad_value_declines_with_reason():
    mod, report = fake_quant(padded(float("nan")), phases=INDEXING_ONLY)
    assert not canonical_calls(mod)
    assert any("pad value is NaN" in r for r in island_reasons(report))


def test_pad_of_a_cropped_input_folds_both():
    """The ONNX importer writes negative pads as a strided_slice before the pad."""
    def body(bb, x):
        cropped = bb.emit(relax.op.strided_slice(x, [1], [1], [8]))
        return padded(0.0, widths=(0, 0, 0, 2, 0, 0, 0, 0))(bb, cropped)

    mod, report = fake_quant(body, out_qp=IN)
    assert names(mod) == ["strided_slice", "pad"] and not report.float_islands


# ---------------------------------------------------------------- gather
def taken(indices, axis=1, mode="wrap"):
    return lambda bb, x: bb.emit(relax.op.take(x, _tvm.const(np.array(indices), "int64"),
                                               axis=axis, mode=mode))


@pytest.mark.parametrize("mode,raw,normalized", [("wrap", [-1, 0, -8, 3], [7, 0, 0, 3]),
                                                 ("clip", [-1, 9, 3], [0, 7, 3]),
                                                 ("fast", [7, 0], [7, 0])])
def test_constant_gather_indices_are_normalized_as_take_reads_them(mode, raw, normalized):
    mod, _ = fake_quant(taken(raw, mode=mode), out_qp=IN)
    ((name, a, call),) = canonical_calls(mod)
    assert name == "gather" and a["axis"] == 1
    assert _tvm.const_value(call.args[1]).tolist() == normalized


def test_gather_with_out_of_range_index_in_fast_mode_declines():
    mod, report = fake_quant(taken([8], mode="fast"), phases=INDEXING_ONLY)
    assert not canonical_calls(mod)
    assert any("index out of range [0, 8)" in r for r in island_reasons(report))


def test_gather_with_runtime_indices_keeps_them_and_requantizes():
    body = lambda bb, x, idx: bb.emit(relax.op.take(x, idx, axis=3, mode="wrap"))  # noqa: E731
    mod, _ = fake_quant(body, extra=[("idx", (5,), "int64")])
    (gather, _, call), (req, _, _) = canonical_calls(mod)
    assert (gather, req) == ("gather", "requantize")
    assert isinstance(call.args[1], relax.Var)


# ---------------------------------------------------------------- strided_slice
@pytest.mark.parametrize("begin,dim,stride,first", [(-1, 8, -2, 7), (100, 8, -1, 7),
                                                    (-100, 8, 1, 0), (3, 8, 2, 3),
                                                    (8, 8, 1, 8)])
def test_relax_slice_begin_canonicalization(begin, dim, stride, first):
    assert relax_slice_begin(begin, dim, stride) == first


def test_negative_step_slice_folds_with_begin_and_size_per_axis():
    def body(bb, x):  # x[:, 7::-2, 1:3, ::-1] as Relax writes it (end -(dim+1): to the start)
        return bb.emit(relax.op.strided_slice(x, [1, 2, 3], [-1, 1, 5], [-9, 3, -7],
                                              [-2, 1, -1]))

    mod, _ = fake_quant(body, out_qp=IN)
    ((name, a, _),) = canonical_calls(mod)
    assert name == "strided_slice"
    assert (a["axes"], a["begin"], a["strides"], a["sizes"]) == (
        [1, 2, 3], [7, 1, 5], [-2, 1, -1], [4, 2, 6])


# ---------------------------------------------------------------- tile / broadcast_to
def test_tile_and_broadcast_to_fold_and_requantize():
    mod, _ = fake_quant(lambda bb, x: bb.emit(relax.op.tile(x, [1, 2, 1, 3])))
    assert names(mod) == ["tile", "requantize"]
    assert canonical_calls(mod)[0][1]["repeats"] == [1, 2, 1, 3]
    mod, _ = fake_quant(lambda bb, x: bb.emit(relax.op.broadcast_to(x, (3, *SHAPE))),
                        out_qp=IN)
    assert [(n, a["shape"]) for n, a, _ in canonical_calls(mod)] == [("broadcast_to",
                                                                      [3, *SHAPE])]


def test_data_movement_whose_float_result_is_reused_declines():
    x = relax.Var("x", _tvm.tensor_type(SHAPE, "int8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            real = bb.emit(qdq.dequantize(x, IN))
            tiled = bb.emit(relax.op.tile(real, [1, 2, 1, 1]))
            q1 = bb.emit(qdq.quantize(tiled, IN))
            out = bb.emit_output(relax.Tuple([q1, bb.emit(relax.op.exp(tiled))]))
        bb.emit_func_output(out)
    mod, report = canonicalize(bb.get(), INDEXING_ONLY)
    assert "tile" not in names(mod)
    assert any("other users" in r for r in island_reasons(report))


# ---------------------------------------------------------------- depth_to_space / space_to_depth
@pytest.mark.parametrize("split,perm,out,expected", [
    ((2, 2, 2, 2, 4, 6), (0, 3, 4, 1, 5, 2), (2, 2, 8, 12), ("DCR", 2)),
    ((2, 2, 2, 2, 4, 6), (0, 1, 4, 2, 5, 3), (2, 2, 8, 12), ("CRD", 2)),
    ((2, 8, 2, 2, 3, 2), (0, 3, 5, 1, 2, 4), (2, 32, 2, 3), ("S2D", 2)),
    ((2, 2, 2, 2, 4, 6), (0, 3, 4, 1, 2, 5), (2, 2, 8, 12), None),  # another permutation
    ((2, 2, 2, 2, 4, 6), (0, 3, 4, 1, 5, 2), (2, 2, 12, 8), None),  # another merge
])
def test_block_layout_recognizes_exactly_the_onnx_layouts(split, perm, out, expected):
    assert block_layout(SHAPE, split, perm, out) == expected


@pytest.mark.parametrize("split,perm,out,op", [
    ((2, 2, 2, 2, 4, 6), (0, 1, 4, 2, 5, 3), (2, 2, 8, 12), "depth_to_space"),
    ((2, 8, 2, 2, 3, 2), (0, 3, 5, 1, 2, 4), (2, 32, 2, 3), "space_to_depth"),
])
def test_reshape_permute_reshape_chain_folds_to_block_op(split, perm, out, op):
    def body(bb, x):
        moved = bb.emit(relax.op.permute_dims(bb.emit(relax.op.reshape(x, split)), perm))
        return bb.emit(relax.op.reshape(moved, out))

    mod, report = fake_quant(body)
    assert names(mod) == [op, "requantize"] and not report.float_islands
    assert canonical_calls(mod)[0][1]["block_size"] == 2
