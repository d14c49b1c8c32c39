"""Reading a ``.pt2`` archive (``torch.export.save``) without running anything it holds.

``torch.export.load`` is not safe on a file from anywhere (torch 2.13): it unpickles with
``weights_only=False`` every payload the archive's configs mark ``use_pickle``, a legacy
``data/weights/<model>.pt``, custom and opaque objects, and the example inputs (after a
``weights_only=True`` attempt); it loads AOTInductor shared libraries; its deserializer
evaluates symbolic-shape strings with ``sympy.sympify`` (``eval``) and resolves a node's target
as any attribute path under ``torch`` (``torch.os.system`` resolves), which the graph then
calls; and ``ExportedProgram.module()`` ``exec``s the program's ``guards_code``.

So canonqnn reads the zip itself (Python's ``zipfile``: sizes checked before reading) and
refuses, naming the member, whatever would run or unpickle something: pickled payloads, custom
and opaque objects, compiled code, the pre-2.7 format (all pickles), any node whose target is
not an operator of an allowed namespace, and symbolic expressions (canonqnn converts programs
of static shapes). What is left is JSON and raw tensor bytes: the tensors are made from the
bytes here, and torch's deserializer turns the JSON into the program, given no example inputs
(a pickle in every archive, never read) and no guards.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import zipfile
from typing import Any

from canonqnn import budget
from canonqnn.errors import InvalidModelError, first_line

MODEL = "model"  # the program torch.export.save writes; an archive of several is refused
PROGRAM = f"models/{MODEL}.json"
WEIGHTS_CONFIG = f"data/weights/{MODEL}_weights_config.json"
CONSTANTS_CONFIG = f"data/constants/{MODEL}_constants_config.json"
MAX_MEMBERS = 100_000  # a program has a member per weight; far more is a crafted archive

# Members that would run or unpickle something if loaded, and why canonqnn refuses them.
_REFUSED_MEMBERS = (
    (re.compile(r"data/(weights|constants)/[^/]+\.pt$"),
     "a pickle (the legacy weights format): canonqnn never unpickles"),
    (re.compile(r"data/aotinductor/"), "compiled code (AOTInductor): loading it would run it"),
    (re.compile(r"data/(executorch|mtia)/"), "a compiled program canonqnn does not load"),
    (re.compile(r"xl_model_weights/"), "weights kept outside the program, which canonqnn "
                                       "does not load"),
)
# Node targets the graph may call: operators of these namespaces, and tuple indexing.
_NAMESPACES = ("aten", "quantized_decomposed", "prims", "torchao")
_TARGET = re.compile(r"torch\.ops\.({})\.\w+\.\w+$".format("|".join(_NAMESPACES)))
_PLAIN_TARGETS = ("_operator.getitem",)


def read_program(source: str | bytes, name: str) -> Any:
    """The ``torch.export.ExportedProgram`` in the archive ``source`` (a path or its bytes),
    ``name`` naming it in errors. Raises ``InvalidModelError`` naming the member for anything
    canonqnn will not load."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InvalidModelError(f"{name}: not a program saved by torch.export.save (a .pt2 "
                                f"file is a zip archive), or truncated ({first_line(exc)})"
                                ) from None
    with archive:
        members = _Members(archive, name)
        program = members.json(PROGRAM)
        _check_program(program, name)
        weights = _tensors(members, "data/weights/", members.json(WEIGHTS_CONFIG))
        constants = _tensors(members, "data/constants/", members.json(CONSTANTS_CONFIG))
    return _deserialize(program, weights, constants, name)


