"""Case enumeration and data loading for ``test_conformance.py``.

Two sources of single-op quantized ONNX cases:

- the shared conformance corpus ``../shared/conformance/onnx-ops`` (relative to the repo root;
  see its README.md): ``migraphx/``, ``onnx2c/``, ``onnx_backend/`` and ``patched/``;
- the onnx package's own node test cases for the quantization ops, generated in memory (the
  installed wheel ships no ``backend/test/data/node`` directory).

A ``Case`` gives its model, its input arrays keyed by graph input name and its stored
reference outputs keyed by graph output name. ``parameter_inputs`` names the graph inputs that
are quantization parameters (bound as constants with ``load(bind=...)``); everything else stays
a runtime input.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

REPO_ROOT = Path(__file__).resolve().parents[3]  # tests/frontends/onnx/<this file>
CORPUS = REPO_ROOT.parent / "shared" / "conformance" / "onnx-ops"
# Set by .ci/run: a missing corpus then fails the run instead of skipping its tests.
REQUIRE_CORPUS_ENV = "CANONQNN_REQUIRE_CORPUS"

SOURCES = ("migraphx", "onnx2c", "onnx_backend", "patched", "onnx_pkg")

# onnx.backend.test.case.node modules whose export() functions generate the node cases of
# QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger, QuantizeLinear, DequantizeLinear
# and DynamicQuantizeLinear (whose function expansion is made of QuantizeLinear & co.).
# Importing only these is what ``collect_testcases()`` does for them, in 0.6 s instead of 10 s.
ONNX_NODE_MODULES = ("convinteger", "dequantizelinear", "dynamicquantizelinear",
                     "matmulinteger", "qlinearconv", "qlinearmatmul", "quantizelinear")
ONNX_NODE_OPS = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger",
                 "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}

# Input positions that hold quantization parameters (scale / zero point) per op type.
_SCALE_ZP_POSITIONS = {
    "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2),
    "QLinearConv": (1, 2, 4, 5, 6, 7), "QLinearMatMul": (1, 2, 4, 5, 6, 7),
    "QGemm": (1, 2, 4, 5, 7, 8), "QLinearAdd": (1, 2, 4, 5, 6, 7),
    "QLinearMul": (1, 2, 4, 5, 6, 7), "QLinearAveragePool": (1, 2, 3, 4),
    "QLinearGlobalAveragePool": (1, 2, 3, 4), "QLinearSigmoid": (1, 2, 3, 4),
    "QLinearLeakyRelu": (1, 2, 3, 4), "QLinearSoftmax": (1, 2, 3, 4),
    "ConvInteger": (2, 3), "MatMulInteger": (2, 3),
}
# int32 bias operands. canonqnn folds the bias into the integer accumulator at compile time,
# so, like a scale, it must be a constant; the corpus's onnx2c QGemm cases feed it as a graph
# input, so it is bound together with the scales and zero points.
_BIAS_POSITIONS = {"QLinearConv": (8,), "QGemm": (6,)}


def corpus_missing_message() -> str:
    return (f"conformance corpus not found at {CORPUS} (expected ../shared/conformance/onnx-ops "
            f"next to the repository root {REPO_ROOT})")


def require_corpus() -> None:
    """Skip a test that reads the corpus when it is absent, with the reason; fail instead when
    the run requires it (``CANONQNN_REQUIRE_CORPUS=1``, as CI sets)."""
    import pytest

    if corpus_available():
        return
    if os.environ.get(REQUIRE_CORPUS_ENV) == "1":
        pytest.fail(f"{corpus_missing_message()}; {REQUIRE_CORPUS_ENV}=1 requires it")
    pytest.skip(corpus_missing_message())


def corpus_available() -> bool:
    return CORPUS.is_dir()


@dataclass
class Case:
    """One conformance case: ``id`` is ``<source>/<name>`` (patched: ``patched/<dir>/<name>``)."""

    id: str
    source: str
    _model: object = field(repr=False)          # Path or ModelProto
    _inputs: object = field(repr=False)         # callable -> dict
    _refs: object = field(repr=False)           # callable -> dict[ref name, dict]

    @functools.cached_property
    def model(self) -> onnx.ModelProto:
        if isinstance(self._model, onnx.ModelProto):
            return self._model
        return onnx.load(os.fspath(self._model))

    @functools.cached_property
    def inputs(self) -> dict[str, np.ndarray]:
        return self._inputs()

    @functools.cached_property
    def refs(self) -> dict[str, dict[str, np.ndarray]]:
        """Stored references by kind: ``ref`` / ``ref_alt`` / ``ref_onnxref`` (migraphx,
        patched) or ``output_pb`` (onnx2c, onnx_backend, onnx package)."""
        return self._refs()

    @property
    def op_types(self) -> list[str]:
        return [n.op_type for n in self.model.graph.node]


# ---------------------------------------------------------------- binding
def parameter_inputs(model: onnx.ModelProto) -> list[str]:
    """Graph inputs consumed as a scale, zero point or int32 bias operand of a quantized op."""
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [vi.name for vi in model.graph.input if vi.name not in inits]
    wanted = set()
    for node in model.graph.node:
        if node.op_type == "QLinearConcat":  # Y_scale, Y_zp, then (X, scale, zp) triples
            positions = [0, 1] + [i for i in range(2, len(node.input)) if (i - 2) % 3]
        else:
            positions = (_SCALE_ZP_POSITIONS.get(node.op_type, ())
                         + _BIAS_POSITIONS.get(node.op_type, ()))
        wanted.update(node.input[i] for i in positions if i < len(node.input) and node.input[i])
    return [name for name in graph_inputs if name in wanted]


def split_inputs(case: Case) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(bind, runtime)``: the case's inputs split into parameters and data."""
    params = set(parameter_inputs(case.model))
    bind = {k: v for k, v in case.inputs.items() if k in params}
    runtime = {k: v for k, v in case.inputs.items() if k not in params}
    return bind, runtime


