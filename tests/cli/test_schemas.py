"""The JSON contract of the command line: each schema is a valid JSON Schema, and docs/cli.md
shows every one as the schemas render it (``python -m canonqnn.cli.schemas docs/cli.md``)."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from canonqnn.cli import parser
from canonqnn.cli.schemas import SCHEMAS, SHARED, documented, rendered

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_schema_is_a_json_schema(name):
    jsonschema.Draft202012Validator.check_schema(SCHEMAS[name])


def test_docs_cli_shows_every_schema_as_rendered_and_every_command():
    page = CLI_DOC.read_text()
    assert documented(page) == set(SCHEMAS) | set(SHARED)
    assert rendered(page) == page, \
        "stale shape blocks: run python -m canonqnn.cli.schemas docs/cli.md"
    commands = parser()._subparsers._group_actions[0].choices
    assert {name.split()[0] for name in SCHEMAS} == set(commands)
    assert all(f"\n## {name}\n" in page for name in commands)
