"""The JSON each command prints with ``--json``: one JSON Schema per command (draft 2020-12).

They are the contract docs/cli.md shows, in a compact notation written from them
(``python -m canonqnn.cli.schemas docs/cli.md``, ``--check`` to compare), and the tests check
every command's output against them. A key a schema requires is always there; ``null`` where
the command did not do that part (no tuning, no device).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from .. import generated_docs


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None,
            more: bool = False) -> dict[str, Any]:
    """An object with ``required`` and ``optional`` properties (``more``: others allowed)."""
    return {"type": "object", "properties": {**required, **(optional or {})},
            "required": list(required), "additionalProperties": more}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


STRING, INTEGER, NUMBER, BOOLEAN = ({"type": t} for t in ("string", "integer", "number",
                                                           "boolean"))
COUNTS = {"type": "object", "additionalProperties": INTEGER}
STRINGS = {"type": "array", "items": STRING}
# A TVM target as TVM writes it in JSON: its kind, keys and the attributes it was given.
TARGET = {"type": "object", "properties": {"kind": STRING}, "required": ["kind"]}

NEAR_MISS = _object({"rule": STRING, "phase": STRING, "step": STRING, "reason": STRING})
REPORT = _object({
    "numerics": _nullable(STRING),  # the profile the module was converted for
    "quantized": BOOLEAN,           # false: a float model, nothing quantized
    "rules": _nullable(COUNTS),     # null: a module file (the rules are not recorded)
    "canonical_ops": COUNTS,
    "float_islands": {"type": "array", "items": _object({
        "op": STRING, "var": STRING, "reason": STRING,
        "near_misses": {"type": "array", "items": NEAR_MISS}})},
})
OUTPUT_PARITY = _object({"name": STRING, "exact_fraction": NUMBER, "max_abs_diff": NUMBER,
                         "elements": INTEGER})
PARITY = _object({
    "outputs": {"type": "array", "items": OUTPUT_PARITY},
    "canonical_ops": COUNTS,
    "float_islands": {"type": "array", "items": _object({"op": STRING, "var": STRING,
                                                         "reason": STRING})},
    "reference": STRING,    # the specification runtime
    "target": TARGET,
    "runs": INTEGER,
    "exact": BOOLEAN,
    "numerics": STRING,
    "runtime_numerics": STRING,
}, {
    "device": _object({"address": STRING, "machine": _nullable(STRING)}),
    "notes": STRINGS,
    "nonfinite_inputs": {"type": "object", "additionalProperties": _object(
        {"nan": INTEGER, "inf": INTEGER})},
    "numerics_differences": STRINGS,
    "also_compared": {"type": "array", "items": _object({
        "reference": STRING, "outputs": {"type": "array", "items": OUTPUT_PARITY}})},
    "first_divergence": _nullable({"type": "object"}),
    "first_divergence_summary": STRING,
    # view --parity: every canonical op whose tensor the source runtime exposes
    "layers": {"type": "array", "items": _object({
        "op": STRING, "var": STRING, "tensor": STRING, "elements": INTEGER,
        "differing": INTEGER, "max_lsb": INTEGER})},
})
TENSORS = {"type": "array", "items": {"type": "array", "prefixItems": [
    STRING, {"type": "array", "items": INTEGER}], "minItems": 2, "maxItems": 2}}  # dtype, shape
EDGES = {"type": "array", "items": _object({"producer": STRING, "consumer": STRING,
                                            "dtype": STRING,
                                            "shape": {"type": "array", "items": INTEGER}})}
KERNELS = _object({
    # producers: per input, the index of the kernel that computed it (null: none did)
    "kernels": {"type": "array", "items": _object({
        "name": STRING, "inputs": TENSORS, "outputs": TENSORS,
        "producers": {"type": "array", "items": _nullable(INTEGER)}})},
    "non_int8_edges": EDGES,  # tensors of another dtype passed between canonical kernels
    "float_island_edges": EDGES,
    "unfused_luts": STRINGS,
})

VIEW_GRAPHS = {"type": "array", "items": _object({"id": STRING, "nodes": INTEGER})}

SCHEMAS: dict[str, dict[str, Any]] = {
    "convert": _object({"model": STRING, "output": STRING, "script": _nullable(STRING),
                        "report": REPORT}),
    "build": _object({
        "model": STRING, "output": STRING, "target": TARGET, "report": REPORT,
        "device": _nullable(_object({"address": STRING, "machine": _nullable(STRING)})),
        "verification": _nullable(_object({
            "runs": INTEGER, "ok": BOOLEAN, "outputs_equal": BOOLEAN,
            "mismatches": {"type": "array", "items": _object({
                "op": STRING, "var": STRING, "differing": INTEGER, "elements": INTEGER})}})),
        "tuning": _nullable(_object({"directory": STRING, "trials": INTEGER,
                                     "tuned": INTEGER, "reused": INTEGER,
                                     "reason": _nullable(STRING)})),
        "conv_forms": _nullable(_object({"measured": INTEGER, "reused": INTEGER,
                                         "reason": _nullable(STRING)})),
    }),
    "run": _object({
        "input": STRING, "output": STRING, "reference": BOOLEAN,
        "outputs": {"type": "array", "items": _object({
            "name": STRING, "dtype": STRING, "shape": {"type": "array", "items": INTEGER}})},
        "islands_run_by_tvm": STRINGS,
    }),
    "inspect": REPORT,
    "inspect --built": KERNELS,
    "parity": PARITY,
    "ops": {"type": "array", "items": _object({
        "name": STRING, "family": STRING, "summary": STRING, "args": STRINGS,
        "attrs": STRINGS, "roundings": STRINGS, "layout": _nullable(STRING),
        "weight_layout": _nullable(STRING), "constraints": STRING})},
    "patterns": {"type": "array", "items": _object({"pattern": STRING, "ops": STRINGS})},
    "patterns MODEL": {"type": "array", "items": _object({"pattern": STRING, "op": STRING,
                                                          "summary": STRING})},
    # the graphs Model Explorer shows (nodes: how many), and what parity found (null without
    # --parity); with --export the files written, else the page's address once it is served
    "view --export": _object({"model": STRING, "graphs": VIEW_GRAPHS, "parity": _nullable(PARITY),
                              "files": STRINGS}),
    "view": _object({"model": STRING, "graphs": VIEW_GRAPHS, "parity": _nullable(PARITY),
                     "url": STRING}),
    "demo": _object({"workdir": _nullable(STRING), "kept": BOOLEAN,
                     "model": _nullable(STRING), "library": _nullable(STRING),
                     "report": REPORT, "target": TARGET, "parity": PARITY}),
}


def schema_of(argv: list[str]) -> dict[str, Any]:
    """The schema of the JSON ``canonqnn ARGV --json`` prints (its command's, or the form
    ``inspect --built``, ``patterns MODEL`` and ``view --export`` print)."""
    command = next(a for a in argv if not a.startswith("-"))
    rest = argv[argv.index(command) + 1:]
    if command == "inspect" and "--built" in rest:
        return SCHEMAS["inspect --built"]
    if command == "patterns" and any(not a.startswith("-") for a in rest):
        return SCHEMAS["patterns MODEL"]
    if command == "view" and any(a.startswith("--export") for a in rest):
        return SCHEMAS["view --export"]
    return SCHEMAS[command]


# The shapes several commands share, shown once in docs/cli.md and named where they recur.
SHARED: dict[str, dict[str, Any]] = {"Report": REPORT, "Parity": PARITY, "Target": TARGET,
                                     "OutputParity": OUTPUT_PARITY, "Kernels": KERNELS}


def shape(schema: dict[str, Any], depth: int = 0, top: bool = True) -> str:
    """``schema`` in the notation docs/cli.md uses: ``{"key": string, "other"?: integer}``
    (``?``: a key that may be absent), ``[item, ...]``, ``A | null``, ``{string: integer}``
    for a map; a shared shape by its name (``Report``)."""
    for name, shared in SHARED.items():
        if schema is shared and not top:
            return name
    pad, inner = "  " * depth, "  " * (depth + 1)
    if "anyOf" in schema:
        return " | ".join(shape(s, depth, False) for s in schema["anyOf"])
    if "prefixItems" in schema:
        return "[" + ", ".join(shape(s, depth, False) for s in schema["prefixItems"]) + "]"
    kind = schema.get("type")
    if kind == "array":
        return f"[{shape(schema.get('items', {}), depth, False)}, ...]"
    if kind == "object" and "properties" in schema:
        required = schema.get("required", [])
        lines = [f'{inner}"{key}"{"" if key in required else "?"}: '
                 f"{shape(value, depth + 1, False)}"
                 for key, value in schema["properties"].items()]
        if schema.get("additionalProperties", True) is not False:
            lines.append(f"{inner}...")
        return "{\n" + ",\n".join(lines) + f"\n{pad}}}"
    if kind == "object":
        values = schema.get("additionalProperties")
        return f"{{string: {shape(values, depth, False)}}}" if values else "{...}"
    return str(kind) if kind else "any"


# docs/cli.md holds each shape between these lines, under the command's heading.
_BLOCK = re.compile(r"(<!-- schema: (?P<name>[A-Za-z -]+?) -->\n)```\n.*?```\n", re.DOTALL)


def _named(name: str) -> dict[str, Any]:
    return SHARED[name] if name in SHARED else SCHEMAS[name]


def rendered(text: str) -> str:
    """``text`` (docs/cli.md) with every shape block written from the schemas."""
    def block(match: re.Match[str]) -> str:
        return f"{match[1]}```\n{shape(_named(match['name']))}\n```\n"

    return _BLOCK.sub(block, text)


def documented(text: str) -> set[str]:
    """The commands whose schema block ``text`` holds."""
    return {m["name"] for m in _BLOCK.finditer(text)}


def main(argv: list[str]) -> int:
    return generated_docs.main(
        argv, "canonqnn.cli.schemas", "docs/cli.md", "shape blocks", rendered,
        lambda page: sorted((set(SCHEMAS) | set(SHARED)) - documented(page)))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
