"""Each canonical op's constraint is defined once, as a function (``CanonicalOp.accepts``):
no other module keeps a copy, none is a stub (each refuses something), the frontends and rules
folding into the op ask it, a refused combination reads the same in every layer, and
docs/spec.md shows the registry's text."""

from __future__ import annotations

import ast
import inspect
import json
import pathlib

import numpy as np
import pytest

import canonqnn
from _tflite import T, single_op
from canonqnn import _tvm, qdq
from canonqnn._tvm import relax
from canonqnn.errors import UnsupportedError
from canonqnn.io import IO_ATTR, ModelIO
from canonqnn.ops import REGISTRY, UnsupportedRounding, conv, matmul, spec
from canonqnn.qparams import QParams

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository (an install has no docs)
SPEC = ROOT / "docs" / "spec.md"
# Names the copies of the ops' constraints had before they became the ops' own: none may return.
FORMER_COPIES = ("_check_16x8", "_sixteen_bit", "check_sixteen_bit", "check_activation_dtype",
                 "check_mean_dtype", "check_table", "check_q31_average", "check_q31_count",
                 "_check_summation", "_check_q31")
# The one definition of each shared constraint, and the modules allowed to define it.
SHARED = {"sixteen_by_eight": "canonqnn/ops/_dtypes.py",
          "activation_dtype": "canonqnn/ops/_dtypes.py",
          "bias_per_channel": "canonqnn/ops/_dtypes.py",
          "mean_dtypes": "canonqnn/ops/pool.py", "q31_average": "canonqnn/ops/pool.py",
          "q31_count": "canonqnn/ops/pool.py"}
# Who must ask which op: file -> the op constants whose ``accepts`` it calls (directly, or
# through a variable or parameter bound to one of those it names).
CALLERS = {"rewrites/compute.py": {"CONV2D", "MATMUL", "CONV2D_TRANSPOSE"},
           "rewrites/dynamic.py": {"DYNAMIC_MATMUL"},
           "rewrites/elementwise.py": {"ADD", "SQUARED_DIFFERENCE"},
           "rewrites/indexing.py": {"TILE", "PAD"},
           "rewrites/resize.py": {"RESIZE2D"},
           "rewrites/movement.py": {"REQUANTIZE"},
           "rewrites/_match.py": {"REQUANTIZE"},
           "rewrites/select.py": {"MAXIMUM", "MINIMUM"},
           "rewrites/softmax.py": {"SOFTMAX"},
           "frontends/tflite/ops/nn.py": {"CONV2D", "MATMUL", "CONV2D_TRANSPOSE"}}
