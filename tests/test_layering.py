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
# specific entry wins (``canonqnn.frontends.onnx.runtime`` over ``canonqnn.frontends.onnx``).
LAYERS: dict[str, list[str]] = {
    # Facts every layer shares, plain Python and numpy: errors, quantization parameters,
    # numerics profiles and the runtimes' arithmetic, the registry of formats (their modules
    # named as strings, imported by name on first use). The root package is the parent of
    # every module, so it imports only these; it reaches the rest lazily (``canonqnn._LAZY``).
    "base": ["canonqnn", "canonqnn.errors", "canonqnn.qparams", "canonqnn.numerics.*",
             "canonqnn.formats", "canonqnn.extras", "canonqnn.progress",
             "canonqnn.generated_docs"],
    # Lookup tables as each source runtime computes them: numpy, no TVM.
    "tables": ["canonqnn.tables.*"],
    # TVM's IR API, the only place that calls it besides the build and each format's bridge.
    "tvm": ["canonqnn._tvm.*"],
    # Canonical ops, the Q/DQ writer, the interface and the numpy reference (and the
    # first diverging layer, which compares a build with it op by op): no model format, no
    # rule.
    "core": ["canonqnn.qdq", "canonqnn.io", "canonqnn.ops.*", "canonqnn.budget",
             "canonqnn.oracle.divergence"],
    # The build: TVM's pipeline, kernel forms, schedules and tuning, driven from one package
    # (so it calls TVM itself); it knows no model format and no rule.
    "build": ["canonqnn.build.*"],
    # The server run on a device (``--rpc``): one file to copy there, beside TVM and the source
    # runtimes, so it imports nothing of canonqnn; the host's side reads its names.
    "device": ["canonqnn.build.device_server"],
    # DPL patterns of the canonical ops, for backend authors.
    "patterns": ["canonqnn.patterns.*"],
    # The oracle's plain part: child processes, and a source runtime as parity holds it.
    # Never TVM, so a child starts fast.
    "oracle": ["canonqnn.oracle", "canonqnn.oracle.isolated", "canonqnn.oracle.source"],
    # Each format's source runtime (onnxruntime, LiteRT, ExecuTorch): run for parity in a child
    # process, probed for its numerics profile. Never TVM, and one layer per format. The
    # PyTorch child reads programs with the format's safe reader, ``archive``.
    "runtimes.onnx": ["canonqnn.frontends.onnx.runtime"],
    "runtimes.tflite": ["canonqnn.frontends.tflite.runtime"],
    "runtimes.torch": ["canonqnn.frontends.torch.runtime", "canonqnn.frontends.torch.archive"],
    # What every frontend shares; each format is its own layer so formats never mix.
    "frontends": ["canonqnn.frontends", "canonqnn.frontends._base"],
    "frontends.onnx": ["canonqnn.frontends.onnx.*"],
    "frontends.tflite": ["canonqnn.frontends.tflite.*"],
    "frontends.torch": ["canonqnn.frontends.torch.*"],
    # Each format's bridge to TVM's own importer and converters of that format (reused for
    # float ops): TVM and that format's package, in one module beside the format.
    "tvm.onnx": ["canonqnn.frontends.onnx._tvm_onnx"],
    "tvm.tflite": ["canonqnn.frontends.tflite._tvm_tflite"],
    "tvm.torch": ["canonqnn.frontends.torch._tvm_torch"],
    "rewrites": ["canonqnn.rewrites.*"],
    # Models built in code for tests, examples, benchmarks and the demo.
    "testing": ["canonqnn.testing.*"],
    # The user's flow: load any format, canonicalize, build, parity, the demo running them.
    "user": ["canonqnn.api", "canonqnn.cli.*", "canonqnn.oracle.parity", "canonqnn.testing.demo",
             "canonqnn.view.*"],
}

_CORE = ["base", "tvm", "core"]
_FORMATS = ["frontends.onnx", "frontends.tflite", "frontends.torch"]
_RUNTIMES = ["runtimes.onnx", "runtimes.tflite", "runtimes.torch"]
_BRIDGES = ["tvm.onnx", "tvm.tflite", "tvm.torch"]
# A layer may always import itself; these are the other layers it may import.
MAY_IMPORT: dict[str, list[str]] = {
    "base": [],
    "tables": ["base"],
    "tvm": ["base"],
    "core": ["base", "tvm"],
    "build": [*_CORE, "device"],
    "device": [],
    "patterns": _CORE,
    # ``device``: the device server's functions, called for parity on a device.
    "oracle": ["base", "device"],
    # A runtime runs in the oracle's children and keeps its setup's messages quiet there.
    "runtimes.onnx": ["base", "oracle"],
    # ``device``: the interpreter is run as on a device (the device server's functions).
    "runtimes.tflite": ["base", "oracle", "device"],
    "runtimes.torch": ["base", "oracle", "tables"],  # the probe compares with XNNPACK's tables
    "frontends": _CORE,
    # A format's oracle on parity's side makes children (``oracle``) running its runtime.
    # ``device``: the names of the device server's functions, for parity on a device.
    **{f: [*_CORE, "frontends", "oracle", r, b, "device"]
       for f, r, b in zip(_FORMATS, _RUNTIMES, _BRIDGES)},
    **{b: ["base", "tvm"] for b in _BRIDGES},
    "rewrites": [*_CORE, "tables"],
    # tvm: a canonical module is read (``tflite_from_canonical``) to be written as TFLite.
    "testing": ["base", "tvm", "frontends", *_FORMATS],
    "user": [layer for layer in LAYERS if layer != "user"],
}

