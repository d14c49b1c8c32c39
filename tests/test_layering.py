"""The import boundaries of canonqnn: every module in one layer, one matrix of allowed imports.

The design's layering (core < frontends, rewrites < user layer; TVM calls only in the TVM
layer) as data: ``LAYERS`` puts every module of ``canonqnn``, ``canonqnn.frontends`` and
``canonqnn.rewrites`` in one layer, ``MAY_IMPORT`` says which other layers each layer may import,
``THIRD_PARTY`` which packages beyond numpy and the standard library. A module in no layer fails,
so a new one cannot escape the matrix. Imports inside functions count: a lazy import is a
dependency that only runs later.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import tomllib

import canonqnn

ROOT = pathlib.Path(__file__).resolve().parents[1]

# An entry is a module, or ``package.*``: the package and everything under it. The most
# specific entry wins (``canonqnn.numerics.probe`` over ``canonqnn.numerics``).
LAYERS: dict[str, list[str]] = {
    # Facts every layer shares, plain Python and numpy: errors, quantization parameters,
    # numerics profiles and the runtimes' arithmetic, the CPU's dot-product instructions. The
    # root package is the parent of every module, so it imports only these; it reaches the
    # rest lazily (``canonqnn._LAZY``).
    "base": ["canonqnn", "canonqnn.errors", "canonqnn.qparams", "canonqnn.numerics.*",
             "canonqnn.integrity", "canonqnn.functions", "canonqnn.dot_isa"],
    # Lookup tables as each source runtime computes them: numpy, no TVM.
    "tables": ["canonqnn.tables.*"],
    # The only modules that call TVM.
    "tvm": ["canonqnn._tvm", "canonqnn._tvm_dot"],
    # Canonical ops, the Q/DQ writer, the interface, build and the numpy reference: no model
    # format, no rule.
    "core": ["canonqnn.qdq", "canonqnn.io", "canonqnn.ops.*", "canonqnn.builder", "canonqnn.layout",
             "canonqnn.kernels", "canonqnn.schedule", "canonqnn.reference",
             "canonqnn.module_check", "canonqnn.budget"],
    # DPL patterns of the canonical ops, for backend authors.
    "patterns": ["canonqnn.patterns.*"],
    # The source runtimes (onnxruntime, LiteRT, ExecuTorch): probed for their numerics profile,
    # run for parity in a child process. Never TVM, so a child starts fast.
    "runtimes": ["canonqnn.numerics.probe", "canonqnn.source_runtimes", "canonqnn.isolated"],
    # What every frontend shares; each format is its own layer so formats never mix.
    "frontends": ["canonqnn.frontends", "canonqnn.frontends._base"],
    "frontends.onnx": ["canonqnn.frontends.onnx.*"],
    "frontends.tflite": ["canonqnn.frontends.tflite.*"],
    "frontends.torch": ["canonqnn.frontends.torch.*"],
    "rewrites": ["canonqnn.rewrites.*"],
    # Models built in code for tests, examples, benchmarks and the demo.
    "testing": ["canonqnn.testing.*"],
    # The user's flow: load any format, canonicalize, build, parity and where it diverges.
    "user": ["canonqnn.api", "canonqnn.cli", "canonqnn.demo", "canonqnn.divergence"],
}

_CORE = ["base", "tvm", "core"]
_FORMATS = ["frontends.onnx", "frontends.tflite", "frontends.torch"]
# A layer may always import itself; these are the other layers it may import.
MAY_IMPORT: dict[str, list[str]] = {
    "base": [],
    "tables": ["base"],
    "tvm": ["base"],
    "core": ["base", "tvm"],
    "patterns": _CORE,
    "runtimes": ["base", "tables"],
    "frontends": _CORE,
    **{f: [*_CORE, "frontends"] for f in _FORMATS},
    # runtimes: a module that records no numerics profile is canonicalized for its source
    # runtime's profile on this host, which only probing that runtime finds.
    "rewrites": [*_CORE, "tables", "runtimes"],
    "testing": ["base", "frontends", *_FORMATS],
    "user": [layer for layer in LAYERS if layer != "user"],
}

# Single module-to-module edges against the matrix, each with the reason it is still there
# (a new one needs its reason written here).
EXCEPTIONS: dict[tuple[str, str], str] = {
    # The PyTorch oracle's child reads the program as the frontend does (never unpickling);
    # the edge goes when each format's oracle moves into its format's folder.
    ("canonqnn.source_runtimes", "canonqnn.frontends.torch.archive"):
        "ExecuTorch's child loads .pt2 bytes with the frontend's safe reader",
}

# Packages beyond numpy and the standard library, per layer.
THIRD_PARTY: dict[str, set[str]] = {
    "base": set(), "tables": set(), "core": set(), "patterns": set(), "frontends": set(),
    "rewrites": set(),
    # tflite: TVM's own TFLite converters (float regions) read the schema package's Model.
    "tvm": {"tvm", "tvm_ffi", "tflite"},
    # onnx: the probes of onnxruntime are tiny ONNX models.
    "runtimes": {"onnx", "onnxruntime", "torch", "executorch", "ai_edge_litert"},
    "frontends.onnx": {"onnx", "google"},  # google.protobuf: how a damaged file fails to parse
    "frontends.tflite": {"tflite"},
    "frontends.torch": {"torch"},
    "testing": {"onnx", "onnxruntime", "tflite", "flatbuffers", "ai_edge_litert"},
    "user": {"onnx", "torch"},
}
EVERYWHERE = {"numpy"}


def _sources() -> dict[str, pathlib.Path]:
    """Module name -> file, for every module the package-dir mapping of pyproject installs."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    modules = {}
    for package, folder in mapping.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


