"""A saved canonical module is checked when it is loaded (``module_check.check_module``, run by
``load_module``): a module canonqnn wrote loads as it was saved; one edited by hand into
something canonqnn could not have written is refused naming the file, the binding and the op
or the reason. The edits are the ``module-json`` family of ``tests/cli/hostile/files.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import tvm
from hostile.artifacts import onnx_conv
from hostile.files import (attr_float, graph_edit, interface_edit, io_input, regex_edit,
                           tensor_dtype_code)

import canonqnn
from canonqnn import _tvm
from canonqnn.api import load_module, save_module
from canonqnn.errors import InvalidModelError
from canonqnn.io import module_io
from canonqnn.module_check import check_module


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
