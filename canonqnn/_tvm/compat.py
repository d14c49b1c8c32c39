"""What changed between TVM releases, in one place: imports, private FFI handles, error and op
registration, the thread pool's size.

Written against apache-tvm 0.27 (Relax only): types are ``expr.ty`` (not ``struct_info``),
constants are ``tvm.ir.expr.GenericConst`` read through ``.value``, TIR lives in ``tvm.tirx``.
The rest of ``canonqnn._tvm`` builds on these names, so a TVM upgrade starts here.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import tvm
import tvm_ffi
from tvm import relax, te, tirx, topi  # noqa: F401  (re-exported for op legalizations)

Expr = relax.Expr


Call = relax.Call


Var = relax.Var


BlockBuilder = relax.BlockBuilder


def _register_errors() -> None:
    """canonqnn's errors raised inside TVM's callbacks (rewrite rules, legalizations) come
    back out of TVM as themselves, not as RuntimeError (those made from a message alone)."""
    from .. import errors

    for cls in (errors.CanonqnnError, errors.InvalidModelError, errors.InvalidQuantizationError,
                errors.ParityError, errors.VerificationError):
        tvm_ffi.register_error(cls)


_register_errors()


def host_cores() -> int:
    """The cores this process may run on, SMT siblings counted once."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else \
        range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


# TVM's thread pool runs on half the logical CPUs of an x86 host unless told otherwise (it
# assumes two SMT threads a core): one thread on a 2-core machine without SMT, while the
# kernels are scheduled for every core. Its size is read once, when a first kernel runs.
if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
    os.environ["TVM_NUM_THREADS"] = str(host_cores())


_ARRAY_ITEM = tvm_ffi.get_global_func("ffi.ArrayGetItem")


_ARRAY_SIZE = tvm_ffi.get_global_func("ffi.ArraySize")


_MAKE_CONST = relax.expr._ffi_api.MakeTensorConst  # what relax.const calls


_ALLOC = tvm.runtime._ffi_api.TVMTensorAllocWithScope  # what tvm.runtime.empty calls


_CPU = tvm.cpu()


def register_op(
    name: str,
    description: str,
    infer_type: Callable[[Any], Any],
    legalize: Callable[[Any, Any], Any],
) -> Any:
    """Register (idempotently) a pure Relax op ``name`` with type inference and legalization."""
    try:
        op = tvm.ir.Op.get(name)
    except Exception:  # noqa: BLE001  (TVM raises a generic error for unknown ops)
        tvm.get_global_func("ir.RegisterOp")(name, description)
        op = tvm.ir.Op.get(name)
    tvm.ir.register_op_attr(name, "FInferType", lambda call, ctx: infer_type(call), level=11)
    tvm.ir.register_op_attr(name, "FPurity", True, level=11)
    tvm.ir.register_op_attr(name, "FLegalize", legalize, level=11)
    return op


def install_script_namespace(namespace: str, builders: dict[str, Callable[..., Any]]) -> None:
    """Let ``tvm.script.from_source`` parse ``R.<namespace>.<op>(...)`` calls back."""
    import tvm.relax.script.parser as parser_module

    setattr(parser_module, namespace, types.SimpleNamespace(**builders))


def op_by_name(name: str) -> Any:
    return tvm.ir.Op.get(name)
