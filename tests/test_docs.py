"""What the documentation and the comments point a reader to exists: every file or folder of
this repository named in a doc, the README, a docstring or a comment.

Three ways of naming one are checked:

- a path from the root: a top-level folder, then names (``canonqnn/ops/conv.py``,
  ``tests/ops/_ort.py``, ``frontends/onnx/``);
- a path from a folder above the text that names it, or from a package's folder
  (``tables/mlas.py`` in ``canonqnn/``, ``ops/conv_transpose.py``), when its first folder is one
  of the repository's;
- a bare module file (``qdq.py``) in the docs and the packages: some file of the repository has
  that name.

Files are the repository's as they are on disk, so a file moved but not yet committed is read
at its new place and no longer found at its old one."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("canonqnn", "frontends", "rewrites", "tests", "docs", "benchmarks", "examples", ".ci")
PACKAGES = ("canonqnn", "frontends", "rewrites")
_FILE = r"[\w-]+\.(?:py|md|json|toml|sh|txt)\b"
# A path from the root: a top-level folder, then names; a file by its extension, else a folder
# (``frontends/onnx/``). ``rewrites/_engine.Rule`` names a module's attribute: not a path.
_TOP = "|".join(re.escape(f) for f in FOLDERS)
PATH = re.compile(r"(?<![\w./-])((?:" + _TOP + r")/(?:[\w.-]+/)*(?:" + _FILE + r"|[\w-]+/))")
# A path of a file from some folder: ``tables/mlas.py``, ``onnx/ops/nn.py``.
RELATIVE = re.compile(r"(?<![\w./-])((?:[\w-]+/)+" + _FILE + ")")
# A module file by its name alone.
BARE = re.compile(r"(?<![\w./-])([\w-]+\.py)\b(?![\w/-])")
# Where bare names are read: the docs and the code users run (tests name the files they make).
BARE_IN = ("README.md", "docs/", "canonqnn/", "frontends/", "rewrites/", "benchmarks/",
           "examples/")


def _files() -> list[str]:
    """The repository's docs and Python files as they are on disk: the README and the top-level
    folders' files (not git's list, so a file moved but not yet committed counts at its new
    place)."""
    found = [ROOT / "README.md"]
    for folder in FOLDERS:
        found += [path for path in (ROOT / folder).rglob("*")
                  if path.suffix in (".md", ".py") and path.is_file()
                  and "__pycache__" not in path.parts]
    return sorted(path.relative_to(ROOT).as_posix() for path in found)


FILES = _files()
FOLDER_NAMES = {part for name in FILES for part in pathlib.PurePath(name).parts[:-1]}
FILE_NAMES = {pathlib.PurePath(name).name for name in FILES}


def _bases(name: str) -> list[pathlib.Path]:
    """The folders a relative path in file ``name`` may start from: the file's own folder and
    those above it, and the packages' folders."""
    above = [ROOT / parent for parent in pathlib.PurePath(name).parents]
    return [*above, *(ROOT / package for package in PACKAGES)]


def _named_paths() -> dict[str, set[str]]:
    """Path named -> the files naming it, for every path from the root."""
    named: dict[str, set[str]] = {}
    for name in FILES:
        for match in PATH.finditer((ROOT / name).read_text(errors="replace")):
            named.setdefault(match.group(1), set()).add(name)
    return named


def _missing_relative_paths() -> dict[str, list[str]]:
    missing: dict[str, set[str]] = {}
    for name in FILES:
        for match in RELATIVE.finditer((ROOT / name).read_text(errors="replace")):
            path = match.group(1)
            first = path.split("/")[0]
            if first in FOLDERS or first not in FOLDER_NAMES:  # from the root, or not ours
                continue
            if not any((base / path).exists() for base in _bases(name)):
                missing.setdefault(path, set()).add(name)
    return {path: sorted(where) for path, where in missing.items()}


def _missing_bare_names() -> dict[str, list[str]]:
    missing: dict[str, set[str]] = {}
    for name in FILES:
        if not name.startswith(BARE_IN):
            continue
        for match in BARE.finditer((ROOT / name).read_text(errors="replace")):
            if match.group(1) not in FILE_NAMES:
                missing.setdefault(match.group(1), set()).add(name)
    return {path: sorted(where) for path, where in missing.items()}


def test_every_repository_path_the_docs_and_comments_name_exists():
    named = _named_paths()
    assert len(named) > 100  # the pattern finds what the docs name
    missing = {path: sorted(where) for path, where in named.items()
               if not (ROOT / path).exists()}
    assert not missing, missing


def test_every_path_named_from_a_folder_exists():
    assert not _missing_relative_paths(), _missing_relative_paths()


def test_every_module_file_named_alone_exists():
    assert not _missing_bare_names(), _missing_bare_names()


def test_the_patterns_tell_paths_from_other_text():
    text = ("canonqnn/ops/conv.py, frontends/onnx/, tables/mlas.py and qdq.py; "
            "rewrites/_engine.Rule, relax.op.nn, https://example.org/a/b.py")
    assert [m.group(1) for m in PATH.finditer(text)] == ["canonqnn/ops/conv.py",
                                                         "frontends/onnx/"]
    # (a relative match starting with a top-level folder is a path from the root)
    assert [m.group(1) for m in RELATIVE.finditer(text)] == ["canonqnn/ops/conv.py",
                                                             "tables/mlas.py"]
    assert [m.group(1) for m in BARE.finditer(text)] == ["qdq.py"]