# Checkers of any op: they ask the op they meet (``op.accepts``).
GENERIC_CALLERS = ("canonqnn/ops/module_check.py",)
# One refused parameter set per op, and the reason it reads (its error type, when not
# ValueError): no constraint is a stub.
REFUSED = {
    "conv2d": (dict(bias_shape=(4,), channels=8),
               "bias of 4 values, not one per output channel (the output has 8 channels)"),
    "conv2d_transpose": (dict(weight_scales=4, channels=8),
                         "4 weight scales for 8 output channels"),
    "matmul": (dict(accumulate="pairwise"), "unknown accumulate 'pairwise'"),
    "dynamic_matmul": (dict(b_shape=(2, 8, 6)),
                       "batched constant weights (dynamic_matmul takes [K, N])"),
    "dynamic_conv2d": (dict(w_constant=False),
                       "weights w must be an int8 constant, got a run-time int8 tensor"),
    "dynamic_quantize": (dict(x_dtype="int8"),
                         "int8 input (DynamicQuantizeLinear quantizes float32)"),
    "dynamic_scale": (dict(x_dtype="float16"),
                      "float16 input (DynamicQuantizeLinear quantizes float32)"),
    "dynamic_zero_point": (dict(x_dtype="int32"),
                           "int32 input (DynamicQuantizeLinear quantizes float32)"),
    "add": (dict(a_dtype="int16", b_dtype="int8", out_dtype="int16"),
            "int16 operands are TFLite's 16x8 ADD only, both int16"),
    "mul": (dict(a_dtype="int16", b_dtype="int16", out_dtype="int16"),
            "int16 operands are TFLite's 16x8 ADD only, both int16"),
    "sub": (dict(rounding="q31_double", scales=(1.0, 1.0, 1e-6)),
            ("TFLite's ADD/SUB needs 2 * max(a_scale, b_scale) < 2^20 * out_scale; got a_scale "
             "1.0, b_scale 1.0, out_scale 1e-06", UnsupportedRounding)),
    "squared_difference": (dict(rounding="rne_f32"), (
        "TFLite's int8 SQUARED_DIFFERENCE kernel (rounding q31_double); the rounding is "
        "rne_f32", UnsupportedRounding)),
    "pad": (dict(x_dtype="int8", mode="reflect", x_shape=(1, 4, 3, 3), pad_before=(0, 0, 3, 0),
                 pad_after=(0, 0, 0, 0)),
            "reflect padding wider than the axis allows"),
    "gather": (dict(indices=[0, 4], axis_length=4), "indices outside [-4, 4) (the axis length)"),
    "strided_slice": (dict(x_dtype="int8", x_shape=(1, 4), axes=(1,), begin=(2,), strides=(1,),
                           sizes=(3,)),
                      "slice begin 2 stride 1 size 3 leaves axis 1 (length 4)"),
    "tile": (dict(rank=4, repeats=(2,)), "1 repeats for a rank-4 input"),
    "broadcast_to": (dict(x_shape=(1, 3), shape=(2, 4)),
                     "shape [1, 3] does not broadcast to [2, 4]"),
    "depth_to_space": (dict(x_shape=(1, 6, 2, 2), block_size=2),
                       "6 channels, not divisible by block_size^2 (4)"),
    "space_to_depth": (dict(x_shape=(1, 4, 3, 4), block_size=2),
                       "H 3 and W 4, not both divisible by block_size 2"),
    "lut": (dict(x_dtype="int16", table_dtype="int16", table_shape=(256,)),
            "an int16 input takes one table of shape [65536] (axis -1), got [256] with axis -1"),
    "reshape": (dict(x_dtype="int16", zero_points=(3,)),
                "int16 input is TFLite's 16x8 int16 activations, under the Q31 roundings, zero "
                "points 0"),
    "transpose": (dict(x_dtype="int16", rounding="rne_f32"), (
        "int16 input is TFLite's 16x8 int16 activations, under the Q31 roundings, zero points "
        "0, not rne_f32", UnsupportedRounding)),
    "max_pool2d": (dict(x_dtype="int16"), "int16 input (int8)"),
    "requantize": (dict(x_dtype="float32"), "float32 input (int8 or int16)"),
    "concat": (dict(rounding="q31_double", source_dtype="int8", same_params=False), (
        "TFLite's int8 CONCATENATION requires every input to have the output's scale and zero "
        "point (only its uint8 kernel rescales)", UnsupportedRounding)),
    "global_avg_pool2d": (dict(x_dtype="int8", out_dtype="int8", rounding="q31_double",
                               q31_kernel=None), (
        "q31_double needs q31_kernel 'mean' (TFLite MEAN) or 'average_pool' (TFLite "
        "AVERAGE_POOL_2D), got None", UnsupportedRounding)),
    "avg_pool2d": (dict(rounding="q31_double", count_include_pad=True), (
        "TFLite's AVERAGE_POOL_2D divides by the in-bounds taps only; q31_double with "
        "count_include_pad refused", UnsupportedRounding)),
    "reduce_mean": (dict(shape=(1, 4, 8), axes=(2,), summation="mlas_sgemm_m1"),
                    "summation 'mlas_sgemm_m1' needs a reduced/kept pattern KRK, not KR"),
    "reduce_max": (dict(axes=(1, 1), rank=4), "axes [1, 1] (at least one, distinct, in [0, 4))"),
    "reduce_min": (dict(axes=(), rank=4), "axes [] (at least one, distinct, in [0, 4))"),
    "argmax": (dict(axis=4, rank=4), "axis 4 (in [0, 4))"),
    "resize2d": (dict(method="cubic"), "method 'cubic' / kernel 'float' not supported"),
    "maximum": (dict(rounding="q31_double", same_params=False),
                "operands with other parameters than the output's under q31_double (TFLite "
                "compares stored values; only rne_f32 requantizes operands)"),
    "minimum": (dict(a_dtype="int16"), "operands of int16, int8 (int8)"),
    "where": (dict(cond_dtype="int8"), "int8 condition (bool)"),
    "softmax": (dict(x_dtype="int8", rounding="q31_double", in_scale=1e-9), (
        "TFLite's SOFTMAX requires in_scale * beta * 2^26 > 1 (in_scale 1e-09, beta 1.0)",
        UnsupportedRounding)),
}


