"""Conv forms chosen by measurement (``build --tune``): every form a conv can take timed in
the contexts it runs in, the fastest recorded and taken by later builds, results exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tvm import relax

import canonqnn
from canonqnn import _tvm
from canonqnn.build import builder, form_tuning, schedule, targets
from canonqnn.build import isa as dot_isa
from canonqnn.build.forms import choice, dot
from canonqnn.build.forms import conv as conv_forms
from canonqnn.errors import CanonqnnError
from canonqnn.ops import conv, elementwise, reference
from canonqnn.qparams import QParams

SHAPE = (1, 16, 14, 14)  # a 3x3 conv of 14-wide rows: output channels in lanes or rows


def _conv(rng, x, o=16):
    c = _tvm.shape_of(x)[1]
    return conv.conv2d(
        x, _tvm.const(rng.integers(-128, 128, (o, c, 3, 3)).astype(np.int8), "int8"),
        rng.integers(-5000, 5000, o).astype(np.int32), QParams.make(0.05, 3),
        QParams.make(rng.uniform(0.002, 0.02, o).astype(np.float32), np.zeros(o, np.int8),
                     axis=0), QParams.make(0.9, -7), strides=(1, 1), padding=(1, 1, 1, 1),
        dilation=(1, 1), groups=1)


def _module():
    """Two convs of one shape, the second followed by a residual add fused into its kernel."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type(SHAPE, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(_conv(rng, x))
            z = bb.emit(_conv(rng, y))
            out = bb.emit_output(bb.emit(elementwise.binary(
                elementwise.ADD, z, y, QParams.make(0.9, -7), QParams.make(0.9, -7),
                QParams.make(1.3, 4))))
        bb.emit_func_output(out)
    return bb.get()


def _conv_calls(mod):
    return [call for _, call in _tvm.call_bindings(mod["main"])[0]
            if _tvm.op_name(call) == conv.CONV2D.relax_name]


def _plans(mod, choices) -> list[str]:
    with targets.host_target(), choice.chosen(choices):
        fused = builder.fuse(mod)
    return [key for name, func in _tvm.module_functions(fused).items() if "conv2d" in name
            for annotations in schedule.root_block_annotations(func)
            for key in annotations if key in dot_isa.BLOCK_PLANS]


@pytest.mark.skipif(dot.host_isa() is None, reason="no int8 dot-product instruction here")
def test_each_conv_shape_is_timed_in_every_form_it_can_take_and_the_fastest_recorded(tmp_path):
    mod = _module()
    choices, measured, found = form_tuning.choose_forms(mod, targets.host_target(),
                                                        str(tmp_path), True, builder.fuse)
    assert (measured, found) == (1, 0)  # the two convs share one shape
    records = json.loads((tmp_path / form_tuning.FORMS_FILE).read_text())
    with targets.host_target():
        (key,) = {choice.form_key(call) for call in _conv_calls(mod)}
        forms = conv_forms.layouts(_conv_calls(mod)[0])
    assert list(records) == [key] and choices == {key: records[key]["form"]}
    times = records[key]["us"]
    assert len(forms) >= 2 and sorted(times) == sorted(forms)
    assert records[key]["form"] == min(times, key=times.get)
    # found again, not measured again
    assert form_tuning.choose_forms(mod, targets.host_target(), str(tmp_path), True,
                                    builder.fuse)[1:] == (0, 1)


def test_a_recorded_form_is_taken_over_the_rules_and_the_build_stays_exact(tmp_path):
    mod = _module()
    with targets.host_target():
        call = _conv_calls(mod)[0]
        key, forms = choice.form_key(call), conv_forms.layouts(call)
    if len(forms) < 2:
        pytest.skip("this CPU's ISA gives the conv one form")
    rules = _plans(mod, {})
    other = next(f for f in forms[1:] if f in ("rows", "channels"))
    forced = _plans(mod, {key: other})
    expected_plan = dot_isa.ROWS if other == "rows" else dot_isa.ANNOTATION
    assert forced == [expected_plan] * 2 and forced != rules
    (tmp_path / form_tuning.FORMS_FILE).write_text(json.dumps({key: {"form": other,
                                                                     "us": {}}}))
    built = canonqnn.build(mod, tuning_dir=tmp_path)
    assert built.forms == (0, 1)
    feeds = {"x": np.random.default_rng(1).integers(-128, 128, SHAPE).astype(np.int8)}
    (expected,) = reference.evaluate(mod, feeds).outputs.values()
    (got,) = built.run(feeds).values()
    np.testing.assert_array_equal(got, expected)


def test_a_record_of_forms_that_is_not_one_is_refused_naming_it(tmp_path):
    path = tmp_path / form_tuning.FORMS_FILE
    for text in ("{not json", json.dumps({"k": {"us": {}}}), "[1, 2]",
                 json.dumps({"k": {"form": "a form no conv takes", "us": {}}})):
        path.write_text(text)
        with pytest.raises(CanonqnnError, match="not a record of measured forms"):
            form_tuning.choose_forms(_module(), targets.host_target(), str(tmp_path), True,
                                     builder.fuse)


def test_a_build_for_another_cpu_measures_nothing(tmp_path, monkeypatch):
    arm = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod"
    assert form_tuning.choose_forms(_module(), arm, str(tmp_path), True,
                                    builder.fuse) == ({}, 0, 0)
    assert not (tmp_path / form_tuning.FORMS_FILE).exists()
    # code for this architecture with an extension this CPU lacks would stop on it
    monkeypatch.setattr(targets, "foreign_instructions", lambda target: ["amx-tile"])
    assert form_tuning.choose_forms(_module(), targets.host_target(), str(tmp_path), True,
                                    builder.fuse) == ({}, 0, 0)
    assert not (tmp_path / form_tuning.FORMS_FILE).exists()
