"""``canonqnn.build`` is the build function and the package of the build at once: once the
package is imported, Python binds the root's attribute ``build`` to it, and calling it builds."""

from __future__ import annotations

import subprocess
import sys

import pytest

import canonqnn
from _tflite import T, single_op
from canonqnn import _tvm

# In a child that has not imported the package yet: argv[1] is a module's JSON, argv[2] which
# spelling builds first; every build runs the same feed.
_CHILD = """
import sys
import numpy as np
import canonqnn
from canonqnn import _tvm

def module():
    import canonqnn.ops  # (registers the canonical ops; it imports canonqnn.build.isa)

    return _tvm.load_json(open(sys.argv[1]).read())


feed = {"in0": np.arange(4, dtype=np.int8).reshape(1, 4), "in1": np.ones((1, 4), np.int8)}
assert "canonqnn.build" not in sys.modules
if sys.argv[2] == "attribute":
    first = canonqnn.build(module())  # (the callee is looked up before the argument)
else:
    from canonqnn import build
    first = build(module())
import canonqnn.build
from canonqnn import build
mod = module()
results = [first, canonqnn.build(mod), build(mod), canonqnn.build.build(mod)]
outputs = [r.run(feed) for r in results]
assert all(type(r).__name__ == "Built" for r in results)
assert all(np.array_equal(o[k], outputs[0][k]) for o in outputs for k in o)
print(type(canonqnn.build).__name__, callable(canonqnn.build))
"""


@pytest.mark.parametrize("first", ["attribute", "import"])
def test_build_is_callable_before_and_after_the_package_is_imported(tmp_path, first):
    model = single_op("ADD", [T((1, 4), scale=0.1), T((1, 4), scale=0.1)],
                      [T((1, 4), scale=0.2)])
    path = tmp_path / "m.json"
    path.write_text(_tvm.save_json(canonqnn.canonicalize(canonqnn.load(model))[0]))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), first], check=True,
                         capture_output=True, text=True).stdout
    assert out.split() == ["_CallableModule", "True"]


def test_the_package_exports_the_build():
    import canonqnn.build as package

    assert callable(package)
    assert {name: getattr(package, name).__name__ for name in package.__all__} == {
        "Built": "Built", "KernelReport": "KernelReport", "build": "build", "fuse": "fuse",
        "inspect_kernels": "inspect_kernels", "load_built": "load_built"}
