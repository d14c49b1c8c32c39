"""The worked backend of examples/npu_backend.py runs end to end and stays bit-exact.

The example partitions canonical modules for a toy NPU (conv2d, depthwise, dense, add, conv
with a lookup-table epilogue), runs the claimed functions through its numpy device registered
as the external codegen's runtime, and compares the whole with the source runtime.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "npu_backend.py"


@pytest.fixture(scope="module")
def npu():
    spec = importlib.util.spec_from_file_location("npu_backend", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_mobilenet_v3_offloads_convs_with_lut_epilogues_and_matches_onnxruntime(npu):
    result = npu.run("onnx", "mobilenet_v3", runs=2)
    assert result["same"] == result["total"] > 8000
    part = result["partition"]
    offloaded = [c for r in part.regions if r.offloaded for c in r.composites]
    assert {"npu.conv2d", "npu.depthwise_conv2d", "npu.conv2d_lut", "npu.add",
            "npu.dense"} <= set(offloaded)
    # the squeeze-excite multiplies and the pools are not NPU layers
    host = part.ops(False)
    assert "canonqnn.mul" in host and "canonqnn.global_avg_pool2d" in host
    assert not {"canonqnn.conv2d", "canonqnn.matmul"} & set(host)
    assert result["device_commands"] == len(offloaded)


def test_mobilenet_v1_keeps_the_bias_add_with_a_constant_operand_on_the_host(npu):
    result = npu.run("onnx", "mobilenet_v1", runs=2)
    assert result["same"] == result["total"] == 20
    assert result["rejected"] == {"add: constant operand": 1}
    counts = result["partition"].counts()
    assert counts["offloaded"] == 10  # 5 convs, 4 depthwise, the dense layer
    assert counts["host_canonical"] == 3  # pool, reshape, the bias add


def test_tflite_model_offloads_under_q31_double_and_falls_back_without_it(npu):
    claimed = npu.run("tflite", "mobilenet_v1", runs=1)
    assert claimed["same"] == claimed["total"]
    assert claimed["partition"].counts()["offloaded"] == 28
    host_only = npu.run("tflite", "mobilenet_v1", runs=1, roundings=("rne_f32",))
    assert host_only["same"] == host_only["total"]
    assert host_only["partition"].counts()["offloaded"] == 0
    assert host_only["rejected"] == {"conv2d: rounding q31_double": 28}


def test_the_npu_rejects_asymmetric_weights_and_dilation(npu):
    import numpy as np

    from canonqnn.patterns import OpParams, Quant, WeightQuant

    def conv(**changes):
        fields = dict(op="conv2d", inputs=(Quant(0.1, 0),), output=Quant(0.1, 0),
                      weight=WeightQuant(np.ones(4, np.float32), np.zeros(4, np.int32), True),
                      clamp=(-128, 127), rounding="rne_f32", layout="NCHW",
                      weight_layout="OIHW", input_shapes=((1, 4, 8, 8),),
                      output_shape=(1, 4, 8, 8), output_dtype="int8",
                      attrs={"groups": 1, "dilation": [1, 1]},
                      constants={"w": np.zeros((4, 4, 3, 3), np.int8),
                                 "bias": np.zeros(4, np.int32)})
        fields.update(changes)
        return OpParams(**fields)

    assert npu.rejection(conv()) is None
    assert npu.rejection(conv(weight=WeightQuant(np.ones(4, np.float32),
                                                 np.array([0, 1, 0, 0], np.int32), True))) \
        == "weight zero points"
    assert npu.rejection(conv(attrs={"groups": 1, "dilation": [2, 2]})) == "dilation"
    assert npu.rejection(conv(rounding="q31_single")) == "rounding q31_single"
    assert npu.rejection(conv(output_dtype="int32")) == "int32 output"
    assert npu.rejection(conv(constants={"bias": np.zeros(4, np.int32)})) \
        == "runtime weights or bias"