def _sources():
    for folder in ("canonqnn", "frontends", "rewrites"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def _defined(path: pathlib.Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_op_has_an_executable_constraint_whose_docstring_is_its_prose():
    for name, op in REGISTRY.items():
        assert callable(op.constraint), name
        assert op.constraint.__doc__ and op.constraints, name
        assert op.constraint.__name__.endswith("_constraint"), name


def test_every_op_has_a_refused_example():
    assert sorted(REFUSED) == sorted(REGISTRY)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_no_constraint_is_a_stub_each_refuses_with_its_reason(name):
    params, reason = REFUSED[name]
    reason, error = reason if isinstance(reason, tuple) else (reason, ValueError)
    op = REGISTRY[name]
    why = op.accepts(**params)
    assert why == reason and why.error is error
    with pytest.raises(error) as raised:
        op.require(**params)
    assert str(raised.value) == f"canonqnn.{name}: {reason}"


def test_no_constraint_function_only_returns_none():
    for name, op in REGISTRY.items():
        body = ast.parse(inspect.getsource(op.constraint)).body[0].body
        statements = [s for s in body if not (isinstance(s, ast.Expr) and
                                              isinstance(s.value, ast.Constant))]
        stub = all(isinstance(s, ast.Return) and (s.value is None or isinstance(
            s.value, ast.Constant) and s.value.value is None) for s in statements)
        assert not stub, f"{name}: {op.constraint.__name__} checks nothing its docstring says"


def test_each_constraint_is_defined_once():
    seen: dict[str, list[str]] = {}
    for path in _sources():
        for name in _defined(path):
            seen.setdefault(name, []).append(str(path.relative_to(ROOT)))
    for name in FORMER_COPIES:
        assert name not in seen, f"{name} is a copy of an op's constraint: {seen[name]}"
    for name, home in SHARED.items():
        assert seen.get(name) == [home], (name, seen.get(name))
    for op in REGISTRY.values():
        fn = op.constraint.__name__
        assert len(seen.get(fn, [])) == 1, (fn, seen.get(fn))


def _asked(tree: ast.AST) -> set[str]:
    """The receivers of the ``.accepts(...)`` calls in ``tree``: op constants (``X.OP``,
    ``OP``) or variables."""
    return {node.func.value.attr if isinstance(node.func.value, ast.Attribute)
            else getattr(node.func.value, "id", None)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "accepts"}


def test_frontends_and_rules_ask_the_ops_they_fold_into():
    for file, ops in CALLERS.items():
        tree = ast.parse((ROOT / file).read_text())
        asked = _asked(tree)
        if any(name is not None and not name.isupper() for name in asked):
            # the op is a variable or parameter there: the constants the file names count
            asked |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                      and node.attr in ops}
        assert ops <= asked, (file, asked)
    for file in GENERIC_CALLERS:
        assert _asked(ast.parse((ROOT / file).read_text())), file


def test_docs_spec_shows_each_constraint_as_the_registry_renders_it():
    page = SPEC.read_text()
    assert sorted(spec.documented(page)) == sorted(REGISTRY), \
        "every op has one constraint block in docs/spec.md"
    assert spec.render(page) == page, \
        "stale constraint blocks: run python -m canonqnn.ops.spec docs/spec.md"
    contents = page.split("## Contents", 1)[1].split("\n## ", 1)[0]
    for name in REGISTRY:
        assert f"[{name}](#{name})" in contents, name


# ---------------------------------------------------------------- one reason, three layers
def _int16(shape):
    return _tvm.Var("x", _tvm.tensor_type(shape, "int16"))


WEIGHT = QParams.make(0.01, 0)


def _conv16(out_qp, w_qp=WEIGHT):
    return conv.conv2d(_int16((1, 4, 9, 9)), _tvm.const(np.ones((8, 4, 3, 3), np.int8)),
                       np.zeros(8), QParams.make(2.0 ** -12, 0, None, "int16"), w_qp, out_qp,
                       strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
                       rounding="q31_double", accumulator="int64")


def _tflite_conv16(out_dtype, out_zp=0):
    w = T((8, 3, 3, 4), "int8", np.full(8, 0.01, np.float32), np.zeros(8, np.int64),
          np.ones((8, 3, 3, 4), np.int8), 0)
    b = T((8,), "int64", np.full(8, 0.01 / 4096, np.float32), np.zeros(8, np.int64),
          np.zeros(8, np.int64))
    return single_op("CONV_2D", [T((1, 9, 9, 4), "int16", 1 / 4096, 0), w, b],
                     [T((1, 9, 9, 8), out_dtype, 1 / 1024, out_zp)], padding="SAME",
                     strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1,
                     fusedActivationFunction="NONE")


@pytest.mark.parametrize("out_dtype,out_zp,reason", [
    ("int8", 0, "int16 input and int8 output (TFLite's 16x8 kernels read and write int16)"),
    ("int16", 3, ("16x8 layer with a non-zero zero point (out_zp): TFLite's 16x8 kernels "
                  "ignore zero points (zero points 0 required)")),
])
def test_a_refused_16x8_layer_reads_the_same_in_op_frontend_and_rule(out_dtype, out_zp, reason):
    out_qp = QParams.make(1 / 1024, out_zp, None, out_dtype)
    assert conv.CONV2D.accepts(x_dtype="int16", out_dtype=out_dtype, accumulator="int64",
                               rounding="q31_double",
                               zero_points=dict(out_zp=out_qp.zero_point)) == reason
    with pytest.raises(ValueError) as builder:
        _conv16(out_qp)
    assert str(builder.value) == f"canonqnn.conv2d: {reason}"
    with pytest.raises(UnsupportedError) as frontend:
        canonqnn.load(_tflite_conv16(out_dtype, out_zp))
    assert str(frontend.value).endswith(reason)


def test_a_rule_declines_with_the_ops_reason():
    """The conv2d rule on an FQ 16x8 conv whose weight has a zero point: a float island whose
    near miss is conv2d's refusal, word for word."""
    x16, w_qp = QParams.make(2.0 ** -12, 0, None, "int16"), QParams.make(0.01, 1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", _tvm.tensor_type((1, 4, 4, 4), "int16"))
    with bb.function("main", [x]):
        with bb.dataflow():
            real = bb.emit(qdq.dequantize(x, x16))
            w = bb.emit(qdq.dequantize(_tvm.const(np.ones((4, 4, 3, 3), np.int8)), w_qp))
            y = bb.emit(relax.op.nn.conv2d(real, w, padding=1))
            out = bb.emit_output(bb.emit(qdq.quantize(y, x16)))
        bb.emit_func_output(out)
    mod = bb.get().with_attr(IO_ATTR, json.dumps(ModelIO("tflite", [], [], "q31_double")
                                                 .to_json()))
    _, report = canonqnn.canonicalize(mod, numerics="tflite-reference")
    reason = conv.CONV2D.accepts(x_dtype="int16", out_dtype="int16", accumulator="int32",
                                 rounding="q31_double", zero_points=dict(w_zp=w_qp.zero_point))
    assert reason.startswith("16x8 layer with a non-zero zero point (w_zp)")
    misses = [m for ms in report.near_misses.values() for m in ms if m.rule == "conv2d"]
    assert [m.reason for m in misses] == [reason], report.summary()


def test_matmul_asks_the_same_sixteen_bit_constraint():
    why = matmul.MATMUL.accepts(a_dtype="int8", out_dtype="int8", accumulator="int64")
    assert why == conv.CONV2D.accepts(x_dtype="int8", out_dtype="int8", accumulator="int64")
    assert why.startswith("int64 bias on an int8 layer")
