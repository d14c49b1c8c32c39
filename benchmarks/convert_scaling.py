"""How import, canonicalization and ``canonqnn convert`` scale with graph size.

Builds synthetic QDQ ONNX graphs of about 1k, 5k, 20k and 50k nodes, of two families:

- ``conv``: chains of QDQ Conv layers (int8 per-channel weights, int32 bias under a
  DequantizeLinear, optional Relu) with a residual Add + Relu every three convs, on
  1x8x8x8 activations;
- ``transformer``: pre-LN encoder blocks on [1, 8, 16] activations (seq 8, hidden 16, 2 heads,
  FFN 32): QDQ MatMul + bias for Q/K/V, the output projection and the FFN, Reshape/Transpose to
  heads, Q*K^T (a Transpose inside the MatMul's operand) scaled by 1/sqrt(d), Softmax, Add
  residuals, LayerNormalization written out in QDQ ops (ReduceMean, Sub, Mul, ReduceMean,
  exp(-0.5 * log(var + eps)) as its reciprocal square root, Mul, Mul gamma, Add beta) and
  Gelu as its Erf form.

Every op of both families canonicalizes (no float islands; LayerNormalization as one op would
stay a float island, so it is written out). For each graph it times, in this process:

    import        canonqnn.load(path)
    canonicalize  canonqnn.canonicalize(mod)
    convert       ``canonqnn convert PATH -o OUT.json`` run in-process (canonqnn.cli.main):
                  load + canonicalize + save_module + the printed summary
    from_onnx     tvm.relax.frontend.onnx.from_onnx(onnx.load(path)), TVM's own importer

and, unless ``--no-memory``, each stage's peak resident memory in a fresh process of its own.

    python benchmarks/convert_scaling.py [--sizes 1000,5000,20000,50000]
        [--family conv|transformer|all] [--repeat N] [--json OUT] [--no-memory] [--keep DIR]
        [--activation int8|uint8]

The graph generators ``conv_stack(n_nodes)`` and ``transformer(n_nodes)`` are importable and
return an ``onnx.ModelProto``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 10
INPUT, OUTPUT = "input", "output"
STAGES = ("import", "canonicalize", "convert", "from_onnx")
DEFAULT_SIZES = (1000, 5000, 20000, 50000)

# conv family
CONV_SHAPE = (1, 8, 8, 8)
CONV_CHANNELS, CONV_KERNEL = 8, 3
CONVS_PER_BLOCK = 3
# a conv layer is DQ(x), DQ(w), DQ(b), Conv, [Relu], Q; the residual DQ, DQ, Add, Relu, Q
CONV_NODES, CONV_RELU_NODES, RESIDUAL_NODES = 5, 6, 5
CONV_BLOCK_NODES = (CONVS_PER_BLOCK - 1) * CONV_RELU_NODES + CONV_NODES + RESIDUAL_NODES

# transformer family
SEQ, HIDDEN, HEADS, FFN = 8, 16, 2, 32
HEAD_DIM = HIDDEN // HEADS
LAYER_NORM_NODES = 31
ATTENTION_NODES = 65  # after its LayerNormalization: Q/K/V, heads, scores, softmax, out, Add
FFN_NODES = LAYER_NORM_NODES + 6 + 7 + 6 + 4  # LN, up, Gelu, down, Add
TRANSFORMER_BLOCK_NODES = LAYER_NORM_NODES + ATTENTION_NODES + FFN_NODES
FILLER_MIN = 9  # every remainder of at least 9 nodes is 3 * (0..3) + 4 * k


class _QdqGraph:
    """Accumulates nodes and initializers of one QDQ graph with unique tensor names."""

    def __init__(self, seed: int, activation: str = "int8") -> None:
        if activation not in ("int8", "uint8"):
            raise ValueError(f"activation {activation!r}: int8 or uint8")
        self.activation = activation
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def init(self, array: np.ndarray, prefix: str) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], prefix: str | None = None, **attrs) -> str:
        out = self.name(prefix or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def act_qparams(self, scale: float | None = None,
                    dtype: str | None = None) -> tuple[str, str, float]:
        """Per-tensor activation parameters (int8 or uint8, default the graph's activation
        type): (scale name, zero point name, scale)."""
        s = np.float32(scale if scale is not None else self.rng.uniform(0.02, 0.06))
        dtype = dtype or self.activation
        z = np.array(self.rng.integers(-4, 5) + (128 if dtype == "uint8" else 0), dtype)
        return self.init(s, "s"), self.init(z, "z"), float(s)

    def q(self, x: str, qp: tuple[str, str, float]) -> str:
        return self.node("QuantizeLinear", [x, qp[0], qp[1]], "q")

    def dq(self, xq: str, qp: tuple[str, str, float]) -> str:
        return self.node("DequantizeLinear", [xq, qp[0], qp[1]], "dq")

    def weight(self, shape: tuple[int, ...], axis: int, x_scale: float,
               bias_size: int) -> tuple[str, str]:
        """DQ of an int8 weight quantized per channel along ``axis`` and DQ of its int32 bias
        (scale x_scale * w_scale per channel, zero point 0)."""
        channels = shape[axis]
        w = self.rng.integers(-127, 128, shape).astype(np.int8)
        ws = self.rng.uniform(0.002, 0.01, channels).astype(np.float32)
        wf = self.node("DequantizeLinear", [self.init(w, "w"), self.init(ws, "ws"),
                                            self.init(np.zeros(channels, np.int8), "wz")],
                       "dq", axis=axis)
        bs = (np.float32(x_scale) * ws).astype(np.float32)
        b = self.rng.integers(-500, 500, bias_size).astype(np.int32)
        bf = self.node("DequantizeLinear", [self.init(b, "b"), self.init(bs, "bs"),
                                            self.init(np.zeros(bias_size, np.int32), "bz")],
                       "dq", axis=0)
        return wf, bf

    def const(self, value: float, prefix: str = "c") -> str:
        """A float32 scalar initializer."""
        return self.init(np.float32(value), prefix)

    def model(self, in_shape: tuple[int, ...], out: str, out_shape: tuple[int, ...],
              name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, list(in_shape))],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(out_shape))],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="canonqnn-benchmark")
        model.ir_version = IR_VERSION
        return model


def _split_3_4(remainder: int) -> tuple[int, int]:
    """``(threes, fours)`` with 3 * threes + 4 * fours == remainder, fewest threes (every
    remainder of at least 6 has one)."""
    threes = (3 * remainder) % 4
    return threes, (remainder - 3 * threes) // 4


# ------------------------------------------------------------------------------- conv family
def _conv_layer(g: _QdqGraph, xq: str, xqp, relu: bool):
    xf = g.dq(xq, xqp)
    wf, bf = g.weight((CONV_CHANNELS, CONV_CHANNELS, CONV_KERNEL, CONV_KERNEL), 0, xqp[2],
                      CONV_CHANNELS)
    y = g.node("Conv", [xf, wf, bf], "conv", pads=[1, 1, 1, 1],
               kernel_shape=[CONV_KERNEL, CONV_KERNEL])
    if relu:
        y = g.node("Relu", [y])
    yqp = g.act_qparams()
    return g.q(y, yqp), yqp


def conv_stack(n_nodes: int, seed: int = 0, activation: str = "int8") -> onnx.ModelProto:
    """A QDQ Conv chain of exactly ``n_nodes`` ONNX nodes (at least 30).

    Input Q, then blocks of three Conv layers (Relu after the first two) closed by a residual
    Add + Relu with the block input, then single Conv layers (5 nodes without Relu, 6 with) to
    reach the count, then the output DQ. ``activation`` is the activations' type (int8 or
    uint8); weights are int8, biases int32.
    """
    n_nodes = max(int(n_nodes), 30)
    body = n_nodes - 2
    blocks = max(0, (body - 20) // CONV_BLOCK_NODES)
    rest = body - blocks * CONV_BLOCK_NODES
    with_relu = rest % 5  # rest = 5 * plain + 6 * with_relu
    plain = (rest - CONV_RELU_NODES * with_relu) // CONV_NODES
    g = _QdqGraph(seed, activation)
    xqp = g.act_qparams(0.05)
    xq = g.q(INPUT, xqp)
    for _ in range(blocks):
        skip, skip_qp = xq, xqp
        for i in range(CONVS_PER_BLOCK):
            xq, xqp = _conv_layer(g, xq, xqp, relu=i < CONVS_PER_BLOCK - 1)
        s = g.node("Add", [g.dq(skip, skip_qp), g.dq(xq, xqp)])
        xqp = g.act_qparams()
        xq = g.q(g.node("Relu", [s]), xqp)
    for i in range(plain + with_relu):
        xq, xqp = _conv_layer(g, xq, xqp, relu=i < with_relu)
    g.dq(xq, xqp)
    g.nodes[-1].output[0] = OUTPUT
    return g.model(CONV_SHAPE, OUTPUT, CONV_SHAPE, f"conv_stack_{n_nodes}")


# ------------------------------------------------------------------------ transformer family
def _linear(g: _QdqGraph, xq: str, xqp, k: int, n: int, out_scale: float | None = None):
    """DQ(x) @ DQ(W [k, n] per column) + DQ(b) -> Q: 6 nodes."""
    wf, bf = g.weight((k, n), 1, xqp[2], n)
    y = g.node("Add", [g.node("MatMul", [g.dq(xq, xqp), wf]), bf])
    yqp = g.act_qparams(out_scale)
    return g.q(y, yqp), yqp


def _movement(g: _QdqGraph, xq: str, xqp, op: str, **kw):
    """DQ -> Reshape | Transpose -> Q with the input's own parameters: 3 nodes."""
    if op == "Reshape":
        y = g.node("Reshape", [g.dq(xq, xqp), g.init(np.array(kw["shape"], np.int64), "shape")])
    else:
        y = g.node("Transpose", [g.dq(xq, xqp)], perm=kw["perm"])
    return g.q(y, xqp), xqp


