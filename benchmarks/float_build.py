"""Build time of float operators a model keeps, against TVM's own build, in one run.

A QDQ ONNX model with a chain of N float elementwise ops (Relu, or Relu/Sigmoid/Mul/Add in
turn) between a DequantizeLinear and a quantized Conv: the ops stay float islands. For each N:

  (a) canonqnn: ``canonqnn.build`` of the canonical module (fusion, CPU schedule, compile, VM)
  (b) TVM alone: ``tvm.compile`` of the same model imported by ``tvm.relax.frontend.onnx``
      (TVM's default pipeline, which compiles every op as a kernel of its own), and its VM

printing seconds and the ratio a/b. Both target this CPU (``mcpu`` from LLVM).

    python benchmarks/float_build.py                   # N = 100, 300, 1000, 3000
    python benchmarks/float_build.py --sizes 300 --mix
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx
import tvm
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn.build import runtime, targets
from canonqnn.frontends.onnx import _tvm_onnx

MIX = ("Relu", "Sigmoid", "Mul", "Add")


def float_chain(n: int, mix: bool = False) -> onnx.ModelProto:
    """x -> Q -> DQ -> n float ops -> Conv(DQ w) -> Q -> DQ (opset 13, IR 10)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["f0"])]
    for i in range(n):
        kind = MIX[i % len(MIX)] if mix else "Relu"
        extra = ["c"] if kind in ("Mul", "Add") else []
        nodes.append(helper.make_node(kind, [f"f{i}", *extra], [f"f{i + 1}"]))
    nodes += [helper.make_node("DequantizeLinear", ["w", "ws", "z"], ["wf"]),
              helper.make_node("Conv", [f"f{n}", "wf"], ["y"]),
              helper.make_node("QuantizeLinear", ["y", "s", "z"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["out"])]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(0.5, np.float32), "c"),
             numpy_helper.from_array(np.ones((8, 8, 1, 1), np.int8), "w"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws")]
    graph = helper.make_graph(
        nodes, "float_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(n: int, mix: bool) -> dict[str, float]:
    model = float_chain(n, mix)
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    ours = seconds(lambda: canonqnn.build(mod))
    target = targets.host_target()

    def tvm_alone():
        runtime.virtual_machine(tvm.compile(_tvm_onnx.from_onnx(model), target=target))

    return {"n": n, "float_islands": len(report.float_islands), "canonqnn": ours,
            "tvm": seconds(tvm_alone)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000, 3000])
    parser.add_argument("--mix", action="store_true", help="Relu, Sigmoid, Mul, Add in turn")
    args = parser.parse_args(argv)
    print(f"{'float ops':>9}  {'islands':>7}  {'canonqnn s':>10}  {'TVM s':>7}  {'a/b':>5}")
    for n in args.sizes:
        row = measure(n, args.mix)
        print(f"{n:>9}  {row['float_islands']:>7}  {row['canonqnn']:>10.2f}  {row['tvm']:>7.2f}  "
              f"{row['canonqnn'] / row['tvm']:>5.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
