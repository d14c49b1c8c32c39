"""A saved canonical module is checked when it is loaded (``module_check.check_module``, run by
``load_module``): a module canonqnn wrote loads as it was saved; one edited by hand into
something canonqnn could not have written is refused naming the file, the binding and the op
or the reason. The edits are the ``module-json`` family of ``tests/cli/hostile/files.py`` and
the ``module-bombs`` family of ``tests/cli/hostile/module_bombs.py``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tvm

import canonqnn
from canonqnn import _tvm
from canonqnn.api import load_module, save_module
from canonqnn.errors import InvalidModelError
from canonqnn.io import module_io
from canonqnn.ops.module_check import check_module
from hostile.artifacts import onnx_conv
from hostile.files import (
    attr_float,
    graph_edit,
    interface_edit,
    io_input,
    regex_edit,
    tensor_dtype_code,
)
from hostile.module_bombs import (
    conv_argument,
    conv_attr_as,
    conv_payload,
    doubling_arrays,
    nested_arrays,
    root_literal,
    with_module_attr,
)


@pytest.fixture(scope="module")
def module():
    return canonqnn.canonicalize(canonqnn.load(onnx_conv()))[0]


@pytest.fixture(scope="module")
def text(module) -> str:
    return _tvm.save_json(module)


@pytest.fixture(scope="module")
def bindings(module) -> dict[str, str]:
    """The name of ``main``'s binding of each op: ``{"relax.canonqnn.conv2d": "lv8", ...}``."""
    return {_tvm.op_name(value): _tvm.var_name(var)
            for var, value in _tvm.function_bindings(module["main"]) if _tvm.op_name(value)}


def test_a_saved_module_loads_back_as_it_was_saved(module, tmp_path):
    path = tmp_path / "m.canonqnn.json"
    save_module(module, path)
    loaded = load_module(path)
    tvm.ir.assert_structural_equal(loaded, module)
    assert module_io(loaded) == module_io(module)


def _refusal(text: str, edit: Callable[[str], str], tmp_path) -> str:
    """The reason ``load_module`` gives for ``text`` edited by ``edit`` (after the path)."""
    edited = edit(text)
    assert edited != text, "the edit changed nothing"
    path = tmp_path / "m.canonqnn.json"
    path.write_text(edited)
    with pytest.raises(InvalidModelError) as info:
        load_module(path)
    assert str(info.value).startswith(f"{path}: "), str(info.value)
    return str(info.value)[len(f"{path}: "):]


def test_a_canonical_op_retargeted_to_another_is_refused_naming_binding_and_op(
        text, bindings, tmp_path):
    reason = _refusal(text, regex_edit(r"relax\.canonqnn\.conv2d", "relax.canonqnn.add"),
                      tmp_path)
    conv = bindings["relax.canonqnn.conv2d"]
    assert reason.startswith(f"binding {conv!r} of main (op relax.canonqnn.add): "), reason


def test_a_bogus_rounding_is_refused_naming_binding_and_op(text, bindings, tmp_path):
    reason = _refusal(text, regex_edit(r'"(rne_f32|q31_double|q31_single)"', '"bogus"'),
                      tmp_path)
    conv = bindings["relax.canonqnn.conv2d"]
    assert reason == f"binding {conv!r} of main: relax.canonqnn.conv2d: unknown rounding 'bogus'"


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_non_finite_float_attribute_is_refused_naming_binding_op_and_attribute(
        text, bindings, tmp_path, value):
    reason = _refusal(text, attr_float(value), tmp_path)
    conv = bindings["relax.canonqnn.conv2d"]
    prefix = f"binding {conv!r} of main: relax.canonqnn.conv2d: attribute "
    assert reason.startswith(prefix) and reason.endswith(" is not finite"), reason
    assert reason[len(prefix):-len(" is not finite")].endswith("_scale"), reason


def test_an_int4_dtype_is_refused_naming_the_binding(text, bindings, tmp_path):
    reason = _refusal(text, regex_edit(r'"int8"', '"int4"', count=0), tmp_path)
    quantize = bindings["relax.quantize"]  # the first binding of int8 (now int4) data
    assert reason.startswith(f"binding {quantize!r} of main has dtype int4, which canonqnn "
                             "does not build (it builds bool, "), reason


def test_a_constant_of_an_unknown_dtype_code_is_refused_naming_its_binding(
        text, bindings, tmp_path):
    reason = _refusal(text, graph_edit(tensor_dtype_code), tmp_path)
    quantize = bindings["relax.quantize"]  # its scale is the first constant of the file
    assert reason.startswith(f"a constant of binding {quantize!r} of main is unreadable: "), \
        reason
    assert "99" in reason


@pytest.mark.parametrize("key, value, says", [
    ("dtype", "int8", "input 'x' is int8 [1, 4, 6, 6], the module has float32 [1, 4, 6, 6]"),
    ("shape", [1, 4, 7, 7], "input 'x' is float32 [1, 4, 7, 7], the module has float32 "
                            "[1, 4, 6, 6]"),
])
def test_a_recorded_interface_contradicting_mains_input_is_refused(text, tmp_path, key, value,
                                                                   says):
    reason = _refusal(text, interface_edit(io_input(key, value)), tmp_path)
    assert reason == f"the recorded interface says {says}"


