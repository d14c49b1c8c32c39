"""ONNX and TFLite models with one defect each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .artifacts import Bases, model_commands, onnx_conv, save_model, tflite_conv
from .case import ACCEPTED, EITHER, REFUSED, Case


def onnx_case(name: str, expect: str, edit: Callable[[onnx.ModelProto], object],
              fast: bool = False, parity: bool = True) -> Case:
    def make(bases: Bases, d: Path) -> list[list[str]]:
        model = onnx_conv()
        edited = edit(model)
        return model_commands(save_model(edited or model, d), d, parity=parity)
    return Case("onnx-model", name, expect, make, fast)


def _node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def _init(model, name):
    return next(t for t in model.graph.initializer if t.name == name)


def _set_init(model, name, value):
    init = _init(model, name)
    init.CopyFrom(numpy_helper.from_array(np.asarray(value, numpy_helper.to_array(init).dtype),
                                          name))


def _set_attr(model, node, name, value):
    n = _node(model, node)
    kept = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(kept + [helper.make_attribute(name, value)])


def _dims(model, which, dims):
    value = (model.graph.input if which == "input" else model.graph.output)[0]
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = d


def _two_writers(m):
    m.graph.node.insert(6, helper.make_node("Relu", ["c"], ["r"], name="relu_again"))


def _writes_input(m):
    _node(m, "relu").output[0] = "x"
    _node(m, "quant_y").input[0] = "x"


def _dup_init(m, same: bool):
    copy = onnx.TensorProto()
    copy.CopyFrom(_init(m, "y_s"))
    if not same:
        copy.CopyFrom(numpy_helper.from_array(np.array(0.3, np.float32), "y_s"))
    m.graph.initializer.append(copy)


def _opsets(m, imports):
    del m.opset_import[:]
    m.opset_import.extend(helper.make_opsetid(domain, v) for domain, v in imports)


def _sequence_input(m):
    m.graph.input[0].CopyFrom(helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT,
                                                                      [1, 4, 6, 6]))


def _undefined_input(m):
    m.graph.input[0].type.tensor_type.elem_type = 0


def _no_outputs(m):
    del m.graph.output[:]


def _extra_conv_input(m):
    _node(m, "conv").input.append("bf")


def _scale(name, value):
    return lambda m: _set_init(m, name, value)


def _zp_type(m):
    """An int8 zero point dequantizing the uint8-typed activations of another Q."""
    m.graph.initializer.append(numpy_helper.from_array(np.array(0, np.uint8), "u8_z"))
    _node(m, "dq_x").input[2] = "u8_z"


def _consistent_scales(x_s=None, w_s=None, y_s=None):
    """New input, weight or output scales, with the bias scale kept ``x_s * w_s`` (else the
    conv does not fold and stays float)."""
    def edit(m):
        read = lambda name: numpy_helper.to_array(_init(m, name))  # noqa: E731
        xs = np.float32(read("x_s") if x_s is None else x_s)
        ws = read("w_s") if w_s is None else np.full(8, w_s, np.float32)
        for name, value in (("x_s", xs), ("w_s", ws), ("y_s", y_s)):
            if value is not None:
                _set_init(m, name, value)
        with np.errstate(over="ignore"):
            _set_init(m, "b_s", (ws * xs).astype(np.float32))
    return edit


def _qlinearconv_zero_point_type(m):
    """The conv as one QLinearConv whose input x is uint8 and x_zero_point int8 (the schema's
    T1 binds both to one type)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z_i8"),
             numpy_helper.from_array(np.array(128, np.uint8), "z_u8"),
             numpy_helper.from_array(rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(0, np.int8), "w_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z_u8"], ["xq"], name="quant_x"),
             helper.make_node("QLinearConv", ["xq", "s", "z_i8", "w", "s", "w_z", "s", "z_u8"],
                              ["yq"], name="qconv", pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["yq", "s", "z_u8"], ["y"], name="dq_y")]
    del m.graph.node[:], m.graph.initializer[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.extend(inits)


def _float_chain(count: int):
    """``count`` float Relu nodes between the input's DequantizeLinear and the Conv: float
    pre-processing a real model keeps (each once cost 0.2-0.35 s of build time)."""
    def edit(m):
        names = ["xf"] + [f"pre{k}" for k in range(count)]
        at = [n.name for n in m.graph.node].index("dq_x") + 1
        for k in range(count):
            m.graph.node.insert(at + k, helper.make_node("Relu", [names[k]], [names[k + 1]],
                                                         name=f"pre_relu{k}"))
        _node(m, "conv").input[0] = names[-1]
    return edit


def onnx_cases() -> list[Case]:
    attr = lambda node, name, value: lambda m: _set_attr(m, node, name, value)  # noqa: E731
    dims = lambda which, d: lambda m: _dims(m, which, d)  # noqa: E731
    ir = lambda v: lambda m: setattr(m, "ir_version", v)  # noqa: E731
    cases = [
        onnx_case("valid", ACCEPTED, lambda m: None, fast=True),
        onnx_case("ir11", ACCEPTED, ir(11), parity=False),
        onnx_case("ir13", ACCEPTED, ir(13), fast=True, parity=False),
        onnx_case("ir2e40", REFUSED, ir(2 ** 40), fast=True),
        onnx_case("ir0", REFUSED, ir(0)),
        onnx_case("ssa_two_writers", REFUSED, _two_writers, fast=True),
        onnx_case("ssa_writes_graph_input", REFUSED, _writes_input),
        onnx_case("duplicate_initializer_same", REFUSED, lambda m: _dup_init(m, True)),
        onnx_case("duplicate_initializer_different", REFUSED, lambda m: _dup_init(m, False),
                  fast=True),
        onnx_case("two_default_opsets", REFUSED,
                  lambda m: _opsets(m, [("", 21), ("ai.onnx", 13)]), fast=True),
        onnx_case("no_default_opset", REFUSED, lambda m: _opsets(m, [("com.microsoft", 1)])),
        onnx_case("opset_999", REFUSED, lambda m: _opsets(m, [("", 999)])),
        onnx_case("input_dim_0", REFUSED, dims("input", [1, 4, 0, 6]), fast=True),
        onnx_case("input_dim_negative", REFUSED, dims("input", [1, 4, -6, 6])),
        onnx_case("input_dim_2e31", REFUSED, dims("input", [1, 4, 2 ** 31, 6])),
        onnx_case("input_dim_2e62", REFUSED, dims("input", [1, 4, 2 ** 62, 6]), fast=True),
        onnx_case("input_rank_wrong", REFUSED, dims("input", [1, 4, 6])),
        onnx_case("output_shape_contradicts", REFUSED, dims("output", [1, 8, 5, 5]), fast=True),
        onnx_case("output_rank_contradicts", REFUSED, dims("output", [1, 8, 36])),
        onnx_case("input_undefined_type", REFUSED, _undefined_input),
        onnx_case("input_sequence_type", REFUSED, _sequence_input, fast=True),
        onnx_case("no_outputs", REFUSED, _no_outputs, fast=True),
        onnx_case("conv_dilations_0", REFUSED, attr("conv", "dilations", [0, 0]), fast=True),
        onnx_case("conv_strides_0", REFUSED, attr("conv", "strides", [0, 1])),
        onnx_case("conv_strides_negative", REFUSED, attr("conv", "strides", [-1, 1])),
        onnx_case("conv_pads_negative", REFUSED, attr("conv", "pads", [-1, 1, 1, 1]), fast=True),
        onnx_case("conv_pads_huge", REFUSED, attr("conv", "pads", [2 ** 40, 1, 1, 1])),
        onnx_case("conv_pads_wrong_length", REFUSED, attr("conv", "pads", [1, 1])),
        onnx_case("conv_kernel_shape_contradicts", REFUSED, attr("conv", "kernel_shape", [5, 5])),
        onnx_case("conv_group_3", REFUSED, attr("conv", "group", 3)),
        onnx_case("conv_unknown_attribute", REFUSED, attr("conv", "speed", 11), fast=True),
        onnx_case("conv_extra_input", REFUSED, _extra_conv_input, fast=True),
        onnx_case("dq_axis_out_of_range", REFUSED, attr("dq_w", "axis", 4), fast=True),
        onnx_case("dq_axis_wraps", REFUSED, attr("dq_w", "axis", -5)),
        onnx_case("dq_axis_wrong_dim", REFUSED, attr("dq_w", "axis", 1)),
        onnx_case("zero_point_dtype_mismatch", REFUSED, _zp_type, fast=True),
        onnx_case("qlinearconv_zero_point_dtype_mismatch", REFUSED,
                  _qlinearconv_zero_point_type),
        onnx_case("float_relu_chain_300", ACCEPTED, _float_chain(300)),
        onnx_case("float_relu_chain_3000", ACCEPTED, _float_chain(3000), parity=False),
    ]
    for tensor in ("x_s", "y_s", "w_s"):
        for label, value in (("0", 0.0), ("negative", -0.05), ("nan", np.nan), ("inf", np.inf)):
            shape = (8,) if tensor == "w_s" else ()
            cases.append(onnx_case(f"scale_{tensor}_{label}", REFUSED,
                                   _scale(tensor, np.full(shape, value, np.float32)),
                                   fast=label == "nan"))
    # Extreme but finite scales: onnxruntime computes a defined result where every output is
    # the zero point, which the build matches. A requantization multiplier above 254.5
    # (qparams.saturating_multiplier) saturates every nonzero accumulator: refused, as is an
    # accumulator scale x_s * w_s that overflows float32. An input scale of 3e38 without its
    # bias scale leaves the conv float (it does not fold): it builds, or is refused.
    cases.append(onnx_case("scale_y_1e38", ACCEPTED, _scale("y_s", np.float32(1e38))))
    cases.append(onnx_case("scale_x_1e-38", ACCEPTED, _scale("x_s", np.float32(1e-38))))
    cases.append(onnx_case("scale_y_1e-38", REFUSED, _scale("y_s", np.float32(1e-38)),
                           fast=True))
    cases.append(onnx_case("scale_w_1e38", REFUSED, _consistent_scales(w_s=1e38)))
    cases.append(onnx_case("scale_y_requant_255", REFUSED,
                           _consistent_scales(x_s=0.5, w_s=0.5, y_s=np.float32(0.25 / 255))))
    cases.append(onnx_case("scale_y_requant_254", ACCEPTED,
                           _consistent_scales(x_s=0.5, w_s=0.5, y_s=np.float32(0.25 / 254))))
    cases.append(onnx_case("scale_x_3e38", EITHER, _scale("x_s", np.float32(3e38))))
    return cases


# ------------------------------------------------------------------ TFLite models


def tflite_case(name: str, expect: str, make_bytes: Callable[[], bytes], fast: bool = False) \
        -> Case:
    def make(bases: Bases, d: Path) -> list[list[str]]:
        path = d / "m.tflite"
        path.write_bytes(make_bytes())
        return model_commands(path, d)
    return Case("tflite-model", name, expect, make, fast)


def _patched_writer(attribute: str, replacement) -> Callable[[Callable[[], bytes]], bytes]:
    """Run ``write`` with one function of the writer's schema bindings replaced (how a field
    the writer never writes wrong gets a wrong value)."""
    from canonqnn.testing import tflite_writer as writer

    def run(write: Callable[[], bytes]) -> bytes:
        original = getattr(writer.tflite, attribute)
        setattr(writer.tflite, attribute, replacement(original))
        try:
            return write()
        finally:
            setattr(writer.tflite, attribute, original)
    return run


def _opcode_version(version: int) -> bytes:
    return _patched_writer("OperatorCodeAddVersion",
                           lambda f: lambda b, v: f(b, version))(tflite_conv)


def _schema_version(version: int) -> bytes:
    return _patched_writer("ModelAddVersion", lambda f: lambda b, v: f(b, version))(tflite_conv)


def _options_of_pool() -> bytes:
    from canonqnn.testing import tflite_writer as writer

    saved = writer.OPTIONS["CONV_2D"]
    writer.OPTIONS["CONV_2D"] = "Pool2DOptions"
    try:
        return tflite_conv(options=dict(padding="SAME", strideW=1, strideH=1, filterWidth=3,
                                        filterHeight=3, fusedActivationFunction="NONE"))
    finally:
        writer.OPTIONS["CONV_2D"] = saved


def _no_zero_points() -> bytes:
    return _patched_writer("QuantizationParametersAddZeroPoint",
                           lambda f: lambda b, v: None)(tflite_conv)


def _edited_conv(edit: Callable[[object, list[int], list[int]], tuple[list[int], list[int]]]) \
        -> bytes:
    """``tflite_conv()`` with ``edit(writer, inputs, outputs)`` applied when it writes (returns
    the graph inputs and outputs to write)."""
    from canonqnn.testing.tflite_writer import GraphWriter

    original = GraphWriter.finish

    def finish(self, inputs, outputs, *args, **kwargs):
        return original(self, *edit(self, list(inputs), list(outputs)), *args, **kwargs)
    GraphWriter.finish = finish
    try:
        return tflite_conv()
    finally:
        GraphWriter.finish = original


def _filter_zero_point(writer, inputs, outputs):
    w = writer.tensors[1]
    writer.tensors[1] = replace(w, zero_point=np.full(w.zero_point.shape, 5, np.int64))
    return inputs, outputs


def tflite_cases() -> list[Case]:
    cases = [
        tflite_case("valid", ACCEPTED, tflite_conv, fast=True),
        tflite_case("valid_uint8", ACCEPTED, lambda: tflite_conv("uint8")),
        tflite_case("graph_input_index_99", REFUSED, lambda: tflite_conv(graph_inputs=[99]),
                    fast=True),
        tflite_case("graph_input_index_negative", REFUSED,
                    lambda: tflite_conv(graph_inputs=[-2])),
        tflite_case("op_input_index_99", REFUSED, lambda: tflite_conv(op_inputs=[0, 99, 2])),
        tflite_case("op_missing_input", REFUSED, lambda: tflite_conv(op_inputs=[0])),
        tflite_case("uint8_zero_point_256", REFUSED, lambda: tflite_conv("uint8", in_zp=256),
                    fast=True),
        tflite_case("uint8_zero_point_negative", REFUSED, lambda: tflite_conv("uint8", out_zp=-1)),
        tflite_case("int8_zero_point_200", REFUSED, lambda: tflite_conv(out_zp=200)),
        tflite_case("output_scale_1e38", REFUSED, lambda: tflite_conv(out_scale=1e38), fast=True),
        tflite_case("input_scale_1e-40", REFUSED, lambda: tflite_conv(in_scale=1e-40)),
        tflite_case("opcode_version_99", REFUSED, lambda: _opcode_version(99), fast=True),
        tflite_case("schema_version_99", REFUSED, lambda: _schema_version(99)),
        tflite_case("options_of_another_table", REFUSED, _options_of_pool, fast=True),
        tflite_case("missing_zero_points", REFUSED, _no_zero_points),
        tflite_case("filter_zero_point_5", REFUSED, lambda: _edited_conv(_filter_zero_point),
                    fast=True),
        tflite_case("no_graph_outputs", REFUSED, lambda: _edited_conv(lambda w, i, o: (i, []))),
        tflite_case("output_scale_1e-8", REFUSED, lambda: tflite_conv(out_scale=1e-8)),
    ]
    for where, kwargs in (("input", "in_scale"), ("output", "out_scale"),
                          ("weight", "w_scale"), ("bias", "bias_scale")):
        for label, value in (("0", 0.0), ("nan", np.nan), ("inf", np.inf), ("negative", -1.0)):
            per = 8 if where in ("weight", "bias") else None
            v = np.full(per, value, np.float32) if per else value
            cases.append(tflite_case(f"{where}_scale_{label}", REFUSED,
                                     lambda k=kwargs, v=v: tflite_conv(**{k: v}),
                                     fast=(where, label) in (("bias", "0"), ("output", "nan"))))
    return cases
