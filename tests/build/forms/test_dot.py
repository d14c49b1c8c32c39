"""The packed int8 forms (``canonqnn.build.forms``) compute exactly what the plain loop nest does:
conv2d with output pixels or output channels in lanes, depthwise conv, matmul with a constant
``b``, for every dot-product ISA.

The host's own ISA runs tensorized; the others are legalized with ``isa.emulating`` and run
untensorized, so their layouts, shifts and bias corrections (AArch64's included) are checked
on any x86 host (only the instruction itself is not: ``tests/build/test_dot_kernels.py``
checks it is emitted). Every result is compared with the op's numpy reference, bit for bit; the
plain path's agreement with onnxruntime is ``tests/ops/test_conv.py``'s and
``tests/ops/test_matmul.py``'s.
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import canonqnn
from _ort import MultiOp, SingleOp
from canonqnn import _tvm
from canonqnn.build import builder, schedule, targets
from canonqnn.build import isa as dot_isa
from canonqnn.build.forms import dot
from canonqnn.ops import conv, conv_transpose, elementwise, lut, matmul, reference
from canonqnn.qparams import QParams

HOST_ISA = dot.host_isa()
OTHER_ISAS = [isa.name for isa in dot_isa.ISAS if isa is not HOST_ISA]


def _conv_op(rng, x_shape, o, k, **options):
    return SingleOp(_conv_call(rng, x_shape, o, k, **options), {"x": x_shape})


def _conv_call(rng, x_shape, o, k, *, stride=1, dilation=1, pad=None, groups=1, w_zp=0,
               x_zp=3, out_dtype="int8"):
    """``x -> canonqnn.conv2d`` with random weights and bias."""
    c = x_shape[1]
    pad = k // 2 if pad is None else pad
    w = rng.integers(-128, 128, (o, c // groups, k, k)).astype(np.int8)
    if w_zp:  # asymmetric weights as uint8 sources give them, w - w_zp inside int8
        w = np.clip(w.astype(np.int32), -128 + w_zp, 127).astype(np.int8)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    raw = out_dtype == "int32"  # the accumulator itself: every multiplier exactly 1
    w_qp = QParams.make(np.ones(o, np.float32) if raw else rng.uniform(0.002, 0.02, o).astype(
        np.float32), np.full(o, w_zp, np.int8), axis=0)
    out_qp = QParams.make(1.0, 0, dtype="int32") if raw else QParams.make(0.9, -7)
    return lambda x: conv.conv2d(
        x, _tvm.const(w, "int8"), bias, QParams.make(1.0 if raw else 0.05, x_zp), w_qp, out_qp,
        strides=(stride, stride), padding=(pad,) * 4 if isinstance(pad, int) else pad,
        dilation=(dilation, dilation),
        groups=groups)


def _matmul_op(rng, a_shape, n, *, a_zp=-4):
    k = a_shape[-1]
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    b_qp = QParams.make(rng.uniform(0.002, 0.02, n).astype(np.float32), np.zeros(n, np.int8),
                        axis=0)
    return SingleOp(lambda a: matmul.matmul(a, _tvm.const(b, "int8"), bias,
                                            QParams.make(0.05, a_zp), b_qp,
                                            QParams.make(0.7, 2)), {"a": a_shape})


def _assert_exact(op: SingleOp, name: str, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    feeds = {arg.name: rng.integers(-128, 128, arg.shape).astype(np.int8)
             for arg in op.built.io.inputs}
    reference, got = op.both(**feeds)
    np.testing.assert_array_equal(got, reference, err_msg=name)


def _runtime_b_op(rng, a_shape, b_shape, *, b_zp=(0,)):
    """``a @ b`` with both operands run-time values (attention's ``QK^T``, ``PV``)."""
    n = b_shape[-1]
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    zp = np.broadcast_to(np.asarray(b_zp, np.int8), (n,)) if len(b_zp) > 1 else np.int8(b_zp[0])
    b_qp = QParams.make(np.float32(0.01), zp) if np.ndim(zp) == 0 else \
        QParams.make(np.full(n, 0.01, np.float32), zp, axis=0)
    return SingleOp(lambda a, b: matmul.matmul(a, b, bias, QParams.make(0.05, -3), b_qp,
                                               QParams.make(0.6, 1)),
                    {"a": a_shape, "b": b_shape})


CONVS = {  # name: (x shape, out channels, kernel, options)
    "3x3_rows": ((1, 5, 9, 16), 12, 3, {}),
    # rows of several vectors at stride 1: the padding is written by the pack itself
    "3x3_wide_rows": ((1, 6, 5, 30), 8, 3, {}),
    # the padded plane flattened (rows of 28 in 30, not 32): channels past the last padded
    "3x3_flat": ((1, 6, 16, 28), 16, 3, dict(x_zp=-9)),
    "3x3_flat_accumulator_batch_of_two": ((2, 8, 16, 28), 16, 3, dict(out_dtype="int32")),
    # rows of 56 in 60 (padding top, left, bottom, right), 17 of them in whole tiles
    "5x5_flat_asymmetric_padding": ((1, 4, 17, 57), 8, 5, dict(pad=(2, 2, 2, 1), w_zp=3)),
    "3x3_channel_lanes": ((1, 16, 7, 7), 20, 3, {}),
    "short_rows_odd_channels": ((1, 8, 5, 5), 20, 3, {}),
    "1x1": ((1, 24, 8, 8), 16, 1, {}),
    # the plane as one row on 16 lanes: 120 outputs, 8 vectors, the last half idle
    "1x1_plane": ((1, 24, 12, 10), 16, 1, dict(x_zp=-9)),
    "1x1_plane_accumulator": ((1, 8, 12, 10), 16, 1, dict(out_dtype="int32")),
    "1x1_plane_batch_of_two": ((2, 5, 12, 10), 32, 1, {}),
    # 192 outputs: three tiles of 4 vectors, run outermost, each core packing its pixels
    "1x1_plane_whole_tiles": ((2, 8, 16, 12), 16, 1, {}),
    "strided_dilated": ((1, 6, 19, 21), 8, 3, dict(stride=2, dilation=2, pad=2)),
    # subsampled, then the pointwise forms at stride 1 (odd sizes: the last row and column)
    "1x1_stride2": ((1, 24, 13, 15), 32, 1, dict(stride=2, pad=0)),
    "1x1_stride3_batch_of_two": ((2, 8, 10, 16), 16, 1, dict(stride=3, pad=0)),
    "7x7_stride2": ((1, 3, 20, 20), 8, 7, dict(stride=2)),
    # a stem's input unfolded along its columns (3 x 7 values a row, padded once), its
    # padding a real zero; the unfolded conv takes the rows (32 outputs a row)
    "7x7_stem_unfolded_rows": ((1, 3, 9, 64), 16, 7, dict(stride=2, x_zp=-20)),
    "5x5_unfolded_stride1_asymmetric": ((2, 3, 8, 16), 8, 5, dict(pad=(1, 2, 3, 0), x_zp=7)),
    "asymmetric_weights": ((1, 7, 8, 8), 9, 3, dict(w_zp=5, x_zp=-20)),
    "accumulator": ((1, 5, 8, 8), 6, 3, dict(out_dtype="int32")),
    "batch_of_two": ((2, 5, 6, 16), 12, 3, dict(pad=0)),
    "depthwise": ((1, 12, 10, 16), 12, 3, dict(groups=12)),
    "depthwise_batch_of_two": ((2, 8, 6, 8), 8, 3, dict(groups=8)),
    "depthwise_strided_5x5": ((1, 8, 15, 17), 8, 5, dict(groups=8, stride=2, w_zp=3)),
    # every other pack row read (stride 2 divides 2 x dilation), and every row (stride 3)
    "depthwise_strided_dilated": ((1, 8, 17, 18), 8, 3, dict(groups=8, stride=2, dilation=2,
                                                            pad=2)),
    "depthwise_stride_3": ((1, 8, 13, 20), 8, 3, dict(groups=8, stride=3)),
    "grouped_rows": ((1, 12, 6, 16), 18, 3, dict(groups=3, x_zp=-5)),
    "grouped_odd_channels": ((1, 15, 5, 16), 10, 3, dict(groups=5, w_zp=2)),
    "grouped_channel_lanes": ((1, 32, 5, 5), 32, 3, dict(groups=2)),
    "grouped_short_rows": ((1, 8, 5, 5), 12, 3, dict(groups=2)),  # plain: 6 per group
    "channel_multiplier": ((1, 4, 6, 16), 8, 3, dict(groups=4, stride=2)),
}
MATMULS = {
    "dense": ((1, 40), 24),
    "rows_not_whole_tiles": ((7, 33), 19),
    "batched": ((2, 3, 5, 16), 10),
}


@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_forms_match_the_reference_on_the_host_isa(case):
    x_shape, o, k, options = CONVS[case]
    _assert_exact(_conv_op(np.random.default_rng(0), x_shape, o, k, **options), case)


def _plans(mod, kernel: str) -> list[str]:
    """The packed forms (``dot_isa.BLOCK_PLANS``) the legalization picks for the kernels whose
    name holds ``kernel`` (fused, not compiled)."""
    return [key for name, func in _tvm.module_functions(builder.fuse(mod)).items()
            if kernel in name for annotations in schedule.root_block_annotations(func)
            for key in annotations if key in dot_isa.BLOCK_PLANS]


def _conv_plans(x_shape, o, k, options) -> list[str]:
    """The packed forms the legalization picks for a conv."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(x_shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(_conv_call(np.random.default_rng(0), x_shape, o, k,
                                                    **options)(x)))
        bb.emit_func_output(out)
    return _plans(bb.get(), "conv2d")


@pytest.mark.parametrize("isa", [isa.name for isa in dot_isa.ISAS])
def test_every_conv_takes_the_packed_form_its_shape_allows(isa):
    # depthwise its own; rows where the output row fills the vectors (on 16 registers, where
    # output channels in lanes can run: only without taps and in whole vectors, or with fewer
    # than 32 input channels); else output channels in lanes, for grouped convs only where a
    # group's output channels fill whole vectors
    lanes = dot_isa.isa_named(isa).lanes
    for case, (x_shape, o, k, options) in CONVS.items():
        groups, stride = options.get("groups", 1), options.get("stride", 1)
        dilation, pad = options.get("dilation", 1), options.get("pad", k // 2)
        pads = (pad,) * 4 if isinstance(pad, int) else pad
        width = (x_shape[3] + pads[1] + pads[3] - dilation * (k - 1) - 1) // stride + 1
        # a strided one runs at stride 1 on the pixels it reads
        pointwise = k == 1 and groups == 1 and not any(pads)
        plane = [(d - 1) // stride + 1 for d in x_shape[2:]]
        channels = groups == 1 or (o // groups) % lanes == 0
        pixels = not (channels and dot.channels_in_lanes_first(dot_isa.isa_named(isa), width,
                                                                k * k, x_shape[1] // groups))
        if groups == x_shape[1] == o:
            expected = [dot_isa.DEPTHWISE]
        elif ((pointwise and dot.plane_as_row(plane, o, dot_isa.isa_named(isa)))
              or (pixels and dot.rows_fit(width, dot_isa.isa_named(isa), k * k))):
            expected = [dot_isa.ROWS]
        else:
            expected = [dot_isa.ANNOTATION] if channels else []
        with dot_isa.emulating(isa):
            assert _conv_plans(x_shape, o, k, options) == expected, case


def test_row_form_loop_order_reads_less_again_from_the_caches():
    vnni = dot_isa.isa_named("avx512_vnni")
    # 1x1, 512 channels at 14x14: weights once per row tile (7 x 512) against the input
    # plane once per channel block (64 x 14 x 16)
    tile = dot.row_tile(vnni, 512, 14, 14)
    assert dot.rows_outer(tile, 512, 14, 1, 14 * 16) == 1
    # 3x3, 256 channels at 14x14 (ResNet-18): 7 x 256 x 9 against 32 x 16 x 18
    tile = dot.row_tile(vnni, 256, 14, 14)
    assert dot.rows_outer(tile, 256, 14, 9, 16 * 18) == 0


def _row_plan(case: str, isa: str, key: str) -> list[int]:
    """``key`` of the row-form plan (0 where it is absent) of each kernel of ``CONVS[case]``
    that takes a row form on ``isa``."""
    x_shape, o, k, options = CONVS[case]
    with dot_isa.emulating(isa):
        fused = builder.fuse(_conv_op(np.random.default_rng(0), x_shape, o, k, **options).mod)
    return [int(annotations[dot_isa.ROWS].get(key, 0))
            for name, func in _tvm.module_functions(fused).items() if "conv2d" in name
            for annotations in schedule.root_block_annotations(func)
            if dot_isa.ROWS in annotations]


def test_pointwise_convs_run_their_plane_as_one_row_where_rows_would_idle_lanes():
    def planes(case, isa):
        return _row_plan(case, isa, "plane")

    vnni = dot_isa.isa_named("avx512_vnni")
    for case in ("1x1_plane", "1x1_plane_accumulator", "1x1_plane_batch_of_two",
                 "1x1_plane_whole_tiles"):
        assert planes(case, "avx512_vnni") == [1], case
    # on 8 lanes 120 outputs are 15 vectors, a tile of one: taken on 16 registers (AVX2),
    # where none of the lanes idles
    assert planes("1x1_plane", "avx2") == [1]
    assert planes("3x3_wide_rows", "avx512_vnni") == [0]  # not pointwise
    # MobileNet-V1's 56x56 and 7x7 planes take it; 112-wide rows are whole vectors already,
    # and a 14x14 plane (13 vectors) would load once an instruction
    assert dot.plane_as_row((56, 56), 128, vnni)
    assert dot.plane_as_row((7, 7), 1024, vnni)  # 49 outputs in 64 lanes: 15 idle
    assert not dot.plane_as_row((3, 3), 256, vnni)  # 7 of 16 idle
    assert not dot.plane_as_row((112, 112), 64, vnni)
    assert not dot.plane_as_row((14, 14), 512, vnni)


def test_16_register_isas_put_output_channels_in_lanes_for_taps_and_rows_that_idle_lanes():
    # the AVX2 choices measured on ResNet-18 and MobileNet's convs (dot.channels_in_lanes_first)
    avx2, vnni = dot_isa.isa_named("avx2"), dot_isa.isa_named("avx512_vnni")
    for width, taps in ((56, 9), (28, 9), (14, 9), (7, 9), (7, 1), (14, 1)):
        assert dot.channels_in_lanes_first(avx2, width, taps, 64), (width, taps)
        assert not dot.channels_in_lanes_first(vnni, width, taps, 64), (width, taps)
    for width in (56, 112):  # rows of whole vectors
        assert not dot.channels_in_lanes_first(avx2, width, 1, 64)
    for channels in (3, 9, 21):  # an image's first layer, as it is and unfolded (3x3, 7x7)
        assert not dot.channels_in_lanes_first(avx2, 112, 3, channels)
    # a 14x14 plane as one row: 196 outputs in 25 vectors, on a tile of one; not a 7x7 one
    assert dot.plane_as_row((14, 14), 512, avx2) and not dot.plane_as_row((7, 7), 1024, avx2)
    with dot_isa.emulating("avx2"):
        assert _conv_plans((1, 32, 12, 16), 16, 3, {}) == [dot_isa.ANNOTATION]  # 16-wide rows
        assert _conv_plans((1, 32, 7, 7), 16, 1, {}) == [dot_isa.ANNOTATION]
        assert _conv_plans((1, 32, 16, 16), 16, 1, {}) == [dot_isa.ROWS]
        assert _conv_plans((1, 8, 12, 16), 16, 3, {}) == [dot_isa.ROWS]  # few input channels
        # grouped with 6 output channels a group: no whole vectors of them, so the rows
        assert _conv_plans((1, 12, 6, 16), 18, 3, dict(groups=3)) == [dot_isa.ROWS]


def test_stride_1_convs_run_the_padded_plane_flattened_where_rows_would_idle_lanes():
    def flat(case, isa):
        return _row_plan(case, isa, "flat")

    assert flat("3x3_flat", "avx512_vnni") == [30]
    assert flat("5x5_flat_asymmetric_padding", "avx512_vnni") == [60]
    assert flat("3x3_rows", "avx512_vnni") == [0]  # rows of 16: whole vectors
    vnni, avx2 = dot_isa.isa_named("avx512_vnni"), dot_isa.isa_named("avx2")
    # ResNet-18's 56x56 and 28x28 convs (96 and 91 % of the lanes, rows 87.5 %); not its
    # 14x14 ones (rows of 14 in 16 either way) nor its 7x7 ones (channels in lanes), nor
    # 56-wide rows on 8 lanes (whole vectors), nor strided or pointwise convs
    assert dot.flat_tile((56, 56), (3, 3), (1, 1, 1, 1), 64, vnni) is not None
    assert dot.flat_tile((28, 28), (3, 3), (1, 1, 1, 1), 128, vnni) is not None
    assert dot.flat_tile((14, 14), (3, 3), (1, 1, 1, 1), 256, vnni) is None
    assert dot.flat_tile((7, 7), (3, 3), (1, 1, 1, 1), 512, vnni) is None
    assert dot.flat_tile((56, 56), (3, 3), (1, 1, 1, 1), 64, avx2) is None
    assert dot.flat_tile((56, 56), (1, 1), (0, 0, 0, 0), 64, vnni) is None
    assert flat("3x3_wide_rows", "avx512_vnni") == [0]  # 5 rows of 30 in 32: no fewer idle


def test_few_channel_wide_kernels_unfold_their_input_columns_where_that_pads_less():
    def unfolded(x_shape, o, k, **options):
        bb = relax.BlockBuilder()
        x = relax.Var("x", _tvm.tensor_type(x_shape, "int8"))
        with dot_isa.emulating("avx512_vnni"), bb.function("main", [x]):
            with bb.dataflow():
                out = bb.emit_output(bb.emit(_conv_call(np.random.default_rng(0), x_shape, o,
                                                        k, **options)(x)))
            bb.emit_func_output(out)
            fused = builder.fuse(bb.get())
        return sorted(name for name in _tvm.module_functions(fused) if "unfold" in name)

    # ResNet's stem: 3 channels x 7 taps padded to 24 values a row, not 7 x 4
    assert unfolded((1, 3, 9, 64), 16, 7, stride=2) == ["canonqnn_unfold_columns"]
    assert unfolded((1, 3, 9, 64), 16, 3, stride=2) == []  # 9 to 12, as 3 x (3 to 4)
    assert unfolded((1, 16, 9, 64), 16, 7, stride=2) == []  # whole pairs already
    assert unfolded((1, 3, 9, 64), 16, 7, stride=3) == []  # strides 1 and 2 only


def test_flat_plane_conv_leaves_its_fused_consumers_whole_outputs_to_read():
    # the flattened plane's tiles run outermost and hold no rectangle of the output: a
    # residual add fused into the conv's kernel reads the outputs it copies out
    rng = np.random.default_rng(4)
    shape = (1, 8, 16, 28)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with dot_isa.emulating("avx512_vnni"), bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(_conv_call(rng, shape, 8, 3)(x))
            out = bb.emit_output(bb.emit(elementwise.binary(
                elementwise.ADD, y, x, QParams.make(0.9, -7), QParams.make(0.05, 3),
                QParams.make(0.5, 1))))
        bb.emit_func_output(out)
        mod = bb.get()
        kernels = [name for name in _tvm.module_functions(builder.fuse(mod))
                   if "conv2d" in name]
        built = canonqnn.build(mod)
    assert kernels and all("add" in name for name in kernels)  # one kernel, the add fused
    feeds = {"x": rng.integers(-128, 128, shape).astype(np.int8)}
    (expected,) = reference.evaluate(mod, feeds).outputs.values()
    (got,) = built.run(feeds).values()
    np.testing.assert_array_equal(got, expected)


def test_plane_tiles_leave_the_kernels_fused_consumers_whole_outputs_to_read():
    # a plane of whole tiles runs them outermost; a lookup table fused into the conv's
    # kernel reads its output by rows, which a tile (64 of 24x24 outputs) does not cover
    rng = np.random.default_rng(3)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type((2, 16, 24, 24), "int8"))
    with dot_isa.emulating("avx512_vnni"), bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(_conv_call(rng, (2, 16, 24, 24), 16, 1)(x))
            out = bb.emit_output(bb.emit(lut.lut(y, table, QParams.make(0.9, -7),
                                                  QParams.make(0.9, -7), "f")))
        bb.emit_func_output(out)
        mod = bb.get()
        kernels = [name for name in _tvm.module_functions(builder.fuse(mod))
                   if "conv2d" in name]
        built = canonqnn.build(mod)
    assert kernels and all("lut" in name for name in kernels)  # one kernel, table fused
    feeds = {"x": rng.integers(-128, 128, (2, 16, 24, 24)).astype(np.int8)}
    (expected,) = reference.evaluate(mod, feeds).outputs.values()
    (got,) = built.run(feeds).values()
    np.testing.assert_array_equal(got, expected)


def test_row_form_packs_with_its_padding_in_one_pass_only_for_wide_unstrided_rows():
    def pad_in_pack(case, isa):
        return _row_plan(case, isa, "pad_in_pack")

    # 30 outputs: two 16-lane vectors; 16 outputs: one, or two 8-lane ones (on AVX2 a grouped
    # conv: one with whole vectors of output channels takes them in lanes there)
    assert pad_in_pack("3x3_wide_rows", "avx512_vnni") == [1]
    assert pad_in_pack("3x3_rows", "avx512_vnni") == [0]
    assert pad_in_pack("grouped_rows", "avx2") == [1]
    assert pad_in_pack("channel_multiplier", "avx2") == [0]  # stride 2, one 8-lane vector


def test_depthwise_with_a_runtime_bias_takes_a_form_that_needs_no_correction():
    # the vpdpbusd form folds its correction into a constant bias; a run-time one cannot take it
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (8, 1, 3, 3)).astype(np.int8)
    call = conv.conv2d(relax.Var("x", _tvm.tensor_type((1, 8, 6, 16), "int8")),
                       _tvm.const(w, "int8"), np.zeros(8, np.int32), QParams.make(0.05, 3),
                       QParams.make(np.full(8, 0.01, np.float32), np.zeros(8, np.int8), axis=0),
                       QParams.make(0.9, -7), strides=(1, 1), padding=(1,) * 4,
                       dilation=(1, 1), groups=8)
    with dot_isa.emulating("avx512_vnni"):
        op = MultiOp(lambda x, b: [relax.Call(call.op, [x, call.args[1], b, *call.args[3:]],
                                              call.attrs)],
                     {"x": ((1, 8, 6, 16), "int8"), "b": ((8,), "int32")})
        intrinsics = _depthwise_intrinsics(op.mod)
    assert intrinsics == [dot_isa.row_intrinsic(dot_isa.isa_named("avx512bw"))]
    feeds = {"x": rng.integers(-128, 128, (1, 8, 6, 16)).astype(np.int8),
             "b": rng.integers(-5000, 5000, 8).astype(np.int32)}
    (reference,) = op.references(**feeds)
    np.testing.assert_array_equal(np.reshape(op.tvm(**feeds)[0], reference.shape), reference)


@pytest.mark.skipif(HOST_ISA is None, reason="this host's CPU has no int8 dot-product")
def test_matmul_requantizes_its_output_rows_in_whole_vectors():
    # the output's columns are the accumulator's lanes: left to LLVM, the requantization read
    # them one at a time (a transformer's 128 x 1024 output: 211 against 163 us, Zen 4)
    with dot_isa.emulating("avx512_vnni"):
        op = _matmul_op(np.random.default_rng(0), (12, 40), 32)
        fused = builder.fuse(op.mod)
    scheduled = schedule.schedule_cpu(fused, schedule.plan_block, 2)
    (script,) = [func.script() for name, func in _tvm.module_functions(scheduled).items()
                 if "matmul" in name]
    lines = script.splitlines()
    (at,) = [i for i, line in enumerate(lines) if 'T.sblock("requant")' in line]
    assert "T.vectorized(T.int64(16))" in lines[at - 1]
    _assert_exact(op, "matmul")


@pytest.mark.skipif(HOST_ISA is None, reason="this host's CPU has no int8 dot-product")
def test_runtime_operand_matmul_requantizes_each_tile_from_its_corrected_start():
    # attention's QK^T: the correction by a's row sums and b's column sums is folded into the
    # accumulator's start, so the requantization reads the accumulator alone and runs on each
    # tile while it is in registers (the transformer's QK^T, 33.6 against 28.8 us, Zen 4),
    # not in a pass over an int32 tensor after all tiles
    with dot_isa.emulating("avx512_vnni"):
        op = _runtime_b_op(np.random.default_rng(3), (1, 2, 24, 16), (1, 2, 16, 20), b_zp=(5,))
        fused = builder.fuse(op.mod)
    # scheduled for a CPU with the instruction, whatever this host has (compiled, not run)
    scheduled = schedule.schedule_cpu(fused, schedule.plan_block, 2,
                                      targets.as_target({"kind": "llvm", "mcpu": "znver4"}))
    (script,) = [func.script() for name, func in _tvm.module_functions(scheduled).items()
                 if "matmul" in name]
    lines = script.splitlines()

    def at(block: str) -> int:
        (index,) = [i for i, line in enumerate(lines) if f'T.sblock("{block}")' in line]
        return index

    start, update, requant = at("acc_start"), at("acc_packed_update_o"), at("requant")
    tile_loops = [i for i, line in enumerate(lines) if line.startswith("        for ")]
    # the start, the tile's reduction and its requantization under one tile loop, in order
    (tile,) = [i for i in tile_loops if i < start and not any(i < j < requant
                                                               for j in tile_loops)]
    assert tile < start < update < requant
    assert not any(line.startswith("    for ") for line in lines[start:requant])
    _assert_exact(op, "runtime operand matmul")


def test_strided_conv_transpose_runs_as_packed_convs_one_per_output_phase():
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (8, 3, 4, 4)).astype(np.int8)  # [C, O/G, kh, kw], 2 groups
    op = SingleOp(lambda x: conv_transpose.conv2d_transpose(
        x, _tvm.const(w, "int8"), rng.integers(-900, 900, 6).astype(np.int32),
        QParams.make(0.1, 3), QParams.make(np.full(6, 0.01, np.float32), np.zeros(6, np.int8),
                                           axis=0), QParams.make(0.2, -1),
        strides=(2, 2), padding=(1, 1, 1, 1), output_padding=(0, 0), dilation=(1, 1),
        groups=2), {"x": (1, 8, 7, 16)})
    # the four phases' convs have one shape here: one kernel, called four times (each phase's
    # rows are 16 outputs wide, whole vectors on 8- and 16-lane ISAs)
    assert _plans(op.mod, "conv2d") == [dot_isa.ROWS]
    _assert_exact(op, "conv_transpose")


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_matmul_form_matches_the_reference_on_the_host_isa(case):
    a_shape, n = MATMULS[case]
    _assert_exact(_matmul_op(np.random.default_rng(0), a_shape, n), case)


RUNTIME_B = {
    "attention_scores": ((2, 3, 9, 16), (2, 3, 16, 9), (0,)),
    "broadcast_batch_zero_point": ((2, 5, 17), (17, 10), (7,)),
    "batch_of_one_b": ((3, 4, 8), (1, 8, 12), (-2,)),
    # k not a multiple of 4 (padded with real zeros), a zero point per column
    "column_zero_points_odd_k": ((2, 7, 13), (2, 13, 20), tuple(range(-10, 10))),
}


@pytest.mark.parametrize("case", sorted(RUNTIME_B))
def test_matmul_of_runtime_operands_matches_the_reference(case):
    a_shape, b_shape, b_zp = RUNTIME_B[case]
    op = _runtime_b_op(np.random.default_rng(0), a_shape, b_shape, b_zp=b_zp)
    if HOST_ISA is not None:  # it took the packed form
        assert _plans(op.mod, "matmul") == [dot_isa.ANNOTATION]
    _assert_exact(op, case)


@pytest.mark.parametrize("isa,runs_on", [("avx512_vnni", "avx512_vnni"), ("avx_vnni", "avx_vnni"),
                                         ("neon_dotprod", "neon_dotprod"),
                                         ("avx2", "avx2"), ("neon", "neon")])
def test_runtime_operands_take_the_byte_instruction_with_sums_where_the_cpu_has_it(isa,
                                                                                   runs_on):
    # vpdpbusd / sdot on b as stored, corrected by a's row sums and b's column sums; the
    # int16-pair CPUs keep packing b - b_zp
    a_shape, b_shape, b_zp = RUNTIME_B["column_zero_points_odd_k"]
    with dot_isa.emulating(isa):
        op = _runtime_b_op(np.random.default_rng(0), a_shape, b_shape, b_zp=b_zp)
        (intrinsic,) = _intrinsics(op.mod)
        fused = builder.fuse(op.mod)
    assert intrinsic.endswith(runs_on), intrinsic
    (kernel,) = [f.script() for name, f in _tvm.module_functions(fused).items() if name != "main"]
    assert ("b_column_sums" in kernel) == (dot_isa.isa_named(isa).pair == 4)
    _assert_exact(op, isa)


@pytest.mark.parametrize("isa", OTHER_ISAS)
def test_other_isas_layouts_and_corrections_match_the_reference(isa):
    rng = np.random.default_rng(0)
    with dot_isa.emulating(isa):
        ops = [_conv_op(rng, (1, 5, 9, 16), 12, 3, w_zp=4, x_zp=-9),
               _conv_op(rng, (1, 9, 7, 7), 20, 3),
               _conv_op(rng, (1, 8, 11, 12), 8, 3, groups=8, stride=2),
               _matmul_op(rng, (7, 33), 19),
               _runtime_b_op(rng, (2, 5, 17), (2, 17, 10), b_zp=(4,))]
    for op in ops:
        _assert_exact(op, isa)


@pytest.mark.slow
@pytest.mark.parametrize("isa", OTHER_ISAS)
@pytest.mark.parametrize("case", sorted(CONVS))
def test_every_conv_form_on_every_isa(isa, case):
    x_shape, o, k, options = CONVS[case]
    with dot_isa.emulating(isa):
        op = _conv_op(np.random.default_rng(0), x_shape, o, k, **options)
    _assert_exact(op, f"{isa} {case}")


def _intrinsics(mod) -> list[str]:
    """The tensor intrinsics the packed plans of ``mod``'s kernels name (fused, not compiled)."""
    return [str(plan["intrinsic"])
            for name, func in _tvm.module_functions(builder.fuse(mod)).items() if name != "main"
            for annotations in schedule.root_block_annotations(func)
            for plan in annotations.values() if isinstance(plan, dict) and "intrinsic" in plan]


def test_pair4_weights_outside_int8_take_the_int16_pairs_of_the_same_cpu():
    # int8 weights minus a nonzero zero point can leave int8 (asymmetric uint8 weights):
    # vpdpbusd cannot take them, the CPU's vpmaddwd can
    w = np.array([[[[-128]], [[127]]]], np.int8)
    assert dot.pack_conv_weights(w, np.array([5]), 0, dot_isa.isa_named("avx512_vnni")) is None
    assert dot.pack_conv_weights(w, np.array([5]), 0, dot_isa.isa_named("avx2")) is not None
    rng = np.random.default_rng(0)
    k, n = 24, 20
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b_qp = QParams.make(np.full(n, 0.01, np.float32), np.full(n, -100, np.int8), axis=0)
    w = rng.integers(-128, 128, (16, 8, 3, 3)).astype(np.int8)
    w_qp = QParams.make(np.full(16, 0.01, np.float32), np.full(16, 90, np.int8), axis=0)
    with dot_isa.emulating("avx512_vnni"):
        ops = [SingleOp(lambda a: matmul.matmul(
                   a, _tvm.const(b, "int8"), rng.integers(-900, 900, n).astype(np.int32),
                   QParams.make(0.05, 3), b_qp, QParams.make(0.7, 2)), {"a": (5, k)}),
               SingleOp(lambda x: conv.conv2d(
                   x, _tvm.const(w, "int8"), rng.integers(-900, 900, 16).astype(np.int32),
                   QParams.make(0.05, -6), w_qp, QParams.make(0.9, 1), strides=(1, 1),
                   padding=(1,) * 4, dilation=(1, 1), groups=1), {"x": (1, 8, 6, 16)})]
        for op in ops:
            (intrinsic,) = _intrinsics(op.mod)
            assert intrinsic.endswith("_avx512bw"), intrinsic
        # the constant b packed at build time, not again inside the kernel at every call
        fused = builder.fuse(ops[0].mod)
    (kernel,) = [func for name, func in _tvm.module_functions(fused).items() if name != "main"]
    assert "b_pack" not in kernel.script()
    for op in ops:
        _assert_exact(op, "int16 pairs")


@pytest.mark.parametrize("isa,shift", [("avx512_vnni", 128), ("avx_vnni", 128),
                                       ("neon_dotprod", 0)])
def test_bias_correction_makes_the_shifted_sum_exact(isa, shift):
    # vpdpbusd reads uint8 x + 128, sdot int8 x: the correction restores sum((x - x_zp) * w)
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (4, 3, 2, 2)).astype(np.int8)
    x = rng.integers(-128, 128, (3, 2, 2)).astype(np.int64)
    x_zp = -11
    packed = dot.pack_conv_weights(w, np.zeros(4, np.int8), x_zp, dot_isa.isa_named(isa))
    assert dot_isa.isa_named(isa).act_shift == shift
    shifted = ((x + shift)[None] * w.astype(np.int64)).sum(axis=(1, 2, 3))
    exact = ((x - x_zp)[None] * w.astype(np.int64)).sum(axis=(1, 2, 3))
    np.testing.assert_array_equal(shifted + packed.bias_correction, exact)


