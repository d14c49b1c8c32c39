"""Runtimes in a child process (canonqnn.oracle.isolated): a runtime's exception is a Failed
error, a crash (signal, exit) a Crashed error naming the runtime and the signal, and canonqnn
lives on.
The factories the children run are in tests/_isolated_runners.py."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import _isolated_runners as runners
import _real_models as real
import canonqnn
from _onnx_chains import conv_then_separately_quantized
from _tflite import T, single_op
from canonqnn.errors import ParityError
from canonqnn.frontends.onnx import oracle as onnx_oracle
from canonqnn.frontends.onnx import runtime as onnx_runtime
from canonqnn.frontends.tflite import runtime as tflite_runtime
from canonqnn.oracle import isolated
from canonqnn.testing.tflite_writer import GraphWriter


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_runs_every_call_in_one_process_of_its_own_reused_once_closed():
    child = isolated.Child("doubling", runners.doubling, 1)
    pid = child.ready()
    assert pid != os.getpid()
    assert child(3) == (7, pid)
    doubled, again = child(np.arange(3, dtype=np.int8))
    np.testing.assert_array_equal(doubled, [1, 3, 5])
    assert again == pid
    child.close()
    with pytest.raises(canonqnn.CanonqnnError, match="the doubling process was closed"):
        child(1)
    with isolated.Child("doubling", runners.doubling, 10) as reused:
        assert reused.ready() == pid and reused(1) == (12, pid)


def test_an_exception_in_a_call_is_failed_with_its_first_line_and_the_child_serves_on():
    with isolated.Child("runtime", runners.raising_on_negative) as child:
        with pytest.raises(isolated.Failed) as info:
            child(-1)
        assert str(info.value) == "negative input -1"
        assert child(2) == 2


def test_an_exception_at_setup_is_failed_every_time_it_is_asked():
    child = isolated.Child("runtime", runners.raising_at_setup)
    for _ in range(2):
        with pytest.raises(isolated.Failed, match="^cannot set up$"):
            child.ready()
    with pytest.raises(isolated.Failed, match="^cannot set up$"):
        child(1)


@pytest.mark.parametrize("signal_name", ["SIGABRT", "SIGSEGV"])
def test_a_child_killed_by_a_signal_is_crashed_naming_the_runtime_and_the_signal(signal_name):
    child = isolated.Child("TFLite interpreter, reference kernels", runners.killed_by,
                           signal_name)
    pid = child.ready()
    with pytest.raises(isolated.Crashed) as info:
        child()
    assert str(info.value) == (
        f"the source runtime (TFLite interpreter, reference kernels) crashed on this model "
        f"({signal_name}): the crash is in that runtime, not in canonqnn")
    assert info.value.how == signal_name and isinstance(info.value, ParityError)
    assert _gone(pid)
    child.close()
    with isolated.Child("doubling", runners.doubling, 0) as next_child:
        assert next_child.ready() != pid


def test_a_child_that_exits_is_crashed_with_its_exit_status():
    with pytest.raises(isolated.Crashed, match=r"\(exit status 3\)"):
        isolated.Child("onnxruntime", runners.exiting, 3)()


def test_a_result_that_does_not_pickle_is_failed_not_a_hang():
    with (isolated.Child("runtime", runners.unpicklable_result) as child,
          pytest.raises(isolated.Failed, match="pickle")):
        child()


def _aborting_tflite() -> bytes:
    """An ADD whose output scale is 1e38: the interpreter's Prepare aborts (SIGABRT)."""
    return single_op("ADD", [T((1, 4), scale=0.1), T((1, 4), scale=0.1)],
                     [T((1, 4), scale=1e38)])


def _postprocess_without_options() -> bytes:
    """A TFLite_Detection_PostProcess with no custom options: the interpreter's Prepare reads
    a null map (SIGSEGV)."""
    g = GraphWriter()
    box = g.tensor("box", (1, 64, 4), "float32")
    cls = g.tensor("cls", (1, 64, 4), "float32")
    anchors = g.tensor("anchors", (64, 4), "float32", real.ssd_anchors(8, 1))
    outs = [g.tensor(n, s, "float32") for n, s in
            [("boxes", (1, 5, 4)), ("classes", (1, 5)), ("scores", (1, 5)), ("num", (1,))]]
    g.custom_op(real.SSD_POSTPROCESS, [box, cls, anchors], outs, None)
    return g.finish([box, cls], outs)


@pytest.mark.parametrize("model, signal_name", [(_aborting_tflite, "SIGABRT"),
                                                (_postprocess_without_options, "SIGSEGV")],
                         ids=["output_scale_1e38", "postprocess_without_options"])
def test_the_tflite_interpreter_crashing_on_a_models_bytes_is_crashed(model, signal_name):
    """The runtime as parity starts it, on bytes no reader has checked (the TFLite reader
    refuses the first model before parity would start the interpreter)."""
    child = isolated.Child("TFLite interpreter, reference kernels",
                           tflite_runtime.tflite_runner, model(), "BUILTIN_REF", ["out0"],
                           False, {})
    with pytest.raises(isolated.Crashed, match=rf"\({signal_name}\): the crash is in that "
                                               "runtime, not in canonqnn"):
        child.ready()


def _add_tflite() -> bytes:
    return single_op("ADD", [T((1, 4), scale=0.1), T((1, 4), scale=0.1)],
                     [T((1, 4), scale=0.2)])


def test_parity_when_the_specification_runtime_crashes_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(tflite_runtime, "tflite_runner",
                        functools.partial(runners.tflite_crashing, crashing=("BUILTIN_REF",),
                                          at="setup"))
    with pytest.raises(isolated.Crashed) as info:
        canonqnn.parity(_add_tflite(), numerics="tflite-reference")
    assert str(info.value) == (
        "the source runtime (TFLite interpreter, reference kernels) crashed on this model "
        "(SIGSEGV): the crash is in that runtime, not in canonqnn")


def test_parity_when_onnxruntime_crashes_mid_run_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(onnx_runtime, "onnxruntime_runner", runners.onnxruntime_aborting)
    with pytest.raises(isolated.Crashed, match=r"^the source runtime \(onnxruntime\) crashed "
                                               r"on this model \(SIGABRT\)"):
        canonqnn.parity(conv_then_separately_quantized("Relu"), runs=1)


@pytest.mark.parametrize("at", ["setup", "run"])
def test_an_also_compared_tflite_runtime_that_crashes_is_reported_not_fatal(monkeypatch, at):
    monkeypatch.setattr(tflite_runtime, "tflite_runner",
                        functools.partial(runners.tflite_crashing, at=at,
                                          crashing=("BUILTIN_WITHOUT_DEFAULT_DELEGATES",
                                                    "BUILTIN")))
    result = canonqnn.parity(_add_tflite(), runs=2, numerics="tflite-reference")
    assert result.exact and result.reference.endswith("reference kernels "
                                                      "(OpResolverType.BUILTIN_REF)")
    also = result.extra["also_compared"]
    assert len(also) == 2
    for entry in also:
        assert entry["outputs"] == []
        assert entry["reference"].endswith(": crashed on this model (SIGSEGV); the crash is in "
                                           "that runtime, not in canonqnn")


def test_an_onnx_model_onnxruntime_refuses_is_a_parity_error_as_before():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"], domain="no.such.domain")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("no.such.domain", 1)])
    model.ir_version = 10
    with pytest.raises(isolated.Failed, match="^onnxruntime cannot run this model: "):
        onnx_oracle.ort_runtime(model, ["y"])