SOURCES = _sources()


def _module(name: str) -> str:
    """The module an imported name lives in: its longest prefix that is a module."""
    root, _, attribute = name.partition(".")
    if root == "canonqnn" and attribute in canonqnn._LAZY:  # the root's lazy attributes
        name = canonqnn._LAZY[attribute][0]
    while name not in SOURCES and "." in name:
        name = name.rpartition(".")[0]
    return name


def imports(module: str, source: str, is_package: bool = False) -> set[str]:
    """Every module ``module`` (of text ``source``) imports, at top level or inside a function:
    canonqnn modules by full name, other packages by their top-level name (the standard library
    left out)."""
    package = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names.update(f"{base}.{a.name}" if base.startswith("canonqnn") else base
                         for a in node.names)
    found = set()
    for name in names:
        if name == "canonqnn" or name.startswith("canonqnn."):
            found.add(_module(name))
        elif (top := name.split(".")[0]) not in sys.stdlib_module_names | {"__future__"}:
            found.add(top)
    return found - {module}


def layer_of(module: str) -> str | None:
    """The layer of ``module``'s most specific entry in ``LAYERS``; None when it has none."""
    best = None
    for layer, entries in LAYERS.items():
        for entry in entries:
            prefix = entry.removesuffix(".*")
            covers = module == prefix or (entry.endswith(".*") and
                                          module.startswith(prefix + "."))
            if covers and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best and best[1]


def crossings(imported: dict[str, set[str]]) -> list[str]:
    """Each import of ``imported`` (module -> what it imports) the matrix does not allow."""
    found = []
    for module, names in sorted(imported.items()):
        layer = layer_of(module)
        if layer is None:
            found.append(f"{module} is in no layer")
            continue
        for name in sorted(names):
            if name.startswith("canonqnn"):
                target = layer_of(name)
                if target in (layer, *MAY_IMPORT[layer]) or (module, name) in EXCEPTIONS:
                    continue
                found.append(f"{module} ({layer}) imports {name} ({target})")
            elif name not in EVERYWHERE | THIRD_PARTY[layer]:
                found.append(f"{module} ({layer}) imports {name}")
    return found


IMPORTS = {module: imports(module, path.read_text(), path.name == "__init__.py")
           for module, path in SOURCES.items()}


def test_every_module_belongs_to_a_layer():
    unassigned = [m for m in SOURCES if layer_of(m) is None]
    assert not unassigned, f"in no layer of LAYERS: {unassigned}"


def test_the_matrix_names_only_its_layers():
    assert set(MAY_IMPORT) == set(LAYERS) == set(THIRD_PARTY)
    assert all(set(allowed) <= set(LAYERS) for allowed in MAY_IMPORT.values())


def test_no_import_crosses_the_matrix():
    found = crossings(IMPORTS)
    assert not found, "\n".join(found)


def test_every_exception_is_still_an_import():
    assert [edge for edge in EXCEPTIONS if edge[1] not in IMPORTS.get(edge[0], set())] == []


def test_the_matrix_keeps_the_design():
    # The core knows no format and no rule; frontends and rewrites never import each other,
    # nor the user layer; fixtures stay out of everything but the user layer; only the TVM
    # layer imports TVM.
    above_core = {"frontends", *_FORMATS, "rewrites", "patterns", "testing", "user"}
    for layer in ("base", "tables", "tvm", "core", "runtimes"):
        assert not above_core & set(MAY_IMPORT[layer]), layer
    for layer in ("frontends", *_FORMATS):
        assert not {"rewrites", "user", "testing"} & set(MAY_IMPORT[layer]), layer
        assert not (set(_FORMATS) - {layer}) & set(MAY_IMPORT[layer]), layer
    assert not {"frontends", *_FORMATS, "user", "testing"} & set(MAY_IMPORT["rewrites"])
    assert [layer for layer in LAYERS if "testing" in MAY_IMPORT[layer]] == ["user"]
    assert [layer for layer in LAYERS if "tvm" in THIRD_PARTY[layer]] == ["tvm"]


def test_a_module_in_no_layer_is_reported():
    assert layer_of("canonqnn.new_module") is None
    assert layer_of("canonqnn.new_package.module") is None
    assert layer_of("canonqnn.ops.new_op") == "core"
    assert layer_of("canonqnn.numerics.probe") == "runtimes"


def test_a_crossing_import_is_reported_lazy_or_not():
    source = ("from .rewrites import canonicalize\n"
              "def f():\n    import tvm\n    from .testing import onnx_models\n")
    assert crossings({"canonqnn.qparams": imports("canonqnn.qparams", source)}) == [
        "canonqnn.qparams (base) imports canonqnn.rewrites (rewrites)",
        "canonqnn.qparams (base) imports canonqnn.testing.onnx_models (testing)",
        "canonqnn.qparams (base) imports tvm"]


def test_a_lazy_attribute_of_the_root_counts_as_its_module():
    assert imports("canonqnn.qdq", "from canonqnn import parity, ops\n") == {"canonqnn.api",
                                                                           "canonqnn.ops"}
    assert imports("canonqnn.qdq", "from canonqnn.ops import conv\n") == {"canonqnn.ops.conv"}


def test_importing_the_root_qparams_or_tables_imports_no_tvm_nor_model_format():
    # In a child: this process has imported TVM already.
    code = ("import sys\n"
            "for name in ('canonqnn', 'canonqnn.qparams', 'canonqnn.tables'):\n"
            "    __import__(name)\n"
            "    heavy = {'tvm', 'onnx', 'onnxruntime', 'tflite', 'torch'} & set(sys.modules)\n"
            "    print(name, sorted(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["canonqnn []", "canonqnn.qparams []", "canonqnn.tables []"]