class _Members:
    """The archive's members under its one root folder, checked before any is read."""

    def __init__(self, archive: zipfile.ZipFile, name: str) -> None:
        self.archive, self.name = archive, name
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise self.error(f"{len(infos)} members; a program has at most {MAX_MEMBERS}")
        if any(i.filename.rpartition("/")[2] == "serialized_exported_program.json"
               for i in infos):
            raise self.error("the format of torch 2.6 and older, whose weights are pickles: "
                             "canonqnn never unpickles; save the program again with torch 2.7 "
                             "or newer")
        roots = {info.filename.split("/", 1)[0] for info in infos}
        if len(roots) != 1 or not all("/" in info.filename for info in infos):
            raise self.error("not the layout torch.export.save writes (one root folder)")
        self.infos = {info.filename.split("/", 1)[1]: info for info in infos}
        for member in self.infos:
            for pattern, why in _REFUSED_MEMBERS:
                if pattern.match(member):
                    raise self.error(f"member {member!r} is {why}")
        models = [m for m in self.infos if m.startswith("models/")]
        if models != [PROGRAM]:
            raise self.error(f"holds programs {models}; canonqnn converts one, {PROGRAM!r}")
        if self.text("archive_format") != "pt2" or self.text("archive_version") != "0":
            raise self.error("an archive format or version other than torch 2.13's "
                             "(archive_format 'pt2', archive_version '0')")
        if "byteorder" in self.infos and self.text("byteorder") != "little":
            raise self.error("big-endian tensor data")

    def error(self, why: str) -> InvalidModelError:
        return InvalidModelError(f"{self.name}: {why}")

    def read(self, member: str) -> bytes:
        info = self.infos.get(member)
        if info is None:
            raise self.error(f"member {member!r} is missing")
        budget.check_bytes(f"member {member!r} of {self.name}", info.file_size)
        try:
            with self.archive.open(info) as f:
                data = f.read(info.file_size + 1)  # a size that lies is no bigger than said
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
            raise self.error(f"member {member!r} is damaged ({first_line(exc)})") from None
        if len(data) != info.file_size:
            raise self.error(f"member {member!r} holds {len(data)} bytes, its header says "
                             f"{info.file_size}")
        return data

    def text(self, member: str) -> str:
        return self.read(member).decode("utf-8", errors="replace").strip()

    def json(self, member: str) -> Any:
        try:
            return json.loads(self.read(member))
        except (ValueError, RecursionError) as exc:
            raise self.error(f"member {member!r} is not JSON ({first_line(exc)})") from None


def _check_program(program: Any, name: str) -> None:
    """Refuse what the deserializer or the program would run: node targets outside the
    allowed operators, symbolic expressions (sympify evaluates them), custom objects."""
    def error(why: str) -> InvalidModelError:
        return InvalidModelError(f"{name}: {PROGRAM}: {why}")

    try:
        graph = program["graph_module"]["graph"]
        nodes = list(graph["nodes"])
    except (KeyError, TypeError) as exc:
        raise error(f"not an exported program (no {first_line(exc)})") from None
    for k, node in enumerate(nodes):
        target = node.get("target") if isinstance(node, dict) else None
        if not isinstance(target, str) or not (
                _TARGET.match(target) or target in _PLAIN_TARGETS):
            where = _node_name(node, k)
            raise error(f"node {where} calls {str(target)[:80]!r}: canonqnn loads programs whose "
                        f"nodes call operators of {', '.join(_NAMESPACES)} only")
    if graph.get("custom_obj_values"):
        raise error("custom objects (torchbind): loading them would unpickle them")
    if program.get("range_constraints"):
        raise error("symbolic shapes (range_constraints): canonqnn converts programs with "
                    "static shapes")
    expression = _first_expression(program)
    if expression is not None:
        raise error(f"the symbolic expression {expression[:80]!r}: canonqnn converts programs "
                    "with static shapes (and never evaluates a file's expressions)")


def _node_name(node: Any, k: int) -> str:
    try:
        return repr(node["outputs"][0]["as_tensor"]["name"])
    except (KeyError, IndexError, TypeError):
        return f"#{k}"


def _first_expression(tree: Any) -> str | None:
    """The first ``expr_str`` in the program's JSON (iterative: the JSON may be deep)."""
    stack = [tree]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "expr_str" in value:
                return str(value["expr_str"])
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


