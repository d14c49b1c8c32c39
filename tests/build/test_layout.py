"""canonqnn.build.layout: the convs the plan keeps run channels-last, chains of them pass NHWC
values without transposing, a large result read NCHW keeps its conv NCHW, and every build
computes the numpy reference's bits.

The channels-last kernels are legalized for AVX512-VNNI (``isa.emulating``): on a host
without it they run untensorized, the same arithmetic (``tests/build/forms/test_dot.py`` says
how).
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import canonqnn
from canonqnn import _tvm, reference
from canonqnn.build import builder, layout, report, schedule, targets
from canonqnn.build import isa as dot_isa
from canonqnn.ops import conv, elementwise
from canonqnn.qparams import QParams


def _conv(rng, x, o, k, *, stride=1, groups=1, pad=None, dilation=1, w_zp=0, x_zp=3,
          rounding="rne_f32"):
    c = _tvm.shape_of(x)[1]
    w = rng.integers(-128, 128, (o, c // groups, k, k)).astype(np.int8)
    if w_zp:
        w = np.clip(w.astype(np.int32), -128 + w_zp, 127).astype(np.int8)
    w_qp = QParams.make(rng.uniform(0.002, 0.02, o).astype(np.float32),
                        np.full(o, w_zp, np.int8), axis=0)
    pad = k // 2 * dilation if pad is None else pad
    return conv.conv2d(x, _tvm.const(w, "int8"), rng.integers(-5000, 5000, o).astype(np.int32),
                       QParams.make(0.05, x_zp), w_qp, QParams.make(0.9, -7),
                       strides=(stride, stride), padding=(pad,) * 4,
                       dilation=(dilation, dilation), groups=groups, act=(-128, 100),
                       rounding=rounding)


def _chain(shape, layers, seed=0):
    """``main(x)``: the convs ``layers`` (``(kind, out channels, options)``, kind ``pw`` a
    1x1 conv, ``dw`` a 3x3 depthwise one) one after the other."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for kind, o, options in layers:
                c = _tvm.shape_of(y)[1]
                y = bb.emit(_conv(rng, y, c if kind == "dw" else o, options.pop("k", 1 if
                                  kind == "pw" else 3), groups=c if kind == "dw" else 1,
                                  **options))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _kernels(mod) -> list[str]:
    with dot_isa.emulating("avx512_vnni"):
        fused = builder.fuse(mod, targets.host_target())
    return [name for name, _, _ in report.kernel_calls(fused)[0]]


def _assert_exact(mod, shape, seed=1):
    with dot_isa.emulating("avx512_vnni"):
        built = canonqnn.build(mod)
    x = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
    (want,) = reference.evaluate(mod, {"x": x}).outputs.values()
    (got,) = built.run({"x": x}).values()
    np.testing.assert_array_equal(got, want)


MOBILE_TAIL = [("pw", 64, {}), ("dw", 0, {}), ("pw", 64, {}), ("dw", 0, dict(stride=2)),
               ("pw", 72, {})]  # 72 output channels: the last vector of lanes half used


def test_a_chain_of_small_convs_runs_channels_last_transposing_only_its_small_result():
    shape = (1, 32, 14, 14)
    mod = _chain(shape, [(k, o, dict(opts)) for k, o, opts in MOBILE_TAIL])
    kernels = _kernels(mod)
    # the first 1x1 conv reads its NCHW input itself; the 7x7 result is transposed back
    assert sum(k.startswith("canonqnn_conv2d_nhwc") for k in kernels) == 5
    assert [k for k in kernels if k.startswith("transpose")] == ["transpose"]
    assert kernels[-1] == "transpose"
    _assert_exact(mod, shape)


def test_a_large_result_read_nchw_keeps_its_convs_nchw():
    shape = (1, 32, 14, 14)
    # the depthwise conv's 14x14 result is the model's: transposing it back would cost more
    # than channels-last gains, and then the 1x1 conv feeding it would have to transpose too
    mod = _chain(shape, [("pw", 64, {}), ("dw", 0, {})])
    assert not any(k.startswith(("canonqnn_conv2d_nhwc", "transpose")) for k in _kernels(mod))
    with dot_isa.emulating("avx512_vnni"), targets.host_target():
        assert layout.plan(mod["main"]) == {}


def test_a_small_depthwise_input_read_nchw_is_transposed_in():
    shape = (1, 32, 7, 7)
    mod = _chain(shape, [("dw", 0, {}), ("pw", 48, {})])
    kernels = _kernels(mod)
    assert [k for k in kernels if k.startswith("transpose")] == ["transpose", "transpose1"]
    _assert_exact(mod, shape)


CHAINS = {  # name: (input shape, layers)
    "batch_of_two": ((2, 16, 7, 7), [("pw", 32, {}), ("dw", 0, {}), ("pw", 16, {})]),
    # 30 input channels: the pack pads them to whole groups of 4 with real zeros
    "odd_input_channels": ((1, 30, 6, 6), [("pw", 16, dict(x_zp=-20)), ("dw", 0, {})]),
    "asymmetric_weights": ((1, 16, 7, 7), [("pw", 32, dict(w_zp=5)),
                                           ("dw", 0, dict(w_zp=3, x_zp=-7))]),
    "depthwise_5x5_strided_dilated": ((1, 16, 12, 12), [
        ("pw", 32, {}), ("dw", 0, dict(k=5, stride=2, dilation=2)), ("pw", 16, {})]),
    "depthwise_unpadded": ((1, 16, 9, 9), [("pw", 32, {}), ("dw", 0, dict(pad=0)),
                                           ("pw", 16, {})]),
    "tflite_rounding": ((1, 16, 7, 7), [("pw", 32, dict(rounding="q31_double")),
                                        ("dw", 0, dict(rounding="q31_double"))]),
    # w - w_zp up to 227: the depthwise weights are int16 (old uint8 models' asymmetric ones)
    "depthwise_wide_weights": ((1, 16, 7, 7), [("pw", 32, {}), ("dw", 0, dict(w_zp=-100)),
                                               ("pw", 16, {})]),
}