@pytest.mark.parametrize("features,expected,pair2", [
    ({"avx2", "avx512bw", "avx512vnni"}, "avx512_vnni", "avx512bw"),
    ({"avx2", "avxvnni"}, "avx_vnni", "avx2"),
    ({"avx2", "avx512bw"}, "avx512bw", "avx512bw"),
    ({"avx2"}, "avx2", "avx2"),
    ({"neon", "dotprod"}, "neon_dotprod", "neon"),
    ({"neon"}, "neon", "neon"),
    (set(), None, None),
])
def test_isa_is_chosen_from_the_target_features(features, expected, pair2):
    isa, pairs = dot_isa.isa_for(features.__contains__), dot_isa.pair2_isa(features.__contains__)
    assert (isa.name if isa else None) == expected
    assert (pairs.name if pairs else None) == pair2
    if pairs is not None:  # depthwise convs and run-time matmuls need the target's own pairs
        assert all(f in features for f in pairs.features)


def test_depthwise_takes_the_targets_pair4_isa_then_the_pairs_that_idle_fewest_lanes():
    def names(features, width):
        return [isa.name for isa in dot_isa.depthwise_isas(features.__contains__, width)]

    vnni = {"avx512vnni", "avx512bw", "avx2"}
    assert names(vnni, 14) == ["avx512_vnni", "avx512bw", "avx2"]
    # 7 outputs: one 8-lane vector, not 16 lanes with 9 idle, among the int16-pair ISAs
    assert names(vnni, 7) == ["avx512_vnni", "avx2", "avx512bw"]
    assert names({"avx2", "avxvnni"}, 7) == ["avx_vnni", "avx2"]
    assert names({"avx2", "avx512bw"}, 112) == ["avx512bw", "avx2"]
    assert names({"avx2"}, 7) == ["avx2"]
    assert names({"neon", "dotprod"}, 7) == ["neon_dotprod", "neon"]
    assert names(set(), 7) == []