def _tensors(members: _Members, folder: str, config: Any) -> dict[str, Any]:
    """The tensors a payload config lists, made from their raw bytes, keyed by name."""
    import torch
    from torch._export.serde.serialize import deserialize_scalar_type

    def error(fqn: str, why: str) -> InvalidModelError:
        return members.error(f"{folder}: tensor {fqn!r}: {why}")

    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise members.error(f"{folder}: its config is not a payload config")
    storages: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for fqn, meta in entries.items():
        if not isinstance(meta, dict):
            raise error(fqn, "not a payload entry")
        path = str(meta.get("path_name", ""))
        member = posixpath.join(folder, path)
        if meta.get("use_pickle") or path.startswith(("custom_obj_", "opaque_obj_")):
            raise error(fqn, f"member {member!r} is a pickle (use_pickle): canonqnn never "
                             "unpickles; save the program with plain tensors")
        if not re.fullmatch(r"(weight|tensor)_\d+", path):
            raise error(fqn, f"member {path!r} is not a tensor payload")
        try:
            tensor = meta["tensor_meta"]
            dtype = deserialize_scalar_type(tensor["dtype"])
            sizes = [_int(s) for s in tensor["sizes"]]
            strides = [_int(s) for s in tensor["strides"]]
            offset = _int(tensor["storage_offset"])
            device = tensor.get("device", {}).get("type", "cpu")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise error(fqn, f"tensor metadata unreadable ({first_line(exc)})") from None
        if device != "cpu":
            raise error(fqn, f"stored for device {device!r}; canonqnn reads CPU tensors")
        if len(sizes) != len(strides) or min([offset, *sizes, *strides], default=0) < 0:
            raise error(fqn, f"sizes {sizes}, strides {strides}, offset {offset}")
        itemsize = dtype.itemsize
        if member not in storages:
            data = members.read(member)
            if len(data) % itemsize:
                raise error(fqn, f"{len(data)} bytes are not whole {dtype} elements")
            storages[member] = torch.frombuffer(bytearray(data), dtype=dtype) if data else \
                torch.empty(0, dtype=dtype)
        storage = storages[member]
        if storage.dtype != dtype:
            raise error(fqn, f"member {member!r} is read as {storage.dtype} elsewhere")
        if 0 not in sizes:
            extent = offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1
            if extent > storage.numel():
                raise error(fqn, f"sizes {sizes} and strides {strides} reach element "
                                 f"{extent - 1} of {storage.numel()} in {member!r}")
        value = torch.as_strided(storage, sizes, strides, offset)
        out[fqn] = torch.nn.Parameter(value, requires_grad=False) if meta.get("is_param") \
            else value
    return out


def _int(value: Any) -> int:
    """A serialized ``SymInt`` that must be a plain integer (static shapes only)."""
    number = value["as_int"] if isinstance(value, dict) else value
    if type(number) is not int:
        raise ValueError(f"not an integer: {str(value)[:40]}")
    return number


def _deserialize(program: Any, weights: dict, constants: dict, name: str) -> Any:
    """The program from its checked JSON and tensors: no example inputs (the archive's are a
    pickle), no guards (Python source ``ExportedProgram.module()`` would ``exec``)."""
    import logging

    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (the q/dq ops PT2E programs call)
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

    log = logging.getLogger("torch._export.serde.serialize")
    level = log.level
    log.setLevel(logging.CRITICAL)  # it logs a traceback before it raises
    try:
        serialized = _dict_to_dataclass(schema.ExportedProgram, program)
        serialized.guards_code = []
        ep = ExportedProgramDeserializer().deserialize(serialized, weights, constants, None)
    except Exception as exc:  # noqa: BLE001  (torch's deserializer raises many kinds)
        raise InvalidModelError(f"{name}: not a program torch {torch.__version__} can read: "
                                f"{first_line(exc)}") from None
    finally:
        log.setLevel(level)
    return ep


def is_archive_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a file that may be a ``.pt2`` archive (a zip)."""
    return os.path.isfile(path) and zipfile.is_zipfile(path)
