"""What the documentation and the comments point a reader to exists: every file or folder of
this repository named in a doc, the README or a source comment (``canonqnn/...``,
``tests/...``, ``docs/...`` and the other top-level folders, by their path from the root)."""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("canonqnn", "frontends", "rewrites", "tests", "docs", "benchmarks", "examples", ".ci")
# A path from the root: a top-level folder, then names; a file by its extension, else a folder
# (``frontends/onnx/``). ``rewrites/_engine.Rule`` names a module's attribute: not a path.
PATH = re.compile(r"(?<![\w./-])((?:%s)/(?:[\w.-]+/)*(?:[\w-]+\.(?:py|md|json|toml|sh|txt)\b|"
                  r"[\w-]+/))" % "|".join(re.escape(f) for f in FOLDERS))


def _named_paths() -> dict[str, set[str]]:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    named: dict[str, set[str]] = {}
    for name in tracked:
        if name.endswith((".md", ".py")):
            for match in PATH.finditer((ROOT / name).read_text(errors="replace")):
                named.setdefault(match.group(1), set()).add(name)
    return named


def test_every_repository_path_the_docs_and_comments_name_exists():
    named = _named_paths()
    assert len(named) > 100  # the pattern finds what the docs name
    missing = {path: sorted(where) for path, where in named.items()
               if not (ROOT / path).exists()}
    assert not missing, missing
