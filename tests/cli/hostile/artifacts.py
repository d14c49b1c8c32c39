"""The valid artifacts the cases edit, the commands run on each kind, and damaged bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .case import EITHER, REFUSED, SEED, Case


def onnx_conv(zp_dtype=np.int8, out_shape=None, ir_version: int = 10) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ per-channel w, DQ int32 bias) -> Relu -> Q -> DQ."""
    rng = np.random.default_rng(0)
    zero = 128 if zp_dtype == np.uint8 else 0
    w_scale = rng.uniform(0.002, 0.02, 8).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "x_s"),
             numpy_helper.from_array(np.array(zero, zp_dtype), "x_z"),
             numpy_helper.from_array(rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8), "w_q"),
             numpy_helper.from_array(w_scale, "w_s"),
             numpy_helper.from_array(np.zeros(8, np.int8), "w_z"),
             numpy_helper.from_array(rng.integers(-900, 900, 8).astype(np.int32), "b_q"),
             numpy_helper.from_array((w_scale * np.float32(0.05)).astype(np.float32), "b_s"),
             numpy_helper.from_array(np.zeros(8, np.int32), "b_z"),
             numpy_helper.from_array(np.array(0.1, np.float32), "y_s"),
             numpy_helper.from_array(np.array(zero, zp_dtype), "y_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], name="quant_x"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xf"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wf"], name="dq_w",
                              axis=0),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["bf"], name="dq_b",
                              axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="conv",
                              kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "y_s", "y_z"], ["yq"], name="quant_y"),
             helper.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["y"], name="dq_y")]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape or [1, 8, 6, 6])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = ir_version
    return model


TFLITE_CONV = dict(padding="SAME", strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1,
                   fusedActivationFunction="RELU")


def tflite_conv(dtype: str = "int8", in_scale=0.05, in_zp=None, out_scale=0.1, out_zp=None,
                w_scale=None, bias_scale=None, options: dict | None = None,
                graph_inputs=None, op_inputs=None) -> bytes:
    """One CONV_2D (1x6x6x4 -> 1x6x6x8), written with canonqnn's TFLite writer; the
    arguments put one field out of range."""
    from canonqnn.testing.tflite_writer import GraphWriter

    rng = np.random.default_rng(1)
    offset = 128 if dtype == "uint8" else 0
    w_data = rng.integers(-127, 128, (8, 3, 3, 4)).astype(np.int32) + offset
    if w_scale is None:
        w_scale = rng.uniform(0.002, 0.02, 8 if dtype == "int8" else 1).astype(np.float32)
    w_scale = np.asarray(w_scale, np.float32)
    if bias_scale is None:
        bias_scale = (w_scale * np.float32(in_scale)).astype(np.float32)
    g = GraphWriter()
    x = g.tensor("x", (1, 6, 6, 4), dtype, None, in_scale, offset if in_zp is None else in_zp)
    w = g.tensor("w", (8, 3, 3, 4), dtype, w_data.astype(dtype), w_scale,
                 np.full(w_scale.size, offset if dtype == "uint8" else 0))
    b = g.tensor("b", (8,), "int32", rng.integers(-900, 900, 8).astype(np.int32),
                 np.asarray(bias_scale, np.float32), np.zeros(np.size(bias_scale), np.int64))
    y = g.tensor("y", (1, 6, 6, 8), dtype, None, out_scale,
                 offset - 3 if out_zp is None else out_zp)
    g.op("CONV_2D", op_inputs or [x, w, b], [y], **(options or TFLITE_CONV))
    return g.finish(graph_inputs or [x], [y])


