"""Result types canonqnn sets itself are the ones TVM would infer: ``_tvm.conv2d`` (TVM 0.27
takes ~0.6 ms a conv to infer it), ``_tvm.quantize``/``dequantize``, constants; every case not
computed, errors included, is left to TVM; within a conversion each type is one object."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tvm

from canonqnn import _tvm


def _var(name, shape, dtype="float32"):
    return _tvm.Var(name, _tvm.tensor_type(shape, dtype))


CASES = [dict(h=h, w=w, c=c, o=o, groups=g, k=k, strides=s, dilation=d, padding=p,
              dtype=dt, out_dtype=od)
         for h, w, (c, o, g), k, s, d, p, (dt, od) in itertools.product(
             (1, 5, 8), (4, 7), ((4, 8, 1), (8, 8, 2), (8, 8, 8), (6, 3, 3)),
             ((1, 1), (3, 2)), ((1, 1), (2, 3)), ((1, 1), (2, 1)),
             ((0, 0, 0, 0), (1, 2, 0, 3)), (("float32", None), ("int8", "int32")))]


@pytest.mark.parametrize("case", [CASES[i] for i in range(0, len(CASES), 7)],
                         ids=lambda c: "-".join(str(v) for v in c.values()))
def test_the_type_set_is_the_one_tvm_infers(case):
    c = case
    x = _var("x", (2, c["c"], c["h"], c["w"]), c["dtype"])
    w = _var("w", (c["o"], c["c"] // c["groups"], *c["k"]), c["dtype"])
    ours = _tvm.conv2d(x, w, c["strides"], c["padding"], c["dilation"], c["groups"],
                       c["out_dtype"])
    theirs = tvm.relax.op.nn.conv2d(x, w, strides=list(c["strides"]),
                                    padding=list(c["padding"]), dilation=list(c["dilation"]),
                                    groups=c["groups"], out_dtype=c["out_dtype"])
    inferred = _tvm.BlockBuilder().normalize(theirs).ty
    if isinstance(ours.ty, _tvm.relax.TensorType):
        tvm.ir.assert_structural_equal(ours.ty, inferred)
    else:  # an empty output (a kernel larger than the padded input): TVM's own inference
        assert any(int(d) < 1 for d in inferred.shape.values)
    tvm.ir.assert_structural_equal(_tvm.BlockBuilder().normalize(ours).ty, inferred)


def test_inconsistent_shapes_are_left_to_tvm_which_refuses_them():
    x, w = _var("x", (1, 6, 8, 8)), _var("w", (4, 4, 3, 3))  # 6 channels, weight for 4
    call = _tvm.conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert not isinstance(call.ty, _tvm.relax.TensorType)
    with pytest.raises(Exception, match="channel"):
        _tvm.BlockBuilder().normalize(call)


def test_symbolic_shapes_are_left_to_tvm():
    n = tvm.tirx.Var("n", "int64")
    x = _tvm.Var("x", _tvm.relax.TensorType([n, 4, 8, 8], "float32"))
    call = _tvm.conv2d(x, _var("w", (4, 4, 3, 3)), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert not isinstance(call.ty, _tvm.relax.TensorType)
    assert str(_tvm.BlockBuilder().normalize(call).ty.shape.values[0]) == "n"


@pytest.mark.parametrize("axis,scales", [(0, ()), (1, (3,)), (2, (4,))])
def test_quantize_and_dequantize_types_set_are_tvms(axis, scales):
    x, q = _var("x", (2, 3, 4)), _var("q", (2, 3, 4), "int8")
    scale = _tvm.const(np.full(scales, 0.1, np.float32))
    zp = _tvm.const(np.zeros(scales, np.int8))
    for ours, theirs in (
            (_tvm.quantize(x, scale, zp, axis, "int8"),
             tvm.relax.op.quantize(x, scale, zp, axis=axis, out_dtype="int8")),
            (_tvm.dequantize(q, scale, zp, axis),
             tvm.relax.op.dequantize(q, scale, zp, axis=axis, out_dtype="float32"))):
        assert isinstance(ours.ty, _tvm.relax.TensorType)
        tvm.ir.assert_structural_equal(ours.ty, _tvm.BlockBuilder().normalize(theirs).ty)


def test_scales_that_do_not_fit_the_axis_are_left_to_tvm_which_refuses_them():
    scale, zp = _tvm.const(np.full(5, 0.1, np.float32)), _tvm.const(np.zeros(5, np.int8))
    call = _tvm.quantize(_var("x", (2, 3, 4)), scale, zp, 1, "int8")
    assert not isinstance(call.ty, _tvm.relax.TensorType)
    with pytest.raises(Exception, match="mismatch"):
        _tvm.BlockBuilder().normalize(call)


def test_a_note_keeps_the_type_set():
    call = _tvm.quantize(_var("x", (2, 3)), _tvm.const(np.float32(0.1)),
                         _tvm.const(np.int8(0)), 0, "int8")
    noted = _tvm.with_note(call, "a note")
    assert _tvm.note_of(noted) == "a note" and noted.ty.same_as(call.ty)


def test_types_are_one_object_per_shape_and_dtype_within_a_conversion():
    with _tvm.converting():
        a = _tvm.tensor_type((2, 3), "int8")
        assert _tvm.tensor_type([2, 3], "int8") is a
        assert _tvm.tensor_type((2, 3), "float32") is not a
        assert _tvm.const(np.zeros((2, 3), np.int8)).ty.same_as(a)  # constants share it
        assert _tvm.conv2d(_var("x", (1, 4, 4, 4), "int8"), _var("w", (2, 4, 3, 3), "int8"),
                           (1, 1), (0, 0, 0, 0), (1, 1), 1, "int32").ty.same_as(
            _tvm.tensor_type((1, 2, 2, 2), "int32"))
    assert _tvm.tensor_type((2, 3), "int8") is not a


def test_padding_in_another_form_is_left_to_tvm():
    call = _tvm.conv2d(_var("x", (1, 4, 8, 8)), _var("w", (4, 4, 3, 3)), (1, 1), (1, 1), (1, 1), 1)
    assert not isinstance(call.ty, _tvm.relax.TensorType)
    assert [int(d) for d in _tvm.BlockBuilder().normalize(call).ty.shape.values] == [1, 4, 8, 8]
