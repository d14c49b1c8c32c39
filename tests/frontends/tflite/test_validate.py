"""What the TFLite reader refuses before anything uses a model (``validate``): indices, sizes,
shapes, quantization parameters, operator codes and options, damaged flatbuffers."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import tflite
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from _tflite import T, single_op
from canonqnn.errors import (
    CanonqnnError,
    InvalidModelError,
    InvalidQuantizationError,
    UnsupportedError,
)
from canonqnn.frontends.tflite import load, validate
from canonqnn.frontends.tflite.reader import read_model
from canonqnn.testing import tflite_writer as writer
from canonqnn.testing.tflite_writer import GraphWriter

CONV = dict(padding="SAME", strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1,
            fusedActivationFunction="NONE")


def conv(x_scale=0.05, w_scale=None, b_scale=None, y_scale=0.1, dtype="int8", x_zp=None,
         y_zp=None) -> bytes:
    """One CONV_2D: x (#0), per-channel weights w (#1), bias b (#2), y (#3)."""
    rng = np.random.default_rng(0)
    off = 128 if dtype == "uint8" else 0
    w_scale = np.full(4, 0.01, np.float32) if w_scale is None else np.asarray(w_scale)
    b_scale = np.float32(x_scale) * w_scale if b_scale is None else np.asarray(b_scale)
    return single_op("CONV_2D", [
        T((1, 5, 5, 3), dtype, x_scale, 3 + off if x_zp is None else x_zp),
        T((4, 3, 3, 3), "int8", w_scale, np.zeros(4, np.int64),
          rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)),
        T((4,), "int32", b_scale, np.zeros(4, np.int64),
          rng.integers(-99, 99, 4).astype(np.int32))],
        [T((1, 5, 5, 4), dtype, y_scale, -2 + off if y_zp is None else y_zp)], **CONV)


def add(y_scale=0.1) -> bytes:
    return single_op("ADD", [T((1, 4), "int8", 0.05, 0), T((1, 4), "int8", 0.05, 0)],
                     [T((1, 4), "int8", y_scale, 0)], fusedActivationFunction="NONE")


def graph(edit=None, **finish) -> bytes:
    """A two-operator int8 model (ADD, then RELU) with ``edit(g, tensors)`` applied to the
    writer before it writes."""
    g = GraphWriter()
    a, b, s, y = (g.tensor(n, (1, 4), "int8", scale=0.05, zero_point=0) for n in "absy")
    g.op("ADD", [a, b], [s], fusedActivationFunction="NONE")
    g.op("RELU", [s], [y])
    if edit is not None:
        edit(g, [a, b, s, y])
    return g.finish(finish.get("inputs", [a, b]), finish.get("outputs", [y]))


def refused(model: bytes, error: type, *words: str) -> str:
    with pytest.raises(error) as info:
        read_model(model)
    message = str(info.value)
    assert all(w in message for w in words), message
    return message


# ---------------------------------------------------------------- indices and sizes
@pytest.mark.parametrize("inputs, outputs, words", [
    ([0, 99], [3], ("graph input 1 is tensor index 99, out of range (4 tensors)",)),
    ([0, 1], [-1], ("graph output 0 is tensor index -1",)),
])
def test_graph_inputs_and_outputs_must_be_tensors(inputs, outputs, words):
    refused(graph(inputs=inputs, outputs=outputs), InvalidModelError, *words)


def test_a_model_without_graph_outputs_is_refused():
    refused(graph(outputs=[]), InvalidModelError,
            "subgraph 0 has no outputs: the model computes nothing")


@pytest.mark.parametrize("kind, count", [("CONV_2D", 1), ("CONV_2D", 2), ("ADD", 1),
                                         ("FULLY_CONNECTED", 1), ("TRANSPOSE_CONV", 2)])
def test_operators_take_the_number_of_inputs_the_interpreter_takes(kind, count):
    """Too few inputs: refused naming the count, as the interpreter refuses the model."""
    low, high = validate.INPUT_COUNTS[kind]
    takes = f"{low}" if low == high else f"{low} or {high}"
    x = T((1, 4, 4, 4), "int8", 0.05, 0)
    model = single_op(kind, [x] * count, [T((1, 4, 4, 4), "int8", 0.1, 0)])
    with pytest.raises((ValueError, RuntimeError)):  # (at load, or in the kernel's Prepare)
        Interpreter(model_content=model).allocate_tensors()
    refused(model, InvalidModelError,
            f"operator #0 ({kind}): {count} inputs; the TFLite interpreter's {kind} takes {takes}")


