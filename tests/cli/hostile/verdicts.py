"""Verdicts and the values behind them: external data read from the model's folder whatever the
working directory holds, input values a float32 input cannot hold, input files and seeds that
are no such thing. That the verdict on external data is exact (not only accepted) is pinned by
``tests/test_api.py``; the writes that must be whole or nothing by ``tests/test_io.py`` and
``tests/build/test_builder.py`` (two processes, a full disk)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
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
        pointing_to(path, location)
    return path


def pointing_to(path: Path, location: str) -> None:
    """The ONNX model at ``path`` edited to name ``location`` as its tensors' data file."""
    proto = onnx.load(str(path), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(proto, str(path))


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


def _exact(d: Path, runs: list) -> str | None:
    """The parity run (the first) found the build bit-exact with onnxruntime."""
    return None if "PARITY: bit-exact" in runs[0].stdout else \
        f"parity from a folder holding a decoy data file: {runs[0].stdout.strip()[-200:]}"


# ---------------------------------------------------------------- a full disk


def _full_disk(bases: Bases, d: Path) -> list[list[str]]:
    """A 1 MiB tmpfs holding a converted module and filled to the last byte; ``convert`` over
    the module must fail and leave it as it was. Where no tmpfs can be mounted (not root), the
    same commands write to /dev/full."""
    disk = d / "disk"
    disk.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                             capture_output=True).returncode == 0
    target = disk / "m.canonqnn.json" if mounted else Path("/dev/full")
    if mounted:
        target.write_bytes(bases.module.read_bytes()[:100_000])
        with open(disk / "filler", "wb") as f, contextlib.suppress(OSError):
            f.write(bytes(1 << 20))
        (d / "kept").write_bytes(target.read_bytes())
    return [["convert", str(bases.onnx), "-o", str(target)],
            ["convert", str(bases.onnx), "-o", str(target), "--script", str(d / "m.py")]]


def _disk_untouched(d: Path, runs: list) -> str | None:
    disk = d / "disk"
    if not (d / "kept").exists():
        return None  # /dev/full: the refusals are the whole check
    try:
        left = sorted(p.name for p in disk.iterdir())
        same = (disk / "m.canonqnn.json").read_bytes() == (d / "kept").read_bytes()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    if not same:
        return "convert on a full disk changed the file it could not replace"
    if left != ["filler", "m.canonqnn.json"]:
        return f"convert on a full disk left files behind: {left}"
    return None


# ---------------------------------------------------------------- two builds of one path

_BUILDING: dict[Path, subprocess.Popen] = {}


def _concurrent_build(bases: Bases, d: Path) -> list[list[str]]:
    """A build of the module into ``d/m.so`` started in the background, then the same build
    as the case's command: the two write one path at once."""
    out = d / "m.so"
    _BUILDING[d] = subprocess.Popen(
        [sys.executable, "-c", "import sys; from canonqnn.cli import main; "
                               "sys.exit(main(sys.argv[1:]))",
         "build", str(bases.module), "-o", str(out)],
        cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "TVM_NUM_THREADS": "1"})
    return [["build", str(bases.module), "-o", str(out)]]


def _one_whole_library(d: Path, runs: list) -> str | None:
    from canonqnn.build import integrity

    background = _BUILDING.pop(d)
    _, stderr = background.communicate(timeout=300)
    if background.returncode != 0:
        return f"the background build failed: {stderr.decode(errors='replace')[-300:]}"
    data = (d / "m.so").read_bytes()
    try:
        integrity.check(str(d / "m.so"))
    except Exception as exc:  # noqa: BLE001  (a CanonqnnError naming what is wrong)
        return f"two builds to one path left a damaged library: {exc}"
    if data.count(integrity.MAGIC) != 1:
        return f"two builds to one path left {data.count(integrity.MAGIC)} integrity records"
    strays = sorted(p.name for p in d.iterdir() if ".part" in p.name)
    return f"temporary files left behind: {strays}" if strays else None


def verdict_cases() -> list[Case]:
    def c(name: str, expect: str, make: Callable[[Bases, Path], list[list[str]]],
          fast: bool = False, check=None) -> Case:
        return Case(FAMILY, name, expect, make, fast, check)

    shape = (1, 4, 6, 6)
    nan_and_inf = np.zeros(shape, np.float32)
    nan_and_inf[0, 0, 0, :3], nan_and_inf[0, 1, 2, 3] = np.nan, -np.inf
    return [
        c("external_data_decoy_in_working_directory", ACCEPTED, lambda b, d: [
            ["parity", str(_with_external_data(d)), "--runs", "1"],
            ["convert", str(_with_external_data(d)), "-o", str(d / "m.json")]], fast=True,
          check=_exact),
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
        c("output_on_a_full_disk_keeps_the_old_file", REFUSED, _full_disk, fast=True,
          check=_disk_untouched),
        c("two_builds_of_one_path", ACCEPTED, _concurrent_build, check=_one_whole_library),
    ]
