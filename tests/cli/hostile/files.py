"""Edited canonical-module JSON and damaged or foreign libraries."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from .artifacts import Bases, damaged_cases, garbage_cases, module_commands
from .case import ACCEPTED, EITHER, REFUSED, Case


def module_case(name: str, expect: str, edit: Callable[[str], str], fast: bool = False) -> Case:
    def make(bases: Bases, d: Path) -> list[list[str]]:
        text = bases.module.read_text()
        edited = edit(text)
        if edited == text:
            raise AssertionError(f"module edit {name} changed nothing")
        path = d / "m.canonqnn.json"
        path.write_bytes(edited.encode("utf-8", "surrogateescape"))
        return module_commands(path, d, bases)
    return Case("module-json", name, expect, make, fast)


def graph_edit(edit: Callable[[dict], None]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        graph = json.loads(text)
        edit(graph)
        return json.dumps(graph)
    return apply


def _refer_back_to_root(graph: dict) -> None:
    nodes = graph["nodes"]
    target = next(n for n in nodes[1:] if n.get("type") not in ("int", "None", "ffi.String")
                  and isinstance(n.get("data"), list) and n["data"])
    target["data"][0] = graph["root_index"]


def _dangling_reference(graph: dict) -> None:
    nodes = graph["nodes"]
    target = next(n for n in nodes if isinstance(n.get("data"), list) and n["data"]
                  and all(isinstance(x, int) for x in n["data"]))
    target["data"][0] = len(nodes) + 5


def regex_edit(pattern: str, replacement: str, count: int = 1) -> Callable[[str], str]:
    return lambda text: re.sub(pattern, replacement, text, count=count)


def attr_float(value: str) -> Callable[[str], str]:
    """The first float attribute of a canonical op (a scale or a multiplier) set to ``value``."""
    def apply(text: str) -> str:
        graph = json.loads(text)
        for node in graph["nodes"]:
            if node.get("type") == "float":
                node["data"] = value
                return json.dumps(graph).replace(f'"{value}"', value)
        raise AssertionError("the module has no float attribute")
    return apply


def tensor_dtype_code(graph: dict) -> None:
    """A constant whose serialized header names dtype code 99."""
    import base64

    for node in graph["nodes"]:
        if node.get("type") == "ffi.Tensor":
            raw = bytearray(base64.b64decode(node["data"]))
            # header: magic u64, reserved u64, device (2 x i32), ndim i32, dtype (u8 code, ...)
            raw[28] = 99
            node["data"] = base64.b64encode(bytes(raw)).decode()
            return
    raise AssertionError("the module has no constant")


def interface_edit(edit: Callable[[dict], None]) -> Callable[[str], str]:
    """Edit the recorded model interface (a JSON string attribute of the module)."""
    def apply(text: str) -> str:
        graph = json.loads(text)
        for node in graph["nodes"]:
            data = node.get("data")
            if node.get("type") == "ffi.String" and isinstance(data, str) and \
                    data.startswith("{") and '"inputs"' in data:
                io = json.loads(data)
                edit(io)
                node["data"] = json.dumps(io)
                return json.dumps(graph)
        raise AssertionError("the module records no interface")
    return apply


def io_input(key: str, value) -> Callable[[dict], None]:
    def edit(io: dict) -> None:
        io["inputs"][0][key] = value
    return edit


def module_cases() -> list[Case]:
    cases = [
        module_case("valid_reformatted", ACCEPTED,
                    lambda t: json.dumps(json.loads(t), indent=1), fast=True),
        module_case("refers_back_to_root", REFUSED, graph_edit(_refer_back_to_root), fast=True),
        module_case("dangling_reference", REFUSED, graph_edit(_dangling_reference)),
        module_case("root_index_out_of_range",
                    REFUSED, graph_edit(lambda g: g.update(root_index=10 ** 9))),
        module_case("nodes_not_a_list", REFUSED, graph_edit(lambda g: g.update(nodes={}))),
        module_case("int4_type", REFUSED, regex_edit(r'"int8"', '"int4"', count=0), fast=True),
        module_case("uint1_type", REFUSED, regex_edit(r'"int8"', '"uint1"', count=1)),
        module_case("op_retargeted_to_another_canonical", REFUSED,
                    regex_edit(r'relax\.canonqnn\.conv2d', 'relax.canonqnn.add'), fast=True),
        module_case("op_retargeted_to_relax_op", REFUSED,
                    regex_edit(r'relax\.canonqnn\.conv2d', 'relax.nn.relu')),
        module_case("op_unknown", REFUSED,
                    regex_edit(r'relax\.canonqnn\.conv2d', 'relax.canonqnn.nonexistent')),
        module_case("constant_dtype_code_99", REFUSED, graph_edit(tensor_dtype_code),
                    fast=True),
        module_case("rounding_bogus", REFUSED, regex_edit(r'"(rne_f32|q31_double|q31_single)"',
                                                           '"bogus"'), fast=True),
        module_case("rounding_key_renamed", REFUSED, regex_edit(r'"rounding"', '"bogus"')),
        module_case("float_attr_nan", REFUSED, attr_float("NaN")),
        module_case("float_attr_inf", REFUSED, attr_float("Infinity")),
        module_case("interface_dtype_contradicts", REFUSED,
                    interface_edit(io_input("dtype", "int8")), fast=True),
        module_case("interface_shape_contradicts", REFUSED,
                    interface_edit(io_input("shape", [1, 4, 7, 7]))),
        module_case("interface_shape_not_numbers", REFUSED,
                    interface_edit(io_input("shape", ["a", None, {}, 6]))),
        module_case("interface_shape_not_a_list", REFUSED,
                    interface_edit(io_input("shape", 7))),
        module_case("interface_renamed_input", EITHER,
                    interface_edit(io_input("name", "other"))),
        module_case("interface_no_outputs", REFUSED,
                    interface_edit(lambda io: io.update(outputs=[]))),
        module_case("interface_not_json", REFUSED,
                    interface_edit(lambda io: io.clear() or io.update(inputs=7))),
        module_case("truncated_half", REFUSED, lambda t: t[:len(t) // 2], fast=True),
        module_case("not_utf8", REFUSED, lambda t: "\udcff" + t),
    ]
    return cases


# ------------------------------------------------------------------ built libraries


def library_commands(path: Path, d: Path, bases: Bases | None = None) -> list[list[str]]:
    x = bases.x if bases is not None else None
    return [["run", str(path), "-o", str(d / "out.npz")]
            + (["--input", f"x={x}"] if x is not None else [])]


def library_cases() -> list[Case]:
    def with_library(name: str, expect: str, edit: Callable[[bytes], bytes],
                     fast: bool = False) -> Case:
        def make(bases: Bases, d: Path) -> list[list[str]]:
            path = d / "m.so"
            path.write_bytes(edit(bases.library.read_bytes()))
            return library_commands(path, d, bases)
        return Case("library", name, expect, make, fast)

    def system_library(bases: Bases, d: Path) -> list[list[str]]:
        import ctypes.util

        found = ctypes.util.find_library("m") or "libm.so.6"
        candidates = [Path(p) / found for p in ("/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64",
                                                "/usr/lib/x86_64-linux-gnu", "/lib")]
        source = next((p for p in candidates if p.is_file()), None)
        if source is None:
            raise AssertionError(f"no system library {found} to try")
        path = d / "m.so"
        path.write_bytes(source.read_bytes())
        return library_commands(path, d, bases)

    cases = [
        with_library("valid", ACCEPTED, lambda b: b, fast=True),
        with_library("truncated_half", REFUSED, lambda b: b[:len(b) // 2], fast=True),
        with_library("truncated_last_byte", REFUSED, lambda b: b[:-1]),
        with_library("appended_byte", REFUSED, lambda b: b + b"\0"),
        with_library("header_zeroed", REFUSED, lambda b: bytes(64) + b[64:], fast=True),
        with_library("middle_byte_flipped", REFUSED,
                     lambda b: b[:len(b) // 2] + bytes([b[len(b) // 2] ^ 0x10])
                     + b[len(b) // 2 + 1:]),
        Case("library", "system_library", REFUSED, system_library, fast=True),
    ]
    cases += damaged_cases("library", "library", ".so", {"bitflip": 6}, 0, library_commands)
    cases += garbage_cases("library", ".so", lambda p, d: [["run", str(p)]])
    return cases
