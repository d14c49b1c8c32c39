"""Bad input arrays and bad command-line arguments."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .artifacts import Bases
from .case import ACCEPTED, EITHER, REFUSED, SEED, Case


def npy_header(shape_text: str, descr: str = "<f4") -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}"
    header += " " * (63 - len(header) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


def input_cases() -> list[Case]:
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((1, 4, 6, 6))
    arrays: dict[str, tuple[str, Callable[[], object]]] = {
        "float32": (ACCEPTED, lambda: x.astype(np.float32)),
        "float64_inexact": (ACCEPTED, lambda: x),  # rounds to the float32 input (docs/errors.md)
        "float64_exact": (ACCEPTED, lambda: x.astype(np.float32).astype(np.float64)),
        "float16": (EITHER, lambda: x.astype(np.float16)),
        "int64": (EITHER, lambda: np.ones((1, 4, 6, 6), np.int64)),
        "int64_huge": (EITHER, lambda: np.full((1, 4, 6, 6), 2 ** 62 + 1, np.int64)),
        "bool": (EITHER, lambda: np.ones((1, 4, 6, 6), bool)),
        "complex": (REFUSED, lambda: x.astype(np.complex64)),
        "strings": (REFUSED, lambda: np.full((1, 4, 6, 6), "a")),
        "object": (REFUSED, lambda: np.empty((1, 4, 6, 6), object)),
        "wrong_shape": (REFUSED, lambda: x[:, :, :5].astype(np.float32)),
        "wrong_rank": (REFUSED, lambda: x[0].astype(np.float32)),
        "zero_sized": (REFUSED, lambda: np.zeros((1, 4, 0, 6), np.float32)),
        "scalar": (REFUSED, lambda: np.float32(1)),
        "nan": (EITHER, lambda: np.full((1, 4, 6, 6), np.nan, np.float32)),
        "inf": (EITHER, lambda: np.full((1, 4, 6, 6), np.inf, np.float32)),
    }
    raw: dict[str, bytes] = {
        "npy_truncated": npy_header("(1, 4, 6, 6)") + b"\0" * 100,
        "npy_negative_shape": npy_header("(1, -4, 6, 6)"),
        "npy_huge_shape": npy_header("(1, 4, 2**40, 6)".replace("2**40", str(2 ** 40))),
        "npy_huge_header": b"\x93NUMPY\x02\x00" + struct.pack("<I", 2 ** 31) + b"{",
        "npy_bad_descr": npy_header("(1, 4, 6, 6)", "<q99") + b"\0" * 576,
        "npy_garbage": b"not an array",
        "npy_empty": b"",
    }
    cases = []

    def feed_commands(bases: Bases, d: Path, path: Path, name: str = "x") -> list[list[str]]:
        spec = f"{name}={path}" if path.suffix == ".npy" else str(path)
        return [["run", str(bases.library), "--input", spec, "-o", str(d / "o.npz")],
                ["run", str(bases.module), "--reference", "--input", spec,
                 "-o", str(d / "o.npz")],
                ["parity", str(bases.onnx), "--input", spec]]

    for name, (expect, value) in arrays.items():
        def make(bases: Bases, d: Path, value=value) -> list[list[str]]:
            path = d / "x.npy"
            np.save(path, value(), allow_pickle=True)
            return feed_commands(bases, d, path)
        cases.append(Case("inputs", name, expect, make,
                          fast=name in ("float32", "object", "strings", "wrong_shape")))
    for name, data in raw.items():
        def make(bases: Bases, d: Path, data=data) -> list[list[str]]:
            path = d / "x.npy"
            path.write_bytes(data)
            return feed_commands(bases, d, path)
        cases.append(Case("inputs", name, REFUSED, make,
                          fast=name in ("npy_truncated", "npy_huge_header")))

    def npz(bases: Bases, d: Path, arrays: dict, name: str = "x.npz") -> list[list[str]]:
        path = d / name
        np.savez(path, **arrays)
        return feed_commands(bases, d, path)

    good = x.astype(np.float32)
    cases += [
        Case("inputs", "npz_valid", ACCEPTED, lambda b, d: npz(b, d, {"x": good})),
        Case("inputs", "npz_missing_input", REFUSED, lambda b, d: npz(b, d, {"y": good}),
             fast=True),
        Case("inputs", "npz_extra_input", REFUSED,
             lambda b, d: npz(b, d, {"x": good, "extra": good})),
        Case("inputs", "npz_empty", REFUSED, lambda b, d: npz(b, d, {})),
        Case("inputs", "unknown_input_name", REFUSED,
             lambda b, d: feed_commands(b, d, b.x, name="nope")),
        Case("inputs", "input_file_missing", REFUSED,
             lambda b, d: feed_commands(b, d, d / "absent.npy")),
        Case("inputs", "input_is_directory", REFUSED,
             lambda b, d: feed_commands(b, d, _mkdir(d / "dir.npy"))),
        Case("inputs", "npz_corrupt", REFUSED, lambda b, d: feed_commands(
            b, d, _write(d / "c.npz", b"PK\x03\x04" + bytes(200))), fast=True),
    ]
    return cases


def _mkdir(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------ command-line arguments


def argument_cases() -> list[Case]:
    def c(name: str, expect: str, argvs: Callable[[Bases, Path], list[list[str]]],
          fast: bool = False) -> Case:
        return Case("arguments", name, expect, argvs, fast)

    targets = {"garbage": "not-a-target", "cuda_without_gpu": "cuda",
               "bad_mcpu": "llvm -mcpu=no-such-cpu", "unknown_option": "llvm -nonsense=1",
               "empty": ""}
    cases = []
    for name, target in targets.items():
        cases.append(c(f"target_{name}", REFUSED, lambda b, d, t=target: [
            ["build", str(b.module), "-o", str(d / "o.so"), "--target", t],
            ["parity", str(b.onnx), "--runs", "1", "--target", t]],
            fast=name in ("garbage", "cuda_without_gpu")))
    cases += [
        c("target_aarch64_cross_parity", REFUSED, lambda b, d: [
            ["parity", str(b.onnx), "--runs", "1", "--target",
             "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]], fast=True),
        c("target_aarch64_cross_build", EITHER, lambda b, d: [
            ["build", str(b.module), "-o", str(d / "o.so"), "--target",
             "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]]),
        c("output_in_missing_directory", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d / "no" / "such" / "m.json")],
            ["build", str(b.module), "-o", str(d / "no" / "m.so")],
            ["run", str(b.library), "--input", f"x={b.x}", "-o", str(d / "no" / "o.npz")]],
            fast=True),
        c("output_is_directory", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d)], ["build", str(b.module), "-o", str(d)],
            ["run", str(b.library), "--input", f"x={b.x}", "-o", str(d)]]),
        c("script_in_missing_directory", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d / "m.json"), "--script",
             str(d / "no" / "m.py")]]),
        c("runs_0", REFUSED, lambda b, d: [["parity", str(b.onnx), "--runs", "0"]], fast=True),
        c("runs_negative", REFUSED, lambda b, d: [["parity", str(b.onnx), "--runs", "-3"]]),
        c("runs_not_a_number", REFUSED, lambda b, d: [["parity", str(b.onnx), "--runs", "x"]]),
        c("tune_negative", REFUSED, lambda b, d: [["build", str(b.module), "--tune", "-1",
                                                   "-o", str(d / "o.so")]]),
        c("numerics_unknown", REFUSED, lambda b, d: [["convert", str(b.onnx), "--numerics",
                                                      "bogus"]]),
        c("shape_contradicts_static_model", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d / "m.json"), "--shape", "x=1x4x9x9"],
            ["parity", str(b.onnx), "--runs", "1", "--shape", "x=1x4x9x9"]], fast=True),
        c("shape_malformed", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "--shape", "x=1xfour"],
            ["convert", str(b.onnx), "--shape", "=1x4"],
            ["convert", str(b.onnx), "--shape", "x=1x-4x6x6"],
            ["convert", str(b.onnx), "--shape", "x=1x4x6x99999999999999999999"]]),
        c("shape_unknown_input", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d / "m.json"), "--shape", "nope=1x4x6x6"]]),
        c("shape_on_tflite", REFUSED, lambda b, d: [
            ["convert", str(b.tflite), "--shape", "x=1x6x6x4"]]),
        c("outputs_unknown_tensor", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "--outputs", "nope"],
            ["convert", str(b.tflite), "--outputs", "nope"]], fast=True),
        c("outputs_empty", REFUSED, lambda b, d: [["convert", str(b.onnx), "--outputs", ","]]),
        c("outputs_graph_input", EITHER, lambda b, d: [
            ["convert", str(b.onnx), "-o", str(d / "m.json"), "--outputs", "x"]]),
        c("model_missing", REFUSED, lambda b, d: [
            [cmd, str(d / "absent.onnx")] for cmd in ("convert", "build", "inspect", "parity")]
          + [["run", str(d / "absent.so")]], fast=True),
        c("model_is_directory", REFUSED, lambda b, d: [
            [cmd, str(_mkdir(d / "dir.onnx"))] for cmd in ("convert", "build", "inspect",
                                                           "parity")]),
        c("model_unknown_suffix", EITHER, lambda b, d: [
            ["convert", str(_copy(b.onnx, d / "m.bin")), "-o", str(d / "m.json")]]),
        c("tflite_named_onnx", EITHER, lambda b, d: [
            ["convert", str(_copy(b.tflite, d / "m.onnx")), "-o", str(d / "m.json")]]),
        c("reference_of_library", REFUSED, lambda b, d: [["run", str(b.library), "--reference"]]),
        c("run_model_file", REFUSED, lambda b, d: [["run", str(b.onnx)]]),
        c("unknown_command", REFUSED, lambda b, d: [["frobnicate"]]),
        c("no_command", REFUSED, lambda b, d: [[]]),
        c("parity_of_module", EITHER, lambda b, d: [["parity", str(b.module), "--runs", "1"]]),
        c("inspect_built_of_library", ACCEPTED, lambda b, d: [["inspect", "--built",
                                                               str(b.library)]]),
        c("inspect_built_of_damaged_library", REFUSED, lambda b, d: [
            ["inspect", "--built", str(_write(d / "m.so", b.library.read_bytes()[:5000]))]]),
    ]
    if os.path.exists("/dev/full"):
        cases.append(c("output_on_full_device", REFUSED, lambda b, d: [
            ["convert", str(b.onnx), "-o", "/dev/full"],
            ["run", str(b.library), "--input", f"x={b.x}", "-o", "/dev/full"]], fast=True))
    return cases


def _copy(source: Path, path: Path) -> Path:
    path.write_bytes(source.read_bytes())
    return path
