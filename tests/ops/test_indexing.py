"""canonqnn.pad / gather / strided_slice / tile / broadcast_to / depth_to_space /
space_to_depth against onnxruntime's integer kernels (Pad, Gather, Slice, Tile, Expand,
DepthToSpace, SpaceToDepth run on the int8 or uint8 data itself), their numpy references and
their TVM legalizations (all ops in one module, one build).
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import MultiOp, assert_bit_exact, rand_q, run_node, to_int8
from canonqnn import _tvm
from canonqnn.build import pipeline, targets
from canonqnn.errors import CanonqnnError
from canonqnn.ops import indexing
from canonqnn.qparams import QParams

QP = QParams.make(0.05, 3)
SHAPE = (2, 8, 4, 6)
I64 = np.int64
PAD_BEFORE, PAD_AFTER = [0, 1, 0, 3], [0, 2, 1, 0]
PADS = np.array(PAD_BEFORE + PAD_AFTER, I64)
PAD_VALUE = -7

# case -> (canonical call on x / idx, onnxruntime node: (op, inputs, initializers, attrs, opset))
CASES = {
    "pad_constant": (lambda x, idx: indexing.pad(x, QP, PAD_BEFORE, PAD_AFTER, "constant",
                                                 PAD_VALUE),
                     ("Pad", ["X", "pads", "cv"], dict(pads=PADS, cv=PAD_VALUE), {}, 13)),
    "pad_reflect": (lambda x, idx: indexing.pad(x, QP, PAD_BEFORE, PAD_AFTER, "reflect"),
                    ("Pad", ["X", "pads"], dict(pads=PADS), dict(mode="reflect"), 13)),
    "pad_edge": (lambda x, idx: indexing.pad(x, QP, PAD_BEFORE, PAD_AFTER, "edge"),
                 ("Pad", ["X", "pads"], dict(pads=PADS), dict(mode="edge"), 13)),
    "pad_wrap": (lambda x, idx: indexing.pad(x, QP, PAD_BEFORE, PAD_AFTER, "wrap"),
                 ("Pad", ["X", "pads"], dict(pads=PADS), dict(mode="wrap"), 19)),
    # constant indices as the rules pass them (normalized); onnxruntime gets the raw ones
    "gather_normalized_constant": (
        lambda x, idx: indexing.gather(x, _tvm.const(np.array([0, 7, 3, 3], I64)), 1, QP),
        ("Gather", ["X", "i"], dict(i=np.array([0, -1, 3, 3], I64)), dict(axis=1), 13)),
    "gather_runtime_negative": (lambda x, idx: indexing.gather(x, idx, 3, QP),
                                ("Gather", ["X", "idx"], {}, dict(axis=3), 13)),
    "gather_scalar_index": (
        lambda x, idx: indexing.gather(x, _tvm.const(np.array(2, I64)), 2, QP),
        ("Gather", ["X", "i"], dict(i=np.array(-2, I64)), dict(axis=2), 13)),
    "strided_slice_negative_steps": (
        lambda x, idx: indexing.strided_slice(x, QP, [1, 2, 3], [7, 1, 5], [-2, 1, -1],
                                              [4, 2, 6]),
        ("Slice", ["X", "s", "e", "a", "t"],
         dict(s=np.array([7, 1, -1], I64), e=np.array([-9, 3, -100], I64),
              a=np.array([1, 2, 3], I64), t=np.array([-2, 1, -1], I64)), {}, 13)),
    "tile": (lambda x, idx: indexing.tile(x, [1, 2, 1, 3], QP),
             ("Tile", ["X", "r"], dict(r=np.array([1, 2, 1, 3], I64)), {}, 13)),
    "broadcast_to": (lambda x, idx: indexing.broadcast_to(x, (3, *SHAPE), QP),
                     ("Expand", ["X", "s"], dict(s=np.array([3, 1, 1, 1, 1], I64)), {}, 13)),
    "depth_to_space_dcr": (lambda x, idx: indexing.depth_to_space(x, 2, "DCR", QP),
                           ("DepthToSpace", ["X"], {}, dict(blocksize=2, mode="DCR"), 13)),
    "depth_to_space_crd": (lambda x, idx: indexing.depth_to_space(x, 2, "CRD", QP),
                           ("DepthToSpace", ["X"], {}, dict(blocksize=2, mode="CRD"), 13)),
    "space_to_depth": (lambda x, idx: indexing.space_to_depth(x, 2, QP),
                       ("SpaceToDepth", ["X"], {}, dict(blocksize=2), 13)),
}
NAMES = list(CASES)


@pytest.fixture(scope="module")
def module():
    return MultiOp(lambda x, idx: [CASES[name][0](x, idx) for name in NAMES],
                   {"x": (SHAPE, "int8"), "idx": ((2, 3), "int64")})


@pytest.fixture(scope="module")
def feeds():
    rng = np.random.default_rng(11)
    return dict(x=rand_q(rng, SHAPE), idx=np.array([[0, -1, 5], [-6, 2, 2]], I64))


@pytest.fixture(scope="module")
def results(module, feeds):
    return module.references(**feeds), module.tvm(**feeds)


def _oracle(name: str, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    op, inputs, consts, attrs, opset = CASES[name][1]
    consts = dict(consts)
    if "cv" in consts:  # the pad value in the stored type
        consts["cv"] = np.array(consts["cv"] + (128 if x.dtype == np.uint8 else 0), x.dtype)
    feeds = {"X": x, **({"idx": idx} if "idx" in inputs else {})}
    return run_node(op, inputs, feeds, consts, x.dtype, opset=opset, **attrs)


@pytest.mark.parametrize("name", NAMES)
def test_indexing_op_matches_onnxruntime_on_int8(name, results, feeds):
    i = NAMES.index(name)
    oracle = _oracle(name, feeds["x"], feeds["idx"])
    assert_bit_exact(oracle, results[0][i], results[1][i], name)


@pytest.mark.parametrize("name", ["pad_constant", "gather_runtime_negative",
                                  "strided_slice_negative_steps", "depth_to_space_crd"])
def test_indexing_op_on_uint8_data_shifted_to_int8_matches_onnxruntime(name, module, feeds):
    xu = (feeds["x"].astype(np.int32) + 128).astype(np.uint8)
    oracle = to_int8(_oracle(name, xu, feeds["idx"]))
    i = NAMES.index(name)
    ref, got = module.references(x=to_int8(xu), idx=feeds["idx"]), module.tvm(
        x=to_int8(xu), idx=feeds["idx"])
    assert_bit_exact(oracle, ref[i], got[i], name)


def test_gather_wraps_only_runtime_indices(module):
    """Constant indices (normalized by the rules) are read as they are (a clamp that never
    acts); only run-time indices pay for the modulo that maps negative ones."""
    lowered = pipeline.legalize(module.mod)
    gathers = {name: str(fn) for name, fn in _tvm.module_functions(lowered).items()
               if name.startswith("canonqnn_gather")}
    assert len(gathers) == 3
    assert sum("truncmod" in text for text in gathers.values()) == 1


def test_builders_reject_out_of_range_slices_and_pad_values():
    x = _tvm.Var("x", _tvm.tensor_type(SHAPE, "int8"))
    with pytest.raises(ValueError, match="leaves axis 1"):
        indexing.strided_slice(x, QP, [1], [7], [2], [2])
    with pytest.raises(ValueError, match="not an int8 value"):
        indexing.pad(x, QP, PAD_BEFORE, PAD_AFTER, "constant", 200)
    with pytest.raises(ValueError, match="pad mode"):
        indexing.pad(x, QP, PAD_BEFORE, PAD_AFTER, "symmetric")


def test_onnxruntime_pads_int8_with_the_given_integer():
    """The oracle itself: an int8 Pad writes constant_value as stored (no requantization)."""
    x = np.zeros((1, 2), np.int8)
    y = run_node("Pad", ["X", "p", "c"], dict(X=x), dict(p=np.array([0, 1, 0, 0], I64),
                                                          c=np.array(-7, np.int8)), np.int8)
    assert y.tolist() == [[-7, 0, 0]]


def test_module_prints_and_parses_back_structurally_equal(module):
    import tvm

    parsed = tvm.script.from_source(module.mod.script(show_meta=True))
    tvm.ir.assert_structural_equal(parsed, module.mod)


# x86 CPUs whose LLVM code for topi.tile's modulo-indexed copy was wrong (int8 everywhere, every
# dtype on znver4/znver5), and a baseline; the tile kernel must be right on each.
X86_CPUS = ("x86-64", "haswell", "znver3", "znver4", "znver5", "skylake-avx512", "sapphirerapids")


def tile_module(shapes, repeats):
    xs = [_tvm.relax.Var(f"x{i}", _tvm.tensor_type(s, "int8")) for i, s in enumerate(shapes)]
    bb = _tvm.BlockBuilder()
    with bb.function("main", xs):
        with bb.dataflow():
            ys = [bb.emit(indexing.tile(x, repeats, QParams.make(0.1, 0, None, "int8")))
                  for x in xs]
            out = bb.emit_output(_tvm.relax.Tuple(ys))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("mcpu", X86_CPUS)
def test_int8_tile_is_right_on_every_x86_cpu_where_llvm_miscompiled_modulo_indexing(mcpu):
    """LLVM's loop vectorizer copied a contiguous run where topi.tile's ``x[i % n]`` wraps (240
    of 480 elements wrong for [1, 5, 8, 3]); the legalization writes affine loops instead."""
    import canonqnn

    shapes = [(1, 5, 8, 3), (1, 5, 8, 4), (1, 6, 8, 3), (1, 7, 8, 3), (1, 5, 16, 3)]
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.integers(-128, 128, s).astype(np.int8) for i, s in enumerate(shapes)}
    target = {"kind": "llvm", "mcpu": mcpu}
    built = canonqnn.build(tile_module(shapes, [1, 2, 2, 1]), target=target)
    # this host cannot run that CPU's code
    if targets.foreign_instructions(targets.as_target(target)):
        with pytest.raises(CanonqnnError, match="uses instructions this host's CPU lacks"):
            built.run(feeds)
        return
    got = built.run(feeds)
    for i, value in enumerate(got.values()):
        np.testing.assert_array_equal(value, np.tile(feeds[f"x{i}"], [1, 2, 2, 1]))
