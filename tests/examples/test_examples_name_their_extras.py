"""Each script of examples/ says in its docstring which install it runs after, and one run
without an extra it needs stops at once with the extra's pip command (status 2, no traceback)
instead of a ModuleNotFoundError.

The scripts run as on the base install: None for every extra's modules in ``sys.modules`` of
the script's process makes their import raise ModuleNotFoundError. (That also keeps each run
short: tvm_ffi imports torch whenever it can.)
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from canonqnn.extras import EXTRAS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# example -> (whether its default run needs only the base install,
#             {extra it needs: the arguments that need it})
NEEDS: dict[str, tuple[bool, dict[str, list[str]]]] = {
    "npu_backend.py": (True, {"tflite": ["--source", "tflite"]}),
    "one_conv_three_formats.py": (False, {"tflite": []}),
    "parity_table.py": (True, {}),
    "tflite_parity.py": (False, {"tflite": []}),
}

BASE_INSTALL = [module for _, modules in EXTRAS.values() for module in modules]

# Runs a script as ``python <script> <args>`` does, with the named modules unimportable.
RUN_WITHOUT = """\
import runpy, sys
path, blocked, args = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
sys.modules.update({name: None for name in blocked})
sys.argv = [path, *args]
runpy.run_path(path, run_name="__main__")
"""


def run_on_base_install(script: str, args: list[str]) -> subprocess.CompletedProcess:
    path = str(EXAMPLES / script)
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT, path, ",".join(BASE_INSTALL),
                           *args], capture_output=True, text=True, timeout=120)


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(NEEDS)


@pytest.mark.parametrize("script", sorted(NEEDS))
def test_the_docstring_names_the_install(script):
    base_only, extras = NEEDS[script]
    doc = ast.get_docstring(ast.parse((EXAMPLES / script).read_text())) or ""
    text = " ".join(doc.split()).lower()  # the sentence may wrap and start a line or not
    if base_only:
        assert "runs after the base install: pip install ." in text
    for extra in extras:
        assert f'needs the {extra} extra: pip install ".[{extra}]"' in text


MISSING = [(script, extra, args) for script, (_, extras) in sorted(NEEDS.items())
           for extra, args in extras.items()]


@pytest.mark.parametrize(("script", "extra", "args"), MISSING,
                         ids=[f"{s}-{e}" for s, e, _ in MISSING])
def test_without_its_extra_the_example_names_the_extra_and_exits_2(script, extra, args):
    result = run_on_base_install(script, args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"{script}: error: ")
    assert re.search(rf"pip install \S*\[{extra}\]", result.stderr), result.stderr
    assert result.stdout == ""  # stopped before any work


# The examples that need an extra for some options are loaded on the base install above.
@pytest.mark.parametrize("script", [s for s, (_, extras) in sorted(NEEDS.items()) if not extras])
def test_an_example_needing_no_extra_loads_on_the_base_install(script):
    result = run_on_base_install(script, ["--help"])
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