def _binary(g: _QdqGraph, op: str, aq: str, aqp, bq: str, bqp, scale: float | None = None):
    """DQ(a), DQ(b) -> Add | Sub | Mul -> Q: 4 nodes."""
    y = g.node(op, [g.dq(aq, aqp), g.dq(bq, bqp)])
    yqp = g.act_qparams(scale)
    return g.q(y, yqp), yqp


def _reduce_mean(g: _QdqGraph, xq: str, xqp):
    y = g.node("ReduceMean", [g.dq(xq, xqp)], axes=[-1], keepdims=1)
    yqp = g.act_qparams()
    return g.q(y, yqp), yqp


def _layer_norm(g: _QdqGraph, xq: str, xqp):
    """LayerNormalization over the last axis written out in QDQ ops: 31 nodes."""
    mean, mean_qp = _reduce_mean(g, xq, xqp)                                   # 3
    d, d_qp = _binary(g, "Sub", xq, xqp, mean, mean_qp)                        # 4
    df = g.dq(d, d_qp)                                                         # 3
    sq_qp = g.act_qparams(0.08)
    sq = g.q(g.node("Mul", [df, df]), sq_qp)
    var, var_qp = _reduce_mean(g, sq, sq_qp)                                   # 3
    t = g.node("Add", [g.dq(var, var_qp), g.const(1e-5, "eps")])              # 6
    t = g.node("Exp", [g.node("Mul", [g.node("Log", [t]), g.const(-0.5)])])
    inv_qp = g.act_qparams(0.1)
    inv = g.q(t, inv_qp)
    n, n_qp = _binary(g, "Mul", d, d_qp, inv, inv_qp)                          # 4
    gamma_qp = g.act_qparams(0.01, "int8")  # constants: int8 like the weights
    gamma = g.init(g.rng.integers(80, 120, HIDDEN).astype(np.int8), "gamma")
    n, n_qp = _binary(g, "Mul", n, n_qp, gamma, gamma_qp)                      # 4
    beta_qp = g.act_qparams(0.002, "int8")
    beta = g.init(g.rng.integers(-20, 20, HIDDEN).astype(np.int8), "beta")
    return _binary(g, "Add", n, n_qp, beta, beta_qp)                           # 4


