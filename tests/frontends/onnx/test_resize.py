"""The ONNX Resize converter: what it imports (opsets 10-19, scales or sizes, axes) as
``image.resize2d``, and what it refuses with a reason instead of computing other numbers than
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import canonqnn
from canonqnn import _tvm
from canonqnn.errors import UnsupportedError
from canonqnn.frontends.onnx import load

F32 = np.float32


def resize_model(shape=(1, 2, 4, 6), *, scales=None, sizes=None, opset=19, quantized=None,
                 **attrs):
    """Resize of a float input (or, with ``quantized`` = "uint8"/"int8", of its quantized
    form: QuantizeLinear -> Resize -> DequantizeLinear)."""
    inits, ins = [], ["x", ""]
    if opset == 10:
        ins = ["x", "scales"]
    elif sizes is not None:
        ins += ["", "sizes"]
    else:
        ins += ["scales"]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, F32), "scales"))
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    if opset >= 11 and scales is None:
        ins[2] = "empty"  # exporters pass empty scales next to sizes
    if opset in (11, 12):
        ins[1] = "empty"  # roi is not optional before opset 13
    if "empty" in ins:
        inits.append(numpy_helper.from_array(np.zeros(0, F32), "empty"))
    nodes = [helper.make_node("Resize", ins, ["y"], **attrs)]
    if quantized:
        dt = np.uint8 if quantized == "uint8" else np.int8
        inits += [numpy_helper.from_array(np.array(0.05, F32), "s"),
                  numpy_helper.from_array(np.array(3, dt), "z")]
        nodes = ([helper.make_node("QuantizeLinear", ["X", "s", "z"], ["x"])]
                 + nodes + [helper.make_node("DequantizeLinear", ["y", "s", "z"], ["Y"])])
    else:
        nodes.append(helper.make_node("Identity", ["y"], ["Y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X" if quantized else "x", TensorProto.FLOAT,
                                                   list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def resize_calls(mod):
    return [b.value for block in mod["main"].body.blocks for b in block.bindings
            if _tvm.op_name(b.value) == "relax.image.resize2d"]


def only_resize(model):
    (call,) = resize_calls(load(model))
    attrs = _tvm.attrs_dict(call)
    return _tvm.shape_of(call)[2:], attrs


def test_scales_and_sizes_import_the_same_output_size():
    by_scales = only_resize(resize_model(scales=[1, 1, 2, 0.5], mode="linear"))
    by_sizes = only_resize(resize_model(sizes=[1, 2, 8, 3], mode="linear"))
    assert by_scales == by_sizes
    assert by_scales[0] == (8, 3) and by_scales[1]["method"] == "linear"


def test_opset18_axes_address_height_and_width_only():
    size, _ = only_resize(resize_model(scales=[2, 2], axes=[2, 3]))
    assert size == (8, 12)
    size, _ = only_resize(resize_model(sizes=[5, 9], axes=[-2, -1]))
    assert size == (5, 9)


def test_scale_that_is_not_out_over_in_is_refused_with_the_reason():
    # 1.5 * 5 -> 7 outputs, but onnxruntime's coordinates use 1.5, not 7/5
    with pytest.raises(UnsupportedError, match=r"scale 1.5 on axis 3 \(size 5 -> 7\)"):
        load(resize_model((1, 2, 4, 5), scales=[1, 1, 1, 1.5]))
    size, _ = only_resize(resize_model((1, 2, 4, 6), scales=[1, 1, 1, 1.5]))  # 9/6 is 1.5
    assert size == (4, 9)


def test_opset10_nearest_truncates_upsampling_and_ceils_downsampling():
    assert only_resize(resize_model(scales=[1, 1, 2, 2], opset=10))[1]["rounding_method"] == \
        "floor"
    assert only_resize(resize_model(scales=[1, 1, 0.5, 0.5], opset=10))[1]["rounding_method"] \
        == "ceil"
    with pytest.raises(UnsupportedError, match="upsamples one axis and downsamples"):
        load(resize_model(scales=[1, 1, 2, 0.5], opset=10))


@pytest.mark.parametrize("opset,attrs", [
    (10, dict(mode="nearest")),
    (11, dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn",
              nearest_mode="ceil")),
    (13, dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
])
def test_quantized_resize_models_match_onnxruntime(opset, attrs):
    model = resize_model((1, 2, 4, 6), scales=[1, 1, 2, 0.5] if opset > 10 else [1, 1, 2, 1.5],
                         opset=opset, quantized="uint8", **attrs)
    result = canonqnn.parity(model, runs=2)
    assert result.exact and result.canonical_ops == {"resize2d": 1}, result.summary()


@pytest.mark.parametrize("attrs,needle", [
    (dict(coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    (dict(coordinate_transformation_mode="half_pixel_symmetric"), "half_pixel_symmetric"),
    (dict(mode="linear", antialias=1), "antialias"),
    (dict(scales=None, sizes=[1, 2, 8, 12], keep_aspect_ratio_policy="not_larger"),
     "keep_aspect_ratio_policy"),  # (valid ONNX with sizes only)
    (dict(mode="area"), "mode 'area'"),
])
def test_unsupported_resize_attributes_are_refused(attrs, needle):
    with pytest.raises(UnsupportedError, match=needle):
        load(resize_model(**{"scales": [1, 1, 2, 2], **attrs}))


def test_resizing_batch_or_channels_and_other_ranks_are_refused():
    with pytest.raises(UnsupportedError, match="batch or channel"):
        load(resize_model(scales=[1, 2, 2, 2]))
    with pytest.raises(UnsupportedError, match="rank-3"):
        load(resize_model((1, 2, 4), scales=[1, 1, 2]))


def test_cubic_imports_in_float_but_not_on_quantized_data():
    assert only_resize(resize_model(scales=[1, 1, 2, 2], mode="cubic"))[1]["method"] == "cubic"
    with pytest.raises(UnsupportedError, match="cubic Resize of a quantized tensor"):
        load(resize_model(scales=[1, 1, 2, 2], mode="cubic", quantized="int8"))
