"""Every command on every kind of input, as a user runs them: each command line of the README as
written there, then each command on each kind of file (ONNX QDQ and float, TFLite, PyTorch
program, module file, library, something else), through the command-line process; and the
progress a user at a terminal sees (the README's ``parity model.pt2`` on a pseudo-terminal).

Each run is ``canonqnn ARGS`` in a process of its own (``hostile_runner.Server``: a fork of a
process that imported canonqnn once, whose status, stdout and stderr are the installed
command's; ``test_hostile_inputs`` checks that they are). What every run must show: the status
it promises, no traceback, nothing on stderr but canonqnn's own lines (``canonqnn: note:`` and
``canonqnn: error:``; other packages' logs only with ``--verbose``), and with ``--json`` one
JSON document matching the command's schema (``canonqnn.cli.schemas``)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.cli.schemas import schema_of
from canonqnn.testing import onnx_models, tflite_models
from hostile_runner import Server

ROOT = Path(__file__).resolve().parents[2]
# Run on a terminal by the installed command (``_on_a_terminal``), where its progress shows.
ON_A_TERMINAL = ("canonqnn parity model.pt2",)
DEVICE = "device:9190"  # how the README names a device: a device server run here in the tests
SLOW_LINES = ("--tune",)  # README lines that take minutes: run under -m slow


def readme_commands() -> list[str]:
    """The ``canonqnn`` command lines of the README's shell blocks, without their comments."""
    text = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            if line.startswith("canonqnn "):
                lines.append(shlex.join(shlex.split(line, comments=True)))
    return lines