def _attention(g: _QdqGraph, hq: str, hqp):
    """LayerNormalization, two-head self-attention and the residual Add: 96 nodes."""
    xq, xqp = _layer_norm(g, hq, hqp)
    heads = []
    for _ in range(3):  # Q, K, V projections, each split into heads [1, 2, 8, 8]
        pq, pqp = _linear(g, xq, xqp, HIDDEN, HIDDEN)                          # 6
        pq, pqp = _movement(g, pq, pqp, "Reshape", shape=[1, SEQ, HEADS, HEAD_DIM])  # 3
        heads.append(_movement(g, pq, pqp, "Transpose", perm=[0, 2, 1, 3]))    # 3
    (qq, qqp), (kq, kqp), (vq, vqp) = heads
    kt = g.node("Transpose", [g.dq(kq, kqp)], perm=[0, 1, 3, 2])               # 6
    s = g.node("Mul", [g.node("MatMul", [g.dq(qq, qqp), kt]),
                       g.const(1.0 / math.sqrt(HEAD_DIM), "alpha")])
    sqp = g.act_qparams(0.1)
    sq = g.q(s, sqp)
    pqp = g.act_qparams(1.0 / 256)                                             # 3
    p = g.q(g.node("Softmax", [g.dq(sq, sqp)], axis=-1), pqp)
    cqp = g.act_qparams()                                                      # 4
    c = g.q(g.node("MatMul", [g.dq(p, pqp), g.dq(vq, vqp)]), cqp)
    c, cqp = _movement(g, c, cqp, "Transpose", perm=[0, 2, 1, 3])              # 3
    c, cqp = _movement(g, c, cqp, "Reshape", shape=[1, SEQ, HIDDEN])           # 3
    o, oqp = _linear(g, c, cqp, HIDDEN, HIDDEN)                                # 6
    return _binary(g, "Add", hq, hqp, o, oqp)                                  # 4