def test_operator_tensor_indices_are_in_range():
    def edit(g, t):
        g.operators[0] = ("ADD", [t[0], 99], [t[2]], g.operators[0][3])
    refused(graph(edit), InvalidModelError,
            "operator #0 (ADD): input 1 is tensor index 99, out of range (4 tensors)")

    def edit_output(g, t):
        g.operators[1] = ("RELU", [t[2]], [-1], {})
    refused(graph(edit_output), InvalidModelError, "operator #1 (RELU): output 0 is tensor "
            "index -1")


def test_an_omitted_input_is_refused_where_tflite_requires_one():
    refused(single_op("ADD", [T((1, 4), "int8", 0.05, 0), None], [T((1, 4), "int8", 0.1, 0)],
                      fusedActivationFunction="NONE"),
            InvalidModelError, "operator #0 (ADD): input 1 is omitted (-1), and is not an "
            "optional input of ADD")


def test_an_omitted_optional_input_is_read():
    model = single_op("FULLY_CONNECTED", [
        T((1, 3), "int8", 0.05, 0), T((2, 3), "int8", 0.01, 0, np.ones((2, 3), np.int8)), None],
        [T((1, 2), "int8", 0.1, 0)])
    assert read_model(model).operators[0].inputs[2] == -1


def _patched(monkeypatch, name: str, value):
    """The writer's schema binding ``name`` writes ``value`` (or calls ``value`` as it)."""
    original = getattr(tflite, name)
    monkeypatch.setattr(tflite, name, value(original) if callable(value) else
                        lambda b, _: original(b, value))


def test_opcode_index_must_name_an_operator_code(monkeypatch):
    _patched(monkeypatch, "OperatorAddOpcodeIndex", 5)
    refused(add(), InvalidModelError, "operator #0: opcode index 5 out of range (1 operator codes)")


def test_tensor_buffer_index_must_name_a_buffer(monkeypatch):
    _patched(monkeypatch, "TensorAddBuffer", 7)
    refused(add(), InvalidModelError, "tensor 'in0' (#0): buffer index 7 out of range (1 buffers)")


def test_constant_data_must_match_shape_and_dtype():
    def edit(g, t):
        g.tensor("k", (1, 4), "int8", np.ones((1, 4), np.int8), 0.05, 0)
        g.buffers[-1] = g.buffers[-1][:3]
    refused(graph(edit), InvalidModelError,
            "tensor 'k' (#4): constant data of 3 bytes; shape [1, 4] of int8 needs 4")


def test_a_variable_tensor_cannot_hold_data():
    def edit(g, t):
        g.tensor("state", (1, 4), "int8", np.ones((1, 4), np.int8), 0.05, 0)
        g.tensors[-1].is_variable = True
    refused(graph(edit), InvalidModelError, "tensor 'state' (#4): a variable tensor with "
            "constant data")


@pytest.mark.parametrize("shape, words", [
    ((1, -3, 4), "shape [1, -3, 4] has a negative dimension"),
    # 2^32 elements: TFLite's kernels count elements in an int32
    ((65536, 65536), "shape [65536, 65536] has 4294967296 elements"),
])
def test_shapes_must_be_non_negative_and_countable(shape, words):
    def edit(g, t):
        g.tensor("big", shape, "int8", scale=0.05, zero_point=0)
    refused(graph(edit), InvalidModelError, "tensor 'big' (#4): " + words)


# ---------------------------------------------------------------- damaged files
def test_truncated_files_are_invalid_models():
    data = conv()
    for end in range(0, len(data), 3):
        with pytest.raises(InvalidModelError):
            read_model(data[:end])


def test_root_table_offset_must_be_inside_the_file():
    data = bytearray(conv())
    data[:4] = (len(data) + 64).to_bytes(4, "little")
    refused(bytes(data), InvalidModelError, "root table offset")
    refused(b"\0\0\0\0TFL3" + bytes(8), InvalidModelError, "root table offset 0")
    refused(bytes(data[:4]) + b"XXXX" + bytes(data[8:]), InvalidModelError, "no TFL3 identifier")


def _bit_flipped(data: bytes, rng: np.random.Generator) -> bytes:
    """``data`` with 1-3 random bits flipped."""
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        out[int(rng.integers(len(out)))] ^= 1 << int(rng.integers(8))
    return bytes(out)