def _detector() -> onnx.ModelProto:
    """A float head whose post-processing (NonMaxSuppression) sizes its output at run time."""
    def const(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    nodes = [helper.make_node("Mul", ["raw_boxes", "two"], ["boxes"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou"], ["picked"])]
    graph = helper.make_graph(
        nodes, "detector",
        [helper.make_tensor_value_info("raw_boxes", TensorProto.FLOAT, [1, 8, 4]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2, 8])],
        [helper.make_tensor_value_info("picked", TensorProto.INT64, None)],
        [const("two", np.float32(2)), const("k", np.array([3], np.int64)),
         const("iou", np.float32(0.5))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The files the README's commands name, and one of each other kind."""
    from _pt2e import network, save

    where = tmp_path_factory.mktemp("commands")
    onnx.save(onnx_models.quantize(onnx_models.resnet_like(), fmt="qdq", activation="u8",
                                   per_channel=True), where / "model.onnx")
    onnx.save(onnx_models.resnet_like(), where / "float.onnx")
    onnx.save(_detector(), where / "detector.onnx")
    x = onnx_models.random_input(0)
    np.save(where / "x.npy", x)
    np.savez(where / "feeds.npz", input=x)
    (where / "model.tflite").write_bytes(tflite_models.classifier())
    save(network("cnn"), where)
    (where / "notes.onnx").write_text("a text file, not a model\n")
    return where


@pytest.fixture(scope="module")
def device():
    """A device server on this host: what ``device:9190`` in the README stands for."""
    server = os.path.join(os.path.dirname(canonqnn.__file__), "build", "device_server.py")
    proc = subprocess.Popen([sys.executable, server, "--port", "19400", "--port-end", "19500"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("serving on "), line
    yield line.split()[-1]
    proc.terminate()
    proc.wait(30)


@pytest.fixture(scope="module")
def runner():
    server = Server()
    yield server
    server.close()


def _run(runner, workdir, argv, status=0, timeout=600.0):
    """``canonqnn ARGV`` in ``workdir``: its status as promised, no traceback, stderr only
    canonqnn's lines (unless --verbose), and its --json valid; returns the run."""
    run = runner.run(argv, cwd=workdir, timeout=timeout)
    assert run.status == status, run
    assert "Traceback" not in run.stderr, run
    if "--verbose" not in argv and "-v" not in argv:
        foreign = [line for line in run.stderr.splitlines() if not line.startswith("canonqnn: ")]
        assert not foreign, (argv, foreign)
    if "--json" in argv and status == 0:
        jsonschema.validate(json.loads(run.stdout), schema_of(argv))
    if status == 0:
        assert not [line for line in run.stderr.splitlines()
                    if line.startswith("canonqnn: error")], run
    return run


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(argv: list[str], cwd, timeout: float = 600.0) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal: its status and all it
    drew (escape sequences removed, carriage returns as line ends)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    drawn, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    text = _ESCAPES.sub("", drawn.decode(errors="replace")).replace("\r", "\n")
    return status, text


@pytest.mark.parametrize("line", [
    pytest.param(line, marks=[pytest.mark.slow] if any(s in line for s in SLOW_LINES) else [])
    for line in readme_commands()])
def test_each_readme_command_line_runs_as_written(runner, workdir, device, line):
    argv = [device if a == DEVICE else a for a in shlex.split(line)[1:]]
    if line in ON_A_TERMINAL:
        _shows_its_steps_on_a_terminal(argv, workdir)
        return
    run = _run(runner, workdir, argv)
    assert run.stdout.strip(), run  # each of these prints its result


def _shows_its_steps_on_a_terminal(argv: list[str], workdir: Path) -> None:
    """The installed ``canonqnn ARGV`` on a terminal draws each long step (the probe of
    ExecuTorch's XNNPACK, the build, the runs) while it runs; the result stays; nothing other
    packages print while they set up is drawn."""
    command = shutil.which("canonqnn")
    if command is None:
        pytest.fail("the canonqnn command is not installed (pip install .)")
    status, text = _on_a_terminal([command, *argv], workdir)
    assert status == 0, text
    spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    steps = {line.strip()[1:].strip() for line in text.splitlines()
             if line.strip()[:1] and line.strip()[0] in spinner}
    for step in ("reading model.pt2", "probing the numerics of ExecuTorch's XNNPACK on this host",
                 "converting to canonical ops", "building with tvm.compile",
                 "running the build and the source runtimes on 3 inputs"):
        assert any(s.startswith(step) for s in steps), (step, steps)
    assert "PARITY: bit-exact" in text and "Traceback" not in text
    assert "cpuinfo" not in text and "_pytree" not in text, text


def test_the_readme_names_every_command_and_a_model_of_each_format():
    argv = [shlex.split(line)[1:] for line in readme_commands()]
    assert {a[0] for a in argv} >= {"convert", "build", "run", "inspect", "parity", "ops",
                                    "patterns"}
    assert {"model.onnx", "model.tflite", "model.pt2", "model.canonqnn.json",
            "model.so"} <= {a for args in argv for a in args}
    assert not [a for args in argv for a in args if a.startswith("xnnpack-x86")], \
        "a host-specific profile in a command line is wrong on other host classes"


# Each command on each kind of input: (argv, status, what stderr or stdout must say).
MATRIX = [
    (["convert", "model.tflite", "--json", "-o", "tflite.canonqnn.json"], 0, None),
    (["convert", "float.onnx"], 0, "nothing was quantized"),
    (["convert", "model.canonqnn.json"], 2, "it is converted already"),
    (["convert", "model.so"], 2, "it is built already"),
    (["convert", "notes.onnx"], 2, "notes.onnx: not an ONNX model, it is a text file"),
    (["build", "model.canonqnn.json", "-o", "again.so", "--json"], 0, None),
    (["build", "model.tflite", "-o", "tflite.so", "--verify", "--json"], 0, None),
    (["build", "model.so"], 2, "canonqnn run model.so runs it"),
    (["run", "model.so", "--input", "feeds.npz", "--json"], 0, None),
    (["run", "tflite.so", "--input", "input=x_tflite.npy", "--json"], 0, None),
    (["run", "model.canonqnn.json", "--input", "feeds.npz"], 2,
     "canonqnn run --reference model.canonqnn.json"),
    (["run", "model.onnx", "--input", "feeds.npz"], 2, "build it (canonqnn build model.onnx)"),
    (["run", "model.so", "--input", "feeds.npz", "--numerics", "exact"], 2,
     "--numerics applies to --reference only"),
    (["run", "--reference", "model.canonqnn.json", "--input", "feeds.npz", "--json"], 0, None),
    (["inspect", "model.canonqnn.json", "--json"], 0, None),
    (["inspect", "model.tflite", "--json"], 0, None),
    (["inspect", "--built", "model.so", "--json"], 0, None),
    (["inspect", "model.so"], 2, "inspect --built model.so lists its kernels"),
    (["parity", "model.tflite", "--runs", "1", "--json"], 0, None),
    (["parity", "model.canonqnn.json"], 2, "needs the model it was converted from"),
    (["parity", "x.npy"], 2, "inputs are given with --input"),
    (["ops", "--json"], 0, None),
    (["ops", "--name", "nope"], 2, "no canonical op 'nope'"),
    (["patterns", "--json"], 0, None),
    (["patterns", "model.canonqnn.json", "--json"], 0, None),
    (["patterns", "model.tflite", "--json"], 0, None),
    (["demo", "--workdir", "kept", "--json"], 0, None),
    (["convert", "model.onnx", "-o", "quiet.canonqnn.json", "--quiet"], 0, None),
    (["parity", "model.tflite", "--runs", "1", "--verbose"], 0, "XNNPACK delegate"),
]


@pytest.mark.parametrize("argv, status, says", MATRIX, ids=[" ".join(m[0]) for m in MATRIX])
def test_each_command_on_each_kind_of_input(runner, workdir, argv, status, says):
    if not (workdir / "model.so").exists():  # made by the README's lines, when run alone
        _run(runner, workdir, ["build", "model.onnx", "-o", "model.so"])
        _run(runner, workdir, ["convert", "model.onnx", "-o", "model.canonqnn.json"])
    if "x_tflite.npy" in " ".join(argv):
        np.save(workdir / "x_tflite.npy", np.arange(-32, 32, dtype=np.int8).reshape(1, 64))
        _run(runner, workdir, ["build", "model.tflite", "-o", "tflite.so"])
    run = _run(runner, workdir, argv, status)
    if says is not None:
        assert says in run.stdout + run.stderr, run
    if status:
        assert not run.stdout, run  # an error writes nothing on stdout, with --json too
        assert run.stderr.startswith("canonqnn: error: "), run
    if "--quiet" in argv:
        assert not run.stdout and not run.stderr, run
    if argv[0] == "demo":  # its files kept where asked
        assert json.loads(run.stdout)["kept"]
        assert (workdir / "kept" / "resnet_like_qdq_u8.so").exists()


def test_a_module_files_report_is_its_own_not_an_empty_one(runner, workdir):
    run = _run(runner, workdir, ["inspect", "model.canonqnn.json", "--json"])
    report = json.loads(run.stdout)
    assert report["canonical_ops"]["conv2d"] == 8 and report["rules"] is None
    assert report["quantized"] and report["numerics"]
    run = _run(runner, workdir, ["build", "float.onnx", "-o", "float.so", "--json"])
    assert not json.loads(run.stdout)["report"]["quantized"]


@pytest.mark.parametrize("model, blocked, extra", [
    ("model.pt2", ["torch", "torchao", "executorch"], "torch"),
    ("model.tflite", ["tflite", "ai_edge_litert", "flatbuffers"], "tflite"),
])
def test_a_missing_extra_is_named_not_a_traceback(workdir, model, blocked, extra):
    code = (f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
            f"from canonqnn.cli import main; "
            f"sys.exit(main(['convert', {model!r}, '-o', 'unused.json']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("canonqnn: error: ") and done.stderr.count("\n") == 1
    assert f"pip install 'canonqnn[{extra}]'" in done.stderr