def _feed_forward(g: _QdqGraph, hq: str, hqp):
    """LayerNormalization, up projection, Gelu (Erf form), down projection, residual Add:
    54 nodes."""
    xq, xqp = _layer_norm(g, hq, hqp)
    uq, uqp = _linear(g, xq, xqp, HIDDEN, FFN)
    uf = g.dq(uq, uqp)                                                         # 7
    e = g.node("Erf", [g.node("Mul", [uf, g.const(1.0 / math.sqrt(2.0), "rsqrt2")])])
    e = g.node("Add", [e, g.const(1.0, "one")])
    y = g.node("Mul", [g.node("Mul", [uf, e]), g.const(0.5, "half")])
    gqp = g.act_qparams()
    gq = g.q(y, gqp)
    dq_, dqp = _linear(g, gq, gqp, FFN, HIDDEN)
    return _binary(g, "Add", hq, hqp, dq_, dqp)


def transformer(n_nodes: int, seed: int = 0, activation: str = "int8") -> onnx.ModelProto:
    """Pre-LN encoder blocks (150 ONNX nodes each) on [1, 8, 16], then 6-node linear layers,
    up to three 3-node pieces (DQ -> Sigmoid -> Q) and 4-node ones (residual Add of the running
    tensor with itself) so that the graph has exactly ``n_nodes`` nodes when
    ``n_nodes >= 161``; smaller requests get one block (152 nodes). ``activation`` is the
    activations' type (int8 or uint8); weights and LayerNormalization's gamma and beta are
    int8, biases int32."""
    n_nodes = int(n_nodes)
    body = n_nodes - 2
    blocks = max(1, (body - FILLER_MIN) // TRANSFORMER_BLOCK_NODES)
    rest = body - blocks * TRANSFORMER_BLOCK_NODES
    linears = max(0, (rest - FILLER_MIN) // 6)
    rest -= 6 * linears
    threes, fours = _split_3_4(rest) if rest >= FILLER_MIN else (0, 0)
    g = _QdqGraph(seed, activation)
    hqp = g.act_qparams(0.05)
    hq = g.q(INPUT, hqp)
    for _ in range(blocks):
        hq, hqp = _attention(g, hq, hqp)
        hq, hqp = _feed_forward(g, hq, hqp)
    for _ in range(linears):
        hq, hqp = _linear(g, hq, hqp, HIDDEN, HIDDEN)
    for _ in range(threes):
        sqp = g.act_qparams(1.0 / 256)
        hq, hqp = g.q(g.node("Sigmoid", [g.dq(hq, hqp)]), sqp), sqp
    for _ in range(fours):
        hq, hqp = _binary(g, "Add", hq, hqp, hq, hqp)
    g.dq(hq, hqp)
    g.nodes[-1].output[0] = OUTPUT
    shape = (1, SEQ, HIDDEN)
    return g.model(shape, OUTPUT, shape, f"transformer_{n_nodes}")


FAMILIES: dict[str, Callable[[int], onnx.ModelProto]] = {
    "conv": conv_stack, "transformer": transformer}


# ------------------------------------------------------------------------------ measurements
def ort_check(model: onnx.ModelProto) -> tuple[int, ...]:
    """Run the model once in onnxruntime on N(0, 1) data; the output's shape."""
    import onnxruntime as ort

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (y,) = sess.run(None, {INPUT: x})
    if not np.all(np.isfinite(y)):
        raise RuntimeError("onnxruntime produced non-finite outputs")
    return tuple(y.shape)


def _import_all() -> None:
    """Everything the stages use, so that timings and memory baselines exclude imports."""
    from tvm.relax.frontend import onnx as _tvm_onnx  # noqa: F401

    import canonqnn
    import canonqnn.cli  # noqa: F401

    canonqnn.frontends, canonqnn.rewrites, canonqnn.ops  # noqa: B018  (lazy imports)


def run_stage(stage: str, path: str, out_json: str):
    """Run one stage on the model file; returns what it produced (kept alive by the caller)."""
    import canonqnn

    if stage == "import":
        return canonqnn.load(path)
    if stage == "canonicalize":  # with its import (time_stages times canonicalize alone)
        return canonqnn.canonicalize(canonqnn.load(path))
    if stage == "convert":
        from canonqnn import cli

        with contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["convert", path, "-o", out_json])
        if status != 0:
            raise RuntimeError(f"canonqnn convert {path} exited with {status}")
        return status
    if stage == "from_onnx":
        from tvm.relax.frontend.onnx import from_onnx

        return from_onnx(onnx.load(path))
    raise ValueError(stage)


def time_stages(path: str, out_json: str, repeat: int) -> tuple[dict[str, float], object]:
    """Minimum wall time (time.perf_counter) of each stage over ``repeat`` runs, and the
    canonicalization report of the last run."""
    import canonqnn

    best = {stage: math.inf for stage in STAGES}
    report = None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        mod = canonqnn.load(path)
        best["import"] = min(best["import"], time.perf_counter() - t0)
        gc.collect()
        t0 = time.perf_counter()
        _, report = canonqnn.canonicalize(mod)
        best["canonicalize"] = min(best["canonicalize"], time.perf_counter() - t0)
        del mod, _
        for stage in ("convert", "from_onnx"):
            gc.collect()
            t0 = time.perf_counter()
            result = run_stage(stage, path, out_json)
            best[stage] = min(best[stage], time.perf_counter() - t0)
            del result
    return best, report


def _status_mb(field: str) -> float:
    """``VmRSS`` (current) or ``VmHWM`` (peak) resident memory of this process, from Linux
    /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def _memory_child(stage: str, path: str, out_json: str) -> None:
    _import_all()
    gc.collect()
    try:  # reset the peak to the current RSS, so that the peak is the stage's own
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    base = _status_mb("VmRSS")
    result = run_stage(stage, path, out_json)
    peak = _status_mb("VmHWM")
    del result
    print(json.dumps({"base_mb": base, "peak_mb": peak, "peak_reset": reset}))


def measure_memory(stage: str, path: str, out_json: str) -> dict[str, float]:
    """Peak RSS of a fresh Python process that imports the modules and runs one stage."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-child", stage,
                           path, out_json], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"memory measurement of {stage} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def growth_exponent(nodes: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) against log(nodes)."""
    if len(nodes) < 2:
        return math.nan
    return float(np.polyfit(np.log(nodes), np.log(seconds), 1)[0])