def _depthwise_op(w: np.ndarray, w_zp: int) -> SingleOp:
    c = w.shape[0]
    return SingleOp(lambda x: conv.conv2d(
        x, _tvm.const(w, "int8"), np.arange(c, dtype=np.int32) * 37 - 100,
        QParams.make(0.05, 3), QParams.make(np.full(c, 0.01, np.float32),
                                            np.full(c, w_zp, np.int8), axis=0),
        QParams.make(0.9, -7), strides=(1, 1), padding=(1,) * 4, dilation=(1, 1), groups=c),
        {"x": (1, c, 6, 16)})


def _depthwise_intrinsics(mod) -> list[str]:
    """The tensor intrinsics of the depthwise plans of ``mod``'s conv kernels."""
    return [str(annotations[dot_isa.DEPTHWISE]["intrinsic"])
            for name, func in _tvm.module_functions(builder.fuse(mod)).items()
            if "conv2d" in name for annotations in schedule.root_block_annotations(func)
            if dot_isa.DEPTHWISE in annotations]


def test_depthwise_takes_the_pair4_isa_only_where_its_weights_fit_int8():
    w = np.random.default_rng(4).integers(-128, 128, (8, 1, 3, 3)).astype(np.int8)
    w[0, 0, 0, 0] = -128  # minus a zero point of 5: outside int8, which vpdpbusd cannot take
    with dot_isa.emulating("avx512_vnni"):
        fits, does_not = _depthwise_op(w, 0), _depthwise_op(w, 5)
        intrinsics = [_depthwise_intrinsics(op.mod) for op in (fits, does_not)]

    def row(name):
        return [dot_isa.row_intrinsic(dot_isa.isa_named(name))]

    assert intrinsics == [row("avx512_vnni"), row("avx512bw")]
    for op in (fits, does_not):
        _assert_exact(op, "depthwise")