def test_a_recorded_interface_without_outputs_is_refused(text, tmp_path):
    reason = _refusal(text, interface_edit(lambda io: io.update(outputs=[])), tmp_path)
    assert reason == "the recorded interface has 0 outputs, main returns 1"


def test_a_module_without_main_is_refused():
    with pytest.raises(InvalidModelError, match="^where: the module has no main function$"):
        check_module(tvm.IRModule(), "where")


@pytest.mark.parametrize("name, values, says", [
    ("w_scale", lambda v: np.resize(v, 4), "argument w_scale has shape [4]: it holds one value "
                                           "or one per output channel ([8])"),
    ("w_zp", lambda v: np.resize(v, 4), "argument w_zp has shape [4]: it holds one value or "
                                        "one per output channel ([8])"),
    ("w_scale", lambda v: v.reshape(2, 4), "argument w_scale has shape [2, 4]: it holds one "
                                           "value or one per output channel ([8])"),
    ("bias", lambda v: np.resize(v, 4), "argument bias of 4 values, not one per output channel "
                                        "(the output has 8 channels)"),
    ("bias", lambda v: v[0], "argument bias of 1 value, not one per output channel (the output "
                             "has 8 channels)"),
])
def test_a_channel_argument_of_another_shape_is_refused_naming_binding_op_and_argument(
        text, bindings, tmp_path, name, values, says):
    reason = _refusal(text, conv_argument(name, values), tmp_path)
    conv = bindings["relax.canonqnn.conv2d"]
    assert reason == f"binding {conv!r} of main: relax.canonqnn.conv2d: {says}"


@pytest.mark.parametrize("name", ["w_scale", "w_zp"])
@pytest.mark.parametrize("values", [lambda v: v[:1], lambda v: v[0]], ids=["[1]", "[]"])
def test_one_weight_scale_or_zero_point_for_every_channel_is_accepted(text, tmp_path, name,
                                                                      values):
    path = tmp_path / "m.canonqnn.json"
    path.write_text(conv_argument(name, values)(text))
    load_module(path)


@pytest.mark.parametrize("name, dtype", [("w_scale", "float32"), ("bias", "int32")])
def test_a_constant_holding_another_shape_than_its_type_is_refused(text, bindings, tmp_path,
                                                                   name, dtype):
    reason = _refusal(text, conv_payload(name, 4), tmp_path)
    conv = bindings["relax.canonqnn.conv2d"]
    assert reason == (f"a constant of binding {conv!r} of main is recorded as {dtype} [8] but "
                      f"holds {dtype} [4]")


@pytest.mark.parametrize("name, other, says", [
    ("x_scale", "strides", "attribute x_scale is not one number (a list of 2)"),
    ("out_zp", "padding", "attribute out_zp is not one number (a list of 4)"),
    ("act_max", "dilation", "attribute act_max is not one integer (a list of 2)"),
    ("act_min", "rounding", "attribute act_min is not one integer (str)"),
])
def test_a_quantization_attribute_of_another_kind_is_refused(text, bindings, tmp_path, name,
                                                             other, says):
    reason = _refusal(text, conv_attr_as(name, other), tmp_path)
    conv = bindings["relax.canonqnn.conv2d"]
    assert reason == f"binding {conv!r} of main: relax.canonqnn.conv2d: {says}"


@pytest.mark.parametrize("root", ["None", "ffi.Array", "ffi.Map"])
def test_a_file_whose_graph_is_not_a_module_is_refused(text, tmp_path, root):
    reason = _refusal(text, root_literal({"type": root, "data": []} if root != "None"
                                         else {"type": root}), tmp_path)
    assert reason == f"not a canonqnn module file (its root is {root}, not ir.IRModule)"


@pytest.mark.parametrize("edit, says", [
    (with_module_attr("deep", nested_arrays(3000)), "is nested more than 256 levels deep"),
    (with_module_attr("dag", doubling_arrays(80)), "expand to more than"),
])
def test_a_module_nested_too_deep_or_expanding_too_far_is_refused_before_tvm_reads_it(
        text, tmp_path, edit, says):
    reason = _refusal(text, edit, tmp_path)
    assert reason.startswith("not a canonqnn module file (") and says in reason, reason


def _concat_module(in_scales: list) -> tvm.IRModule:
    """``main(a, b)``: a canonical concat of two int8 tensors with ``in_scales``."""
    from canonqnn.ops.movement import CONCAT

    relax = tvm.relax
    a, b = (relax.Var(n, relax.TensorType((1, 4), "int8")) for n in "ab")
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(CONCAT.call([a, b], dict(
                axis=1, in_scales=in_scales, in_zps=[0, 0], out_scale=0.1, out_zp=0,
                rounding="rne_f32", source_dtype="int8")))
        bb.emit_func_output(out)
    return bb.get()


def test_one_scale_per_input_of_a_concat_is_accepted_and_another_count_refused():
    check_module(_concat_module([0.1, 0.2]), "where")
    with pytest.raises(InvalidModelError) as info:
        check_module(_concat_module([0.1, 0.2, 0.3]), "where")
    assert str(info.value).endswith(": relax.canonqnn.concat: attribute in_scales holds 3 "
                                    "values for 2 inputs"), str(info.value)
