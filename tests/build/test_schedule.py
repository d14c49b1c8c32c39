"""The CPU schedule build gives untuned kernels: what each loop nest gets, and that the scheduled
build stays bit-exact and multi-threaded."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import canonqnn
from canonqnn import _tvm
from canonqnn.build import pipeline, targets
from canonqnn.build.builder import Built
from canonqnn.build.schedule import (
    ACC_LANES,
    MIN_PARALLEL_WORK,
    BlockPlan,
    plan_block,
    schedule_cpu,
)
from canonqnn.frontends.onnx.oracle import ort_session
from canonqnn.io import module_io
from canonqnn.ops import elementwise, lut
from canonqnn.qparams import QParams
from canonqnn.testing import onnx_models as models

CONV = ["S", "S", "S", "S", "R", "R", "R"]


def test_conv_moves_output_columns_inside_the_reduction_and_blocks_channels():
    plan = plan_block(CONV, [1, 64, 32, 32, 64, 3, 3], cores=2)
    assert plan.inner == 1  # j (32 columns) fills a vector on its own
    assert plan.block == ACC_LANES // 32
    assert plan.parallel >= 2  # n alone is one chunk; n x channel blocks is enough


def test_short_rows_take_the_row_loop_inside_too():
    plan = plan_block(CONV, [1, 256, 8, 8, 128, 1, 1], cores=2)
    assert plan.inner == 2  # 8 columns are less than a vector: rows x columns = 64 lanes
    assert plan.block == 1


def test_channel_block_divides_the_channels():
    assert plan_block(CONV, [1, 24, 16, 16, 8, 3, 3], cores=2).block == 4
    assert plan_block(CONV, [1, 3, 16, 16, 8, 3, 3], cores=2).block == 1


def test_matmul_keeps_its_output_columns_innermost():
    plan = plan_block(["S", "S", "S", "R"], [1, 64, 512, 128], cores=2)
    assert plan.inner == 1 and plan.parallel >= 1


def test_elementwise_block_is_parallel_outside_its_last_loop_only_when_large():
    big = plan_block(["S", "S", "S", "S"], [1, 64, 64, 64], cores=2)
    assert big == BlockPlan(inner=0, block=1, parallel=2, vector=16)
    small = plan_block(["S", "S", "S", "S"], [1, 4, 8, 8], cores=2)
    assert small.is_noop and MIN_PARALLEL_WORK > 4 * 8 * 8


def test_elementwise_last_loop_is_vectorized_by_tvm_in_whole_vectors_only():
    assert plan_block(["S", "S"], [4, 48], cores=1) == BlockPlan(vector=16)
    assert plan_block(["S", "S"], [4, 50], cores=1).vector == 0  # no whole vectors
    assert plan_block(CONV, [1, 64, 32, 32, 64, 3, 3], cores=2).vector == 0


def _scheduled_kernels(mod) -> dict[str, str]:
    fused = canonqnn.build.fuse(mod)
    scheduled = schedule_cpu(fused, plan_block, 2, targets.host_target())
    return {name: func.script() for name, func in _tvm.module_functions(scheduled).items()
            if name != "main"}


def _elementwise_module(make) -> object:
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type((1, 4, 8, 32), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(make(x)))
        bb.emit_func_output(out)
    return bb.get()


def test_requantizing_elementwise_kernels_run_vectorized_but_table_gathers_do_not():
    # LLVM's own loop vectorizer gives up on the requantization's llvm.arithmetic.fence: a
    # rescaling mul ran one value at a time until TVM vectorized it
    scale = _tvm.const(np.array([3], np.int8), "int8")
    mul = _elementwise_module(lambda x: elementwise.binary(
        elementwise.MUL, x, scale, QParams.make(0.1, 2), QParams.make(0.2, 0),
        QParams.make(0.3, -1)))
    (script,) = _scheduled_kernels(mul).values()
    assert "llvm.arithmetic.fence" in script and "T.vectorized(T.int64(16))" in script
    table = np.arange(-128, 128)[::-1].astype(np.int8)
    gather = _elementwise_module(lambda x: lut.lut(
        x, table, QParams.make(0.1, 0), QParams.make(0.1, 0), "reverse"))
    (script,) = _scheduled_kernels(gather).values()
    assert "T.vectorized" not in script  # a data-dependent read: LLVM's loop does better
    for mod in (mul, gather):
        x = np.random.default_rng(0).integers(-128, 128, (1, 4, 8, 32)).astype(np.int8)
        (want,) = canonqnn.reference.evaluate(mod, {"x": x}).outputs.values()
        (got,) = canonqnn.build(mod).run({"x": x}).values()
        np.testing.assert_array_equal(got, want)


def _row_sum(dtype: str):
    from tvm import te

    x = te.placeholder((4, 32, 64), dtype, name="x")
    k = te.reduce_axis((0, 64), "k")
    total = te.compute((4, 32), lambda i, j: te.sum(x[i, j, k], axis=k), name="row_sum")
    return te.create_prim_func([x, total])


def test_float_row_sums_interleave_rows_each_summed_in_order():
    import tvm

    target = targets.host_target()
    func = _row_sum("float32")
    scheduled = schedule_cpu(tvm.IRModule({"main": func}), plan_block, 2, target)["main"]
    script = scheduled.script()
    # the rows' loop inside the reduction, unrolled: eight chains of additions in flight
    assert "T.unroll(8)" in script and script.index("for k in") < script.rindex("T.unroll(8)")
    x = np.random.default_rng(0).standard_normal((4, 32, 64)).astype(np.float32)
    outs = []
    for f in (func, scheduled):
        lib = pipeline.compile_kernel(f, target)
        out = tvm.runtime.tensor(np.zeros((4, 32), np.float32))
        lib["main"](tvm.runtime.tensor(x), out)
        outs.append(out.numpy())
    np.testing.assert_array_equal(outs[1], outs[0])  # the same additions in the same order
    int_script = schedule_cpu(tvm.IRModule({"main": _row_sum("int32")}), plan_block, 2,
                              target)["main"].script()
    assert "T.unroll(8)" not in int_script  # LLVM reorders and vectorizes an integer sum


def test_one_core_gets_no_parallel_loop():
    assert plan_block(CONV, [1, 64, 32, 32, 64, 3, 3], cores=1).parallel == 0


def test_nest_with_spatial_loops_inside_the_reduction_is_left_alone():
    assert plan_block(["S", "R", "S"], [64, 64, 64], cores=2).is_noop


@pytest.fixture(scope="module")
def conv_model():
    q = models.quantize(models.resnet_like(resolution=32, width=2), fmt="qdq", activation="s8",
                        per_channel=True)
    mod, _ = canonqnn.canonicalize(canonqnn.load(q))
    return q, mod


def test_scheduled_kernels_run_parallel_loops_and_match_the_unscheduled_build(conv_model):
    q, mod = conv_model
    target = targets.host_target()
    fused = canonqnn.build.fuse(mod, target)
    scheduled = schedule_cpu(fused, plan_block, cores=2)
    text, fused_text = _tvm.script(scheduled), _tvm.script(fused)
    # only the schedule makes loops parallel (besides the row loops of a max pool and of a
    # stem's unfolded input, which take their threads from the target they are legalized for;
    # the stem unfolds on int16-pair CPUs)
    row_loops = sum(fused_text.count(f"{name}(")
                    for name in ("canonqnn_max_pool2d", "canonqnn_unfold_columns"))
    assert text.count("T.parallel") > fused_text.count("T.parallel") == row_loops
    one_core = tvm.target.Target({**dict(target.export()), "num-cores": 1})
    assert "T.parallel" not in _tvm.script(schedule_cpu(canonqnn.build.fuse(mod, one_core),
                                                        plan_block, cores=1))

    x = models.random_input(3, models.input_shape(q))
    plain = Built(pipeline.compile_fused(fused, target), module_io(mod), str(target)).run(
        {"input": x})
    built = canonqnn.build(mod).run({"input": x})
    assert np.array_equal(plain["logits"], built["logits"])
    session, _ = ort_session(q)
    assert np.array_equal(built["logits"], session.run(None, {"input": x})[0])
