"""``canonqnn demo``: the whole flow on a small ResNet-style CNN quantized by onnxruntime."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx

from .. import progress
from ..api import load
from ..build import build, load_built
from ..oracle.parity import ParityResult, parity
from ..rewrites import Report, canonicalize
from . import onnx_models

MODEL, LIBRARY = "resnet_like_qdq_u8.onnx", "resnet_like_qdq_u8.so"


@dataclass
class DemoResult:
    workdir: str | None  # where the files are kept (None: a temporary folder, deleted)
    report: Report
    target: str
    parity: ParityResult

    def to_json(self) -> dict[str, Any]:
        from ..build.targets import target_config

        where = self.workdir
        return {"workdir": where, "kept": where is not None,
                "model": os.path.join(where, MODEL) if where is not None else None,
                "library": os.path.join(where, LIBRARY) if where is not None else None,
                "report": self.report.to_json(), "target": target_config(self.target),
                "parity": self.parity.to_json()}


def run_demo(workdir: str | None = None,
             say: Callable[[str], Any] | None = print) -> DemoResult:
    """Quantize, convert, build and check parity, telling each step with ``say`` (None:
    silently). The files are written to ``workdir`` and kept there, or to a temporary folder
    deleted at the end."""
    def tell(text: str) -> None:
        if say is not None:
            say(text)

    with tempfile.TemporaryDirectory(prefix="canonqnn-demo-") as tmp:
        where = workdir or tmp
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, MODEL)
        tell("1. quantizing a ResNet-style CNN with onnxruntime.quantization.quantize_static "
             "(QDQ, uint8 activations, per-channel int8 weights)")
        with progress.step("quantizing with onnxruntime"):
            model = onnx_models.quantize(onnx_models.resnet_like(), fmt="qdq", activation="u8",
                                         per_channel=True)
        onnx.save(model, path)
        tell(f"   {_shown(path, workdir)}")
        tell("2. converting to canonical ops")
        mod, report = canonicalize(load(path))
        tell("   " + report.summary().replace("\n", "\n   "))
        tell("3. building integer code with tvm.compile")
        lib = os.path.join(where, LIBRARY)
        built = build(mod)
        built.export(lib)
        load_built(lib)
        tell(f"   {_shown(lib, workdir)}")
        tell("4. parity against onnxruntime on 3 random inputs")
        result = parity(path, runs=3)
        tell("   " + result.summary().replace("\n", "\n   "))
        tell(f"the files are in {workdir}" if workdir else
             "the files were in a temporary folder, deleted now (--workdir DIR keeps them)")
        return DemoResult(workdir, report, built.target, result)


def _shown(path: str, workdir: str | None) -> str:
    """A file as the demo names it: its path where it is kept, else its name."""
    return path if workdir else f"{os.path.basename(path)} (temporary)"

