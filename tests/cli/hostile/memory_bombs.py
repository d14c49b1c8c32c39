"""Small models that describe huge tensors, and the memory budget's arguments: each bomb is
refused before anything of its size is allocated (``canonqnn.budget``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from .artifacts import Bases, onnx_conv, save_model
from .case import ACCEPTED, REFUSED, Case

FAMILY = "memory-bombs"


def tflite_pad(side: int, channels: int = 3) -> bytes:
    """int8 1x2x2xC -> PAD -> 1 x side x side x C: a few hundred bytes whatever ``side``."""
    from canonqnn.testing.tflite_writer import GraphWriter

    g = GraphWriter()
    x = g.tensor("x", (1, 2, 2, channels), "int8", None, 0.05, 0)
    pads = g.tensor("pads", (4, 2), "int32",
                    np.array([[0, 0], [0, side - 2], [0, side - 2], [0, 0]], np.int32))
    y = g.tensor("pad_out", (1, side, side, channels), "int8", None, 0.05, 0)
    g.op("PAD", [x, pads], [y])
    return g.finish([x], [y])


def tflite_huge_input(rows: int = 20000, cols: int = 100000) -> bytes:
    """int8 1 x rows x cols x 1 -> 2x2 MAX_POOL: an input of 2e9 elements by default."""
    from canonqnn.testing.tflite_writer import GraphWriter

    g = GraphWriter()
    x = g.tensor("x", (1, rows, cols, 1), "int8", None, 0.05, 0)
    y = g.tensor("pooled", (1, rows // 2, cols // 2, 1), "int8", None, 0.05, 0)
    g.op("MAX_POOL_2D", [x], [y], padding="VALID", strideW=2, strideH=2, filterWidth=2,
         filterHeight=2, fusedActivationFunction="NONE")
    return g.finish([x], [y])


def onnx_dynamic_batch() -> onnx.ModelProto:
    """The corpus's ONNX conv with a dynamic batch dimension ``N`` (``--shape`` sets it)."""
    model = onnx_conv()
    for value in (model.graph.input[0], model.graph.output[0]):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "N"
    return model


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _small_input(d: Path, shape=(1, 2, 2, 3)) -> Path:
    path = d / "x.npy"
    np.save(path, np.arange(np.prod(shape), dtype=np.int8).reshape(shape))
    return path


def _pad_commands(model: Path, d: Path, *extra: str) -> list[list[str]]:
    x = _small_input(d)
    return [["convert", str(model), "-o", str(d / "m.json"), *extra],
            ["build", str(model), "-o", str(d / "m.so"), *extra],
            ["run", str(model), "--reference", "--input", f"x={x}", "-o", str(d / "o.npz"),
             *extra],
            ["parity", str(model), "--runs", "1", *extra]]


def memory_bomb_cases() -> list[Case]:
    def c(name: str, expect: str, make, fast: bool = False) -> Case:
        return Case(FAMILY, name, expect, make, fast)

    def pad(side: int, *extra: str):
        return lambda b, d: _pad_commands(_write(d / "pad.tflite", tflite_pad(side)), d, *extra)

    def huge_input(b: Bases, d: Path) -> list[list[str]]:
        model = _write(d / "big_input.tflite", tflite_huge_input())
        return [[*argv, "--max-memory", "8G"] for argv in (
            ["parity", str(model), "--runs", "1"],
            ["run", str(model), "--reference", "--input", f"x={_small_input(d)}",
             "-o", str(d / "o.npz")],
            ["convert", str(model), "-o", str(d / "m.json")])]

    def dynamic(shape: str, *extra: str):
        def make(b: Bases, d: Path) -> list[list[str]]:
            model = save_model(onnx_dynamic_batch(), d)
            return [["convert", str(model), "-o", str(d / "m.json"), "--shape", shape, *extra],
                    ["build", str(model), "-o", str(d / "m.so"), "--shape", shape, *extra],
                    ["parity", str(model), "--runs", "1", "--shape", shape, *extra]]
        return make

    def bad_budget(value: str):
        def make(b: Bases, d: Path) -> list[list[str]]:
            return [["convert", str(b.onnx), "-o", str(d / "m.json"), "--max-memory", value],
                    ["run", str(b.library), "--input", f"x={b.x}", "-o", str(d / "o.npz"),
                     "--max-memory", value],
                    ["parity", str(b.onnx), "--runs", "1", "--max-memory", value]]
        return make

    return [
        # 1 x 25000 x 25000 x 3 int8: 1.75 GiB from 544 bytes
        c("pad_25000_under_1G", REFUSED, pad(25000, "--max-memory", "1G"), fast=True),
        # each tensor fits 8G, a run does not (its working space: 12 bytes an element)
        c("pad_25000_under_8G", REFUSED, pad(25000, "--max-memory", "8G")),
        c("input_2e9_elements_under_8G", REFUSED, huge_input),
        c("shape_huge_dynamic_dim", REFUSED, dynamic("x=99999999999x4x6x6"), fast=True),
        c("shape_large_dynamic_dim_under_16M", REFUSED,
          dynamic("x=20000x4x6x6", "--max-memory", "16M")),
        c("shape_small_dynamic_dim", ACCEPTED, dynamic("x=2x4x6x6")),
        # 1 x 2000 x 2000 x 3 int8, 11.4 MiB: refused under 8 MiB, accepted by default
        c("pad_2000_under_8M", REFUSED, pad(2000, "--max-memory", "8M")),
        c("pad_2000", ACCEPTED, pad(2000)),
        c("pad_2000_under_1G", ACCEPTED, pad(2000, "--max-memory", "1G")),
        c("max_memory_garbage", REFUSED, bad_budget("lots"), fast=True),
        c("max_memory_0", REFUSED, bad_budget("0")),
        c("max_memory_negative", REFUSED, bad_budget("-1")),
        c("max_memory_unit_unknown", REFUSED, bad_budget("2Q")),
        c("max_memory_nan", REFUSED, bad_budget("nan")),
        c("max_memory_fraction_of_a_byte", REFUSED, bad_budget("0.5")),
        c("max_memory_units_accepted", ACCEPTED, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d / "m.json"), "--max-memory", size]
            for size in ("2G", "512M", "1.5GiB", "1000000000", "4gb")]),
    ]
