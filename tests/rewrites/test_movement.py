"""Rules of rewrites/movement.py that act on int8 moved before any op names its parameters
(a QOperator model's int8 input transposed to NCHW before its first QLinearConv)."""

from __future__ import annotations

from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.ops import lookup
from canonqnn.qparams import QParams
from canonqnn.rewrites import canonicalize

IN = QParams.make(0.05, 3)
OUT = QParams.make(0.05, 3)


def moved_then_dequantized(move, uses=1, shape=(1, 6, 5, 3)):
    """main(x int8) = q(relu(dq(move(x)))) [+ q(dq(move(x))) for a second use]."""
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            moved = bb.emit(move(x))
            outs = []
            for k in range(uses):
                real = bb.emit(qdq.dequantize(moved, IN))
                y = bb.emit(relax.op.nn.relu(real)) if k == 0 else real
                outs.append(bb.emit(qdq.quantize(y, OUT)))
            out = bb.emit_output(outs[0] if uses == 1 else relax.Tuple(outs))
        bb.emit_func_output(out)
    return canonicalize(bb.get())


def calls(mod) -> list[tuple[str, dict]]:
    out = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = lookup(binding.value)
            if op is not None:
                out.append((op.name, _tvm.attrs_dict(binding.value)))
            elif _tvm.op_name(binding.value):
                out.append((_tvm.op_name(binding.value), {}))
    return out


def test_int8_transpose_takes_the_parameters_of_the_dequantize_that_reads_it():
    mod, report = moved_then_dequantized(lambda x: relax.op.permute_dims(x, [0, 3, 1, 2]))
    assert report.float_islands == []
    (name, attrs), *rest = calls(mod)
    assert name == "transpose" and attrs["axes"] == [0, 3, 1, 2]
    assert (attrs["scale"], attrs["zp"]) == (float(IN.scalar_scale), IN.scalar_zp)
    assert "relax.permute_dims" not in [n for n, _ in rest]


def test_int8_reshape_becomes_a_canonical_reshape():
    mod, _ = moved_then_dequantized(lambda x: relax.op.reshape(x, (1, 6, 15)))
    assert calls(mod)[0][0] == "reshape" and calls(mod)[0][1]["newshape"] == [1, 6, 15]


def test_a_moved_tensor_read_twice_is_left_to_the_later_rules():
    mod, _ = moved_then_dequantized(lambda x: relax.op.permute_dims(x, [0, 3, 1, 2]), uses=2)
    assert calls(mod)[0][0] == "relax.permute_dims"