# ---------------------------------------------------------------- loading helpers
def _graph_input_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def _read_pb(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _pb_dir_loader(case_dir: Path, model_path: Path):
    data = case_dir / "test_data_set_0"

    def inputs():
        names = _graph_input_names(onnx.load(os.fspath(model_path)))
        files = sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return {names[i]: _read_pb(p) for i, p in enumerate(files)}

    def refs():
        names = [vi.name for vi in onnx.load(os.fspath(model_path)).graph.output]
        files = sorted(data.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return {"output_pb": {names[i]: _read_pb(p) for i, p in enumerate(files)}}

    return inputs, refs


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _npz_loader(stem: Path, data_stem: Path):
    """Inputs/refs of ``<stem>.onnx`` read from ``<data_stem>.*.npz``."""

    def inputs():
        path = data_stem.with_name(data_stem.name + ".inputs.npz")
        return _npz(path) if path.is_file() else {}

    def refs():
        out = {}
        for kind in ("ref", "ref_alt", "ref_onnxref"):
            path = data_stem.with_name(f"{data_stem.name}.{kind}.npz")
            if path.is_file():
                out[kind] = _npz(path)
        return out

    return inputs, refs


# ---------------------------------------------------------------- enumeration
def corpus_cases() -> list[Case]:
    """Every case of the shared corpus (120), in a stable order."""
    cases = []
    patched_ms = CORPUS / "patched" / "migraphx_msdomain"
    for model in sorted((CORPUS / "migraphx").glob("*.onnx")):
        stem = model.with_suffix("")
        data_stem = stem
        if not stem.with_name(stem.name + ".inputs.npz").is_file() \
                and (patched_ms / model.name).is_file():
            data_stem = patched_ms / stem.name  # originals keep their data in patched/ only
        inputs, refs = _npz_loader(stem, data_stem)
        cases.append(Case(f"migraphx/{stem.name}", "migraphx", model, inputs, refs))
    for source in ("onnx2c", "onnx_backend"):
        for case_dir in sorted(p for p in (CORPUS / source).iterdir() if p.is_dir()):
            model = case_dir / "model.onnx"
            inputs, refs = _pb_dir_loader(case_dir, model)
            cases.append(Case(f"{source}/{case_dir.name}", source, model, inputs, refs))
    for model in sorted(patched_ms.glob("*.onnx")):
        stem = model.with_suffix("")
        inputs, refs = _npz_loader(stem, stem)
        cases.append(Case(f"patched/migraphx_msdomain/{stem.name}", "patched", model, inputs,
                          refs))
    for case_dir in sorted(p for p in (CORPUS / "patched" / "onnx2c_qlinearsoftmax_opset")
                           .iterdir() if p.is_dir()):
        model = case_dir / "model.onnx"
        inputs, refs = _pb_dir_loader(case_dir, model)
        cases.append(Case(f"patched/onnx2c_qlinearsoftmax_opset/{case_dir.name}", "patched",
                          model, inputs, refs))
    return cases


@functools.lru_cache(maxsize=1)
def onnx_package_cases() -> tuple[Case, ...]:
    """The onnx package's node cases of the quantization ops (45 with onnx 1.23)."""
    node = importlib.import_module("onnx.backend.test.case.node")
    node._TargetOpType = None  # collect_testcases(op_type) filters through this global
    for name in ONNX_NODE_MODULES:
        importlib.import_module(f"onnx.backend.test.case.node.{name}")  # registers its cases
    cases, seen = [], set()
    for tc in node._NodeTestCases:
        ops = {n.op_type for n in tc.model.graph.node}
        if not ops & ONNX_NODE_OPS or tc.name in seen:
            continue
        seen.add(tc.name)
        ins, outs = tc.data_sets[0]
        in_names = _graph_input_names(tc.model)
        out_names = [vi.name for vi in tc.model.graph.output]
        inputs = {n: np.asarray(v) for n, v in zip(in_names, ins)}
        refs = {"output_pb": {n: np.asarray(v) for n, v in zip(out_names, outs)}}
        cases.append(Case(f"onnx_pkg/{tc.name}", "onnx_pkg", copy.deepcopy(tc.model),
                          lambda inputs=inputs: inputs, lambda refs=refs: refs))
    return tuple(cases)


def all_case_ids() -> list[str]:
    ids = [c.id for c in corpus_cases()] if corpus_available() else []
    return ids + [c.id for c in onnx_package_cases()]


@functools.lru_cache(maxsize=1)
def _by_id() -> dict[str, Case]:
    cases = list(corpus_cases()) if corpus_available() else []
    return {c.id: c for c in cases + list(onnx_package_cases())}


def get_case(case_id: str) -> Case:
    return _by_id()[case_id]


# ---------------------------------------------------------------- onnxruntime
def run_onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime (CPU, default options) on ``model``; IR versions > 10 are lowered to 10 in
    memory, as onnxruntime 1.31 loads only IR <= 10."""
    import onnxruntime as ort

    model = copy.deepcopy(model)
    model.ir_version = min(model.ir_version, 10)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))
