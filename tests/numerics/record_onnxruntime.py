"""Record onnxruntime's outputs of small models whose result depends on the host class.

    python tests/numerics/record_onnxruntime.py DIR [--machine TEXT] [--rpc HOST:PORT]

writes ``DIR/<case>.<profile>.npz``: the ONNX model, its inputs and onnxruntime's outputs (as
parity runs it, ``canonqnn.frontends.onnx.oracle.ort_session``), the numerics profile this
onnxruntime was probed to follow, and where it ran. The files in ``fixtures/`` were recorded
on an AMD EPYC Zen 4 (AVX512-VNNI) both natively and under ``qemu-x86_64 -cpu Haswell``
(QEMU's user-mode emulator of an AVX2 CPU without VNNI, Debian package qemu-user), so that tests
on either host class pin both profiles: see test_recorded_profiles.py. With ``--rpc`` the
cases run on a device, by the onnxruntime there (canonqnn's device server, docs/devices.md): the
ARM64 files were recorded so on the emulated Neoverse N1 of ``tools/arm-device``. The
QLinearAdd / QLinearMul cases (``--cases``), whose arithmetic is the same on both x86 classes
and differs on ARM64, were recorded on x86 on an AMD EPYC Zen 3 (AVX2) only.
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _onnx_chains import attention_scores, extreme_inputs  # noqa: E402
from canonqnn.frontends.onnx import oracle, runtime  # noqa: E402
from canonqnn.frontends.onnx.oracle import ort_session  # noqa: E402


def matmul_integer_u8s8():
    """MatMulInteger of uint8 A [2, 5, 20] and a runtime int8 B [2, 20, 6], zero points 7 / -3."""
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "za", "zb"], ["Y"])], "g",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [2, 5, 20]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [2, 20, 6])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [2, 5, 6])],
        [helper.make_tensor("za", TensorProto.UINT8, [], [7]),
         helper.make_tensor("zb", TensorProto.INT8, [], [-3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    rng = np.random.default_rng(4)
    feeds = [{"A": rng.choice(np.array([0, 255, 250], np.uint8), (2, 5, 20)),
              "B": rng.choice(np.array([-128, 127, 120], np.int8), (2, 20, 6))},
             {"A": rng.integers(0, 256, (2, 5, 20)).astype(np.uint8),
              "B": rng.integers(-128, 128, (2, 20, 6)).astype(np.int8)}]
    return model, feeds


def attention_u8s8():
    """QDQ Q x K^T of uint8 queries and int8 keys, both runtime tensors."""
    rng = np.random.default_rng(3)
    random = {"A": rng.integers(0, 256, (2, 3, 6, 16)).astype(np.uint8),
              "B": rng.integers(-128, 128, (2, 3, 6, 16)).astype(np.int8)}
    feeds = [extreme_inputs(np.uint8, np.int8, s) for s in (1, 2)] + [random]
    return attention_scores(np.uint8, np.int8), feeds


# (a_scale, a_zp, b_scale, b_zp, out_scale, out_zp) of int8 models where onnxruntime's x86 and
# AArch64 QLinearAdd differ (uint8 models: zero points + 128): ties of ratios 1/2, ratios 1/2 and
# 3/2, extreme zero points, and three the AArch64 kernel computes in float (a ratio of 300; both
# below 2^-10; a ratio whose multiplier rounds up to 2^22)
QLINEAR_ADD = [(0.05, 0, 0.05, 0, 0.1, 0), (0.025, -10, 0.075, 20, 0.05, -1),
               (0.007, 127, 0.003, -128, 0.004, -128), (6.0, 0, 0.05, 0, 0.02, 0),
               (1e-4, 3, 1.2e-4, -5, 0.1, 2),
               (float(np.nextafter(np.float32(2.0), np.float32(0))), 0, 0.5, 0, 1.0, 0)]
# ... and QLinearMul (its x86 kernel rounds the product before adding the zero point)
QLINEAR_MUL = [(0.02, 10, 0.013, -20, 0.045, -7), (0.0039, -128, 0.0039, -128, 0.0039, -128),
               (0.1, -128, 0.1, -128, 0.02, -128), (0.3, 0, 0.3, 0, 0.9, 0)]


def qlinear_add_mul(dtype):
    """QLinearAdd and QLinearMul (com.microsoft) of every pair of ``dtype`` codes, in both
    broadcast layouts (A the scalar of each span, and B), one node per parameter set."""
    from onnx import numpy_helper

    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    shift = 128 if dtype == np.uint8 else 0
    nodes, inits, outputs = [], [], []
    for op, sets in (("QLinearAdd", QLINEAR_ADD), ("QLinearMul", QLINEAR_MUL)):
        for k, params in enumerate(sets):
            names = []
            for i, value in enumerate(params):
                name = f"{op}{k}_{i}"
                names.append(name)
                inits.append(numpy_helper.from_array(
                    np.array(value, np.float32) if i % 2 == 0 else
                    np.array(value + shift, dtype), name))
            for a, b in (("A", "B"), ("B", "A")):
                out = f"{op}{k}_{a}{b}"
                nodes.append(helper.make_node(op, [a, *names[:2], b, *names[2:4], *names[4:]],
                                              [out], domain="com.microsoft"))
                outputs.append(helper.make_tensor_value_info(out, elem, [256, 256]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", elem, [256, 1]),
                                           helper.make_tensor_value_info("B", elem, [1, 256])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    codes = np.arange(256) - 128 + shift
    return model, [{"A": codes.astype(dtype).reshape(256, 1),
                    "B": codes.astype(dtype).reshape(1, 256)}]


# (x_scale, x_zp, y_scale, y_zp) of int8 tables (uint8: zero points + 128): typical ones, and
# one whose input code 0 dequantizes to 17.482065, where MLAS's x86 logistic gives 1.0000001
# and its AArch64 one 1.0, quantized apart by the output scale
TABLES = {"Sigmoid": [(0.05, 3, 1 / 256, -128), (0.13657863438129425, -128, 0.007662835065275431,
                                                  -128)],
          "Tanh": [(0.031, -5, 1 / 128, 0), (0.09, 20, 0.0075, 2)],
          "LeakyRelu": [(0.05, 3, 0.02, -40), (0.11, -7, 0.07, 11)]}


def qdq_tables(dtype):
    """DequantizeLinear -> Sigmoid / Tanh / LeakyRelu (alpha 0.1) -> QuantizeLinear of every
    ``dtype`` code, one chain per parameter set: what canonqnn makes lookup tables of."""
    from onnx import numpy_helper

    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    shift = 128 if dtype == np.uint8 else 0
    nodes, inits, outputs = [], [], []
    for op, sets in TABLES.items():
        for k, (sx, zx, sy, zy) in enumerate(sets):
            p = f"{op}{k}"
            inits += [numpy_helper.from_array(np.array(sx, np.float32), f"{p}_sx"),
                      numpy_helper.from_array(np.array(zx + shift, dtype), f"{p}_zx"),
                      numpy_helper.from_array(np.array(sy, np.float32), f"{p}_sy"),
                      numpy_helper.from_array(np.array(zy + shift, dtype), f"{p}_zy")]
            nodes += [helper.make_node("DequantizeLinear", ["X", f"{p}_sx", f"{p}_zx"], [f"{p}_x"]),
                      helper.make_node(op, [f"{p}_x"], [f"{p}_f"],
                                       **({"alpha": 0.1} if op == "LeakyRelu" else {})),
                      helper.make_node("QuantizeLinear", [f"{p}_f", f"{p}_sy", f"{p}_zy"], [p])]
            outputs.append(helper.make_tensor_value_info(p, elem, [256]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", elem, [256])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model, [{"X": (np.arange(256) - 128 + shift).astype(dtype)}]


def qdq_resize():
    """DequantizeLinear -> Resize (linear, half_pixel, 8x8 -> 16x16 and 8x8 -> 12x20) ->
    QuantizeLinear of random int8 codes: onnxruntime's float bilinear Resize."""
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(np.array(0.0186, np.float32), "s"),
             numpy_helper.from_array(np.array(-105, np.int8), "z"),
             numpy_helper.from_array(np.array(0.0193, np.float32), "s2"),
             numpy_helper.from_array(np.array(7, np.int8), "z2"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up"),
             numpy_helper.from_array(np.array([1, 4, 12, 20], np.int64), "size")]
    nodes = [helper.make_node("DequantizeLinear", ["X", "s", "z"], ["x"]),
             helper.make_node("Resize", ["x", "", "up"], ["r"], mode="linear",
                              coordinate_transformation_mode="half_pixel"),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["Y"]),
             helper.make_node("Resize", ["x", "", "", "size"], ["r2"], mode="linear",
                              coordinate_transformation_mode="half_pixel"),
             helper.make_node("QuantizeLinear", ["r2", "s2", "z2"], ["Y2"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.INT8, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("Y", TensorProto.INT8, [1, 4, 16, 16]),
         helper.make_tensor_value_info("Y2", TensorProto.INT8, [1, 4, 12, 20])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    rng = np.random.default_rng(5)
    return model, [{"X": rng.integers(-128, 128, (1, 4, 8, 8)).astype(np.int8)}
                   for _ in range(3)]


CASES = {"matmul_integer_u8s8": matmul_integer_u8s8, "attention_u8s8": attention_u8s8,
         "qdq_resize_s8": qdq_resize,
         "qdq_tables_s8": lambda: qdq_tables(np.int8),
         "qdq_tables_u8": lambda: qdq_tables(np.uint8),
         "qlinear_add_mul_s8": lambda: qlinear_add_mul(np.int8),
         "qlinear_add_mul_u8": lambda: qlinear_add_mul(np.uint8)}


def record(out_dir: pathlib.Path, machine: str, device=None,
           cases: list[str] | None = None) -> list[pathlib.Path]:
    profile = runtime.profile() if device is None else oracle.device_profile(device)
    written = []
    for name in cases or CASES:
        make = CASES[name]
        model, feeds = make()
        run, described = _runner(model, device)
        arrays = {"model": np.frombuffer(model.SerializeToString(), np.uint8),
                  "profile": np.array(profile.name), "machine": np.array(machine)}
        for k, feed in enumerate(feeds):
            outputs = run(feed)
            arrays.update({f"input/{k}/{n}": v for n, v in feed.items()})
            arrays.update({f"output/{k}/{o.name}": v
                           for o, v in zip(model.graph.output, outputs)})
        arrays["onnxruntime"] = np.array(described())
        path = out_dir / f"{name}.{profile.name}.npz"
        np.savez_compressed(path, **arrays)
        written.append(path)
    return written


def _runner(model, device):
    """``run(feed)`` giving the model's outputs by onnxruntime as parity runs it, here or on
    ``device``, and ``described()``: its version and settings."""
    import onnxruntime

    names = [o.name for o in model.graph.output]
    if device is None:
        session, settings = ort_session(model)
        return (lambda feed: session.run(names, feed)), \
            (lambda: f"{onnxruntime.__version__}, {settings}")
    said = []

    def run(feed):
        *outputs, description = oracle.run_on_device(device, model.SerializeToString(), feed,
                                                     names, runtime.ORT_CONFIGS, None)
        said.append(description)
        return outputs

    return run, lambda: said[-1]


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("dir", type=pathlib.Path)
    args.add_argument("--machine", default=platform.processor() or platform.machine(),
                      help="where this runs, as the fixture should name it")
    args.add_argument("--rpc", metavar="HOST:PORT[:KEY]", help="run the cases on this device")
    args.add_argument("--cases", help="comma-separated cases to record (default: all of "
                                      f"{', '.join(CASES)})")
    ns = args.parse_args()
    ns.dir.mkdir(parents=True, exist_ok=True)
    device = None
    if ns.rpc:
        from canonqnn.build import remote

        device = remote.connect(ns.rpc)
    for path in record(ns.dir, ns.machine, device, ns.cases.split(",") if ns.cases else None):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
