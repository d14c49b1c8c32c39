"""A regular (non-editable) install ships every package of the source tree."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAPPED = {"canonqnn": "canonqnn", "frontends": "canonqnn.frontends",
          "rewrites": "canonqnn.rewrites"}


def test_every_source_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = set()
    for top, name in MAPPED.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *rel)))
    assert found == listed


def test_pytest_collects_every_test_folder():
    # pytest skips folders matching ``norecursedirs`` (by default ``build`` among them), so a
    # test folder mirroring a source package of such a name would silently never run. (Hidden
    # folders and caches hold no tests: tools write them.)
    import fnmatch

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["norecursedirs"]
    skipped = [str(folder.relative_to(ROOT)) for folder in (ROOT / "tests").rglob("*")
               if folder.is_dir() and not folder.name.startswith((".", "__pycache__"))
               and any(fnmatch.fnmatch(folder.name, p) for p in patterns)]
    assert skipped == []
