"""The command that regenerates the blocks of a doc page written from code (``python -m
canonqnn.ops.spec docs/spec.md``, ``python -m canonqnn.cli.schemas docs/cli.md``):
``--check`` reports a stale page instead of writing it."""

from __future__ import annotations

import sys
from collections.abc import Callable


def main(argv: list[str], program: str, doc: str, blocks: str, render: Callable[[str], str],
         missing: Callable[[str], list[str]] | None = None) -> int:
    """Regenerate (or with ``--check`` compare) the ``blocks`` ("constraint blocks") of the
    page ``argv`` names with ``render``; ``missing(page)``: the names the page lacks a block
    for, an error before anything is written. ``program``: the module run, ``doc``: the page
    it writes (for messages)."""
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    if len(paths) != 1:
        print(f"usage: python -m {program} [--check] {doc}", file=sys.stderr)
        return 2
    with open(paths[0], encoding="utf-8") as f:
        page = f.read()
    absent = missing(page) if missing is not None else []
    if absent:
        print(f"{paths[0]}: no {blocks[:-1]} for {sorted(absent)}", file=sys.stderr)
        return 1
    fresh = render(page)
    if check:
        if fresh != page:
            print(f"{paths[0]}: {blocks} are stale; regenerate with python -m {program} "
                  f"{paths[0]}", file=sys.stderr)
            return 1
        return 0
    if fresh != page:
        with open(paths[0], "w", encoding="utf-8") as f:
            f.write(fresh)
    return 0
