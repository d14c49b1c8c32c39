"""What a build turns into: the fused kernels, and the tensors passed between them.

After TVM fuses operators, each ``call_tir`` in ``main`` is one kernel. A canonical module
should pass only int8 between kernels that implement canonical ops (names containing
``canonqnn_``), and a lookup table that follows a conv/matmul/add/mul should live inside that
op's kernel, not in a kernel of its own. ``KernelReport`` lists the kernels with their dtypes and
flags what breaks either rule: an integer tensor wider than int8 (int16/int32 between layers was
old TVM's failure) between canonical kernels, or a lookup table left alone. Canonical ops never
produce float, so a float (or bool) tensor between kernels always comes from a dequantize, i.e.
enters or leaves a float island (TVM may fuse the island's float ops into a canonical kernel,
so kernel names cannot tell): those are listed separately, expected where the Report names an
island.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tvm import relax

from .. import _tvm
from ..ops import absorbing

CANONICAL_MARK = "canonqnn_"
LUT_KERNEL = "canonqnn_lut"  # the primfunc name hint of the lut op's legalization

Tensor = tuple[str, tuple[int, ...]]  # (dtype, shape)


@dataclass(frozen=True)
class Kernel:
    name: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    producers: list[int | None]  # per input: index of the kernel that computed it, or None

    @property
    def canonical(self) -> bool:
        return CANONICAL_MARK in self.name

    @property
    def output(self) -> Tensor:
        return self.outputs[0]


@dataclass(frozen=True)
class Edge:
    producer: str
    consumer: str
    dtype: str
    shape: tuple[int, ...]


@dataclass
class KernelReport:
    kernels: list[Kernel]
    non_int8_edges: list[Edge] = field(default_factory=list)  # integer, between canonical ones
    float_island_edges: list[Edge] = field(default_factory=list)
    unfused_luts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.non_int8_edges and not self.unfused_luts

    def to_json(self) -> dict[str, Any]:
        def edge(e: Edge) -> dict[str, Any]:
            return {"producer": e.producer, "consumer": e.consumer, "dtype": e.dtype,
                    "shape": list(e.shape)}

        return {
            "kernels": [{"name": k.name, "inputs": [[d, list(s)] for d, s in k.inputs],
                         "outputs": [[d, list(s)] for d, s in k.outputs],
                         "producers": k.producers} for k in self.kernels],
            "non_int8_edges": [edge(e) for e in self.non_int8_edges],
            "float_island_edges": [edge(e) for e in self.float_island_edges],
            "unfused_luts": list(self.unfused_luts),
        }

    @staticmethod
    def from_json(data: dict[str, Any] | str) -> KernelReport:
        data = json.loads(data) if isinstance(data, str) else data
        kernels = [Kernel(k["name"], [(d, tuple(s)) for d, s in k["inputs"]],
                          [(d, tuple(s)) for d, s in k["outputs"]], list(k["producers"]))
                   for k in data["kernels"]]
        return analyze(kernels)

    def summary(self) -> str:
        def tensors(ts: list[Tensor]) -> str:
            return ", ".join(f"{d}{list(s)}" for d, s in ts) or "-"

        lines = [f"kernels ({len(self.kernels)}):"]
        for i, k in enumerate(self.kernels):
            lines.append(f"  #{i} {k.name}: ({tensors(k.inputs)}) -> {tensors(k.outputs)}")
        if self.non_int8_edges:
            lines.append(f"NOT int8 between canonical kernels ({len(self.non_int8_edges)}):")
            lines += [f"  {e.producer} -> {e.consumer}: {e.dtype}{list(e.shape)}"
                      for e in self.non_int8_edges]
        else:
            lines.append("int8 between every pair of canonical kernels")
        if self.unfused_luts:
            lines.append("lookup tables not fused into the conv/matmul/add/mul they solely read: "
                         + ", ".join(self.unfused_luts))
        if self.float_island_edges:
            lines.append(f"float tensors at float islands ({len(self.float_island_edges)}):")
            lines += [f"  {e.producer} -> {e.consumer}: {e.dtype}{list(e.shape)}"
                      for e in self.float_island_edges]
        return "\n".join(lines)


def from_fused_module(mod: Any) -> KernelReport:
    """The kernels of a module after TVM's FuseOps/FuseTIR (``pipeline.fuse_kernels``)."""
    produced_by: dict[Any, int] = {}
    kernels = []
    calls, origin = kernel_calls(mod)
    for index, (name, args, out_var) in enumerate(calls):
        inputs, producers = [], []
        for arg in args:
            inputs += _tvm.tensor_types(arg)
            producers.append(produced_by.get(origin.get(arg, arg)))
        outputs = _tvm.tensor_types(out_var)
        produced_by[out_var] = index
        kernels.append(Kernel(name, inputs, outputs, producers))
    return analyze(kernels)


