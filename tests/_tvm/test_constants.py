"""``_tvm.const``: a copy of the value in a tensor TVM allocates (64-byte aligned, as its own
allocations are), with no numpy array kept alive beside it; within ``_tvm.converting``, small
constants shared, shapes read once, the cyclic collector paused and no cycle left for it."""

from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np
import pytest

from canonqnn import _tvm

VALUES = [np.asarray(np.float32(0.05)), np.arange(24, dtype=np.int8).reshape(2, 3, 4),
          np.arange(6, dtype=">i4").reshape(2, 3), np.arange(12.0).reshape(3, 4)[:, ::2],
          np.asarray(np.uint8(200)), np.arange(5, dtype=np.float16), np.arange(3, dtype=np.int64),
          np.array([True, False]), np.zeros((0, 3), np.int32)]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{v.dtype.str}{list(v.shape)}")
def test_const_holds_a_copy_of_the_value(value):
    source = value.copy()
    c = _tvm.const(source)
    source[...] = 0  # the constant does not share the caller's memory
    got = _tvm.const_value(c)
    assert got.dtype == value.dtype.newbyteorder("=") and got.shape == value.shape
    np.testing.assert_array_equal(got, value)
    assert _tvm.dtype_of(c) == str(got.dtype) and _tvm.shape_of(c) == value.shape


@pytest.mark.parametrize("value", [v for v in VALUES if v.size and v.dtype.kind != "b"],
                         ids=lambda v: f"{v.dtype.str}{list(v.shape)}")
def test_const_data_is_64_byte_aligned(value):
    assert np.from_dlpack(_tvm.const(value).value).ctypes.data % 64 == 0


def test_constants_keep_no_numpy_buffer_alive():
    values = [np.full((8, 8, 3, 3), i % 100, np.int8) for i in range(200)]
    values += [np.asarray(np.float32(i)) for i in range(200)]
    tracemalloc.start()
    try:
        consts = [_tvm.const(v) for v in values]
        numpy_alive = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    finally:
        tracemalloc.stop()
    assert sum(s.size for s in numpy_alive.statistics("filename")) == 0
    assert all(np.array_equal(_tvm.const_value(c), v) for c, v in zip(consts, values))


def test_const_value_is_a_copy_the_caller_may_change():
    c = _tvm.const(np.arange(4, dtype=np.int32))
    got = _tvm.const_value(c)
    got[...] = 7
    np.testing.assert_array_equal(_tvm.const_value(c), np.arange(4, dtype=np.int32))


def test_equal_small_constants_are_one_object_within_a_conversion():
    with _tvm.converting():
        a = _tvm.const(np.float32(0.05))
        assert _tvm.const(np.asarray(0.05, np.float32)) is a
        assert _tvm.const(np.float32(0.06)) is not a  # another value
        assert _tvm.const(np.asarray([0.05], np.float32)) is not a  # another shape
        assert _tvm.const(np.float64(0.05)) is not a  # another dtype
        with _tvm.converting():  # a nested scope shares the outer one's
            assert _tvm.const(np.float32(0.05)) is a
        big = np.zeros(_tvm.SHARED_CONST_MAX + 1, np.int8)
        assert _tvm.const(big) is not _tvm.const(big)  # weights are never shared
    assert _tvm.const(np.float32(0.05)) is not a  # outside a conversion: a new constant


def test_shapes_read_within_a_conversion_are_the_expressions_own():
    x = _tvm.Var("x", _tvm.tensor_type((2, 3), "float32"))
    y = _tvm.Var("y", _tvm.tensor_type((4,), "int8"))
    with _tvm.converting():
        assert [_tvm.shape_of(x), _tvm.shape_of(y), _tvm.shape_of(x)] == [(2, 3), (4,), (2, 3)]


def test_a_conversion_pauses_the_cyclic_collector_and_leaves_no_cycles():
    import gc

    import canonqnn
    from canonqnn.testing import onnx_models as models

    model = models.quantize(models.mobilenet_v3_like(), fmt="qdq", activation="u8",
                            per_channel=True)  # lookup tables (hard swish, sigmoid), convs
    gc.collect()
    with _tvm.converting():
        assert not gc.isenabled()
        canonqnn.canonicalize(canonqnn.load(model))
        cycles = gc.collect()  # (an explicit collection runs while paused)
    assert gc.isenabled()
    assert cycles == 0


@pytest.mark.parametrize("value", [*VALUES, np.array(True), np.asarray(np.int8(3))],
                         ids=lambda v: f"{v.dtype.str}{list(v.shape)}")
def test_a_constants_type_is_the_shape_of_its_data(value):
    for scope in (contextlib.nullcontext(), _tvm.converting()):
        with scope:
            c = _tvm.const(value)
            assert _tvm.shape_of(c) == _tvm.const_value(c).shape == tuple(c.value.shape)