def test_bit_flipped_models_are_read_or_refused_with_a_named_error():
    """200 seeded flips of 1-3 random bits: reading raises a canonqnn error or gives a model
    that imports or is refused with one, never another exception (the flatbuffers library
    reads out of bounds with struct.error, IndexError, ...). A flip can leave a valid model, or
    a valid one with an unsupported feature (a float16 tensor, two subgraphs), so refusals
    other than InvalidModelError are legitimate; invalid quantization values get theirs."""
    base = conv()
    rng = np.random.default_rng(20261126)
    outcomes = {"read": 0, "refused": 0}
    for _ in range(200):
        data = _bit_flipped(base, rng)
        try:
            read_model(data)
        except (InvalidModelError, InvalidQuantizationError, UnsupportedError):
            outcomes["refused"] += 1
            continue
        outcomes["read"] += 1
        with contextlib.suppress(CanonqnnError):
            load(data)
    assert min(outcomes.values()) > 20, outcomes  # both outcomes are exercised


def test_damaged_flatbuffers_are_refused_in_canonqnns_words():
    """The flatbuffers library's own messages ("bad number -15944 for type uint32", "buffer is
    smaller than requested size") and exception names stay out of the refusal."""
    base = conv()
    rng = np.random.default_rng(5)
    damaged = []
    for _ in range(300):
        try:
            read_model(_bit_flipped(base, rng))
        except CanonqnnError as exc:
            if "the flatbuffer is damaged" in str(exc):
                damaged.append(str(exc))
    assert len(damaged) > 5
    for message in damaged:
        assert not re.search(r"\w+Error\b|bad number|requested size", message), message
        assert re.search(r"damaged: (an offset|a vector|a length|a field)", message), message


# ---------------------------------------------------------------- quantization parameters
@pytest.mark.parametrize("value", [0.0, -0.5, np.nan, np.inf])
@pytest.mark.parametrize("tensor, label", [("x_scale", "'in0' (#0)"), ("y_scale", "'out0' (#3)"),
                                           ("w_scale", "'in1' (#1)"), ("b_scale", "'in2' (#2)")])
def test_scales_must_be_finite_and_positive(tensor, label, value):
    scale = value if tensor in ("x_scale", "y_scale") else np.full(4, value, np.float32)
    refused(conv(**{tensor: scale}), InvalidQuantizationError,
            f"tensor {label}: scale {float(np.float32(value))!r} is not a finite positive number")


@pytest.mark.parametrize("dtype, zp, words", [
    ("uint8", 256, "tensor 'in0' (#0): zero point 256 outside the uint8 range [0, 255]"),
    ("uint8", -1, "tensor 'in0' (#0): zero point -1 outside the uint8 range [0, 255]"),
    ("int8", 200, "tensor 'in0' (#0): zero point 200 outside the int8 range [-128, 127]"),
])
def test_zero_points_must_be_in_the_range_of_the_dtype(dtype, zp, words):
    refused(conv(dtype=dtype, x_zp=zp), InvalidQuantizationError, words)


def test_uint8_zero_points_at_the_ends_of_the_range_are_read():
    m = read_model(conv(dtype="uint8", x_zp=0, y_zp=255))
    assert (int(m.tensors[0].zero_point[0]), int(m.tensors[3].zero_point[0])) == (0, 255)


def test_scales_need_zero_points_one_each(monkeypatch):
    def fewer_zero_points(g, t):
        g.tensors[0].zero_point = np.zeros(2, np.int64)
        g.tensors[0].scale = np.full(4, 0.05, np.float32)
    refused(graph(fewer_zero_points), InvalidQuantizationError,
            "tensor 'a' (#0): 4 scales and 2 zero points")
    _patched(monkeypatch, "QuantizationParametersAddZeroPoint", lambda f: lambda b, v: None)
    refused(add(), InvalidQuantizationError, "tensor 'in0' (#0): 1 scales and no zero point")


@pytest.mark.parametrize("scales, axis, words", [
    (4, 4, "quantized_dimension 4 out of range for shape [4, 3, 3, 3]"),
    (4, -1, "quantized_dimension -1 out of range"),
    (3, 0, "3 scales along dimension 0 of shape [4, 3, 3, 3]"),
])
def test_per_channel_scales_follow_the_quantized_dimension(scales, axis, words):
    def edit(g, t):
        g.tensor("w", (4, 3, 3, 3), "int8", np.ones((4, 3, 3, 3), np.int8),
                 np.full(scales, 0.01, np.float32), np.zeros(scales, np.int64), axis)
    refused(graph(edit), InvalidQuantizationError, "tensor 'w' (#4): " + words)