def kernel_calls(mod: Any) -> tuple[list[tuple[str, list[Any], Any]], dict[Any, Any]]:
    """The ``call_tir`` bindings of a fused module's ``main``, in order, as
    ``(kernel name, arguments, output var)``, and for each variable that reads a field of
    (or aliases) another variable, the variable it comes from."""
    calls: list[tuple[str, Any, Any]] = []
    origin: dict[Any, Any] = {}
    call_tir = _tvm.op_by_name("relax.call_tir")
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem):
                origin[binding.var] = origin.get(value.tuple_value, value.tuple_value)
            elif isinstance(value, relax.Var):
                origin[binding.var] = origin.get(value, value)
            elif isinstance(value, relax.Call) and value.op.same_as(call_tir):
                calls.append((value.args[0].name_hint, list(value.args[1].fields), binding.var))
    return calls, origin


def analyze(kernels: list[Kernel]) -> KernelReport:
    report = KernelReport(kernels)
    readers = [0] * len(kernels)
    table_producers = absorbing("absorbs_table")
    for kernel in kernels:
        for source in kernel.producers:
            if source is not None:
                readers[source] += 1
    for consumer in kernels:
        for (dtype, shape), source in zip(consumer.inputs, consumer.producers):
            if source is None or dtype == "int8":
                continue
            producer = kernels[source]
            edge = Edge(producer.name, consumer.name, dtype, shape)
            if producer.canonical and consumer.canonical and dtype.startswith(("int", "uint")):
                report.non_int8_edges.append(edge)
            else:
                report.float_island_edges.append(edge)
        # Fused kernels are named fused_<first op>_..._<last op>: a kernel that starts with the
        # table read its input from another kernel. Fusion is due only when the table is the
        # sole reader of its producer's output (FuseOps cannot duplicate the producer).
        source = consumer.producers[0] if consumer.producers else None
        if consumer.name.removeprefix("fused_").startswith(LUT_KERNEL) and source is not None:
            producer = kernels[source]
            if readers[source] == 1 and producer.canonical and any(
                    f"{CANONICAL_MARK}{op}" in producer.name for op in table_producers):
                report.unfused_luts.append(consumer.name)
    return report


def kernel_of_bindings(legalized: Any, fused: Any) -> dict[Any, str]:
    """Each variable bound in ``legalized``'s ``main`` (the build's module before FuseOps) that a
    kernel computes, mapped to that kernel's name; ``fused`` is ``legalized`` after FuseOps,
    before FuseTIR (FuseTIR names each kernel after its Relax function).

    A fused kernel's function keeps the variables of the bindings it groups but its result's,
    which FuseOps binds anew: that binding is the one of ``legalized`` that calls the same
    kernel on the same variables."""
    bound = dict(_tvm.function_bindings(legalized["main"]))
    kernel_of: dict[Any, str] = {}
    origin: dict[Any, Any] = {}  # a variable of fused main -> the legalized one it holds
    call_tir = _tvm.op_by_name("relax.call_tir")

    def key(call: Any, resolve: Any) -> Any:
        if not (isinstance(call, relax.Call) and call.op.same_as(call_tir)):
            return None
        args = tuple(resolve(a, a) for a in call.args[1].fields)
        return call.args[0], tuple(a if isinstance(a, relax.Var) else None for a in args)

    unassigned = {var: key(value, lambda v, _: v) for var, value in bound.items()}
    for var, value in _tvm.function_bindings(fused["main"]):
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            kernel_of[var] = value.args[0].name_hint
            continue
        func = _tvm.callee_function(fused, value)
        if func is None:
            continue
        name = value.op.name_hint
        params = {p: origin.get(a, a) for p, a in zip(func.params, value.args)}
        for inner, call in _tvm.function_bindings(func):
            if inner not in bound:  # the kernel's result
                wanted = key(call, params.get)
                inner = next((v for v, k in unassigned.items()
                              if k is not None and k[1] == wanted[1]
                              and k[0].same_as(wanted[0])), None) if wanted else None
                if inner is None:
                    continue
                origin[var] = inner
            kernel_of[inner] = name
            unassigned.pop(inner, None)
    return kernel_of
