"""GATHER_ND with indices computed at run time, as MoveNet computes them: the keypoint heatmap's
ARG_MAX turned into (batch, row, column, keypoint) index tuples by int32 arithmetic (CAST,
FLOOR_DIV, MUL, SUB, ADD, PACK, CONCATENATION), gathering int8 (uint8, int16) offsets. It is
canonical data movement (canonqnn.gather on the flattened tensor, at a flat index the module
computes), bit-exact with the interpreter's reference kernels and its default kernels."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

import canonqnn
from canonqnn.errors import UnsupportedError
from canonqnn.testing.tflite_writer import GraphWriter

H, W, K, DEPTH = 4, 5, 3, 2
TYPES = {"int32": 2, "int64": 4}  # TensorType of the index tensors


def movenet_like(data_dtype="int8", out_params=None, argmax_dtype="int64") -> bytes:
    """heatmap int8 [1,H,W,K] -> RESHAPE [1,H*W,K] -> ARG_MAX (axis 1) -> CAST int32 ->
    row = FLOOR_DIV W, column = (best - row*W) + 0 -> PACK (row, column) -> CONCATENATION with
    the batch and keypoint columns -> indices [K, 4] -> GATHER_ND of offsets [1,H,W,K,DEPTH]
    -> keypoints [K, DEPTH] (stored values read with ``out_params``, default the data's)."""
    g = GraphWriter()

    def ints(name, value):
        value = np.asarray(value, np.int32)
        return g.tensor(name, value.shape, "int32", value)

    zp = 0 if data_dtype == "int16" else 5
    heat = g.tensor("heatmap", (1, H, W, K), "int8", scale=1 / 256, zero_point=-128)
    offsets = g.tensor("offsets", (1, H, W, K, DEPTH), data_dtype, scale=0.04, zero_point=zp)
    flat = g.tensor("flat", (1, H * W, K), "int8", scale=1 / 256, zero_point=-128)
    g.op("RESHAPE", [heat, ints("flat_shape", [1, H * W, K])], [flat])
    best = g.tensor("best", (1, K), argmax_dtype)
    g.op("ARG_MAX", [flat, ints("axis", 1)], [best], outputType=TYPES[argmax_dtype])
    best32 = g.tensor("best32", (1, K), "int32")
    g.op("CAST", [best], [best32], inDataType=TYPES[argmax_dtype], outDataType=TYPES["int32"])
    width = ints("width", W)
    row = g.tensor("row", (1, K), "int32")
    g.op("FLOOR_DIV", [best32, width], [row])
    row_start = g.tensor("row_start", (1, K), "int32")
    g.op("MUL", [row, width], [row_start], fusedActivationFunction="NONE")
    within = g.tensor("within", (1, K), "int32")
    g.op("SUB", [best32, row_start], [within], fusedActivationFunction="NONE")
    column = g.tensor("column", (1, K), "int32")
    g.op("ADD", [within, ints("zero", np.zeros((1, K)))], [column], fusedActivationFunction="NONE")
    pair = g.tensor("pair", (1, K, 2), "int32")
    g.op("PACK", [row, column], [pair], valuesCount=2, axis=2)
    rows_cols = g.tensor("rows_cols", (K, 2), "int32")
    g.op("RESHAPE", [pair, ints("pair_shape", [K, 2])], [rows_cols])
    batch = ints("batch", np.zeros((K, 1)))
    keypoint = ints("keypoint", np.arange(K).reshape(K, 1))
    indices = g.tensor("indices", (K, 4), "int32")
    g.op("CONCATENATION", [batch, rows_cols, keypoint], [indices], axis=1,
         fusedActivationFunction="NONE")
    scale, out_zp = out_params or (0.04, zp)
    out = g.tensor("keypoints", (K, DEPTH), data_dtype, scale=scale, zero_point=out_zp)
    g.op("GATHER_ND", [offsets, indices], [out])
    return g.finish([heat, offsets], [out])


def _feeds(seed: int, data_dtype: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    info = np.iinfo(data_dtype)
    return {"heatmap": rng.integers(-128, 128, (1, H, W, K)).astype(np.int8),
            "offsets": rng.integers(info.min, info.max + 1,
                                    (1, H, W, K, DEPTH)).astype(data_dtype)}


def _interpreter(model: bytes, feeds: dict[str, np.ndarray], resolver) -> np.ndarray:
    interp = Interpreter(model_content=model, experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    for detail in interp.get_input_details():
        interp.set_tensor(detail["index"], feeds[detail["name"]])
    interp.invoke()
    (out,) = interp.get_output_details()
    return interp.get_tensor(out["index"]).copy()


CASES = {
    "int8": {},
    "int8_int32_argmax_other_output_parameters": dict(out_params=(0.08, 1),
                                                      argmax_dtype="int32"),
    "uint8": dict(data_dtype="uint8"),
    "int16_16x8": dict(data_dtype="int16"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_time_indices_gather_canonically_and_bit_exact(case):
    model = movenet_like(**CASES[case])
    mod, report = canonqnn.canonicalize(canonqnn.load(model))
    assert report.float_islands == [], report.summary()
    assert report.canonical_ops["gather"] == 1 and report.canonical_ops["argmax"] == 1
    built = canonqnn.build(mod, verify=True)  # (verify: against the numpy reference)
    dtype = CASES[case].get("data_dtype", "int8")
    for seed in range(6):
        feeds = _feeds(seed, dtype)
        got = built.run(feeds)["keypoints"]
        for resolver in (OpResolverType.BUILTIN_REF, OpResolverType.BUILTIN):
            want = _interpreter(model, feeds, resolver)
            assert got.dtype == want.dtype and np.array_equal(got, want), (resolver, want, got)


def test_parity_with_every_interpreter_configuration_is_exact():
    result = canonqnn.parity(movenet_like(), runs=3)
    assert result.exact and result.float_islands == [], result.summary()
    assert all(o["outputs"] and all(x["exact_fraction"] == 1.0 for x in o["outputs"])
               for o in result.extra["also_compared"]), result.summary()


def test_indices_of_a_float_type_are_refused_named():
    g = GraphWriter()
    x = g.tensor("x", (4, 5), "int8", scale=0.05, zero_point=1)
    i = g.tensor("i", (2, 2), "float32")
    y = g.tensor("y", (2,), "int8", scale=0.05, zero_point=1)
    g.op("GATHER_ND", [x, i], [y])
    with pytest.raises(UnsupportedError, match=r"GATHER_ND.*indices of type float32"):
        canonqnn.load(g.finish([x, i], [y]))