# ------------------------------------------------------------------------------------- main
HEADER = """\
times: wall seconds (time.perf_counter), minimum of {repeat} run(s) in this process, after a
  warm-up run of all stages on a graph of min(200, smallest size) nodes of each family (so
  one-time costs - lazy imports, op registration, table modules - stay out of the timings).
  import    = canonqnn.load(path)
  canon     = canonqnn.canonicalize(mod) of that module
  convert   = `canonqnn convert PATH -o OUT.json` in-process via canonqnn.cli.main
              (load + canonicalize + save_module + printed summary)
  from_onnx = tvm.relax.frontend.onnx.from_onnx(onnx.load(path))  (TVM's ONNX importer)
  us/n = seconds / ONNX nodes * 1e6
memory: {memory}
islands: len(report.float_islands) after canonicalize (0 = every op canonical)."""
MEMORY_TEXT = """\
one fresh Python process per (graph, stage): it imports canonqnn (frontends, rewrites,
  ops, cli) and tvm.relax.frontend.onnx, runs gc.collect(), resets its peak RSS to the current
  RSS (echo 5 > /proc/self/clear_refs), reads base = VmRSS, runs the stage, reads
  peak = VmHWM (/proc/self/status). Columns "MB" = peak - base: the stage's peak RSS growth
  (canon runs canonicalize(load(path)), so it includes its import); "base" = the post-import
  RSS of the import process. (ru_maxrss is not used: Linux carries the parent's high-water
  mark into a fork+exec child.)"""


def _print_header(memory: bool) -> None:
    cols = "".join(f" | {s + ' s':>11} {'us/n':>6}" for s in ("import", "canon", "convert",
                                                              "from_onnx"))
    mem = (" | MB: import  canon convert from_onnx |   base") if memory else ""
    print(f"{'family':<11} {'nodes':>6} {'fileMB':>6}{cols}{mem} | islands")


