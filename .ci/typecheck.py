"""mypy over the package as it is installed: ``canonqnn`` with ``frontends/`` and ``rewrites/``
as its subpackages ``canonqnn.frontends`` and ``canonqnn.rewrites``.

setuptools maps those folders into the package (``[tool.setuptools.package-dir]`` in
``pyproject.toml``); mypy names a module by its folders only, so this links the same layout
under ``.mypy_cache/tree/``, runs mypy there with the settings of ``[tool.mypy]`` and prints
the repository's own paths. Arguments are passed on to mypy.

    python .ci/typecheck.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".mypy_cache"
TREE = CACHE / "tree"
PACKAGE = "canonqnn"


def link_tree() -> dict[str, str]:
    """The installed layout as symlinks under TREE; returns tree path prefix -> repo prefix."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    root = TREE / PACKAGE
    root.mkdir(parents=True)
    # the top package: a real folder holding links to its own entries, so the mapped
    # subpackages can be linked in beside them
    for entry in (ROOT / package_dir[PACKAGE]).iterdir():
        if entry.name != "__pycache__":
            (root / entry.name).symlink_to(entry)
    prefixes = {}
    for package, folder in package_dir.items():
        if package == PACKAGE:
            continue
        parent, _, name = package.rpartition(".")
        if parent != PACKAGE:
            raise SystemExit(f"typecheck: {package}: only subpackages of {PACKAGE} are mapped")
        (root / name).symlink_to(ROOT / folder)
        prefixes[f"{PACKAGE}/{name}/"] = f"{folder}/"
    return prefixes


def main(argv: list[str]) -> int:
    prefixes = link_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(CACHE), "-p", PACKAGE, *argv]
    result = subprocess.run(command, cwd=TREE, capture_output=True, text=True)
    for stream, text in ((sys.stdout, result.stdout), (sys.stderr, result.stderr)):
        for line in text.splitlines(keepends=True):
            for tree_prefix, repo_prefix in prefixes.items():
                if line.startswith(tree_prefix):
                    line = repo_prefix + line[len(tree_prefix):]
                    break
            stream.write(line)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
