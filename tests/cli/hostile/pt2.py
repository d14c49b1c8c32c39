""".pt2 archives that would run code if loaded with ``torch.export.load``, and damaged ones.

Every payload touches ``PWNED`` in the working directory (the runner runs each command in the
case's folder and fails the case if the file appears: "code executed"). Where the payload sits
in a member canonqnn never reads (the example inputs) or in what it drops (guards), the program
is valid and accepted; everywhere else it is refused naming the member.
``tests/frontends/torch/test_archive.py`` checks that ``torch.export.load`` does run them.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

from .artifacts import Bases
from .case import ACCEPTED, EITHER, REFUSED, Case

MARKER = "PWNED"
TOUCH = f"__import__('pathlib').Path({MARKER!r}).touch()"
SHAPE = (1, 4, 6, 6)


def program_bytes() -> bytes:
    """A PT2E-quantized conv + relu (1x4x6x6 -> 1x8x6x6) as ``torch.export.save`` writes it."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torch import nn
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU()).eval()
    example = (torch.randn(SHAPE),)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, example).module(), quantizer)
    with torch.no_grad():
        for _ in range(4):
            prepared(torch.randn(SHAPE))
    buffer = io.BytesIO()
    torch.export.save(torch.export.export(convert_pt2e(prepared), example), buffer)
    return buffer.getvalue()


def base_program(bases: Bases) -> Path:
    return bases._file("conv.pt2", lambda p: p.write_bytes(program_bytes()))


# ------------------------------------------------------------------ payloads