# Single module-to-module edges against the matrix, each with the reason it is still there
# (a new one needs its reason written here).
EXCEPTIONS: dict[tuple[str, str], str] = {
    # The size of each member of a .pt2 archive is checked against the memory budget before it
    # is read; ``budget.check_bytes`` is plain Python (the child test below checks that the
    # runtime modules load no TVM).
    ("canonqnn.frontends.torch.archive", "canonqnn.budget"):
        "a .pt2 member's size is checked against the memory budget before it is read",
    # The probe of the interpreter's default configuration offers it one-operator models,
    # written by the same writer the tests use (imported only when probing, in the parent).
    ("canonqnn.frontends.tflite.runtime", "canonqnn.testing.tflite_writer"):
        "the delegate probe writes its one-operator models with the TFLite writer",
}

# Packages beyond numpy and the standard library, per layer.
THIRD_PARTY: dict[str, set[str]] = {
    "base": set(), "tables": set(), "core": set(), "patterns": set(), "frontends": set(),
    "rewrites": set(),
    "tvm": {"tvm", "tvm_ffi"},
    "build": {"tvm"},
    "device": {"tvm", "onnxruntime", "ai_edge_litert"},
    "tvm.onnx": {"tvm"},
    # tflite: TVM's own TFLite converters (float regions) read the schema package's Model.
    "tvm.tflite": {"tvm", "tflite"},
    "tvm.torch": {"tvm"},
    "oracle": set(),
    # onnx: the probe of onnxruntime is a tiny ONNX model.
    "runtimes.onnx": {"onnx", "onnxruntime"},
    "runtimes.tflite": {"ai_edge_litert"},
    "runtimes.torch": {"torch", "executorch"},
    "frontends.onnx": {"onnx", "google"},  # google.protobuf: how a damaged file fails to parse
    # flatbuffers (the tflite schema package's own dependency): its flexbuffers module reads
    # custom operators' options
    "frontends.tflite": {"tflite", "flatbuffers"},
    "frontends.torch": {"torch"},
    # torch, torchao, executorch: a float ONNX network as a PyTorch module, PT2E-quantized
    # and lowered to ExecuTorch (``torch_from_onnx``, the benchmark's ExecuTorch peer).
    "testing": {"onnx", "onnxruntime", "tflite", "flatbuffers", "ai_edge_litert", "torch",
                "torchao", "executorch"},
    # onnx: the demo writes its model as an ONNX file, as a user would. rich: the command
    # line's progress on a terminal. model_explorer, dacite (its dependency): the viewer (the
    # view extra).
    "user": {"onnx", "rich", "model_explorer", "dacite"},
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
    # layer, the build and the formats' TVM bridges import TVM; the source runtimes import
    # neither TVM nor the core, and a format reaches its own runtime and bridge only. The
    # device server imports nothing of canonqnn (it is copied to devices on its own).
    above_core = {"frontends", *_FORMATS, *_RUNTIMES, "rewrites", "patterns", "testing", "user"}
    for layer in ("base", "tables", "tvm", "core", "build", "oracle", *_RUNTIMES, *_BRIDGES):
        assert not above_core & set(MAY_IMPORT[layer]), layer
    for layer in ("oracle", *_RUNTIMES):
        assert not {"tvm", "core"} & set(MAY_IMPORT[layer]), layer
    for layer, own, bridge in zip(_FORMATS, _RUNTIMES, _BRIDGES):
        assert not {"rewrites", "user", "testing"} & set(MAY_IMPORT[layer]), layer
        assert not (set(_FORMATS + _RUNTIMES + _BRIDGES) - {layer, own, bridge}) & \
            set(MAY_IMPORT[layer]), layer
    assert not {"rewrites", "user", "testing"} & set(MAY_IMPORT["frontends"])
    assert not {"frontends", *_FORMATS, *_RUNTIMES, "user", "testing"} & \
        set(MAY_IMPORT["rewrites"])
    assert [layer for layer in LAYERS if "testing" in MAY_IMPORT[layer]] == ["user"]
    assert {layer for layer in LAYERS if "tvm" in THIRD_PARTY[layer]} == {"tvm", "build",
                                                                           "device", *_BRIDGES}
    assert MAY_IMPORT["device"] == []


def test_a_module_in_no_layer_is_reported():
    assert layer_of("canonqnn.new_module") is None
    assert layer_of("canonqnn.new_package.module") is None
    assert layer_of("canonqnn.ops.new_op") == "core"
    assert layer_of("canonqnn.frontends.onnx.runtime") == "runtimes.onnx"


def test_a_crossing_import_is_reported_lazy_or_not():
    source = ("from .rewrites import canonicalize\n"
              "def f():\n    import tvm\n    from .testing import onnx_models\n")
    assert crossings({"canonqnn.qparams": imports("canonqnn.qparams", source)}) == [
        "canonqnn.qparams (base) imports canonqnn.rewrites (rewrites)",
        "canonqnn.qparams (base) imports canonqnn.testing.onnx_models (testing)",
        "canonqnn.qparams (base) imports tvm"]


def test_a_lazy_attribute_of_the_root_counts_as_its_module():
    assert imports("canonqnn.qdq", "from canonqnn import parity, ops\n") == {
        "canonqnn.oracle.parity", "canonqnn.ops"}
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


def test_a_child_process_imports_the_source_runtimes_without_tvm(tmp_path):
    # What parity's children import (``canonqnn.oracle.isolated``, each format's runtime and
    # their packages' __init__) must not load TVM: a child would take seconds to start.
    runtimes = [m for m in SOURCES if layer_of(m) in ("oracle", *_RUNTIMES)]
    code = ("import sys\n"
            f"for name in {runtimes!r}:\n"
            "    __import__(name)\n"
            "print(sorted({'tvm', 'tflite'} & set(sys.modules)))\n")
    # (from another folder: ``python -c`` puts the working directory first on sys.path, where
    # the repository's canonqnn/ has no frontends/ under it unless installed editable)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout.splitlines()
    assert "canonqnn.frontends.torch.runtime" in runtimes and out == ["[]"]


def import_cycles(imported: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of canonqnn modules in ``imported`` (module -> what it imports): each strongly
    connected group of two or more modules, sorted. An import of a package the module is inside
    (``from . import name`` of a name the package's ``__init__`` re-exports) is left out: Python
    imports a package before its modules anyway, so a package importing its own module and that
    module importing from the package is the ordinary re-export, not a cycle."""
    graph = {m: sorted(n for n in names if n in imported and not m.startswith(n + "."))
             for m, names in imported.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in graph[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def test_no_canonqnn_modules_import_each_other_in_a_cycle():
    assert import_cycles(IMPORTS) == []


def test_a_cycle_is_found_and_a_packages_own_module_is_none():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"p": {"p.m"}, "p.m": {"p"}}) == []


# The matrix as docs/architecture.md shows it: generated, so the doc cannot go stale.
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
DOC_BEGIN = "<!-- layers: generated by python tests/test_layering.py --write-docs -->"
DOC_END = "<!-- end layers -->"


def render_layers() -> str:
    """``LAYERS``, ``MAY_IMPORT``, ``THIRD_PARTY`` and ``EXCEPTIONS`` as markdown: one table
    row per layer, then the single edges allowed against the matrix."""
    lines = ["| Layer | Modules | May import (besides itself) | Packages beyond numpy |",
             "|---|---|---|---|"]
    for layer, entries in LAYERS.items():
        modules = ", ".join(f"`{entry}`" for entry in entries)
        others = [other for other in LAYERS if other != layer]
        allowed = ("every other layer" if MAY_IMPORT[layer] == others else
                   ", ".join(MAY_IMPORT[layer]) or "—")
        packages = ", ".join(f"`{p}`" for p in sorted(THIRD_PARTY[layer])) or "—"
        lines.append(f"| {layer} | {modules} | {allowed} | {packages} |")
    if EXCEPTIONS:
        lines += ["", "Single edges allowed against the matrix, each with its reason:", ""]
        lines += [f"- `{a}` → `{b}`: {reason}" for (a, b), reason in EXCEPTIONS.items()]
    return "\n".join(lines)


def _with_layers(doc: str) -> str:
    """``doc`` with the block between the markers replaced by the current rendering."""
    head, _, rest = doc.partition(DOC_BEGIN + "\n")
    _, _, tail = rest.partition(DOC_END)
    return f"{head}{DOC_BEGIN}\n{render_layers()}\n{DOC_END}{tail}"


def test_the_architecture_doc_shows_the_matrix_as_it_is():
    doc = ARCHITECTURE_DOC.read_text()
    assert DOC_BEGIN in doc and DOC_END in doc
    assert doc == _with_layers(doc), (
        "docs/architecture.md's layer table is stale: python tests/test_layering.py --write-docs")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-docs"]:
        sys.exit("usage: python tests/test_layering.py --write-docs")
    ARCHITECTURE_DOC.write_text(_with_layers(ARCHITECTURE_DOC.read_text()))
