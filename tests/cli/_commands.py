"""What the command-line tests share: the files a user's commands name, a process per command
(``hostile_runner.Server``: a fork of a process that imported canonqnn once, whose status,
stdout and stderr are the installed command's; ``test_hostile_inputs`` checks that they are),
and what every run must show: the status it promises, no traceback, nothing on stderr but
canonqnn's own lines (``canonqnn: note:``, ``canonqnn: error:``; other packages' logs only with
``--verbose``), and with ``--json`` one JSON document matching the command's schema
(``canonqnn.cli.schemas``)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import jsonschema
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from canonqnn.cli.schemas import schema_of
from canonqnn.testing import onnx_models, tflite_models
from hostile_runner import Server


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



def make_files(where: Path, program: bool) -> Path:
    """The files the README's commands name, and one of each other kind, in ``where``.
    ``program``: model.pt2 is a PT2E program (its sigmoid a lookup table; else only a ZIP
    archive, as a .pt2 is, for what needs no torch)."""
    onnx.save(onnx_models.quantize(onnx_models.resnet_like(), fmt="qdq", activation="u8",
                                   per_channel=True), where / "model.onnx")
    onnx.save(onnx_models.resnet_like(), where / "float.onnx")
    onnx.save(_detector(), where / "detector.onnx")
    x = onnx_models.random_input(0)
    np.save(where / "x.npy", x)
    np.savez(where / "feeds.npz", input=x)
    (where / "model.tflite").write_bytes(tflite_models.classifier())
    if program:
        from _pt2e import network, save

        save(network("gated_upsample"), where)
    else:
        with zipfile.ZipFile(where / "model.pt2", "w") as archive:
            archive.writestr("model/archive_format", "pt2")
    (where / "notes.onnx").write_text("a text file, not a model\n")
    return where


def command_runner():
    """A process per command (module fixture)."""
    server = Server()
    yield server
    server.close()


def run_command(runner, workdir, argv, status=0, timeout=600.0):
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


