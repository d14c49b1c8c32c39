"""``params_of`` reads every canonical op by the registry's naming contract (docs/spec.md)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from _pattern_modules import (
    ACT,
    CONV_OUT,
    MATMUL_N,
    QB,
    QOUT,
    QX,
    W_SCALES,
    conv2d_call,
    example,
    typed,
    var,
)
from canonqnn import _tvm
from canonqnn.ops import REGISTRY, conv
from canonqnn.patterns import OpParams, Quant, params_of
from canonqnn.qparams import QParams

# Every attribute holding a scale or zero point has one of these names: the contract's.
CONTRACT_NAMES = {"x_scale", "x_zp", "in_scale", "in_zp", "scale", "zp", "a_scale", "a_zp",
                  "b_scale", "b_zp", "in_scales", "in_zps", "out_scale", "out_zp"}
WEIGHT_ARGS = {"w_scale", "b_scale"}


def quant(qp: QParams) -> Quant:
    return Quant(qp.scalar_scale, qp.scalar_zp)


def test_every_registered_op_names_its_quantization_attributes_by_the_contract():
    for name, op in REGISTRY.items():
        named = {a for a in op.attrs if a.endswith(("scale", "zp", "scales", "zps"))}
        assert named <= CONTRACT_NAMES, f"{name}: {sorted(named - CONTRACT_NAMES)}"
        # (dynamic quantization's input is float: its parameters exist only at run time)
        assert op.family == "dynamic" or any(
            a in op.attrs for a in ("x_scale", "in_scale", "scale", "a_scale", "in_scales")), \
            f"{name} names no quantized input"
        for a in named:  # every scale comes with its zero point
            assert a.replace("scale", "zp") in op.attrs and a.replace("zp", "scale") in op.attrs


@pytest.mark.parametrize("name", list(REGISTRY))
def test_params_of_follows_the_naming_contract_for_every_registered_op(name):
    op, e = REGISTRY[name], example(name)
    p = params_of(e.call)
    attrs = _tvm.attrs_dict(e.call)
    assert isinstance(p, OpParams) and p.op == name
    assert p.inputs == tuple(quant(qp) for _, qp in e.inputs)
    assert p.input_shapes == tuple(_tvm.shape_of(v) for v, _ in e.inputs)
    assert p.output == (None if e.output is None else quant(e.output))
    assert [(p.output_dtype, p.output_shape)] == _tvm.tensor_types(e.call)
    assert p.clamp == (ACT if "act_min" in op.attrs else None)
    assert (p.act_min, p.act_max) == (p.clamp or (None, None))
    assert p.rounding == attrs.get("rounding")
    assert (p.layout, p.weight_layout) == (op.layout, op.weight_layout)
    assert dict(p.attrs) == attrs
    constants = {arg_name: arg for arg_name, arg in zip(op.args, e.call.args)
                 if _tvm.is_const(arg)}
    assert set(p.constants) == set(constants)
    for arg_name, arg in constants.items():
        np.testing.assert_array_equal(p.constants[arg_name], _tvm.const_value(arg))
    assert p.epilogue is None and p.final_output == p.output

    # the single-value accessors answer or say where to look, never return a wrong field
    if len(p.inputs) == 1:
        assert (p.input_scale, p.input_zp) == (p.inputs[0].scale, p.inputs[0].zero_point)
    else:
        with pytest.raises(AttributeError, match=r"\.inputs"):
            _ = p.input_scale
    if p.output is None:
        with pytest.raises(AttributeError, match="no quantized output"):
            _ = p.output_scale
    else:
        assert (p.output_scale, p.output_zp) == (p.output.scale, p.output.zero_point)

    assert (p.weight is not None) == bool(WEIGHT_ARGS & set(op.args))
    if p.weight is None:
        with pytest.raises(AttributeError, match="no weights"):
            _ = p.weight_scale
        return
    channels = p.output_shape[1] if op.layout == "NCHW" else p.output_shape[-1]
    assert p.weight.scale.dtype == np.float32 and p.weight.zero_point.dtype == np.int32
    np.testing.assert_array_equal(p.weight_scale,
                                  np.broadcast_to(e.weight.scale, (channels,)))
    np.testing.assert_array_equal(p.weight_zp,
                                  np.broadcast_to(e.weight.zero_point, (channels,)))
    assert p.weight.per_channel == (not e.weight.per_tensor)


def test_conv2d_input_is_x_and_its_weight_scale_has_one_entry_per_output_channel():
    p = params_of(example("conv2d").call)
    assert (p.input_scale, p.input_zp) == (QX.scalar_scale, QX.scalar_zp)
    assert (p.output_scale, p.output_zp) == (QOUT.scalar_scale, QOUT.scalar_zp)
    assert p.weight.per_channel and p.weight_scale.shape == (CONV_OUT,)
    np.testing.assert_array_equal(p.weight_scale, W_SCALES)
    assert p.weight.symmetric
    assert (p.layout, p.weight_layout) == ("NCHW", "OIHW")
    assert p.clamp == ACT and p.rounding == "rne_f32"


def test_a_scalar_weight_scale_is_broadcast_to_every_output_channel_and_not_per_channel():
    x = var("x", (1, 4, 6, 6))
    p = params_of(typed(conv2d_call(x, w_qp=QParams.make(0.03125, 0))))
    assert not p.weight.per_channel
    np.testing.assert_array_equal(p.weight_scale, np.full(CONV_OUT, 0.03125, np.float32))
    np.testing.assert_array_equal(p.weight_zp, np.zeros(CONV_OUT, np.int32))
    # conv2d_transpose: IOHW weights, output channels = w.shape[1] * groups
    t = params_of(example("conv2d_transpose").call)
    assert (t.layout, t.weight_layout) == ("NCHW", "IOHW")
    assert not t.weight.per_channel and t.weight_scale.shape == (CONV_OUT,)
    np.testing.assert_array_equal(t.weight_zp, np.full(CONV_OUT, 2, np.int32))
    assert not t.weight.symmetric


def test_matmul_reads_only_a_as_input_and_its_weight_has_one_entry_per_column():
    e = example("matmul")
    p = params_of(e.call)
    assert p.inputs == (quant(QX),) and p.input_shapes == ((1, 6, 16),)
    assert p.weight.per_channel and p.weight_scale.shape == (MATMUL_N,)
    np.testing.assert_array_equal(p.weight_scale, e.weight.scale)
    assert (p.layout, p.weight_layout) == (None, "KN")
    assert set(p.constants) == {"b", "bias", "b_scale", "b_zp"}


def test_binary_ops_have_two_inputs_and_input_scale_points_to_inputs():
    p = params_of(example("add").call)
    assert p.inputs == (quant(QX), quant(QB))
    assert p.rounding == "q31_double"
    with pytest.raises(AttributeError, match=r"add has 2 quantized inputs.*\.inputs"):
        _ = p.input_scale
    with pytest.raises(AttributeError, match=r"\.inputs"):
        _ = p.input_zp
    assert p.weight is None and (p.layout, p.weight_layout) == (None, None)


def test_concat_has_one_quant_and_one_input_shape_per_input():
    e = example("concat")
    p = params_of(e.call)
    assert p.inputs == tuple(quant(qp) for _, qp in e.inputs) and len(p.inputs) == 3
    assert p.input_shapes == ((1, 4, 6, 6), (1, 2, 6, 6), (1, 1, 6, 6))
    assert p.output == quant(QOUT) and p.output_shape == (1, 7, 6, 6)


def test_ops_that_keep_their_parameters_output_their_input_quant():
    for name in ("reshape", "transpose", "max_pool2d", "pad", "gather", "reduce_max"):
        p = params_of(example(name).call)
        assert p.output == p.inputs[0] == quant(QX), name
        assert p.clamp is None and p.rounding is None, name


def test_argmax_output_is_not_quantized():
    p = params_of(example("argmax").call)
    assert p.output is None and p.final_output is None and p.output_dtype == "int64"
    assert p.inputs == (quant(QX),)
    with pytest.raises(AttributeError, match="argmax has no quantized output"):
        _ = p.output_zp


def test_layouts_are_nchw_for_convolutions_and_pools_and_absent_for_elementwise_ops():
    layouts = {name: (params_of(example(name).call).layout,
                      params_of(example(name).call).weight_layout)
               for name in ("conv2d", "conv2d_transpose", "matmul", "max_pool2d", "avg_pool2d",
                            "global_avg_pool2d", "add", "lut")}
    assert layouts == {"conv2d": ("NCHW", "OIHW"), "conv2d_transpose": ("NCHW", "IOHW"),
                       "matmul": (None, "KN"), "max_pool2d": ("NCHW", None),
                       "avg_pool2d": ("NCHW", None), "global_avg_pool2d": ("NCHW", None),
                       "add": (None, None), "lut": (None, None)}


@pytest.mark.parametrize("c_in, groups, c_out, expected", [
    (4, 4, 4, True),      # one input and one output channel per group
    (4, 4, 8, False),     # depth multiplier 2
    (4, 1, 4, False),     # dense
    (4, 2, 4, False),     # grouped, two channels per group
    (8, 4, 4, False),     # fewer groups than input channels
])
def test_depthwise_exactly_when_groups_equal_input_and_output_channels(c_in, groups, c_out,
                                                                        expected):
    x = var("x", (1, c_in, 6, 6))
    p = params_of(typed(conv2d_call(x, out_channels=c_out, groups=groups)))
    assert p.depthwise is expected


def test_depthwise_is_false_for_ops_other_than_conv2d():
    for name in REGISTRY:
        if name != "conv2d":
            assert params_of(example(name).call).depthwise is False, name


def test_params_of_rejects_a_call_that_is_not_canonical():
    x = var("x", (2, 3))
    with pytest.raises(TypeError, match="not a canonical op call: relax.add"):
        params_of(typed(relax.op.add(x, x)))


def test_weight_scale_given_as_a_variable_is_rejected():
    e = example("conv2d")
    args = list(e.call.args)
    args[3] = var("w_scale", (CONV_OUT,), "float32")
    call = typed(conv.CONV2D.call(args, _tvm.attrs_dict(e.call)))
    with pytest.raises(TypeError, match="weight scale and zero point must be constants"):
        params_of(call)


def test_weight_shape_is_read_for_constant_and_runtime_weights():
    assert params_of(example("conv2d").call).weight_shape == (CONV_OUT, 4, 3, 3)
    assert params_of(example("matmul").call).weight_shape == (16, MATMUL_N)
    assert params_of(example("add").call).weight_shape is None
    # attention-style matmul: b computed at run time, so only its shape tells its size
    from canonqnn.ops import matmul

    a, b = var("a", (1, 6, 16)), var("b", (1, 16, 5))
    p = params_of(typed(matmul.matmul(a, b, None, QX, QB, QOUT, act=ACT)))
    assert p.weight_shape == (1, 16, 5) and "b" not in p.constants


def test_weight_quant_compares_by_value():
    p, q = params_of(example("conv2d").call), params_of(example("conv2d").call)
    assert p.weight == q.weight and p.weight is not q.weight
    assert p.weight != params_of(example("conv2d_transpose").call).weight
