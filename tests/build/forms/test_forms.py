"""The build's choice of kernel form is made in one place (``canonqnn.build.forms.legalize``,
installed as the ``FLegalize`` of the ops that have forms): under a target with a dot-product
instruction the build's legalization is a packed form, while the op's own legalization stays
its definition's loop nest, whatever the target."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from canonqnn import _tvm
from canonqnn.build import forms, schedule
from canonqnn.build import isa as dot_isa
from canonqnn.ops import conv, matmul
from canonqnn.qparams import QParams

TARGET = {"kind": "llvm", "mcpu": "skylake-avx512"}


def _module(make, shape) -> tuple:
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(shape, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(make(x)))
        bb.emit_func_output(out)
    return bb.get()


def _conv(x):
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (12, 5, 3, 3)).astype(np.int8)
    return conv.conv2d(x, _tvm.const(w, "int8"), rng.integers(-900, 900, 12).astype(np.int32),
                       QParams.make(0.05, 3), QParams.make(np.full(12, 0.01, np.float32),
                                                           np.zeros(12, np.int8), axis=0),
                       QParams.make(0.9, -7), strides=(1, 1), padding=(1,) * 4,
                       dilation=(1, 1), groups=1)


def _matmul(x):
    rng = np.random.default_rng(1)
    b = rng.integers(-128, 128, (40, 24)).astype(np.int8)
    return matmul.matmul(x, _tvm.const(b, "int8"), rng.integers(-900, 900, 24).astype(np.int32),
                         QParams.make(0.05, -4), QParams.make(np.full(24, 0.01, np.float32),
                                                              np.zeros(24, np.int8), axis=0),
                         QParams.make(0.7, 2))


def _plans(mod, own: dict | None = None) -> list[str]:
    """The packed plans of ``mod`` legalized for AVX512-VNNI, by the installed ``FLegalize``
    or by ``own`` (op name -> legalization)."""
    with dot_isa.emulating("avx512_vnni"), tvm.target.Target(TARGET):
        lowered = relax.transform.LegalizeOps(own)(mod)
    return [key for name, func in _tvm.module_functions(lowered).items() if name != "main"
            for annotations in schedule.root_block_annotations(func)
            for key in annotations if key in dot_isa.BLOCK_PLANS]


def test_the_build_picks_a_packed_form_and_the_op_keeps_its_loop_nest():
    for make, shape, op in ((_conv, (1, 5, 9, 16), conv.CONV2D),
                            (_matmul, (3, 40), matmul.MATMUL)):
        mod = _module(make, shape)
        assert _plans(mod), op.name
        assert _plans(mod, {op.relax_name: op.legalize}) == [], op.name


def test_without_a_target_the_build_legalizes_as_the_op_does():
    assert set(forms.FORMS) == {"conv2d", "matmul", "conv2d_transpose", "max_pool2d"}
    mod = _module(_conv, (1, 5, 9, 16))
    assert relax.transform.LegalizeOps()(mod).script() == relax.transform.LegalizeOps(
        {conv.CONV2D.relax_name: conv.CONV2D.legalize})(mod).script()