@pytest.mark.parametrize("model, words", [
    # in * w / out = 5e-4 / 1e38: below float32's normal range (every output the zero point)
    (lambda: conv(y_scale=1e38), "operator #0 (CONV_2D): requantization multiplier 5e-42"),
    (lambda: conv(x_scale=1e-40), "below float32's normal range"),
    # 5e-4 / 1e-38 = 5e34: every nonzero accumulator saturates (and TFLite would shift it
    # left by 116 bits)
    (lambda: conv(y_scale=1e-38), "operator #0 (CONV_2D): requantization multiplier 5e+34 "
                                  "(from the scales) is above 254.5"),
    # MUL: 0.05 * 0.05 / 1e-38: a shift of 118 bits
    (lambda: single_op("MUL", [T((1, 4), "int8", 0.05, 0), T((1, 4), "int8", 0.05, 0)],
                       [T((1, 4), "int8", 1e-38, 0)], fusedActivationFunction="NONE"),
     "operator #0 (MUL): the scales make a requantization multiplier of 2^117 or more"),
    # TFLite computes 2^20 * out_scale in float32: inf, and the interpreter aborts
    (lambda: add(y_scale=1e38), "operator #0 (ADD): TFLite's ADD/SUB computes 2 * max(a_scale, "
                                "b_scale) and 2^20 * out_scale in float32, and they overflow it"),
])
def test_scales_whose_multipliers_leave_float32_range_are_refused(model, words):
    refused(model(), InvalidQuantizationError, words)


@pytest.mark.parametrize("y_scale, dtype, saturates", [
    # in * w = 5e-4: a multiplier of 254 leaves acc = 1 below the top from a zero point at the
    # bottom; from 255 on, every nonzero accumulator gives an end of the range
    (5e-4 / 254, "int8", False), (5e-4 / 255, "int8", True), (1e-8, "int8", True),
    (5e-4 / 255, "uint8", True),
])
def test_accumulator_multipliers_that_saturate_every_output_are_refused(y_scale, dtype,
                                                                        saturates):
    model = conv(y_scale=np.float32(y_scale), dtype=dtype)
    if not saturates:
        read_model(model)
        return
    refused(model, InvalidQuantizationError, "operator #0 (CONV_2D): requantization multiplier",
            f"is above 254.5: every nonzero accumulator saturates the {dtype} output")


def _reference_interpreter(model: bytes) -> Interpreter:
    """The interpreter with its reference kernels (the specification: the XNNPACK delegate
    refuses more)."""
    return Interpreter(model_content=model,
                       experimental_op_resolver_type=OpResolverType.BUILTIN_REF)


def _conv_with_filter_zero_point(zp, dtype="int8", channels=4, kind="CONV_2D") -> bytes:
    rng = np.random.default_rng(0)
    w_scale = np.full(channels, 0.01, np.float32)
    zps = np.full(channels, 0, np.int64)
    zps[-1] = zp
    acc, act_zp = ("int64", 0) if dtype == "int16" else ("int32", 3)
    w_shape = (1, 3, 3, 4) if kind == "DEPTHWISE_CONV_2D" else (4, 3, 3, 4)
    options = dict(CONV, depthMultiplier=1) if kind == "DEPTHWISE_CONV_2D" else CONV
    return single_op(kind, [
        T((1, 5, 5, 4), dtype, 0.05, act_zp),
        T(w_shape, "int8", w_scale, zps, rng.integers(-127, 128, w_shape).astype(np.int8),
          3 if kind == "DEPTHWISE_CONV_2D" else 0),
        T((4,), acc, np.float32(0.05) * np.full(4, 0.01, np.float32), np.zeros(4, np.int64),
          np.zeros(4, acc))], [T((1, 5, 5, 4), dtype, 0.1, act_zp)], **options)


@pytest.mark.parametrize("dtype, channels", [("int8", 4), ("int8", 1), ("int16", 4)])
def test_conv_filter_zero_points_must_be_0(dtype, channels):
    """The interpreter's CONV_2D refuses an int8 filter with a zero point other than 0 (int8 and
    16x8 layers, per channel or per tensor): so does the reader, naming the filter."""
    model = _conv_with_filter_zero_point(5, dtype, channels)
    with pytest.raises(RuntimeError, match="zero_point"):
        _reference_interpreter(model).allocate_tensors()
    where = " (channel 3)" if channels > 1 else ""
    refused(model, InvalidQuantizationError,
            f"operator #0 (CONV_2D): filter tensor 'in1' (#1) has zero point 5{where}; TFLite's "
            "int8 filters are symmetric and the interpreter's CONV_2D takes zero point 0")