def _print_row(family, nodes, secs, mem, islands, file_mb):
    line = f"{family:<11} {nodes:>6} {file_mb:>6.2f}"
    for stage in STAGES:
        line += f" | {secs[stage]:>11.3f} {secs[stage] / nodes * 1e6:>6.1f}"
    if mem:
        growth = [mem[s]["peak_mb"] - mem[s]["base_mb"] for s in STAGES]
        line += " |     {:>6.1f} {:>6.1f} {:>7.1f} {:>9.1f}".format(*growth)
        line += f" | {mem['import']['base_mb']:>6.1f}"
    print(f"{line} | {islands:>7}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="comma-separated ONNX node counts (default %(default)s)")
    p.add_argument("--family", choices=("conv", "transformer", "all"), default="all")
    p.add_argument("--activation", choices=("int8", "uint8"), default="int8",
                   help="activation type of the graphs (weights stay int8; default %(default)s)")
    p.add_argument("--repeat", type=int, default=2,
                   help="timed runs per graph; the minimum is reported (default %(default)s)")
    p.add_argument("--json", metavar="OUT", help="write all measurements to this JSON file")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    p.add_argument("--keep", metavar="DIR", help="write the models here and keep them")
    p.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        _memory_child(*args.memory_child)
        return 0

    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    families = list(FAMILIES) if args.family == "all" else [args.family]
    started = time.perf_counter()
    _import_all()
    import canonqnn  # noqa: F401

    print(HEADER.format(repeat=args.repeat,
                        memory="not measured (--no-memory)" if args.no_memory else MEMORY_TEXT))
    print(f"graphs: {args.activation} activations, int8 per-channel weights, int32 biases; "
          f"ONNX opset {OPSET}, IR version {IR_VERSION}.")
    print("exponent: least-squares slope of log(seconds) vs log(nodes) over all sizes.")
    results: dict = {"sizes": sizes, "repeat": args.repeat, "statistic": "min",
                     "activation": args.activation, "families": {}}
    with contextlib.ExitStack() as stack:
        workdir = args.keep or stack.enter_context(tempfile.TemporaryDirectory())
        os.makedirs(workdir, exist_ok=True)
        out_json = os.path.join(workdir, "converted.canonqnn.json")
        # warm-up: first-call costs (op registration, table modules) stay out of the timings
        for family in families:
            path = os.path.join(workdir, f"warmup_{family}.onnx")
            onnx.save(FAMILIES[family](min(200, sizes[0]), activation=args.activation), path)
            time_stages(path, out_json, 1)
        for family in families:
            rows = []
            print()
            _print_header(not args.no_memory)
            for size in sizes:
                model = FAMILIES[family](size, activation=args.activation)
                nodes = len(model.graph.node)
                path = os.path.join(workdir, f"{family}_{nodes}.onnx")
                onnx.save(model, path)
                if size == sizes[0]:
                    shape = ort_check(model)
                    print(f"# onnxruntime runs {family}_{nodes}: output {list(shape)}")
                del model
                secs, report = time_stages(path, out_json, args.repeat)
                islands = len(report.float_islands)
                mem = None if args.no_memory else {
                    s: measure_memory(s, path, out_json) for s in STAGES}
                _print_row(family, nodes, secs, mem, islands, os.path.getsize(path) / 2**20)
                rows.append({"requested": size, "nodes": nodes, "seconds": secs,
                             "us_per_node": {s: secs[s] / nodes * 1e6 for s in STAGES},
                             "memory_mb": mem, "float_islands": islands,
                             "canonical_ops": dict(report.canonical_ops),
                             "file_bytes": os.path.getsize(path)})
            nodes = [r["nodes"] for r in rows]
            exps = {s: growth_exponent(nodes, [r["seconds"][s] for r in rows]) for s in STAGES}
            ratio = rows[-1]["seconds"]["convert"] / rows[-1]["seconds"]["from_onnx"]
            print(f"exponent {family}: " + ", ".join(f"{s} {exps[s]:.2f}" for s in STAGES))
            print(f"ratio {family}: convert / from_onnx at {nodes[-1]} nodes = {ratio:.2f}")
            results["families"][family] = {"rows": rows, "exponents": exps,
                                           "convert_over_from_onnx": ratio}
    total = time.perf_counter() - started
    print(f"\ntotal run time: {total:.0f} s")
    results["total_seconds"] = total
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
