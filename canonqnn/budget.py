"""One memory budget for what canonqnn allocates on a model's behalf, checked before allocating.

A model file of a few hundred bytes can describe tensors of many gigabytes (a PAD to
25000x25000, a dynamic dimension set to 10^11 by ``--shape``). Every size is known from the
module's types once the model is converted, so canonqnn compares them with one budget before
making inputs, starting a runtime or running a build, and refuses with ``ResourceError``
naming the tensor, its dtype and shape, the bytes it needs and the budget.

The budget, in bytes, is the first of:

- ``limit(size)`` (a context manager; the CLI's ``--max-memory SIZE`` sets it for a command),
- the environment variable ``CANONQNN_MAX_MEMORY`` (same syntax),
- half of the machine's physical memory (``default()``; less where a cgroup limits the
  process to less).

A SIZE is a positive number of bytes with an optional unit: ``4096``, ``512M``, ``2G``,
``1.5GiB``. ``K``, ``M``, ``G``, ``T`` and ``KiB`` ... ``TiB`` are powers of 1024;
``KB``, ``MB``, ``GB``, ``TB`` powers of 1000. From Python::

    from canonqnn import budget
    with budget.limit("2G"):
        built = canonqnn.build(mod)

What is checked (every dimension product in Python integers, which never overflow):

- ``check_module`` (after conversion: ``api.load`` of a module file, ``api.canonical_module``,
  ``oracle.parity``, the CLI's commands, ``builder.build``): every tensor with a static shape —
  ``main``'s inputs, constants, each binding's result in every function — alone, and an
  estimate of a whole run of ``main`` (``Estimate``). A symbolic dimension cannot be bounded
  from the module: such a tensor is skipped here and bounded at run time, where ``Built.run``
  checks the actual inputs and the interface's outputs;
- ``check_run`` (``Built.run``): the inputs, the outputs and the kernels' results of one run;
- ``check_parity`` (``oracle.parity``): what a parity run holds at once, before its inputs are
  made or a source runtime is started.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import CanonqnnError, ResourceError

ENV_VAR = "CANONQNN_MAX_MEMORY"
HOW_TO_RAISE = f"--max-memory, {ENV_VAR}"
DEFAULT_FRACTION = 0.5  # of physical memory: room for the OS, the source runtimes' own pools

_SET: contextvars.ContextVar[int | None] = contextvars.ContextVar("canonqnn_max_memory",
                                                                  default=None)
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-z]*)\s*", re.I)


# ---------------------------------------------------------------- the budget
def parse_size(text: str | int, what: str = "--max-memory") -> int:
    """``text`` (``4096``, ``512M``, ``2G``, ``1.5GiB``) in bytes; ``CanonqnnError`` naming
    ``what`` for anything else, zero or a negative size."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise CanonqnnError(f"{what} {text!r}: expected a size such as 2G, 512M or 4096")
    if isinstance(text, int):
        number, unit = float(text), ""
    else:
        match = _SIZE.fullmatch(text)
        if match is None or match.group(2).lower() not in _UNITS:
            raise CanonqnnError(f"{what} {text!r}: expected a size such as 2G, 512M, 1.5GiB "
                                "or 4096 (bytes)")
        number, unit = float(match.group(1)), match.group(2).lower()
    size = int(number * _UNITS[unit])
    if not number > 0 or size < 1:
        raise CanonqnnError(f"{what} {text!r}: the memory budget must be 1 byte or more")
    return size


