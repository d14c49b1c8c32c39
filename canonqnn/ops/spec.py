"""The constraint blocks of ``docs/spec.md``, rendered from the registry.

Each op's section holds one block between ``<!-- constraints: <op> -->`` and
``<!-- /constraints -->``: the docstring of the op's constraint function (``CanonicalOp.
constraints``), the one source of that text. Regenerate them with

    python -m canonqnn.ops.spec docs/spec.md

(``--check`` reports a stale page instead of writing it).
"""

from __future__ import annotations

import re
import sys
import textwrap

from .. import generated_docs
from . import REGISTRY

BLOCK = re.compile(r"<!-- constraints: (\w+) -->\n.*?<!-- /constraints -->", re.DOTALL)
WIDTH = 96


def block(name: str) -> str:
    """The generated block of op ``name``."""
    op = REGISTRY[name]
    text = (f"**Constraints** (executable: `{op.constraint.__module__}."
            f"{op.constraint.__qualname__}`, asked through `CanonicalOp.accepts`): "
            f"{op.constraints}")
    return (f"<!-- constraints: {name} -->\n{textwrap.fill(text, WIDTH)}\n"
            "<!-- /constraints -->")


def render(page: str) -> str:
    """``page`` with every constraint block regenerated (unknown op names raise KeyError)."""
    return BLOCK.sub(lambda m: block(m.group(1)), page)


def documented(page: str) -> list[str]:
    """The op names whose constraint block ``page`` holds, in page order."""
    return BLOCK.findall(page)


def main(argv: list[str]) -> int:
    return generated_docs.main(argv, "canonqnn.ops.spec", "docs/spec.md", "constraint blocks",
                               render)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
