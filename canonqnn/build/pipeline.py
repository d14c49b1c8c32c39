"""TVM's CPU pipeline as the build runs it: legalization, fusion, compilation; and the constants a
module carries into it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax, te, tirx

from .._tvm import attrs_dict, const_value, is_const, map_nodes
from . import forms  # noqa: F401  (installs the build's kernel forms as the ops' FLegalize)

# FuseOps fuses up to 256 ops into one kernel; a chain of float elementwise ops a model keeps
# (pre- and post-processing) then becomes one PrimFunc with a block and a buffer per op, which
# LLVM compiles in time growing faster than the chain (300 relus: 14.5 s; TVM's own unfused
# build of the model: 0.7 s). Kernels of at most 8 ops compile in about TVM's time (300: 1.1 s;
# 3,000: 3.4 s against TVM's 3.7 s; docs/benchmarks.md) and hold every canonical fusion (an op
# with its requantize, clamp and table).
MAX_FUSE_DEPTH_KEY, MAX_FUSE_DEPTH = "relax.FuseOps.max_depth", 8


def _quantize_by_reciprocal(bb: Any, call: Any) -> Any:
    """``relax.quantize`` as ``clip(RNE(f32(x * f32(1 / scale))) + zp)``: XNNPACK's (and
    PyTorch's) quantize multiplies by the float32 reciprocal of the scale, where TVM's own
    legalization divides (as ONNX's QuantizeLinear)."""
    x, scale, zp = call.args
    attrs = attrs_dict(call)
    axis, out_dtype = int(attrs["axis"]), str(attrs["out_dtype"])
    recip = (np.float32(1) / const_value(scale).astype(np.float32)).astype(np.float32)
    info = np.iinfo(out_dtype)
    lo, hi = (tirx.const(float(v), "float32") for v in (info.min, info.max))

    def compute(data: Any, r: Any, z: Any) -> Any:
        def elem(*i: Any) -> Any:
            k = () if len(r.shape) == 0 else (i[axis],)
            v = tirx.round(data(*i) * r(*k)) + z(*k).astype("float32")
            return te.max(te.min(v, hi), lo).astype(out_dtype)

        return te.compute(data.shape, elem, name="quantize")

    return bb.call_te(compute, x, relax.const(recip), zp, primfunc_name_hint="quantize")


def fuse_kernels(mod: Any, target: Any,
                 elementwise_kernels: Callable[[str, Any], bool] | None = None,
                 quantize_by_reciprocal: bool = False,
                 before_legalize: Callable[[Any], Any] | None = None,
                 float_legalize: dict[str, Any] | None = None, fuse: bool = True) -> Any:
    """TVM's CPU pipeline up to kernel fusion (dispatch, LegalizeOps, AnnotateTIROpPattern,
    FoldConstant, then ``fuse_ops``; ``fuse=False``: stop before it), with the PrimFuncs
    ``elementwise_kernels(name, func)`` names marked elementwise (op_pattern 0) before fusion;
    ``quantize_by_reciprocal``: ``relax.quantize`` multiplies by the reciprocal of its scale
    (``_quantize_by_reciprocal``); ``before_legalize(mod)``, run under the target just before
    LegalizeOps (the layout pass).

    AnnotateTIROpPattern classifies a table gather as opaque, which stops FuseOps at it; a
    pre-set 0 is overwritten (0 counts as unset), hence a pass after the annotation.
    """
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.MarkElementwiseKernels")
    def mark_elementwise(m: Any, _ctx: Any) -> Any:
        for gv, func in list(m.functions_items()):
            if (isinstance(func, tirx.PrimFunc) and elementwise_kernels is not None
                    and elementwise_kernels(gv.name_hint, func)):
                m[gv] = func.with_attr("op_pattern", 0)
        return m

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.BeforeLegalize")
    def before(m: Any, _ctx: Any) -> Any:
        return before_legalize(m) if before_legalize is not None else m

    passes = cpu.library_dispatch_passes(target) + [
        before,
        relax.transform.LegalizeOps(
            {**({"relax.quantize": _quantize_by_reciprocal} if quantize_by_reciprocal else {}),
             **(float_legalize or {})} or None),
        relax.transform.AnnotateTIROpPattern(), mark_elementwise,
        relax.transform.FoldConstant()]
    mod = _run(passes, mod, target)
    return fuse_ops(mod, target) if fuse else mod


def fuse_ops(mod: Any, target: Any, fuse_tir: bool = True) -> Any:
    """FuseOps, then FuseTIR (``fuse_tir=False``: each fused kernel left a Relax function of
    the kernel calls it groups, as ``report.kernel_of_bindings`` reads it)."""
    passes = [relax.transform.FuseOps()] + ([relax.transform.FuseTIR()] if fuse_tir else [])
    return _run(passes, mod, target)


def _run(passes: list[Any], mod: Any, target: Any) -> Any:
    current = tvm.transform.PassContext.current()
    config = {**dict(current.config), MAX_FUSE_DEPTH_KEY: MAX_FUSE_DEPTH}
    with target, tvm.transform.PassContext(opt_level=current.opt_level, config=config,
                                           instruments=list(current.instruments)):
        return tvm.transform.Sequential(passes)(mod)


# A kernel's buffers of whole vectors of at most this many bytes live on the stack of the
# thread that runs it (``stack_buffers``): a tile's accumulators.
STACK_BUFFER_MAX_BYTES = 8 * 1024
TIR_PIPELINE = "canonqnn"


def stack_buffers(func: Any) -> Any:
    """``func`` with every buffer of whole vectors it allocates (TVM vectorized every access:
    a tile's accumulators), of a constant size of at most ``STACK_BUFFER_MAX_BYTES``, kept on
    the stack (TVM's ``disable_lower_builtin``).

    TVM puts a buffer on the stack only under 1 KB; any other is a ``TVMBackendAllocWorkspace``
    and ``TVMBackendFreeWorkspace`` call pair where it is allocated, which for a tile's
    accumulators is inside the parallel loop, once per tile: MobileNet-V2 made 10,500 pairs
    an inference (3.7 % of its time on one Zen 4 thread); with its tiles on the stack (an
    ``alloca`` at the entry of the loop's function) most of its convs ran 7 to 33 % faster in
    the network (three 28x28 1x1 convs of 32 to 192 channels 15 % slower), the whole network
    about 0.9 of its time.
    Only buffers of vectors: their ``alloca`` has the vector's alignment, where a byte
    buffer's is 16 (TVM's code generator caps it) against the workspace's 64, and the
    depthwise convs' padded input planes ran twice as slow on the stack."""

    def on_stack(alloc: Any) -> Any:
        shape, dtype = alloc.buffer.shape, tvm.runtime.DataType(alloc.buffer.dtype)
        if (len(shape) != 1 or not isinstance(shape[0], tirx.IntImm) or dtype.lanes == 1
                or int(shape[0]) * dtype.bits * dtype.lanes > 8 * STACK_BUFFER_MAX_BYTES):
            return alloc
        keep = tirx.IntImm("int32", 1)
        return tirx.AllocBuffer(alloc.buffer, {**dict(alloc.annotations),
                                               "disable_lower_builtin": keep})

    return func.with_body(map_nodes(func.body, tirx.AllocBuffer, on_stack))


def _tir_pipeline() -> Any:
    """TVM's default (``s_tir``) lowering, then ``stack_buffers`` before its finalizing passes
    turn the allocations into calls."""
    lower, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("s_tir")

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.StackBuffers")
    def lower_then_stack(m: Any, _ctx: Any) -> Any:
        m = lower(m)
        for gv, func in list(m.functions_items()):
            if isinstance(func, tirx.PrimFunc):
                m[gv] = stack_buffers(func)
        return m

    return lower_then_stack, finalize_host, finalize_device


tvm.tirx.register_tir_pipeline(TIR_PIPELINE, _tir_pipeline)


def compile_fused(mod: Any, target: Any) -> Any:
    """Compile a module returned by ``fuse_kernels`` (TVM's remaining CPU passes, its kernels
    lowered by ``TIR_PIPELINE``)."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    @tvm.transform.module_pass(opt_level=0, name="canonqnn.LowerFused")
    def lower(m: Any, _ctx: Any) -> Any:
        with target:
            return tvm.transform.Sequential(cpu.dataflow_lower_passes(target)
                                            + cpu.finalize_passes(target))(m)

    return tvm.compile(mod, target=target, relax_pipeline=lower, tir_pipeline=TIR_PIPELINE)


def compile_kernel(func: Any, target: Any) -> Any:
    """One PrimFunc compiled alone as the build compiles it (for timing kernels)."""
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                       target=target, tir_pipeline=TIR_PIPELINE).jit()


def legalize(mod: Any) -> Any:
    return relax.transform.LegalizeOps()(mod)


def constant_bytes(mod: Any) -> dict[str, int]:
    """Bytes of the distinct constants in ``mod``'s Relax functions, by dtype (what a built
    module carries as weights and parameters)."""
    seen: set[Any] = set()
    sizes: dict[str, int] = {}

    def visit(expr: Any) -> None:
        if is_const(expr) and expr.__hash__() not in seen:
            seen.add(expr.__hash__())
            value = expr.value
            dtype = str(value.dtype)
            count = int(np.prod([int(d) for d in value.shape])) if len(value.shape) else 1
            sizes[dtype] = sizes.get(dtype, 0) + count * np.dtype(dtype).itemsize

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return sizes