def physical_memory() -> int:
    """This machine's memory in bytes, or its cgroup's limit where that is lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf names (not POSIX)
        total = 8 * 2**30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def default() -> int:
    """The budget when none is set: ``DEFAULT_FRACTION`` of ``physical_memory()``."""
    return int(physical_memory() * DEFAULT_FRACTION)


def current() -> int:
    """The budget in force, in bytes (``limit``, else ``CANONQNN_MAX_MEMORY``, else
    ``default()``)."""
    chosen = _SET.get()
    if chosen is not None:
        return chosen
    env = os.environ.get(ENV_VAR, "").strip()
    return parse_size(env, ENV_VAR) if env else default()


@contextlib.contextmanager
def limit(size: int | str | None) -> Iterator[int]:
    """Within the block, the budget is ``size`` (bytes, or a SIZE string); ``None`` keeps the
    budget in force. Yields the budget."""
    if size is None:
        yield current()
        return
    budget = parse_size(size)
    token = _SET.set(budget)
    try:
        yield budget
    finally:
        _SET.reset(token)


# ---------------------------------------------------------------- sizes
@functools.cache
def itemsize(dtype: str) -> int:
    """Bytes per element of a TVM or numpy dtype name (``int8``, ``float32``, ``bool``);
    8 for a name without a width, so that an unknown type is not undercounted."""
    if dtype == "bool":
        return 1
    bits = re.search(r"(\d+)", dtype)
    lanes = re.search(r"x(\d+)$", dtype)
    width = (int(bits.group(1)) + 7) // 8 if bits else 8
    return width * (int(lanes.group(1)) if lanes else 1)


def elements(shape: Sequence[int]) -> int:
    """The product of ``shape`` in Python integers (numpy's int64 product wraps)."""
    count = 1
    for d in shape:
        count *= int(d)
    return count


def nbytes(dtype: str, shape: Sequence[int]) -> int:
    return elements(shape) * itemsize(dtype)


def human(size: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


@dataclass(frozen=True)
class Tensor:
    """A tensor the budget counts: what names it, its dtype and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return nbytes(self.dtype, self.shape)

    def __str__(self) -> str:
        return f"tensor {self.name!r} ({self.dtype} {list(self.shape)})"


def _refusal(what: str, need: int, budget: int) -> ResourceError:
    return ResourceError(f"{what} needs {human(need)}; the memory budget is {human(budget)} "
                         f"({HOW_TO_RAISE})")


def check_tensors(tensors: Iterable[Tensor], where: str = "", budget: int | None = None) -> None:
    """Each tensor alone within the budget."""
    budget = current() if budget is None else budget
    for t in tensors:
        if t.nbytes > budget:
            raise _refusal(f"{where}{t}", t.nbytes, budget)


def check_bytes(what: str, need: int, budget: int | None = None) -> None:
    """``what`` (bytes a file says it holds, read before anything is made of them) within the
    budget."""
    budget = current() if budget is None else budget
    if need > budget:
        raise _refusal(what, need, budget)


# ---------------------------------------------------------------- modules
@dataclass
class Estimate:
    """What a whole run of a module's ``main`` holds at most, in bytes.

    The numpy reference interpreter (``run --reference``, ``build --verify``, parity's search
    for the first diverging layer) keeps every binding's value to the end, so the sum over
    ``main``'s bindings is what it holds; the VM frees and reuses storage, so for a build the
    sum is an upper bound. ``working`` is room for the temporaries of the op being computed
    (the reference's ``quantize`` makes three float32 copies of its input; a fused kernel an
    int32 accumulator of its output): three times the largest tensor at 4 bytes per element.
    """

    inputs: int = 0
    constants: int = 0
    bindings: int = 0
    largest: Tensor | None = None
    symbolic: list[str] = field(default_factory=list)  # tensors whose shape is symbolic

    @property
    def working(self) -> int:
        return 3 * elements(self.largest.shape) * max(4, itemsize(self.largest.dtype)) \
            if self.largest else 0

    @property
    def total(self) -> int:
        return self.inputs + self.constants + self.bindings + self.working

    def parts(self) -> str:
        text = (f"inputs {human(self.inputs)}, constants {human(self.constants)}, results of "
                f"its bindings {human(self.bindings)}, working space {human(self.working)}")
        return text + (f"; the largest: {self.largest} {human(self.largest.nbytes)}"
                       if self.largest else "")


def _type_tensors(t: Any, name: str) -> Iterator[Tensor | str]:
    """The tensors of a Relax type named ``name`` (fields of a tuple ``name[i]``); the name
    alone for a tensor whose shape is symbolic or unknown."""
    fields = getattr(t, "fields", None)
    if fields is not None:
        for i, f in enumerate(fields):
            yield from _type_tensors(f, f"{name}[{i}]")
        return
    if not hasattr(t, "dtype") or not hasattr(t, "ndim"):  # shapes, objects, scalars
        return
    from . import _tvm

    values = getattr(getattr(t, "shape", None), "values", None)
    dims = [getattr(d, "value", None) for d in _tvm.items(values)] if values is not None \
        else [None]
    known = [d for d in dims if isinstance(d, int)]
    if len(known) < len(dims):
        yield name
    else:
        yield Tensor(name, str(t.dtype), tuple(known))


def _constants(value: Any) -> Iterator[Any]:
    """The constants among a binding's value, its call's arguments and their tuple fields."""
    from . import _tvm

    pending = [value]
    while pending:
        expr = pending.pop()
        if _tvm.is_const(expr):
            yield expr
        else:
            inner = getattr(expr, "args", None)
            inner = getattr(expr, "fields", None) if inner is None else inner
            pending += _tvm.items(inner) if inner is not None else []


_CHECKED: list[Any] = []  # [(module, budget, estimate)]: the last module checked, kept alive


def check_module(mod: Any, source: str = "", budget: int | None = None) -> Estimate:
    """Every statically shaped tensor of ``mod`` alone, then ``main``'s ``Estimate``, within
    the budget; ``ResourceError`` names the tensor (and ``source``, the file). Symbolic shapes
    are left to the run-time checks (``check_run``). Returns the estimate."""
    from . import _tvm

    budget = current() if budget is None else budget
    if _CHECKED and _tvm.identity(_CHECKED[0][0]) == _tvm.identity(mod) \
            and _CHECKED[0][1] == budget:
        return _CHECKED[0][2]  # the CLI's conversion, then the build of the same module
    where = f"{source}: " if source else ""
    estimate = None
    seen_constants: set[int] = set()
    outputs = _output_names(mod)
    for fname, func in _tvm.relax_functions(mod).items():
        counted = Estimate() if fname == "main" else None
        named = outputs(func) if fname == "main" else {}
        for param in _tvm.function_params(func):
            for t in _type_tensors(_tvm.ty(param), _tvm.var_name(param)):
                _count(t, where, f", an input of {fname},", budget, counted, "inputs")
        for var, value in _tvm.function_bindings(func):
            name = _tvm.var_name(var)
            for const in _constants(value):
                if _tvm.identity(const) not in seen_constants:
                    seen_constants.add(_tvm.identity(const))
                    for t in _type_tensors(_tvm.ty(const), f"constant of {name}"):
                        _count(t, where, f" in {fname}", budget, counted, "constants")
            # an alias, a tuple or a field of one has no storage of its own: calls only count
            allocates = hasattr(value, "op") and hasattr(value, "args")
            what = f", the result of {_tvm.op_name(value) or 'a call'} in {fname}," \
                if allocates else f" in {fname}"
            for t in _type_tensors(_tvm.ty(var), named.get(_tvm.identity(var), name)):
                _count(t, where, what, budget, counted if allocates else None,
                       "bindings")
        if counted is not None:
            estimate = counted
    estimate = estimate or Estimate()
    if estimate.total > budget:
        raise _refusal(f"{where}a run of the module ({estimate.parts()})", estimate.total,
                       budget)
    _CHECKED[:] = [(mod, budget, estimate)]
    return estimate


def _output_names(mod: Any):
    """A function from ``main`` to the model's output names (``canonqnn.io``) keyed by the
    identity of the variables bound to them, through aliases (``gv = lv2``)."""
    from . import _tvm
    from .io import module_io

    io = module_io(mod)

    def names(func: Any) -> dict[int, str]:
        if io is None:
            return {}
        alias = {_tvm.identity(var): value for var, value in _tvm.function_bindings(func)
                 if _tvm.is_var(value)}
        result = func.body.body
        fields = _tvm.tuple_fields(result) or [result]
        out = {}
        for info, var in zip(io.outputs, fields):
            while _tvm.is_var(var):
                out[_tvm.identity(var)] = info.name
                var = alias.get(_tvm.identity(var))
        return out

    return names


def _count(t: Tensor | str, where: str, suffix: str, budget: int,
           estimate: Estimate | None, part: str) -> None:
    """``t`` alone within the budget, and added to ``part`` of ``estimate``."""
    if isinstance(t, str):
        if estimate is not None:
            estimate.symbolic.append(t)
        return
    size = t.nbytes
    if size > budget:
        raise _refusal(f"{where}{t}{suffix}", size, budget)
    if estimate is not None:
        setattr(estimate, part, getattr(estimate, part) + size)
        if estimate.largest is None or size > estimate.largest.nbytes:
            estimate.largest = t


# ---------------------------------------------------------------- runs
def io_tensors(infos: Iterable[Any]) -> list[Tensor]:
    """``canonqnn.io.TensorInfo`` entries as ``Tensor``."""
    return [Tensor(i.name, i.dtype, tuple(i.shape)) for i in infos]


def run_bytes(io: Any, kernels: Any = None) -> tuple[int, Tensor | None]:
    """The bytes one ``Built.run`` holds and its largest tensor: the inputs twice (converted
    to the model's dtypes, and on the device), the outputs twice (on the device, and as numpy
    arrays) and every kernel's result (``kernels``, a ``KernelReport``: the VM's storage is at
    most that, without reuse)."""
    tensors = io_tensors(io.inputs) + io_tensors(io.outputs)
    total = 2 * sum(t.nbytes for t in tensors)
    for kernel in getattr(kernels, "kernels", None) or []:
        outs = [Tensor(f"{kernel.name}:{j}", d, tuple(s)) for j, (d, s) in
                enumerate(kernel.outputs)]
        tensors += outs
        total += sum(t.nbytes for t in outs)
    return total, max(tensors, key=lambda t: t.nbytes, default=None)


def check_run(io: Any, kernels: Any = None, budget: int | None = None) -> None:
    """Before ``Built.run`` converts inputs or allocates outputs: each input and output alone
    (named as the model names it), then the whole run (``run_bytes``)."""
    budget = current() if budget is None else budget
    check_tensors(io_tensors(io.inputs), "input ", budget)
    check_tensors(io_tensors(io.outputs), "output ", budget)
    total, largest = run_bytes(io, kernels)
    if total > budget:
        assert largest is not None  # a total above a budget has a largest tensor
        raise _refusal(f"a run of the build (inputs, outputs and every kernel's result; the "
                       f"largest: {largest} {human(largest.nbytes)})", total, budget)


def parity_bytes(io: Any, module: Estimate, runs: int, runtimes: int) -> int:
    """What a parity run holds at once (``oracle.parity``), in this process and its children:

    - the inputs of every run, made before the first run (``runs`` x inputs), and a float64 or
      int64 draw of one input while they are made (8 bytes an element of the largest);
    - the build's run: at most the module's ``Estimate`` (TVM's VM keeps its storage pooled
      after a run), plus its inputs and outputs as numpy arrays;
    - each source runtime, in a child process that lives for the whole comparison: the
      model's tensors (at most the estimate's inputs, constants and bindings; a runtime runs
      no numpy reference, so no working space), and the feed and outputs it is sent and
      returns, each pickled once over the socket;
    - here, one runtime's outputs with their pickled bytes, the previous runtime's outputs
      until they are replaced, and the build's outputs (the comparison works in chunks:
      ``oracle.parity._compare``);
    - or, where an output differs, the search for the first diverging layer once the
      runtimes are closed: the reference interpreter's values (the whole estimate again) and
      one onnxruntime child holding the model's tensors.
    """
    inputs = sum(t.nbytes for t in io_tensors(io.inputs))
    outputs = sum(t.nbytes for t in io_tensors(io.outputs))
    largest_input = max((elements(t.shape) for t in io_tensors(io.inputs)), default=0)
    held = runs * inputs + 8 * largest_input + module.total + inputs + outputs
    tensors = module.inputs + module.constants + module.bindings
    comparing = runtimes * (tensors + 2 * (inputs + outputs)) + 4 * outputs
    diverging = module.total + tensors
    return held + max(comparing, diverging)


def check_parity(io: Any, module: Estimate, runs: int, runtimes: int,
                 budget: int | None = None) -> None:
    """``parity_bytes`` within the budget, before any input is made or runtime started."""
    budget = current() if budget is None else budget
    need = parity_bytes(io, module, runs, runtimes)
    if need > budget:
        largest = f"; the largest: {module.largest} {human(module.largest.nbytes)}" \
            if module.largest else ""
        raise _refusal(f"parity over {runs} run(s) with {runtimes} source runtime(s) "
                       f"(inputs, the build's run and each runtime's copy of the model's "
                       f"tensors{largest})", need, budget)