@pytest.mark.parametrize("case", sorted(CHAINS))
def test_channels_last_chains_compute_the_reference(case):
    shape, layers = CHAINS[case]
    mod = _chain(shape, [(k, o, dict(opts)) for k, o, opts in layers])
    assert any(k.startswith("canonqnn_conv2d_nhwc") for k in _kernels(mod)), case
    _assert_exact(mod, shape)


def test_without_a_measured_isa_every_conv_stays_nchw():
    shape = (1, 32, 14, 14)
    mod = _chain(shape, [(k, o, dict(opts)) for k, o, opts in MOBILE_TAIL])
    with dot_isa.emulating("avx2"):
        kernels = [name for name, _, _ in report.kernel_calls(
            builder.fuse(mod, targets.host_target()))[0]]
    assert not any(k.startswith(("canonqnn_conv2d_nhwc", "transpose")) for k in kernels)


def test_channels_last_kernels_record_their_real_multiply_accumulates():
    shape = (1, 32, 14, 14)
    mod = _chain(shape, [(k, o, dict(opts)) for k, o, opts in MOBILE_TAIL])
    with dot_isa.emulating("avx512_vnni"):
        fused = builder.fuse(mod, targets.host_target())
    macs = sorted(int(plan["macs"]) for name, func in _tvm.module_functions(fused).items()
                  if "nhwc" in name for block in schedule.root_block_annotations(func)
                  for plan in block.values() if isinstance(plan, dict) and "macs" in plan)
    # 1x1 32->64 and 64->64 at 14x14, depthwise 3x3 at 14x14 and to 7x7, 1x1 64->72 at 7x7
    # (72 output channels: the packed weights' 80 are not counted)
    assert macs == sorted([196 * 64 * 32, 196 * 64 * 9, 196 * 64 * 64, 49 * 64 * 9,
                           49 * 72 * 64])


def test_a_depthwise_conv_whose_weights_leave_int8_runs_channels_last_on_int16_weights():
    shape, layers = CHAINS["depthwise_wide_weights"]
    mod = _chain(shape, [(k, o, dict(opts)) for k, o, opts in layers])
    with dot_isa.emulating("avx512_vnni"), targets.host_target():
        forms = sorted((how.form, str(how.weights.dtype))
                       for how in layout.plan(mod["main"]).values())
    assert forms == [("depthwise", "int16"), ("pointwise", "int8"), ("pointwise", "int8")]


def _residual(shape, seed=0):
    """``main(x)``: MobileNet-V2's inverted residual block between two 1x1 convs: ``y0 =
    pw(x)``, ``h = pw(dw(pw(y0)))``, ``out = pw(add(y0, h))``."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y0 = bb.emit(_conv(rng, x, 16, 1))
            h = bb.emit(_conv(rng, y0, 48, 1))
            h = bb.emit(_conv(rng, h, 48, 3, groups=48))
            h = bb.emit(_conv(rng, h, 16, 1))
            y1 = bb.emit(elementwise.binary(elementwise.ADD, y0, h, QParams.make(0.9, -7),
                                            QParams.make(0.9, -7), QParams.make(1.3, 4)))
            out = bb.emit_output(bb.emit(_conv(rng, y1, 24, 1)))
        bb.emit_func_output(out)
    return bb.get()


def test_a_residual_add_between_channels_last_convs_runs_channels_last_in_its_conv_kernel():
    shape = (1, 16, 7, 7)
    mod = _residual(shape)
    kernels = _kernels(mod)
    # no transpose but the result's: the add reads both operands NHWC, in the kernel of the
    # conv that makes its second operand
    assert [k for k in kernels if k.startswith("transpose")] == ["transpose"]
    assert any(k.startswith("fused_canonqnn_conv2d_nhwc") and k.endswith("canonqnn_add")
               for k in kernels), kernels
    assert not any(k.startswith("canonqnn_add") for k in kernels)
    _assert_exact(mod, shape)


def test_a_residual_add_of_large_planes_read_nchw_stays_nchw():
    shape = (1, 16, 14, 14)  # the result, 14x14, is read NCHW: transposing it back costs more
    mod = _residual(shape)
    with dot_isa.emulating("avx512_vnni"), targets.host_target():
        assert layout.plan(mod["main"]) == {}
    _assert_exact(mod, shape)


def test_an_add_no_channels_last_conv_feeds_stays_nchw():
    # ResNet's 7x7 residual adds: small operands, but 3x3 convs (NCHW) make them; channels-last
    # they would only transpose in and out
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type((1, 16, 7, 7), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(_conv(rng, x, 16, 3))
            y = bb.emit(elementwise.binary(elementwise.ADD, x, h, QParams.make(0.9, -7),
                                           QParams.make(0.9, -7), QParams.make(1.3, 4)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    with dot_isa.emulating("avx512_vnni"), targets.host_target():
        assert layout.plan(mod["main"]) == {}
    assert not any("transpose" in k for k in _kernels(mod))
