"""Canonical-module JSON built to crash or exhaust what reads it: attributes nested thousands
deep (TVM's loader recurses once per level), small DAGs whose expansion is astronomical (TVM's
printer expands shared structure), a graph whose root is no module, and per-channel arguments
of the wrong shape. Each is refused on every command that reads a module; a converted model
whose types and constants are shared as canonqnn shares them is accepted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .artifacts import Bases, module_commands
from .case import ACCEPTED, REFUSED, Case

FAMILY = "module-bombs"


def commands(path: Path, d: Path, bases: Bases) -> list[list[str]]:
    return [*module_commands(path, d, bases), ["patterns", str(path)]]


def bomb_case(name: str, edit: Callable[[str], str], fast: bool = False) -> Case:
    def make(bases: Bases, d: Path) -> list[list[str]]:
        path = d / "m.canonqnn.json"
        path.write_text(edit(bases.module.read_text()))
        return commands(path, d, bases)
    return Case(FAMILY, name, REFUSED, make, fast)


# ------------------------------------------------------------------ JSON graph edits


def with_module_attr(key: str, value: Callable[[Callable[[dict], int]], int]
                     ) -> Callable[[str], str]:
    """The module with one more module attribute ``key``: ``value(append)`` appends the nodes
    of its value (``append(node)`` returns a node's index) and returns the value's index. The
    new nodes go before the root, which is the last node, and the root's attributes become a
    copy holding the new key."""
    def apply(text: str) -> str:
        graph = json.loads(text)
        nodes = graph["nodes"]
        if graph["root_index"] != len(nodes) - 1:
            raise AssertionError("the module's root is not its last node")
        module = nodes.pop()

        def append(node: dict) -> int:
            nodes.append(node)
            return len(nodes) - 1

        value_index = value(append)
        attrs = nodes[module["data"]["attrs"]]["data"]["__dict__"]
        key_index = append({"type": "ffi.String", "data": key})
        pairs = append({"type": "ffi.Map", "data": nodes[attrs]["data"] + [key_index,
                                                                           value_index]})
        module["data"]["attrs"] = append({"type": "ir.DictAttrs", "data": {"__dict__": pairs}})
        graph["root_index"] = append(module)
        return json.dumps(graph)
    return apply


def nested_arrays(depth: int) -> Callable[[Callable[[dict], int]], int]:
    """``[[[...[1]...]]]``: ``depth`` arrays each holding the next."""
    def value(append: Callable[[dict], int]) -> int:
        inner = append({"type": "int", "data": 1})
        for _ in range(depth):
            inner = append({"type": "ffi.Array", "data": [inner]})
        return inner
    return value


def doubling_arrays(levels: int) -> Callable[[Callable[[dict], int]], int]:
    """``levels`` arrays, each holding the previous one twice: a few hundred bytes whose tree
    has 2**levels leaves."""
    def value(append: Callable[[dict], int]) -> int:
        inner = append({"type": "int", "data": 1})
        for _ in range(levels):
            inner = append({"type": "ffi.Array", "data": [inner, inner]})
        return inner
    return value


def doubling_maps(levels: int) -> Callable[[Callable[[dict], int]], int]:
    """As ``doubling_arrays``, with maps ``{"a": previous, "b": previous}``."""
    def value(append: Callable[[dict], int]) -> int:
        a = append({"type": "ffi.String", "data": "a"})
        b = append({"type": "ffi.String", "data": "b"})
        inner = append({"type": "int", "data": 1})
        for _ in range(levels):
            inner = append({"type": "ffi.Map", "data": [a, inner, b, inner]})
        return inner
    return value


def root_literal(node: dict) -> Callable[[str], str]:
    """A graph whose root is ``node`` (a literal, an array or a map), not a module."""
    return lambda text: json.dumps({"root_index": 0, "nodes": [node],
                                    "metadata": json.loads(text).get("metadata", {})})


def conv_argument(name: str, values: Callable[[np.ndarray], np.ndarray]
                  ) -> Callable[[str], str]:
    """The conv's constant argument ``name`` (``w_scale``, ``w_zp``, ``bias``) replaced by
    ``values(old)``, its recorded type with it: an edit of the module through TVM."""
    def apply(text: str) -> str:
        import tvm

        from canonqnn import _tvm
        from canonqnn.ops import lookup

        mod = tvm.ir.load_json(text)

        @tvm.relax.expr_functor.mutator
        class Replace(tvm.relax.PyExprMutator):
            def visit_call_(self, call):
                call = super().visit_call_(call)
                op = lookup(call)
                if op is None or name not in op.args:
                    return call
                args = list(call.args)
                k = op.args.index(name)
                old = _tvm.const_value(args[k])
                args[k] = _tvm.const(values(old).astype(old.dtype))
                return tvm.relax.Call(call.op, args, call.attrs, call.ty_args)

        mod["main"] = Replace().visit_expr(mod["main"])
        return tvm.ir.save_json(mod)
    return apply


def _conv_call(nodes: list[dict]) -> dict:
    return next(n for n in nodes if n["type"] == "ir.Call"
                and nodes[n["data"]["op"]].get("data") == "relax.canonqnn.conv2d")


def conv_payload(name: str, count: int) -> Callable[[str], str]:
    """The serialized tensor of the conv's 1-D constant argument ``name`` cut to its first
    ``count`` values, its recorded type left as it was: a hand edit of the file's bytes."""
    def apply(text: str) -> str:
        import base64
        import struct

        from canonqnn.ops import REGISTRY

        graph = json.loads(text)
        nodes = graph["nodes"]
        args = nodes[_conv_call(nodes)["data"]["args"]]["data"]
        const = nodes[args[REGISTRY["conv2d"].args.index(name)]]
        tensor = nodes[const["data"]["value"]]
        raw = base64.b64decode(tensor["data"])
        # header: magic u64, reserved u64, device (2 x i32), ndim i32, dtype (4 bytes), then
        # the shape (ndim x i64), the data's byte size (i64) and the data
        if struct.unpack_from("<i", raw, 24)[0] != 1:
            raise AssertionError(f"{name} is not 1-D")
        itemsize = raw[29] // 8
        data = raw[48:48 + count * itemsize]
        tensor["data"] = base64.b64encode(raw[:32] + struct.pack("<qq", count, len(data))
                                          + data).decode()
        return json.dumps(graph)
    return apply


def conv_attr_as(name: str, other: str) -> Callable[[str], str]:
    """The conv's attribute ``name`` given the value of its attribute ``other`` (an array
    where a number belongs, or the reverse)."""
    def apply(text: str) -> str:
        graph = json.loads(text)
        nodes = graph["nodes"]
        pairs = nodes[nodes[_conv_call(nodes)["data"]["attrs"]]["data"]["__dict__"]]["data"]
        keys = [nodes[k].get("data") for k in pairs[::2]]
        pairs[2 * keys.index(name) + 1] = pairs[2 * keys.index(other) + 1]
        return json.dumps(graph)
    return apply


# ------------------------------------------------------------------ a legitimate module


def shared_chain(layers: int = 48) -> onnx.ModelProto:
    """``layers`` QDQ convs of one shape sharing one weight, bias and scales, with residual
    adds: every binding of the canonical module has the same type and the same constants."""
    rng = np.random.default_rng(5)
    c = 4
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(rng.integers(-100, 100, (c, c, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(np.full(c, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(c, np.int8), "wz"),
             numpy_helper.from_array(np.zeros(c, np.int32), "b"),
             numpy_helper.from_array(np.full(c, 0.0005, np.float32), "bs"),
             numpy_helper.from_array(np.zeros(c, np.int32), "bz")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["f0"])]
    for k in range(layers):
        nodes += [helper.make_node("Conv", [f"f{k}", "wf", "bf"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"c{k}", "s", "z"], [f"cq{k}"]),
                  helper.make_node("DequantizeLinear", [f"cq{k}", "s", "z"], [f"cf{k}"]),
                  helper.make_node("Add", [f"cf{k}", f"f{k}"], [f"a{k}"]),
                  helper.make_node("QuantizeLinear", [f"a{k}", "s", "z"], [f"q{k + 1}"]),
                  helper.make_node("DequantizeLinear", [f"q{k + 1}", "s", "z"], [f"f{k + 1}"])]
    graph = helper.make_graph(
        nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
        [helper.make_tensor_value_info(f"f{layers}", TensorProto.FLOAT, [1, c, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _shared_module(bases: Bases, d: Path) -> list[list[str]]:
    source = d / "shared.onnx"
    onnx.save(shared_chain(), str(source))
    path = d / "m.canonqnn.json"
    result = bases.run(["convert", str(source), "-o", str(path)])
    if getattr(result, "status", 0) != 0:
        raise AssertionError(f"converting the shared chain failed: {result}")
    x = d / "x.npy"
    np.save(x, np.random.default_rng(3).standard_normal((1, 4, 6, 6)).astype(np.float32))
    return [["inspect", str(path)], ["build", str(path), "-o", str(d / "out.so")],
            ["run", str(path), "--reference", "--input", f"x={x}", "-o", str(d / "out.npz")],
            ["patterns", str(path)]]


def module_bomb_cases() -> list[Case]:
    return [
        bomb_case("arrays_nested_3000_deep", with_module_attr("deep", nested_arrays(3000)),
                  fast=True),
        bomb_case("arrays_nested_100000_deep", with_module_attr("deep", nested_arrays(100000))),
        bomb_case("array_dag_80_levels", with_module_attr("dag", doubling_arrays(80)),
                  fast=True),
        bomb_case("map_dag_60_levels", with_module_attr("dag", doubling_maps(60))),
        bomb_case("array_dag_24_levels", with_module_attr("dag", doubling_arrays(24))),
        bomb_case("root_none", root_literal({"type": "None"})),
        bomb_case("root_int", root_literal({"type": "int", "data": 1})),
        bomb_case("root_string", root_literal({"type": "ffi.String", "data": "x"})),
        bomb_case("root_empty_array", root_literal({"type": "ffi.Array", "data": []})),
        bomb_case("root_empty_map", root_literal({"type": "ffi.Map", "data": []})),
        bomb_case("w_scale_4_of_8", conv_argument("w_scale", lambda v: np.resize(v, 4))),
        bomb_case("w_zp_4_of_8", conv_argument("w_zp", lambda v: np.resize(v, 4))),
        bomb_case("w_scale_2d", conv_argument("w_scale", lambda v: v.reshape(2, 4))),
        bomb_case("bias_4_of_8", conv_argument("bias", lambda v: np.resize(v, 4))),
        bomb_case("bias_scalar", conv_argument("bias", lambda v: v[:1].reshape(()))),
        bomb_case("w_scale_payload_4_typed_8", conv_payload("w_scale", 4), fast=True),
        bomb_case("bias_payload_4_typed_8", conv_payload("bias", 4)),
        bomb_case("x_scale_attr_an_array", conv_attr_as("x_scale", "strides")),
        bomb_case("out_zp_attr_an_array", conv_attr_as("out_zp", "padding")),
        bomb_case("act_max_attr_an_array", conv_attr_as("act_max", "dilation")),
        Case(FAMILY, "shared_types_and_constants", ACCEPTED, _shared_module, fast=True),
    ]