def test_filter_zero_points_the_interpreter_ignores_are_refused():
    """DEPTHWISE_CONV_2D loads with a nonzero int8 filter zero point, and its kernels ignore
    it: built as its parameters say, the model would differ from every TFLite runtime."""
    model = _conv_with_filter_zero_point(5, kind="DEPTHWISE_CONV_2D")
    _reference_interpreter(model).allocate_tensors()
    refused(model, InvalidQuantizationError,
            "operator #0 (DEPTHWISE_CONV_2D): filter tensor 'in1' (#1) has zero point 5 (channel "
            "3); TFLite's int8 filters are symmetric and the interpreter's DEPTHWISE_CONV_2D "
            "ignores any other than zero point 0")


def test_a_filter_zero_point_of_0_is_read():
    model = _conv_with_filter_zero_point(0)
    _reference_interpreter(model).allocate_tensors()
    read_model(model)


# ---------------------------------------------------------------- codes, versions, options
def test_schema_version_must_be_3(monkeypatch):
    _patched(monkeypatch, "ModelAddVersion", 2)
    refused(add(), InvalidModelError, "schema version 2: TFLite models are schema version 3")


def test_operator_versions_beyond_the_runtimes_are_refused(monkeypatch):
    _patched(monkeypatch, "OperatorCodeAddVersion", 99)
    refused(conv(), InvalidModelError,
            "operator #0 (CONV_2D): version 99; the TFLite runtime defines CONV_2D versions 1..8")


def test_operator_version_table_is_the_interpreters():
    """Each operator canonqnn converts at its highest version in ``MAX_VERSIONS`` is one the
    interpreter finds a kernel for, and the next version is not."""
    def found(kind: str, version: int) -> bool:
        g = GraphWriter()
        x, y = g.tensor("x", (1, 4), "float32"), g.tensor("y", (1, 4), "float32")
        g.op(kind, [x], [y])
        original = tflite.OperatorCodeAddVersion
        tflite.OperatorCodeAddVersion = lambda b, _: original(b, version)
        try:
            data = g.finish([x], [y])
        finally:
            tflite.OperatorCodeAddVersion = original
        try:
            Interpreter(model_content=data)
        except ValueError as exc:
            assert "Didn't find op" in str(exc), exc
            return False
        return True

    wrong = {kind: top for kind, top in validate.MAX_VERSIONS.items()
             if not found(kind, top) or found(kind, top + 1)}
    assert not wrong


def test_unknown_builtin_codes_are_refused(monkeypatch):
    _patched(monkeypatch, "OperatorCodeAddBuiltinCode", 250)
    refused(add(), InvalidModelError, "operator #0: builtin code 250 is not a TFLite operator")


def test_options_must_be_the_operators_table(monkeypatch):
    with monkeypatch.context() as patch:  # (the reader's table too: undone before reading)
        patch.setitem(writer.OPTIONS, "CONV_2D", "Pool2DOptions")
        model = single_op("CONV_2D", [
            T((1, 4, 4, 1), "int8", 0.05, 0),
            T((1, 1, 1, 1), "int8", 0.01, 0, np.ones((1, 1, 1, 1), np.int8)),
            T((1,), "int32", 0.0005, 0, np.zeros(1, np.int32))],
            [T((1, 4, 4, 1), "int8", 0.1, 0)], padding="SAME", strideH=1, strideW=1,
            filterHeight=1, filterWidth=1)
    refused(model, InvalidModelError,
            "operator #0 (CONV_2D): builtin options are Pool2DOptions; CONV_2D takes "
            "Conv2DOptions")


def test_strides_must_be_positive():
    model = single_op("MAX_POOL_2D", [T((1, 4, 4, 1), "int8", 0.05, 0)],
                      [T((1, 4, 4, 1), "int8", 0.05, 0)], padding="SAME", strideH=0, strideW=1,
                      filterHeight=2, filterWidth=2)
    refused(model, InvalidModelError, "operator #0 (MAX_POOL_2D): stride_h 0 (at least 1)")


def test_version_table_names_every_operator_canonqnn_converts():
    from canonqnn.frontends.tflite import _fold, importer  # noqa: F401  (registers converters)
    from canonqnn.frontends.tflite._context import CONVERTERS

    # SHAPE: folded by the importer itself
    assert set(validate.MAX_VERSIONS) == set(CONVERTERS) | set(_fold.FOLDERS) | {"SHAPE"}
