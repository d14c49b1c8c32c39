"""docs/models.md is the table ``tests/e2e/models_table.py`` prints: every row present (fast),
and, under the slow marker, the whole table as it computes it on this machine."""

from __future__ import annotations

import re

import pytest

import models_table


def test_every_model_of_the_table_is_in_docs_models_md():
    text = models_table.DOC.read_text()
    for row in models_table.ROWS:
        assert f"| {row.family} | {row.fmt} |" in text, \
            f"{row.family} ({row.fmt}) missing: run python tests/e2e/models_table.py --write"


def _any_class(text: str) -> str:
    """``text`` with the x86 class of each profile name left out: the profile compared is the
    runtime's on the host computing the table (onnxruntime's and ExecuTorch's differ by class),
    the rest of the table reads the same on every host."""
    return re.sub(r"-x86-(avx2|vnni|avx512)`", "-x86-<class>`", text)


@pytest.mark.slow
def test_docs_models_md_is_the_computed_table():
    assert _any_class(models_table.DOC.read_text()) == _any_class(models_table.table()), \
        "docs/models.md is stale: run python tests/e2e/models_table.py --write"
