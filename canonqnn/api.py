"""The user-level flow: load a model of any registered format, save and load canonical modules,
canonicalize, inspect a build. Parity against the source runtime is ``canonqnn.oracle.parity``.

This is the layer above the core that reaches formats (through ``canonqnn.formats``) and rules
(``canonqnn.rewrites``); the CLI is a thin shell over it.
"""

from __future__ import annotations

import os
from typing import Any

from . import _tvm, budget, formats, progress
from .build import inspect_kernels, load_built
from .errors import CanonqnnError, InvalidModelError
from .io import ModelIO, checked_inputs, module_io, random_inputs  # noqa: F401  (public here too)


def load(model: Any, **options: Any) -> Any:
    """A fake-quant module from a model of any registered format (``canonqnn.formats``: ONNX,
    TFLite, a PT2E-quantized PyTorch ExportedProgram or its ``.pt2`` file), or a saved
    canonqnn module (``.json``)."""
    if _is_module_file(model):
        if options:
            raise CanonqnnError(f"options {sorted(options)} apply to models, not to a saved "
                                "canonical module: convert the model again with them")
        mod = load_module(model)
        budget.check_module(mod, os.fspath(model))
        return mod
    fmt = formats.of(model)
    refused = sorted(set(options) - set(fmt.options)) if fmt.options is not None else []
    if refused:
        raise CanonqnnError(f"options {refused} {fmt.options_refusal}")
    with progress.step(f"reading {_source_name(model) or fmt.models[:-1]}"):
        return fmt.call("load", model, **options)


def save_module(mod: Any, path: str | os.PathLike) -> None:
    """Write ``mod`` to ``path`` whole or not at all (``io.write_file``)."""
    from .io import write_file

    write_file(path, _tvm.save_json(mod))


def load_module(path: str | os.PathLike) -> Any:
    # (importing canonqnn.ops registers the canonical ops, which parsing needs)
    from .ops.module_check import check_module

    try:
        with open(path, encoding="utf-8") as f:
            mod = _tvm.load_json(f.read(), root_type="ir.IRModule")
    except FileNotFoundError:
        raise InvalidModelError(f"{path}: no such file") from None
    except Exception as exc:  # noqa: BLE001
        raise InvalidModelError(f"{path}: not a canonqnn module file ({exc})") from None
    check_module(mod, os.fspath(path))
    return mod


def canonical_module(model: Any, **options: Any) -> Any:
    """``model`` canonicalized: a Relax module is taken as it is, a saved module (``.json``)
    as saved, and a model of any format is imported and canonicalized."""
    if hasattr(model, "functions_items"):
        return model
    mod = load(model, **options)
    if _is_module_file(model):
        return mod
    from .rewrites import canonicalize

    mod = canonicalize(mod)[0]
    budget.check_module(mod, _source_name(model))
    return mod


def convert(model: Any, numerics: str | None = None, **options: Any) -> tuple[Any, Any]:
    """``model`` as a canonical module and its conversion report (``rewrites.Report``): a saved
    module as it is, its report recomputed from it (``numerics``, if given, must be the one it
    was converted for); a model of any format imported and canonicalized for ``numerics``."""
    from . import numerics as profiles
    from .rewrites import canonicalize, report_of

    mod = load(model, **options)
    if _is_module_file(model):
        recorded = profiles.recorded(mod)
        if numerics is not None and (recorded is None or recorded.name != numerics):
            raise CanonqnnError(f"{os.fspath(model)} was converted for numerics "
                                f"{recorded.name if recorded else 'unknown'}; convert the model "
                                f"again with --numerics {numerics}")
        return mod, report_of(mod)
    mod, report = canonicalize(mod, numerics=numerics)
    budget.check_module(mod, _source_name(model))
    return mod, report


def _is_module_file(model: Any) -> bool:
    """Whether ``model`` is the path of a saved module: named ``.json``, or holding one."""
    if not isinstance(model, (str, os.PathLike)):
        return False
    return os.fspath(model).endswith(".json") or formats.file_kind(model) == "module"


def _source_name(model: Any) -> str:
    """How a refusal names ``model``: its path, or nothing for one given in memory."""
    return os.fspath(model) if isinstance(model, (str, os.PathLike)) else ""


def inspect_built(model: Any, target: Any = None, **options: Any):
    """The kernels a build of ``model`` consists of, with their input/output dtypes, and every
    non-int8 tensor passed between canonical kernels (``KernelReport``).

    ``model`` is a library written by ``canonqnn build`` (``.so``: read from the library), or
    anything ``canonical_module`` takes (fused as ``build`` would, without compiling).
    """
    if isinstance(model, (str, os.PathLike)) and formats.file_kind(model) == "library":
        kernels = load_built(model).kernels
        if kernels is None:
            raise CanonqnnError(f"{os.fspath(model)}: the library records no kernel report "
                                "(built by an older canonqnn); inspect the model instead")
        return kernels
    return inspect_kernels(canonical_module(model, **options), target)