def test_tiles_divide_the_loops_they_split():
    for isa in dot_isa.ISAS:
        for width in (1, 7, 14, 56, 112, 13):
            tile = dot.conv_tile(isa, 4, width)
            assert width % tile["width"] == 0 and 4 % tile["blocks"] == 0
            rows = dot.row_tile(isa, 24, width, width)
            assert 24 % rows["blocks"] == 0 and width % rows["rows"] == 0
            assert (-(-width // isa.lanes)) % rows["vectors"] == 0
            held = rows["blocks"] * rows["vectors"] * rows["rows"]
            assert held <= isa.registers // 2


def test_short_rows_share_a_tile_so_each_broadcast_weight_serves_several_rows():
    # 14 outputs a row: one 16-lane vector; two rows of 8 channels load 10 vectors for 16
    # instructions where one row of 8 loaded 9 for 8
    assert dot.row_tile(dot_isa.isa_named("avx512_vnni"), 512, 14, 14) == {
        "blocks": 8, "vectors": 1, "rows": 2}
    # long rows keep one row: the vectors along it already share each weight
    assert dot.row_tile(dot_isa.isa_named("avx512_vnni"), 128, 56, 56)["rows"] == 1


def test_strided_pointwise_convs_run_at_stride_one_on_the_pixels_they_read():
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type((1, 24, 13, 15), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(_conv_call(np.random.default_rng(0), (1, 24, 13, 15),
                                                    32, 1, stride=2, pad=0)(x)))
        bb.emit_func_output(out)
    kernels = [name for name in _tvm.module_functions(builder.fuse(bb.get())) if name != "main"]
    assert any("subsample" in k for k in kernels) == (HOST_ISA is not None), kernels


def test_strided_depthwise_packs_each_columns_phases_and_row_pair_together():
    # (phases outermost, LLVM copied the pack value by value: 2.2 times slower on 28x28 planes)
    x_shape, o, k, options = CONVS["depthwise_stride_3"]
    with dot_isa.emulating("avx2"):
        fused = builder.fuse(_conv_op(np.random.default_rng(0), x_shape, o, k, **options).mod)
        scheduled = schedule.schedule_cpu(fused, schedule.plan_block, 1,
                                          targets.as_target({"kind": "llvm", "mcpu": "znver3"}))
    (script,) = [func.script() for name, func in _tvm.module_functions(scheduled).items()
                 if "conv2d" in name]
    pack = script[:script.index('T.sblock("x_pack")')].rsplit("\n    for ", 1)[-1]
    # the column loop, then the three phases and the row pair unrolled inside it
    assert "T.unroll(T.int64(3))" in pack and "T.unroll(T.int64(2))" in pack
    assert pack.index("T.unroll(T.int64(3))") < pack.index("T.unroll(T.int64(2))")
