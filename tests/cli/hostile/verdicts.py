"""Verdicts and the values behind them: external data read from the model's folder whatever the
working directory holds, input values a float32 input cannot hold, input files and seeds that
are no such thing. That the verdict on external data is exact (not only accepted) is pinned by
``tests/test_api.py``; the writes that must be whole or nothing by ``tests/test_io.py`` and
``tests/test_builder.py`` (two processes, a full disk)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from .artifacts import Bases, onnx_conv
from .case import ACCEPTED, REFUSED, Case

FAMILY = "verdicts"


def _with_external_data(d: Path, location: str = "conv.data") -> Path:
    """The corpus conv in ``d/model``, its weights in ``conv.data`` beside it, the model
    pointing to them as ``location``; a decoy ``conv.data`` of other bytes in ``d`` (the
    working directory of the case's commands)."""
    folder = d / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "conv.onnx"
    onnx.save(onnx_conv(), str(path), save_as_external_data=True, size_threshold=100,
              location="conv.data")
    size = (folder / "conv.data").stat().st_size
    (d / "conv.data").write_bytes(np.random.default_rng(3).bytes(size))
    if location != "conv.data":
        proto = onnx.load(str(path), load_external_data=False)
        for tensor in proto.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = location
        onnx.save(proto, str(path))
    return path


def _feeds(bases: Bases, d: Path, value: np.ndarray) -> list[list[str]]:
    path = d / "x.npy"
    np.save(path, value)
    return [["run", str(bases.library), "--input", f"x={path}", "-o", str(d / "o.npz")],
            ["run", str(bases.module), "--reference", "--input", f"x={path}",
             "-o", str(d / "o.npz")],
            ["parity", str(bases.onnx), "--input", f"x={path}"]]


def _npy_named_npz(bases: Bases, d: Path) -> list[list[str]]:
    path = d / "x.npz"
    with open(path, "wb") as f:
        np.save(f, np.zeros((1, 4, 6, 6), np.float32))
    return [["run", str(bases.library), "--input", str(path), "-o", str(d / "o.npz")],
            ["parity", str(bases.onnx), "--input", str(path)],
            ["parity", str(bases.onnx), "--input", f"x={path}"]]


def verdict_cases() -> list[Case]:
    def c(name: str, expect: str, make: Callable[[Bases, Path], list[list[str]]],
          fast: bool = False) -> Case:
        return Case(FAMILY, name, expect, make, fast)

    shape = (1, 4, 6, 6)
    nan_and_inf = np.zeros(shape, np.float32)
    nan_and_inf[0, 0, 0, :3], nan_and_inf[0, 1, 2, 3] = np.nan, -np.inf
    return [
        c("external_data_decoy_in_working_directory", ACCEPTED, lambda b, d: [
            ["parity", str(_with_external_data(d)), "--runs", "1"],
            ["convert", str(_with_external_data(d)), "-o", str(d / "m.json")]], fast=True),
        c("external_data_outside_model_folder", REFUSED, lambda b, d: [
            [command, str(_with_external_data(d, "../conv.data"))]
            for command in ("convert", "parity")]),
        c("external_data_absolute_path", REFUSED, lambda b, d: [
            [command, str(_with_external_data(d, str(d / "conv.data")))]
            for command in ("convert", "parity")]),
        c("int64_2pow24_plus_1_into_float32", REFUSED,
          lambda b, d: _feeds(b, d, np.full(shape, 2 ** 24 + 1, np.int64)), fast=True),
        c("float64_1e300_into_float32", REFUSED,
          lambda b, d: _feeds(b, d, np.full(shape, 1e300))),
        c("float64_1e-300_into_float32", REFUSED,
          lambda b, d: _feeds(b, d, np.full(shape, 1e-300))),
        c("nan_and_inf_inputs_reported", ACCEPTED, lambda b, d: _feeds(b, d, nan_and_inf)),
        c("npy_named_npz", REFUSED, _npy_named_npz, fast=True),
        c("seed_negative", REFUSED, lambda b, d: [["parity", str(b.onnx), "--seed", "-1"]],
          fast=True),
    ]
