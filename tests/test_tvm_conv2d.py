"""``_tvm.conv2d`` sets the result type TVM would infer (TVM 0.27 takes ~0.6 ms a conv to infer
it), and leaves every case it does not compute, errors included, to TVM."""

from __future__ import annotations

import itertools

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