class _Eval:
    """Unpickles as ``eval(code)``: what a malicious pickle runs."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return eval, (self.code,)


def torch_pickle(code: str) -> bytes:
    """``torch.save`` of an object whose unpickling evaluates ``code``."""
    import torch

    buffer = io.BytesIO()
    torch.save(_Eval(code), buffer)
    return buffer.getvalue()


def plain_pickle(code: str) -> bytes:
    import pickle

    return pickle.dumps(_Eval(code))


# ------------------------------------------------------------------ archive edits


def _members(data: bytes) -> tuple[str, dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0]
        return root, {n.split("/", 1)[1]: z.read(n) for n in names}


def _archive(root: str, members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(f"{root}/{name}" if root else name, data)
    return buffer.getvalue()


def _json_edit(member: str, change: Callable[[dict], None]) -> Callable[[dict], None]:
    def edit(members: dict[str, bytes]) -> None:
        value = json.loads(members[member])
        change(value)
        members[member] = json.dumps(value).encode()
    return edit


PICKLE = b"<a pickle running TOUCH>"  # placeholder: crafted() puts the pickle there
WEIGHTS = "data/weights/model_weights_config.json"
CONSTANTS = "data/constants/model_constants_config.json"
PROGRAM = "models/model.json"


def _pickled_weight(stealthy: bool) -> Callable[[dict], None]:
    """The first weight stored as a pickle; the stealthy one returns the genuine tensor."""
    def edit(members: dict[str, bytes]) -> None:
        config = json.loads(members[WEIGHTS])
        fqn, meta = next(iter(config["config"].items()))
        meta["use_pickle"] = True
        path = f"data/weights/{meta['path_name']}"
        code = TOUCH
        if stealthy:
            t = meta["tensor_meta"]
            sizes = [s["as_int"] for s in t["sizes"]]
            code = (f"({TOUCH}, __import__('torch').frombuffer(bytearray({members[path]!r}), "
                    f"dtype=__import__('torch').float32).reshape({sizes})"
                    f".requires_grad_({t['requires_grad']}))[1]")
        members[path] = torch_pickle(code)
        members[WEIGHTS] = json.dumps(config).encode()
    return edit


def _constant(path_name: str, payload: bytes, use_pickle: bool = True) -> Callable[[dict], None]:
    def edit(members: dict[str, bytes]) -> None:
        config = json.loads(members[CONSTANTS])
        config["config"]["extra_constant"] = {
            "path_name": path_name, "is_param": False, "use_pickle": use_pickle,
            "tensor_meta": None}
        members[f"data/constants/{path_name}"] = payload
        members[CONSTANTS] = json.dumps(config).encode()
    return edit


def _first_node(change: Callable[[dict], None]) -> Callable[[dict], None]:
    return _json_edit(PROGRAM, lambda p: change(p["graph_module"]["graph"]["nodes"][0]))


def _symbolic_size(program: dict) -> None:
    values = program["graph_module"]["graph"]["tensor_values"]
    meta = next(iter(values.values()))
    meta["sizes"][0] = {"as_expr": {"expr_str": f"{TOUCH} or 1", "hint": {"as_int": 1}}}


def _old_format(members: dict[str, bytes]) -> None:
    members.clear()
    members["serialized_exported_program.json"] = b"{}"
    members["serialized_state_dict.pt"] = torch_pickle(TOUCH)
    members["version"] = b"8.20"


EDITS: dict[str, tuple[str, Callable[[dict], None], str]] = {
    # name: (expected, edit, whether torch.export.load runs the payload: "load" or "")
    "weight_pickle": (REFUSED, _pickled_weight(False), "load"),
    "weight_pickle_stealthy": (REFUSED, _pickled_weight(True), "load"),
    "constant_pickle": (REFUSED, _constant("tensor_0", PICKLE), "load"),
    "opaque_object": (REFUSED, _constant("opaque_obj_0", PICKLE), "load"),
    "custom_object": (REFUSED, _constant("custom_obj_0", PICKLE), ""),
    "legacy_weights": (REFUSED, lambda m: m.__setitem__("data/weights/model.pt", PICKLE),
                       "load"),
    "sample_inputs_pickle": (ACCEPTED, lambda m: m.__setitem__(
        "data/sample_inputs/model.pt", PICKLE), "load"),
    "guards_code": (ACCEPTED, _json_edit(PROGRAM, lambda p: p.__setitem__(
        "guards_code", [TOUCH])), ""),
    "node_calls_os_system": (REFUSED, _first_node(lambda n: n.__setitem__(
        "target", "torch.os.system")), ""),
    "node_calls_torch_load": (REFUSED, _first_node(lambda n: n.__setitem__(
        "target", "torch.load")), ""),
    "symbolic_size_expression": (REFUSED, _json_edit(PROGRAM, _symbolic_size), "load"),
    "aotinductor_library": (REFUSED, lambda m: m.__setitem__(
        "data/aotinductor/model/model.so", b"\x7fELF"), ""),
    "two_programs": (REFUSED, lambda m: m.__setitem__("models/other.json", m[PROGRAM]), ""),
    "old_format": (REFUSED, _old_format, ""),
    "program_not_json": (REFUSED, lambda m: m.__setitem__(PROGRAM, b"{not json"), ""),
    "weight_bytes_short": (REFUSED, lambda m: m.__setitem__(
        "data/weights/weight_0", m["data/weights/weight_0"][:7]), ""),
    "archive_version_other": (REFUSED, lambda m: m.__setitem__("archive_version", b"9"), ""),
}


def crafted(data: bytes, name: str) -> bytes:
    """The base program ``data`` with edit ``name`` applied, its ``PICKLE`` placeholder made
    a pickle (a plain one where torch reads it with ``pickle.loads``)."""
    _, edit, _ = EDITS[name]
    root, members = _members(data)
    edit(members)
    for member, value in members.items():
        if value is PICKLE:
            members[member] = plain_pickle(TOUCH) if "_obj_" in member else torch_pickle(TOUCH)
    return _archive(root, members)


def pt2_commands(path: Path, d: Path) -> list[list[str]]:
    numerics = ["--numerics", "xnnpack-x86-avx2"]  # skips probing XNNPACK (~15 s a process)
    return [["convert", str(path), "-o", str(d / "out.json"), *numerics],
            ["inspect", str(path), *numerics],
            ["parity", str(path), "--runs", "1"]]


def pt2_cases() -> list[Case]:
    cases = []
    for name, (expect, _, _) in EDITS.items():
        def make(bases: Bases, d: Path, name=name, expect=expect) -> list[list[str]]:
            path = d / "m.pt2"
            path.write_bytes(crafted(base_program(bases).read_bytes(), name))
            commands = pt2_commands(path, d)
            return commands if expect == REFUSED else commands[:2]
        cases.append(Case("pt2", name, expect, make,
                          fast=name in ("weight_pickle_stealthy", "symbolic_size_expression")))
    for name, cut in (("truncated_half", 0.5), ("truncated_tail", 0.98)):
        def make(bases: Bases, d: Path, cut=cut) -> list[list[str]]:
            data = base_program(bases).read_bytes()
            path = d / "m.pt2"
            path.write_bytes(data[:int(len(data) * cut)])
            return pt2_commands(path, d)[:2]
        cases.append(Case("pt2", name, REFUSED, make))
    cases.append(Case("pt2", "valid", ACCEPTED,
                      lambda b, d: pt2_commands(base_program(b), d)[:2]))
    cases.append(Case("pt2", "not_a_zip", REFUSED, lambda b, d: pt2_commands(
        _write(d / "m.pt2", b"PK\x03\x04 not really"), d)[:2]))
    assert all(expect in (ACCEPTED, REFUSED, EITHER) for expect, _, _ in EDITS.values())
    return cases


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
