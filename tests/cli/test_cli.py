"""The command line as a user drives it: outputs, files, exit codes, errors without tracebacks."""

from __future__ import annotations

import json
import os
import tarfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _onnx_chains import qdq_layer_norm
from canonqnn import cli
from canonqnn.api import load_module
from canonqnn.cli import EXIT_DIFFERS, EXIT_ERROR, commands, main
from canonqnn.io import module_io
from hostile.artifacts import onnx_conv


def _save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _qdq_model(op: str = "Relu", scale: float = 0.05, zp_dtype=np.int8, opset: int = 13,
               dq_attrs: dict | None = None, op_attrs: dict | None = None) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(0, zp_dtype), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant_in"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"], name="dequant_in",
                              **(dq_attrs or {})),
             helper.make_node(op, ["xf"], ["y"], name="the_op", **(op_attrs or {})),
             helper.make_node("QuantizeLinear", ["y", "s", "z"], ["yq"], name="quant_out"),
             helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["out"], name="dequant_out")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def test_parity_json_reports_outputs_ops_and_islands(tmp_path, quantized_model, capsys):
    path = _save(quantized_model("mobilenet_v1", "qoperator", "s8", True), tmp_path / "m.onnx")
    assert main(["parity", path, "--json", "--runs", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs"][0]["name"] == "logits"
    assert report["outputs"][0]["exact_fraction"] == 1.0
    assert report["outputs"][0]["max_abs_diff"] == 0
    assert report["canonical_ops"]["conv2d"] == 9
    assert report["float_islands"] == []


def test_convert_build_run_keep_names_and_match_parity_inputs(tmp_path, quantized_model, capsys):
    model_path = _save(quantized_model("resnet", "qdq", "s8", False), tmp_path / "r.onnx")
    module_path = str(tmp_path / "r.canonqnn.json")
    assert main(["convert", model_path, "-o", module_path]) == 0
    assert main(["inspect", module_path]) == 0
    assert "R.canonqnn.conv2d" in capsys.readouterr().out
    lib = str(tmp_path / "r.so")
    assert main(["build", module_path, "-o", lib]) == 0
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "out.npz")
    assert main(["run", lib, "--input", f"input={tmp_path / 'x.npy'}", "-o", out]) == 0
    with np.load(out) as result:
        assert result.files == ["logits"]
        logits = result["logits"]
    np.savez(tmp_path / "feeds.npz", input=x)
    capsys.readouterr()
    assert main(["parity", model_path, "--input", str(tmp_path / "feeds.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"][0]["exact_fraction"] == 1.0
    import onnxruntime as ort
    ref = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    assert logits.shape == ref.shape


def test_build_for_another_architecture_without_a_cross_compiler_writes_object_files(
        tmp_path, quantized_model, capsys, monkeypatch):
    monkeypatch.setenv("CANONQNN_CROSS_CC", "no-such-cross-compiler")
    model_path = _save(quantized_model("mobilenet_v1", "qdq", "u8", True), tmp_path / "m.onnx")
    target = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod"
    assert main(["build", model_path, "--target", target, "-o", str(tmp_path / "m.so")]) == \
        EXIT_ERROR
    err = capsys.readouterr().err
    assert "needs a C cross compiler on this host to link it" in err
    assert "or write the build as a .tar of object files (-o MODEL.tar)" in err
    assert main(["build", model_path, "--target", target]) == 0  # default: MODEL.tar
    assert f"wrote {tmp_path / 'm.tar'}" in capsys.readouterr().out
    with tarfile.open(tmp_path / "m.tar") as tar:
        assert any(name.endswith(".o") for name in tar.getnames())


def test_numerics_verify_and_reference_run_from_the_command_line(tmp_path, quantized_model,
                                                                 capsys):
    model_path = _save(quantized_model("mobilenet_v1", "qdq", "u8", True), tmp_path / "m.onnx")
    module = str(tmp_path / "m.json")
    assert main(["convert", model_path, "-o", module, "--numerics", "exact"]) == 0
    assert capsys.readouterr().out.startswith("numerics: exact\n")
    lib = str(tmp_path / "m.so")
    assert main(["build", module, "-o", lib, "--verify"]) == 0
    assert "verify: 2 random input(s), outputs equal to the numpy reference" in \
        capsys.readouterr().out
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    feed = f"input={tmp_path / 'x.npy'}"
    assert main(["run", lib, "--input", feed, "-o", str(tmp_path / "tvm.npz")]) == 0
    assert main(["run", "--reference", module, "--input", feed, "-o",
                 str(tmp_path / "spec.npz")]) == 0
    with np.load(tmp_path / "tvm.npz") as built, np.load(tmp_path / "spec.npz") as spec:
        np.testing.assert_array_equal(built["logits"], spec["logits"])
    capsys.readouterr()
    # a saved module keeps its profile: asking for another one is an error, not a silent mix
    assert main(["build", module, "--numerics", "onnxruntime-1.31-x86-avx2"]) == EXIT_ERROR
    assert "was converted for numerics exact; convert the model again with --numerics " \
        "onnxruntime-1.31-x86-avx2" in capsys.readouterr().err
    assert main(["run", "--reference", lib, "--input", feed]) == EXIT_ERROR
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["convert", model_path, "--numerics", "no-such"])
    assert exit_.value.code == 2 and "invalid choice: 'no-such'" in capsys.readouterr().err


def test_parity_names_the_profiles(tmp_path, quantized_model, capsys):
    path = _save(quantized_model("mobilenet_v1", "qdq", "u8", True), tmp_path / "m.onnx")
    assert main(["parity", path, "--runs", "1", "--numerics", "exact"]) == 0
    out = capsys.readouterr().out
    assert "numerics: exact (this host's runtime: onnxruntime-1.31-x86-" in out
    assert "PARITY: bit-exact" in out


def test_float_island_is_reported_with_its_reason(tmp_path, capsys):
    assert main(["inspect", _save(qdq_layer_norm(), tmp_path / "ln.onnx")]) == 0
    text = capsys.readouterr().out
    assert "float islands (1)" in text and "relax.nn.layer_norm" in text
    assert "layer normalization has no canonical int8 op" in text


def test_parity_exit_status_is_zero_when_exact(tmp_path):
    assert main(["parity", _save(_qdq_model("Relu"), tmp_path / "relu.onnx")]) == 0
    assert EXIT_DIFFERS == 1


@pytest.mark.parametrize("make,needle", [
    (lambda p: p.write_text("this is not a model"), "not an ONNX model"),
    (lambda p: p.write_bytes(_qdq_model().SerializeToString()[:60]), "not an ONNX model"),
    (lambda p: _save(_qdq_model("Det"), p), "node 'the_op' (op Det)"),
    (lambda p: _save(_qdq_model(scale=0.0), p), "scale 0.0 is not a finite positive"),
    (lambda p: _save(_qdq_model(scale=-1.0), p), "scale -1.0 is not a finite positive"),
    (lambda p: _save(_qdq_model(scale=float("nan")), p), "scale nan is not a finite positive"),
    (lambda p: _save(_qdq_model(zp_dtype=np.int32, opset=21), p), "int32"),
    (lambda p: _save(_qdq_model(opset=21, dq_attrs={"block_size": 2}), p), "blocked"),
], ids=["not-onnx", "truncated", "unsupported-op", "zero-scale", "negative-scale", "nan-scale",
        "int32", "blocked"])
def test_bad_input_is_one_clear_error_without_traceback(tmp_path, capsys, make, needle):
    path = tmp_path / "bad.onnx"
    make(path)
    assert main(["convert", str(path), "-o", str(tmp_path / "o.json")]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("canonqnn: error: ") and needle in err, err
    assert "Traceback" not in err


def test_every_line_of_a_refusal_is_an_error_line(tmp_path, capsys):
    """A message of several lines (the unsupported nodes, then how to cut the model) is printed
    a ``canonqnn: error:`` line each: no line of stderr reads as other output."""
    model = _qdq_model("Det")
    model.graph.node.insert(3, helper.make_node("Det", ["xf"], ["d2"], name="second_det"))
    model.graph.output.append(helper.make_tensor_value_info("d2", TensorProto.FLOAT, None))
    assert main(["convert", _save(model, tmp_path / "m.onnx"), "-o", str(tmp_path / "o.json")]) \
        == EXIT_ERROR
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and all(line.startswith("canonqnn: error: ") for line in lines), lines
    assert any("node 'second_det' (op Det)" in line for line in lines), lines


@pytest.mark.parametrize("target", ["cuda", "llvm -mcpu=no-such-cpu"])
def test_a_refused_target_prints_only_the_refusal(tmp_path, capfd, target):
    """TVM and LLVM log what they guess about a target on the process's stderr (a CUDA version,
    a default CPU): a refused target prints the one error line only."""
    path = _save(_qdq_model(), tmp_path / "m.onnx")
    assert main(["build", path, "--target", target, "-o", str(tmp_path / "m.so")]) == EXIT_ERROR
    err = capfd.readouterr().err
    assert err.startswith(f"canonqnn: error: target {target!r}: ") and err.count("\n") == 1, err


def test_missing_file_is_an_error(tmp_path, capsys):
    assert main(["parity", str(tmp_path / "nope.onnx")]) == EXIT_ERROR
    assert "no such file" in capsys.readouterr().err


def test_ops_lists_every_canonical_op(capsys):
    from canonqnn.ops import REGISTRY
    assert main(["ops"]) == 0
    text = capsys.readouterr().out
    for name in REGISTRY:
        assert f"relax.canonqnn.{name}" in text


def test_patterns_lists_registered_patterns_and_a_models_matches(tmp_path, quantized_model,
                                                                  capsys):
    assert main(["patterns"]) == 0
    listing = capsys.readouterr().out
    assert "canonqnn.conv2d_lut  matches conv2d -> lut" in listing
    assert "canonqnn.softmax  matches softmax" in listing
    path = _save(quantized_model("mobilenet_v1", "qoperator", "u8", True), tmp_path / "m.onnx")
    assert main(["patterns", path, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [m["pattern"] for m in found].count("canonqnn.conv2d") == 9
    first = found[0]["summary"]  # the stem conv: per-channel symmetric int8 weights
    assert first.startswith("conv2d in ") and "per-channel[16] symmetric" in first


def test_dynamic_batch_is_one_with_a_note_and_shape_sets_another(tmp_path, quantized_model,
                                                                  capsys):
    model = quantized_model("resnet", "qdq", "s8", True)
    for value in (model.graph.input[0], model.graph.output[0]):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "N"
    path = _save(model, tmp_path / "dyn.onnx")
    note = ("canonqnn: note: the dynamic batch dimension 'N' of input 'input' was set to 1; for "
            "batch B, give --shape input=Bx3x32x32 (load(..., input_shapes=...))\n")
    module = tmp_path / "o.json"
    assert main(["convert", path, "-o", str(module)]) == 0
    captured = capsys.readouterr()
    assert captured.err == note and captured.out.endswith(f"wrote {module}\n")
    assert module_io(load_module(module)).inputs[0].shape == (1, 3, 32, 32)
    assert main(["parity", path, "--runs", "1"]) == 0
    assert f"note: {note.removeprefix('canonqnn: note: ')}" in capsys.readouterr().out
    assert main(["convert", path, "--shape", "input=2x3x32x32", "-o", str(module)]) == 0
    assert capsys.readouterr().err == ""
    assert module_io(load_module(module)).inputs[0].shape == (2, 3, 32, 32)
    assert main(["parity", path, "--shape", "input=2x3x32x32", "--runs", "1"]) == 0
    assert main(["convert", path, "--shape", "input=1xAx3"]) == EXIT_ERROR


def test_inspect_built_lists_kernels_for_a_model_and_for_its_library(tmp_path, quantized_model,
                                                                      capsys):
    model_path = _save(quantized_model("mobilenet_v1", "qdq", "s8", True), tmp_path / "m.onnx")
    assert main(["inspect", "--built", model_path]) == 0
    text = capsys.readouterr().out
    assert "canonqnn_conv2d" in text and "int8 between every pair of canonical kernels" in text
    lib = str(tmp_path / "m.so")
    assert main(["build", model_path, "-o", lib]) == 0
    capsys.readouterr()
    assert main(["inspect", "--built", lib, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["non_int8_edges"] == [] and report["unfused_luts"] == []
    assert sum("canonqnn_conv2d" in k["name"] for k in report["kernels"]) == 9


def test_tflite_model_converts_builds_and_passes_parity(tmp_path, capsys):
    from canonqnn.testing import tflite_models as models

    path = tmp_path / "classifier.tflite"
    path.write_bytes(models.classifier(inputs=16, hidden=(8,), num_classes=4))
    assert main(["convert", str(path)]) == 0
    assert (tmp_path / "classifier.canonqnn.json").exists()
    capsys.readouterr()
    assert main(["parity", str(path), "--runs", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # the specification: the interpreter's default configuration on this host (its profile
    # probed), the other op resolvers beside it
    from canonqnn.frontends.tflite import oracle, runtime

    spec = oracle.SPECIFIED_BY[runtime.profile().name]
    assert report["exact"] and report["reference"].endswith(f"(OpResolverType.{spec})")
    assert report["numerics"] == runtime.profile().name
    assert [o["reference"].split("(")[-1] for o in report["also_compared"]] == \
        [f"OpResolverType.{r})" for r, _ in oracle.RESOLVERS if r != spec]
    assert main(["parity", str(path), "--shape", "input=1x16"]) == EXIT_ERROR
    assert "apply to ONNX models only" in capsys.readouterr().err


def test_outputs_cuts_the_model_for_every_command(tmp_path, capsys):
    """--outputs names inner tensors: convert, inspect and parity work on the model up to them."""
    path = _save(_qdq_model("Det"), tmp_path / "det.onnx")  # Det: neither canonqnn nor TVM
    assert main(["convert", path, "-o", str(tmp_path / "m.json")]) == EXIT_ERROR
    assert "--outputs xf" in capsys.readouterr().err
    assert main(["convert", path, "--outputs", "xf", "-o", str(tmp_path / "m.json")]) == 0
    assert main(["parity", path, "--outputs", "xf", "--runs", "1"]) == 0
    assert main(["inspect", path, "--outputs", ","]) == EXIT_ERROR
    assert "--outputs ','" in capsys.readouterr().err


def test_an_unexpected_exception_is_one_line_that_says_bug_and_debug_shows_the_traceback(
        monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("something canonqnn did not foresee\nsecond line")

    monkeypatch.setattr(commands, "cmd_ops", broken)
    assert main(["ops"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("canonqnn: internal error (a bug in canonqnn")
    assert "RuntimeError: something canonqnn did not foresee; --debug" in err
    assert main(["--debug", "ops"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "second line" in err


@pytest.mark.parametrize("runs", ["0", "-2"])
def test_parity_with_no_run_is_an_error_not_a_pass(tmp_path, quantized_model, capsys, runs):
    path = _save(quantized_model("conv_classifier"), tmp_path / "m.onnx")
    assert main(["parity", path, "--runs", runs]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err == f"canonqnn: error: parity needs at least one run, not {runs}\n"


def test_an_interrupt_is_one_line_and_the_shells_status(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "cmd_ops", interrupted)
    assert main(["ops"]) == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "canonqnn: interrupted\n"


def test_a_module_file_whose_graph_refers_back_to_its_root_is_refused_not_a_crash(
        tmp_path, quantized_model):
    """TVM's load_json follows a reference back to the root into a cycle and crashes the
    process (SIGSEGV): the graph is checked first. Run in a child process, so that a crash
    fails the test instead of ending pytest."""
    import subprocess
    import sys

    path = tmp_path / "m.canonqnn.json"
    assert main(["convert", _save(quantized_model("conv_classifier"), tmp_path / "m.onnx"),
                 "-o", str(path)]) == 0
    graph = json.loads(path.read_text())
    array = next(n for n in graph["nodes"] if n["type"] == "ffi.Array" and n.get("data"))
    array["data"][0] = graph["root_index"]
    path.write_text(json.dumps(graph))
    for command in ("inspect", "build"):
        # (cwd: from the repository's root, ``-m`` would import its canonqnn/ folder, which
        # holds neither canonqnn.frontends nor canonqnn.rewrites, instead of the installed one)
        done = subprocess.run([sys.executable, "-m", "canonqnn.cli", command, str(path)],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == EXIT_ERROR, (command, done.returncode, done.stderr)
        assert done.stderr.startswith(f"canonqnn: error: {path}: not a canonqnn module file "
                                      "(node ") and "refers to node" in done.stderr


# ---------------------------------------------------------------- output files and --shape
def _one_error(capsys) -> str:
    """The message of the single ``canonqnn: error:`` line the command printed."""
    err = capsys.readouterr().err
    assert err.startswith("canonqnn: error: ") and err.count("\n") == 1, err
    return err[len("canonqnn: error: "):-1]


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if a command converts a model or reads its inputs."""
    def work(*args, **kwargs):
        pytest.fail("the command did work before checking its output file")

    monkeypatch.setattr(commands, "_canonical", work)
    monkeypatch.setattr(commands, "parse_inputs", work)


@pytest.mark.parametrize("command", [["convert", "m.onnx", "-o"], ["build", "m.onnx", "-o"],
                                     ["run", "m.so", "--input", "x=x.npy", "-o"],
                                     ["convert", "m.onnx", "--script"]],
                         ids=["convert", "build", "run", "convert-script"])
def test_an_output_in_a_missing_directory_is_refused_before_any_work(tmp_path, capsys, no_work,
                                                                     command):
    out = tmp_path / "no" / "such" / "out"
    assert main([*command, str(out)]) == EXIT_ERROR
    assert _one_error(capsys) == f"output {str(out)!r}: directory {str(out.parent)!r} does " \
                                 "not exist"


@pytest.mark.parametrize("command", [["convert", "m.onnx", "-o"], ["build", "m.onnx", "-o"],
                                     ["run", "m.so", "--input", "x=x.npy", "-o"]],
                         ids=["convert", "build", "run"])
def test_an_output_that_is_a_directory_is_refused_before_any_work(tmp_path, capsys, no_work,
                                                                  command):
    assert main([*command, str(tmp_path)]) == EXIT_ERROR
    assert _one_error(capsys) == f"output {str(tmp_path)!r} is a directory; give a file name"


def test_a_negative_seed_is_refused_before_any_work(capsys, no_work):
    assert main(["parity", "m.onnx", "--seed", "-1"]) == EXIT_ERROR
    assert _one_error(capsys) == "--seed -1: the seed must be 0 or more"


def test_convert_to_a_full_device_is_an_error_not_a_short_file(tmp_path, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    assert main(["convert", _save(onnx_conv(), tmp_path / "m.onnx"), "-o", "/dev/full"]) \
        == EXIT_ERROR
    assert _one_error(capsys) == "cannot write '/dev/full': No space left on device"


def _conv_with_dynamic_height_and_width() -> onnx.ModelProto:
    model = onnx_conv(out_shape=[1, 8, "H", "W"])
    for dim, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], "HW"):
        dim.Clear()
        dim.dim_param = name
    return model


@pytest.mark.parametrize("shape, model_shape", [
    ("1x4x9x9", "1x4x6x6"), ("1x4x6", "1x4x6x6"), ("1x4x6x6x1", "1x4x6x6"),
    ("0x4x6x6", "1x4x6x6"),
], ids=["contradicts-static-dim", "lower-rank", "higher-rank", "zero-static-dim"])
def test_a_shape_contradicting_the_static_model_is_refused(tmp_path, capsys, shape, model_shape):
    path = _save(onnx_conv(), tmp_path / "m.onnx")
    assert main(["convert", path, "-o", str(tmp_path / "m.json"), "--shape", f"x={shape}"]) \
        == EXIT_ERROR
    assert _one_error(capsys) == (f"input 'x': the shape {shape} given for it contradicts the "
                                  f"model's {model_shape} (only its dynamic dimensions can be "
                                  "set, each to 1 or more)")
    assert not (tmp_path / "m.json").exists()


def test_a_zero_for_a_dynamic_dimension_is_refused(tmp_path, capsys):
    path = _save(_conv_with_dynamic_height_and_width(), tmp_path / "dyn.onnx")
    assert main(["convert", path, "-o", str(tmp_path / "m.json"), "--shape", "x=1x4x0x6"]) \
        == EXIT_ERROR
    assert _one_error(capsys) == ("input 'x': the shape 1x4x0x6 given for it contradicts the "
                                  "model's 1x4x?x? (only its dynamic dimensions can be set, "
                                  "each to 1 or more)")


def test_a_shape_naming_no_input_is_refused(tmp_path, capsys):
    path = _save(onnx_conv(), tmp_path / "m.onnx")
    assert main(["convert", path, "-o", str(tmp_path / "m.json"), "--shape", "x=1x4x6x6",
                 "--shape", "nope=1x4x6x6"]) == EXIT_ERROR
    assert _one_error(capsys) == ("shapes given for ['nope'], which are not inputs of the "
                                  "model (its inputs: ['x'])")


def test_a_shape_sets_the_dynamic_dimensions_of_a_model(tmp_path, capsys):
    path = _save(_conv_with_dynamic_height_and_width(), tmp_path / "dyn.onnx")
    module = tmp_path / "m.json"
    assert main(["convert", path, "-o", str(module), "--shape", "x=1x4x5x7"]) == 0
    assert capsys.readouterr().out.endswith(f"wrote {module}\n")
    io = module_io(load_module(module))
    assert [(t.name, t.dtype, t.shape) for t in (*io.inputs, *io.outputs)] == \
        [("x", "float32", (1, 4, 5, 7)), ("y", "float32", (1, 8, 5, 7))]
