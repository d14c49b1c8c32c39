"""The layering the design fixes: core < frontends, rewrites; TVM calls only in the TVM layer
(``_tvm``, and ``_tvm_dot`` for the tensor intrinsics and schedules of the int8 kernels)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE = ["canonqnn/_tvm.py", "canonqnn/errors.py", "canonqnn/qparams.py", "canonqnn/qdq.py",
        "canonqnn/io.py", "canonqnn/builder.py", *sorted(
            str(p.relative_to(ROOT)) for p in (ROOT / "canonqnn" / "ops").glob("*.py"))]


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # resolve relative imports against the file's package
                package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-node.level])
                package = package.replace("frontends", "canonqnn.frontends", 1) \
                    if package.startswith("frontends") else package
                package = package.replace("rewrites", "canonqnn.rewrites", 1) \
                    if package.startswith("rewrites") else package
                module = f"{package}.{module}" if module else package
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def _files(folder: str) -> list[pathlib.Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_core_imports_no_frontend_rule_or_user_layer():
    for rel in CORE:
        bad = {n for n in _imports(ROOT / rel)
               if n.startswith(("canonqnn.frontends", "canonqnn.rewrites", "canonqnn.api",
                                "canonqnn.cli", "onnx"))}
        assert not bad, f"{rel} imports {bad}"


def test_frontends_and_rewrites_never_import_each_other():
    for path in _files("frontends"):
        bad = {n for n in _imports(path) if n.startswith(("canonqnn.rewrites", "canonqnn.api"))}
        assert not bad, f"{path} imports {bad}"
    for path in _files("rewrites"):
        bad = {n for n in _imports(path) if n.startswith(("canonqnn.frontends", "canonqnn.api",
                                                          "onnx"))}
        assert not bad, f"{path} imports {bad}"


TVM_LAYER = ("_tvm.py", "_tvm_dot.py")


def test_only_the_tvm_layer_imports_tvm():
    for path in [*_files("canonqnn"), *_files("frontends"), *_files("rewrites")]:
        if path.name in TVM_LAYER:
            continue
        bad = {n for n in _imports(path) if n == "tvm" or n.startswith("tvm.")}
        assert not bad, f"{path} imports {bad}"