@dataclass
class Bases:
    """The valid artifacts the cases edit, made once in ``root`` (the library by the CLI)."""

    root: Path
    run: Callable[[list[str]], object]  # runs one CLI command (used to make the library)
    _made: dict = field(default_factory=dict)

    def _file(self, name: str, write: Callable[[Path], None]) -> Path:
        if name not in self._made:
            path = self.root / name
            write(path)
            self._made[name] = path
        return self._made[name]

    @property
    def onnx(self) -> Path:
        return self._file("conv.onnx", lambda p: onnx.save(onnx_conv(), str(p)))

    @property
    def onnx_u8(self) -> Path:
        return self._file("conv_u8.onnx", lambda p: onnx.save(onnx_conv(np.uint8), str(p)))

    @property
    def tflite(self) -> Path:
        return self._file("conv.tflite", lambda p: p.write_bytes(tflite_conv()))

    @property
    def tflite_u8(self) -> Path:
        return self._file("conv_u8.tflite", lambda p: p.write_bytes(tflite_conv("uint8")))

    @property
    def module(self) -> Path:
        def convert(path: Path) -> None:
            self._expect_ok(["convert", str(self.onnx), "-o", str(path)])
        return self._file("conv.canonqnn.json", convert)

    @property
    def library(self) -> Path:
        def build(path: Path) -> None:
            self._expect_ok(["build", str(self.module), "-o", str(path)])
        return self._file("conv.so", build)

    @property
    def x(self) -> Path:
        """A valid input of the ONNX model (float32 1x4x6x6)."""
        return self._file("x.npy", lambda p: np.save(p, np.random.default_rng(2).standard_normal(
            (1, 4, 6, 6)).astype(np.float32)))

    def _expect_ok(self, argv: list[str]) -> None:
        result = self.run(argv)
        if getattr(result, "status", 0) != 0:
            raise RuntimeError(f"making a valid artifact failed: canonqnn {' '.join(argv)}: "
                               f"{result}")


# ------------------------------------------------------------------ commands per artifact


def model_commands(path: Path, d: Path, build: bool = True, parity: bool = True) -> list[list[str]]:
    argvs = [["convert", str(path), "-o", str(d / "out.json")], ["inspect", str(path)]]
    if build:
        argvs.append(["build", str(path), "-o", str(d / "out.so")])
    if parity:
        argvs.append(["parity", str(path), "--runs", "1"])
    return argvs


def module_commands(path: Path, d: Path, bases: Bases) -> list[list[str]]:
    return [["inspect", str(path)], ["build", str(path), "-o", str(d / "out.so")],
            ["run", str(path), "--reference", "--input", f"x={bases.x}",
             "-o", str(d / "out.npz")]]


def save_model(model: onnx.ModelProto, d: Path, name: str = "m.onnx") -> Path:
    path = d / name
    path.write_bytes(model.SerializeToString())
    return path


def _damaged(data: bytes, kind: str, rng: np.random.Generator) -> bytes:
    if kind == "truncated":
        return data[:int(rng.integers(1, len(data)))]
    if kind == "bitflip":
        out = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            out[int(rng.integers(len(out)))] ^= 1 << int(rng.integers(8))
        return bytes(out)
    if kind == "bytes_overwritten":
        out = bytearray(data)
        start = int(rng.integers(len(out) - 8))
        out[start:start + 8] = rng.integers(0, 256, 8).astype(np.uint8).tobytes()
        return bytes(out)
    raise ValueError(kind)


def damaged_cases(family: str, source: str, suffix: str, n: dict[str, int], fast: int,
                  commands: Callable[[Path, Path, Bases], list[list[str]]]) -> list[Case]:
    """Seeded edits of a valid artifact's bytes: truncations are refused; flips may leave a
    valid file (``either``)."""
    cases = []
    for kind, count in n.items():
        for k in range(count):
            def make(bases: Bases, d: Path, kind=kind, k=k) -> list[list[str]]:
                data = getattr(bases, source).read_bytes()
                rng = np.random.default_rng([SEED, k, len(kind)])
                path = d / f"m{suffix}"
                path.write_bytes(_damaged(data, kind, rng))
                return commands(path, d, bases)
            cases.append(Case(family, f"{kind}_{k}", REFUSED if kind == "truncated" else EITHER,
                              make, fast=k < fast))
    return cases


def garbage_cases(family: str, suffix: str, commands) -> list[Case]:
    contents = {
        "empty": b"",
        "text": b"this is not a model\n",
        "random_4k": np.random.default_rng(SEED).integers(0, 256, 4096).astype(np.uint8)
        .tobytes(),
        "tflite_identifier_then_garbage": b"\x18\x00\x00\x00TFL3" + b"\xff" * 64,
        "json_object": b"{}",
        "zeros_1k": bytes(1024),
    }
    cases = []
    for name, data in contents.items():
        def make(bases: Bases, d: Path, data=data) -> list[list[str]]:
            path = d / f"m{suffix}"
            path.write_bytes(data)
            return commands(path, d)
        cases.append(Case(family, name, REFUSED, make, fast=name in ("empty", "random_4k")))
    return cases
