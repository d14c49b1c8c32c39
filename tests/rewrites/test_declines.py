"""Every ``Decline`` of the rules in rewrites/ reaches users: each decline site (one
``Decline(...)`` call, named by module, function and the literal text of its reason, never by
line: ``sites_of``) has an example module whose canonicalization reports it as a near miss,
with the rule, the step and the reason. The sites no module reaches are listed in
``UNREACHED``, those reached but never shown in a report in ``UNREPORTED``, each with why; both
lists can only shrink."""

from __future__ import annotations

import ast
import functools
import json
import math
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import canonqnn
from canonqnn import _tvm, qdq
from canonqnn._tvm import relax, tirx
from canonqnn.io import IO_ATTR, ModelIO
from canonqnn.qparams import QParams, product_scale
from canonqnn.rewrites import Decline, Rule
from canonqnn.rewrites._engine import NearMiss

REWRITES = pathlib.Path(canonqnn.rewrites.__file__).parent
KEY_LENGTH = 40  # a site's reason text longer than this is cut (while that keeps it unique)


# ---------------------------------------------------------------- naming the sites
@dataclass(frozen=True)
class Site:
    """One ``Decline(...)`` call: ``name`` is stable under edits elsewhere in the file; the
    lines locate the call in the current source, to attribute a decline made at run time."""

    name: str
    module: str
    function: str
    first_line: int
    last_line: int


def _reason_parts(node: ast.expr | None) -> list[tuple[bool, str]]:
    """The reason expression as (literal?, text) pieces: string literals as they read, every
    other part as ``{its source}``."""
    if node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(True, node.value)]
    if isinstance(node, ast.JoinedStr):
        return [piece for value in node.values for piece in _reason_parts(value)]
    if isinstance(node, ast.FormattedValue):
        return [(False, "{" + ast.unparse(node.value) + "}")]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _reason_parts(node.left) + _reason_parts(node.right)
    return [(False, "{" + ast.unparse(node) + "}")]


def _is_decline(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "Decline"


def _shortest_unique(text: str, others: list[str]) -> str:
    """``text`` cut after a word within ``KEY_LENGTH`` characters, unless that leaves a prefix
    of another's."""
    if len(text) <= KEY_LENGTH:
        return text
    cut = text[:KEY_LENGTH].rsplit(" ", 1)[0]
    return text if any(o.startswith(cut) for o in others) else cut + "..."


def sites_of(source: str, module: str) -> list[Site]:
    """The decline sites of one rewrites module's source: ``module.function: text``, the text
    being the reason's leading literal, else its whole text with ``{...}`` for what is computed
    (when the leading literal is empty or shared in the function), else ``module.function#n``
    (the n-th decline of the function)."""
    calls: list[tuple[str, ast.Call]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_decline(child):
                calls.append((function, child))
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else function
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    calls.sort(key=lambda c: (c[1].lineno, c[1].col_offset))
    by_function: dict[str, list[ast.Call]] = {}
    for function, call in calls:
        by_function.setdefault(function, []).append(call)
    sites = []
    for function, group in by_function.items():
        parts = [_reason_parts(c.args[0] if c.args else None) for c in group]
        leads = []
        for pieces in parts:
            lead = ""
            for literal, text in pieces:
                if not literal:
                    break
                lead += text
            leads.append(lead.strip())
        wholes = ["".join(text for _, text in pieces).strip() for pieces in parts]
        for i, call in enumerate(group):
            others_lead = leads[:i] + leads[i + 1:]
            others_whole = wholes[:i] + wholes[i + 1:]
            if leads[i] and leads[i] not in others_lead:
                key = ": " + _shortest_unique(leads[i], others_lead)
            elif any(literal for literal, _ in parts[i]) and wholes[i] not in others_whole:
                key = ": " + _shortest_unique(wholes[i], others_whole)
            else:
                key = f"#{i + 1}"
            sites.append(Site(f"{module}.{function}{key}", module, function, call.lineno,
                              call.end_lineno or call.lineno))
    return sites


@functools.cache
def decline_sites() -> dict[str, Site]:
    """Every decline site of rewrites/, by name."""
    sites = [site for path in sorted(REWRITES.glob("*.py"))
             for site in sites_of(path.read_text(), path.stem)]
    return {site.name: site for site in sites}


# ---------------------------------------------------------------- attributing declines
def _site_at(frame) -> str | None:
    """The site whose ``Decline(...)`` call ``frame`` is executing."""
    path = pathlib.Path(frame.f_code.co_filename)
    if path.parent != REWRITES:
        return None
    for site in decline_sites().values():
        if (site.module, site.function) == (path.stem, frame.f_code.co_name) and \
                site.first_line <= frame.f_lineno <= site.last_line:
            return site.name
    return None


@dataclass(frozen=True)
class Declined:
    """A Decline a rule returned: its site, the variable it names and the near miss it is."""

    site: str | None
    var: str | None
    miss: NearMiss


def convert(model, numerics: str) -> tuple[object, list[Declined]]:
    """Canonicalize ``model`` for ``numerics``; the report and every Decline rules returned."""
    made: dict[int, tuple[Decline, str | None]] = {}
    returned: list[Declined] = []
    init, attempt = Decline.__init__, Rule.attempt

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made[id(self)] = (self, _site_at(sys._getframe(1)))  # (kept alive: ids stay unique)

    def recording_attempt(rule, ctx, call):
        result, step = attempt(rule, ctx, call)
        if isinstance(result, Decline):
            at = result.at
            var = _tvm.var_name(at) if isinstance(at, relax.Var) else None
            returned.append(Declined(made.get(id(result), (None, None))[1], var,
                                     NearMiss(rule.name, rule.phase, step or "", result.reason)))
        return result, step

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Decline, "__init__", recording_init)
        patch.setattr(Rule, "attempt", recording_attempt)
        _, report = canonqnn.canonicalize(model, numerics=numerics)
    return report, returned


# ---------------------------------------------------------------- example modules
X = QParams.make(0.05, 3)
Y = QParams.make(0.1, -2)
W = QParams.make(0.01, 0)
ONE = QParams.make(1.0, 0)
INT16 = QParams.make(0.001, 0, dtype="int16")
INT32 = QParams.make(0.05, 0, dtype="int32")
ACC = QParams.make(product_scale(X.scale, W.scale), 0, dtype="int32")  # a conv's bias
SOFTMAX_OUT = QParams.make(1 / 256, -128)
NCHW = (1, 4, 4, 4)
TFLITE = "tflite-reference"
r = relax.op


class G:
    """Emits the bindings of an example's ``main``."""

    def __init__(self, bb: relax.BlockBuilder) -> None:
        self.bb = bb

    def __call__(self, expr):
        return self.bb.emit(expr)

    def dq(self, x, qp: QParams = X, stored: str = "int8"):
        if isinstance(x, np.ndarray):
            x = _tvm.const(x)
        return self.bb.emit(qdq.dequantize(x, qp, source_dtype=stored))

    def q(self, y, qp: QParams = Y, stored: str = "int8"):
        return self.bb.emit(qdq.quantize(y, qp, source_dtype=stored))


def module(inputs: dict, body: Callable, source: str | None = None):
    """main(inputs) = body(g, *inputs) (a tuple: several outputs); ``inputs``: name -> (shape,
    dtype) or a tensor type; ``source``: the format the module records (default: none, read as
    ONNX's)."""
    bb = relax.BlockBuilder()
    params = [relax.Var(n, _tvm.tensor_type(*spec) if isinstance(spec, tuple) else spec)
              for n, spec in inputs.items()]
    with bb.function("main", params):
        with bb.dataflow():
            result = body(G(bb), *params)
            out = bb.emit_output(relax.Tuple(list(result)) if isinstance(result, tuple)
                                 else result)
        bb.emit_func_output(out)
    mod = bb.get()
    if source is None:
        return mod
    rounding = "q31_double" if source == "tflite" else "rne_f32"
    return mod.with_attr(IO_ATTR, json.dumps(ModelIO(source, [], [], rounding).to_json()))


def i8(*shape):
    return (shape, "int8")


def f32(*shape):
    return (shape, "float32")


def weights(*shape, seed: int = 0, dtype=np.int8) -> np.ndarray:
    return np.random.default_rng(seed).integers(-100, 100, shape).astype(dtype)


def scalar(value, dtype=np.float32):
    return _tvm.const(np.asarray(value, dtype))


def per_channel(n: int, axis: int, scale: float = 0.01) -> QParams:
    return QParams.make(np.linspace(scale, 2 * scale, n), np.zeros(n), axis=axis)


@dataclass(frozen=True)
class Example:
    build: Callable
    rule: str
    step: str
    reason: str  # a distinctive part of the reported reason
    numerics: str


EXAMPLES: dict[str, Example] = {}


def example(site: str, rule: str, step: str, reason: str, numerics: str = "exact"):
    """Registers the decorated function's module as the example of decline ``site``."""
    def register(build: Callable) -> Callable:
        assert site not in EXAMPLES, site
        EXAMPLES[site] = Example(build, rule, step, reason, numerics)
        return build
    return register


def conv(g: G, x, w=None, w_qp: QParams = W, **attrs):
    w = weights(4, 4, 3, 3) if w is None else w
    return g(r.nn.conv2d(x, g.dq(w, w_qp), padding=1, **attrs))


def bias_of(g: G, qp: QParams, stored: str = "int8"):
    """dq(int32 [1, 2, 3, 4]) of shape [1, 4, 1, 1]: a conv bias as the frontends write it."""
    return g.dq(np.arange(1, 5, dtype=np.int32).reshape(1, 4, 1, 1), qp, stored)


# -- the engine and the shared matchers
@example("_engine.attempt#1", "lut", "table_profile",
         "its lookup-table functions is not implemented (tables=unverified)",
         numerics="xnnpack")
def table_under_a_profile_without_its_tables():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.sigmoid(g.dq(x)))))


@example("_match.per_tensor_int8: {what} is {qp.dtype}, not {' or...",
         "reshape", "reshape_chain", "input is int32, not int8")
def reshape_of_an_int32_tensor():
    return module({"x": (NCHW, "int32")},
                  lambda g, x: g.q(g(r.reshape(g.dq(x, INT32), (1, 64)))))


@example("_match.per_tensor_int8: {what} is int16 with zero point...",
         "reshape", "reshape_chain", "input is int16 with zero point 5", numerics=TFLITE)
def int16_reshape_with_a_zero_point():
    in_qp = QParams.make(0.001, 5, dtype="int16")
    return module({"x": (NCHW, "int16")},
                  lambda g, x: g.q(g(r.reshape(g.dq(x, in_qp), (1, 64))), INT16),
                  source="tflite")


@example("_match.per_tensor_int8: {what} is quantized per channel (axis...",
         "reshape", "reshape_chain", "input is quantized per channel (axis 1)")
def reshape_of_a_per_channel_tensor():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g.q(g(r.reshape(g.dq(x, per_channel(4, 1)), (1, 64)))))


@example("_match.quantized_op: the float result has other users", "binary", "binary_chain",
         "the float result has other users")
def sum_quantized_twice():
    def body(g, a, b):
        y = g(r.add(g.dq(a), g.dq(b)))
        return g.q(y), g.q(y, X)
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, body)


@example("_match.unary_chain: input is not dequantized from", "reshape", "reshape_chain",
         "input is not dequantized from int8")
def reshape_of_a_float_input():
    return module({"x": f32(*NCHW)}, lambda g, x: g.q(g(r.reshape(x, (1, 64)))))


# -- compute
@example("compute.conv2d_checks#3", "conv2d", "conv2d_checks", "int64 bias on an int8 layer")
def int8_conv_with_an_int64_bias():
    # the reason is conv2d's constraint (canonqnn.ops.conv.conv2d_constraint), whose other
    # refusals tests/ops/test_constraints.py shows at this rule
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.add(
        conv(g, g.dq(x)), bias_of(g, ACC, "int64")))))


@example("compute.matmul_checks#7", "matmul", "matmul_checks", "int64 bias on an int8 layer")
def int8_matmul_with_an_int64_bias():
    def body(g, a):
        y = g(r.matmul(g.dq(a), g.dq(weights(8, 4), W)))
        return g.q(g(r.add(y, g.dq(np.arange(4, dtype=np.int32), ACC, "int64"))))
    return module({"a": i8(3, 8)}, body)


@example("compute._bias: bias of shape", "conv2d", "conv2d_checks",
         "bias of shape [4] is not one value per output channel")
def conv_plus_a_float_row():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.add(
        conv(g, g.dq(x)), scalar(np.arange(4.0))))))


@example("compute._bias#2", "matmul", "matmul_checks",
         "bias of 3 values, not one per output channel (the output has 1 channel)")
def matrix_vector_product_plus_one_bias_per_row():
    def body(g, a):
        y = g(r.matmul(g.dq(a), g.dq(weights(8), W)))
        return g.q(g(r.add(y, g.dq(np.arange(3, dtype=np.int32), ACC))))
    return module({"a": i8(3, 8)}, body)


@example("compute._bias: bias zero point is not 0", "conv2d", "conv2d_checks",
         "bias zero point is not 0")
def conv_bias_with_a_zero_point():
    acc = QParams.make(ACC.scale, 1, dtype="int32")
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.add(
        conv(g, g.dq(x)), bias_of(g, acc)))))


@example("compute._bias: bias scale is not input_scale *...", "conv2d",
         "conv2d_checks", "bias scale is not input_scale * weight_scale")
def conv_bias_of_another_scale():
    acc = QParams.make(0.001, 0, dtype="int32")
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.add(
        conv(g, g.dq(x)), bias_of(g, acc)))))


@example("compute._quantized_float_bias: float bias does not fit int32 at the...",
         "conv2d", "conv2d_checks", "float bias does not fit int32")
def conv_with_a_huge_float_bias():
    big = np.full((1, 4, 1, 1), 1e12, np.float32)
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.add(
        conv(g, g.dq(x)), _tvm.const(big)))))


@example("compute._accumulator_output: int32 output that is not the raw...",
         "conv2d_integer", "conv2d_checks", "int32 output that is not the raw accumulator")
def conv_accumulator_of_scaled_operands():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g(r.astype(conv(g, g.dq(x)), "int32")))


@example("compute.conv_chain: the float result has other users", "conv2d", "conv2d_chain",
         "the float result has other users")
def conv_quantized_twice():
    def body(g, x):
        y = conv(g, g.dq(x))
        return g.q(y), g.q(y, X)
    return module({"x": i8(*NCHW)}, body)


@example("compute.conv_chain: input or weight is not dequantized from...", "conv2d",
         "conv2d_chain", "input or weight is not dequantized from int8")
def conv_of_a_float_input():
    return module({"x": f32(*NCHW)}, lambda g, x: g.q(conv(g, x)))


@example("compute.conv_chain: weight is", "conv2d", "conv2d_chain", "weight is int32, not int8")
def conv_with_int32_weights():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(conv(
        g, g.dq(x), w=weights(4, 4, 3, 3, dtype=np.int32), w_qp=INT32)))


@example("compute._conv_bias: bias is neither an int32 dequantize nor...",
         "conv2d", "conv2d_checks", "bias is neither an int32 dequantize nor a float constant")
def conv_plus_a_runtime_bias():
    return module({"x": i8(*NCHW), "b": f32(1, 4, 1, 1)},
                  lambda g, x, b: g.q(g(r.add(conv(g, g.dq(x)), b))))


@example("compute.conv2d_checks: layout", "conv2d", "conv2d_checks",
         "layout NHWC/OHWI is not NCHW/OIHW")
def channels_last_conv():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(conv(
        g, g.dq(x), w=weights(4, 3, 3, 4), data_layout="NHWC", kernel_layout="OHWI")))


@example("compute.conv2d_checks: weight quantized along axis", "conv2d", "conv2d_checks",
         "weight quantized along axis 1, not output channels")
def conv_weights_quantized_per_input_channel():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g.q(conv(g, g.dq(x), w_qp=per_channel(4, 1))))


@example("compute.conv2d_checks: activation on an int32 accumulator", "conv2d_integer",
         "conv2d_checks", "activation on an int32 accumulator")
def relu_before_the_integer_accumulator():
    return module({"x": i8(*NCHW)}, lambda g, x: g(r.astype(
        g(r.nn.relu(conv(g, g.dq(x, ONE), w_qp=ONE))), "int32")))


@example("compute.conv_transpose_checks: layout", "conv2d_transpose", "conv_transpose_checks",
         "layout NHWC/IOHW/NHWC is not NCHW/IOHW")
def channels_last_transposed_conv():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.conv2d_transpose(
        g.dq(x), g.dq(weights(4, 4, 3, 3), W), data_layout="NHWC"))))


@example("compute.conv_transpose_checks: weight quantized along axis", "conv2d_transpose",
         "conv_transpose_checks", "weight quantized along axis 0, not output channels")
def transposed_conv_weights_quantized_per_input_channel():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.conv2d_transpose(
        g.dq(x), g.dq(weights(4, 4, 3, 3), per_channel(4, 0))))))


@example("compute.conv_transpose_checks: 1-D runtime weight with per-channel...",
         "conv2d_transpose", "conv_transpose_checks", "1-D runtime weight with per-channel")
def conv1d_transpose_of_runtime_per_channel_weights():
    return module({"x": i8(1, 4, 8), "w": i8(4, 2, 3)}, lambda g, x, w: g.q(g(
        r.nn.conv1d_transpose(g.dq(x), g.dq(w, per_channel(2, 1))))))


@example("compute.matmul_chain: the float result has other users", "matmul", "matmul_chain",
         "the float result has other users")
def product_quantized_twice():
    def body(g, a):
        y = g(r.matmul(g.dq(a), g.dq(weights(8, 6), W)))
        return g.q(y), g.q(y, X)
    return module({"a": i8(3, 8)}, body)


@example("compute.matmul_checks: an operand is not dequantized from int8", "matmul",
         "matmul_checks", "an operand is not dequantized from int8")
def product_of_a_float_input():
    return module({"a": f32(3, 8)},
                  lambda g, a: g.q(g(r.matmul(a, g.dq(weights(8, 6), W)))))


@example("compute.matmul_checks: B is", "matmul", "matmul_checks", "B is int32, not int8")
def product_with_int32_weights():
    return module({"a": i8(3, 8)}, lambda g, a: g.q(g(r.matmul(
        g.dq(a), g.dq(weights(8, 6, dtype=np.int32), INT32)))))


@example("compute.matmul_checks: B quantized along axis", "matmul", "matmul_checks",
         "B quantized along axis 0, not per column")
def product_weights_quantized_per_row():
    return module({"a": i8(3, 8)}, lambda g, a: g.q(g(r.matmul(
        g.dq(a), g.dq(weights(8, 6), per_channel(8, 0))))))


@example("compute.matmul_checks: transposed runtime B with per-column...", "matmul",
         "matmul_checks", "transposed runtime B with per-column parameters")
def product_with_runtime_keys_transposed_in_float():
    return module({"a": i8(3, 8), "b": i8(6, 8)}, lambda g, a, b: g.q(g(r.matmul(
        g.dq(a), g(r.permute_dims(g.dq(b, per_channel(6, 0))))))))


@example("compute.matmul_checks: 1-D B with per-column parameters", "matmul", "matmul_checks",
         "1-D B with per-column parameters")
def matrix_vector_product_with_per_element_vector_scales():
    return module({"a": i8(3, 8)}, lambda g, a: g.q(g(r.matmul(
        g.dq(a), g.dq(weights(8), per_channel(8, 0))))))


@example("compute.matmul_checks: activation or alpha on an int32...",
         "matmul_integer", "matmul_checks", "activation or alpha on an int32 accumulator")
def relu_before_the_integer_product():
    return module({"a": i8(3, 8)}, lambda g, a: g(r.astype(g(r.nn.relu(g(r.matmul(
        g.dq(a, ONE), g.dq(weights(8, 6), ONE))))), "int32")))


@example("compute.matmul_checks: 1-D int32 matmul", "matmul_integer", "matmul_checks",
         "1-D int32 matmul")
def integer_vector_matrix_product():
    return module({"a": i8(8)}, lambda g, a: g(r.astype(g(r.matmul(
        g.dq(a, ONE), g.dq(weights(8, 6), ONE))), "int32")))


# -- dynamic quantization
def dynamic_product(g: G, x, *, w=None, w_scale=None, centred_x=None,
                    scale_of_x: bool = True, conv_layout: str | None = None):
    """x -> DynamicQuantizeLinear -> integer product with ``w`` -> float, times the scale and
    ``w_scale``: the form the ONNX frontend writes for MatMulInteger / ConvInteger."""
    q, scale, zp = qdq.dynamic_quantize(g, x)
    if centred_x is None:
        centred_x = g(r.subtract(g(r.astype(q, "int32")),
                                 g(r.astype(g(r.reshape(zp, ())), "int32"))))
    if not isinstance(w, relax.Var):
        w = _tvm.const(weights(8, 6) if w is None else w)
    zp_w = _tvm.const(np.zeros((), np.int8))
    centred_w = g(r.subtract(g(r.astype(w, "int32")), g(r.astype(zp_w, "int32"))))
    if conv_layout is None:
        acc = g(r.matmul(centred_x, centred_w, out_dtype="int32"))
    else:
        acc = g(r.nn.conv2d(centred_x, centred_w, data_layout=conv_layout,
                            kernel_layout="OHWI", out_dtype="int32"))
    w_scale = scalar(0.01) if w_scale is None else _tvm.const(w_scale)
    scales = g(r.multiply(scale, w_scale)) if scale_of_x else w_scale
    return g(r.multiply(g(r.astype(acc, "float32")), scales))


@example("dynamic._per_channel: {what} of shape {list(array.shape)}...",
         "dynamic_product", "dynamic_product", "weight scale of shape [3, 1] varies along")
def dynamic_product_with_weight_scales_per_row():
    return module({"x": f32(3, 8)}, lambda g, x: dynamic_product(
        g, x, w_scale=np.full((3, 1), 0.01, np.float32)))


@example("dynamic.dynamic_product: the integer product does not read...",
         "dynamic_product", "dynamic_product", "the integer product does not read")
def integer_product_of_a_static_int8_input():
    return module({"x": f32(3, 8), "s": i8(3, 8)}, lambda g, x, s: dynamic_product(
        g, x, centred_x=g(r.astype(s, "int32"))))


@example("dynamic.dynamic_product: the weights are not a constant with a...",
         "dynamic_product", "dynamic_product", "the weights are not a constant")
def dynamic_product_with_runtime_weights():
    return module({"x": f32(3, 8), "w": i8(8, 6)},
                  lambda g, x, w: dynamic_product(g, x, w=w))


@example("dynamic.dynamic_product: the scale is not...",
         "dynamic_product", "dynamic_product", "the scale is not DynamicQuantizeLinear's")
def dynamic_product_times_a_constant_scale_only():
    return module({"x": f32(3, 8)},
                  lambda g, x: dynamic_product(g, x, scale_of_x=False))


@example("dynamic.dynamic_product#4",
         "dynamic_product", "dynamic_product", "batched constant weights")
def dynamic_product_with_batched_weights():
    return module({"x": f32(2, 3, 8)},
                  lambda g, x: dynamic_product(g, x, w=weights(2, 8, 6)))


@example("dynamic.dynamic_product: convolution layout other than NCHW/OIHW", "dynamic_product",
         "dynamic_product", "convolution layout other than NCHW/OIHW")
def dynamic_channels_last_conv():
    return module({"x": f32(*NCHW)}, lambda g, x: dynamic_product(
        g, x, w=weights(4, 3, 3, 4), conv_layout="NHWC"))


# -- elementwise
@example("elementwise.binary_operands#1",
         "binary", "binary_operands", "16x8 layer with a non-zero zero point (out_zp)",
         numerics=TFLITE)
def int16_add_with_an_output_zero_point():
    return module({"a": (NCHW, "int16"), "b": (NCHW, "int16")}, lambda g, a, b: g.q(g(r.add(
        g.dq(a, INT16), g.dq(b, INT16))), QParams.make(0.002, 5, dtype="int16")),
        source="tflite")


@example("elementwise.binary_operands: an operand is not dequantized from int8", "binary",
         "binary_operands", "an operand is not dequantized from int8")
def sum_with_a_float_input():
    return module({"a": i8(*NCHW), "b": f32(*NCHW)},
                  lambda g, a, b: g.q(g(r.add(g.dq(a), b))))


@example("elementwise.squared_difference_chain: the difference is also used outside the...",
         "squared_difference", "squared_difference_chain",
         "the difference is also used outside the squared difference", numerics=TFLITE)
def squared_difference_whose_difference_is_quantized_too():
    def body(g, a, b):
        d = g(r.subtract(g.dq(a), g.dq(b)))
        return g.q(g(r.square(d))), g.q(d)
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, body, source="tflite")


@example("elementwise.squared_difference_chain: canonqnn.squared_difference:",
         "squared_difference", "squared_difference_chain",
         "the rounding is rne_f32, so the squared difference stays float")
def squared_difference_of_an_onnx_model():
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, lambda g, a, b: g.q(g(r.square(
        g(r.subtract(g.dq(a), g.dq(b)))))))


# -- indexing
@example("indexing._pad_source: input is not dequantized from int8", "pad", "pad_geometry",
         "input is not dequantized from int8")
def pad_of_a_float_input():
    return module({"x": f32(*NCHW)},
                  lambda g, x: g.q(g(r.nn.pad(x, [0, 0, 0, 0, 1, 1, 1, 1]))))


@example("indexing._pad_source: the cropped float tensor has other users", "pad",
         "pad_geometry", "the cropped float tensor has other users")
def pad_of_a_crop_quantized_too():
    def body(g, x):
        crop = g(r.strided_slice(g.dq(x), [3], [1], [4]))
        return g.q(g(r.nn.pad(crop, [0, 0, 0, 0, 1, 1, 0, 0]))), g.q(crop)
    return module({"x": i8(*NCHW)}, body)


@example("indexing.pad_geometry: pad mode", "pad", "pad_geometry",
         "pad mode edge has no canonical form")
def edge_pad_mode_named_as_numpy_names_it():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.pad(
        g.dq(x), [0, 0, 0, 0, 1, 1, 1, 1], pad_mode="edge"))))


def pad_with_a_negative_width():
    """(indexing.pad_geometry#2 again, canonqnn.pad's refusal: see the test below)"""
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.pad(
        g.dq(x), [0, 0, 0, 0, -1, 1, 0, 0]))))


@example("indexing.pad_geometry#2", "pad",
         "pad_geometry", "reflect padding wider than the axis allows")
def reflect_pad_wider_than_the_axis():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.pad(
        g.dq(x), [0, 0, 0, 0, 4, 0, 0, 0], pad_mode="reflect"))))


@example("indexing.pad_geometry: the pad value is NaN (no quantized...", "pad",
         "pad_geometry", "the pad value is NaN")
def pad_with_nan():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.pad(
        g.dq(x), [0, 0, 0, 0, 1, 1, 1, 1], pad_value=math.nan))))


@example("indexing._gather_indices: run-time indices with mode clip...",
         "gather", "gather_indices", "run-time indices with mode clip")
def gather_of_runtime_indices_clipped():
    return module({"x": i8(*NCHW), "i": ((2,), "int64")}, lambda g, x, i: g.q(g(r.take(
        g.dq(x), i, axis=1, mode="clip"))))


@example("indexing._gather_indices: index out of range [0,", "gather", "gather_indices",
         "index out of range [0, 4) with mode fast")
def gather_of_an_index_past_the_axis():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.take(
        g.dq(x), scalar([0, 9], np.int64), axis=1))))


@example("indexing.gather_indices: take over the flattened tensor (no axis)", "gather",
         "gather_indices", "take over the flattened tensor")
def gather_without_an_axis():
    return module({"x": i8(16)}, lambda g, x: g.q(g(r.take(
        g.dq(x), scalar([0, 9], np.int64)))))


@example("indexing._canonical_slice: slice bounds are not constants", "strided_slice",
         "slice_bounds", "slice bounds are not constants")
def slice_of_a_symbolic_length():
    """The last two of ``n`` elements: the bounds are expressions of ``n``."""
    n = tirx.Var("n", "int64")
    scale, zp = _tvm.const(X.scale), _tvm.const(np.int8(X.scalar_zp))

    def body(g, x):
        real = g(_tvm.dequantize(x, scale, zp, 0))
        return g(_tvm.quantize(g(r.strided_slice(real, [3], [n - 2], [n])), scale, zp, 0,
                               "int8"))
    return module({"x": relax.TensorType([1, 4, 4, n], "int8")}, body)


@example("indexing._canonical_slice: the slice is empty", "strided_slice", "slice_bounds",
         "the slice is empty")
def empty_slice():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g.q(g(r.strided_slice(g.dq(x), [3], [2], [2]))))


@example("indexing._canonical_slice: assume_inbound with a begin outside the...",
         "strided_slice", "slice_bounds", "assume_inbound with a begin outside the axis")
def slice_assumed_in_bounds_that_is_not():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.strided_slice(
        g.dq(x), [3], [5], [7], assume_inbound=True))))


@example("indexing.tile_repeats#1", "tile",
         "tile_repeats", "1 repeats for a rank-4 input")
def tile_with_fewer_repeats_than_axes():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.tile(g.dq(x), [2]))))


@example("indexing.depth_space_chain: an intermediate float result has other...",
         "depth_space", "depth_space_chain", "an intermediate float result has other users")
def depth_to_space_whose_split_is_quantized_too():
    def body(g, x):
        split = g(r.reshape(g.dq(x), (1, 2, 2, 2, 2, 2)))
        moved = g(r.permute_dims(split, [0, 3, 4, 1, 5, 2]))
        return g.q(g(r.reshape(moved, (1, 2, 4, 4)))), g.q(split)
    return module({"x": i8(1, 8, 2, 2)}, body)


# -- islands
@example("islands.name_island#1", "declined", "name_island",
         "16-bit quantization: onnxruntime computes the ops between 16-bit")
def sixteen_bit_sigmoid_of_an_onnx_model():
    return module({"x": (NCHW, "int16")},
                  lambda g, x: g.q(g(r.sigmoid(g.dq(x, INT16))), INT16))


@example("islands.name_island#2", "declined", "name_island",
         "layer normalization has no canonical int8 op")
def quantized_layer_norm():
    return module({"x": i8(1, 8, 16)}, lambda g, x: g.q(g(r.nn.layer_norm(
        g.dq(x), scalar(np.ones(16)), scalar(np.zeros(16)), axes=[-1]))))


# -- lookup tables
@example("lut._check: {_tvm.op_name(call)} computes...",
         "lut", "lut_chain", "relax.add computes float16")
def sigmoid_selecting_by_a_half_precision_condition():
    def body(g, x):
        level = g(r.add(scalar(np.arange(4), np.float16), scalar(1, np.float16)))
        chosen = g(r.where(g(r.less(level, scalar(3, np.float16))), g.dq(x), scalar(0.0)))
        return g.q(g(r.sigmoid(chosen)))
    return module({"x": i8(*NCHW)}, body)


@example("lut._check: the result of", "lut", "lut_chain",
         "the result of relax.sigmoid is also used outside the function")
def tanh_of_a_sigmoid_that_is_also_an_output():
    def body(g, x):
        s = g(r.sigmoid(g.dq(x)))
        return g.q(g(r.tanh(s))), s
    return module({"x": i8(*NCHW)}, body)


@example("lut._check: the float chain reads", "lut", "lut_chain",
         "the float chain reads 2 quantized tensors")
def sigmoid_gate_of_another_tensor():
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, lambda g, a, b: g.q(g(r.multiply(
        g(r.sigmoid(g.dq(a))), g.dq(b)))))


@example("lut._table_axis: a constant of shape", "lut", "lut_table",
         "a constant of shape [1, 3, 1, 1] does not broadcast to the input shape [1, 4, 2, 2]")
def prelu_with_fewer_slopes_than_channels():
    return module({"x": i8(1, 4, 2, 2)}, lambda g, x: g.q(g(r.nn.prelu(
        g.dq(x), scalar([0.1, 0.2, 0.3])))))


@example("lut._table_axis: constants vary along axes", "lut", "lut_table",
         "constants vary along axes [1, 2] of the input")
def product_with_a_constant_varying_along_two_axes():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.sigmoid(g(r.multiply(
        g.dq(x), scalar(np.arange(16.0).reshape(1, 4, 4, 1))))))))


@example("lut._kernel_table: {runtime} has no kernel computing...",
         "lut", "lut_table", "TFLite has no kernel computing exp(x)", numerics=TFLITE)
def exp_of_a_tflite_model():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.exp(g.dq(x)))), source="tflite")


@example("lut._kernel_table: {runtime} kernels read and write one...",
         "lut", "lut_table", "kernels read and write one type; input uint8, output int8",
         numerics=TFLITE)
def tflite_sigmoid_from_uint8_to_int8():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.sigmoid(g.dq(x, stored="uint8"))),
                                                     SOFTMAX_OUT), source="tflite")


@example("lut._kernel_table: {exc}; the chain stays float", "lut", "lut_table",
         "TFLite LOGISTIC requires output scale 1/256", numerics=TFLITE)
def tflite_sigmoid_to_another_scale():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.sigmoid(g.dq(x)))), source="tflite")


@example("lut.lut_table: {_tvm.op_name(op)} has no {ctx.source}...",
         "lut", "lut_table", "relax.sin has no onnx table evaluator")
def sine_of_an_onnx_model():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.sin(g.dq(x)))))


@example("lut.lut_table: the float chain computes", "lut", "lut_table",
         "the float chain computes float32[2, 4] from an input of shape [4]")
def sigmoid_broadcast_to_more_rows():
    return module({"x": i8(4)}, lambda g, x: g.q(g(r.sigmoid(g(r.add(
        g.dq(x), scalar(np.zeros((2, 4)))))))))


@example("lut.lut_table: {exc}; the chain stays float", "lut", "lut_table",
         "softplus with beta=2.0 (ONNX Softplus has beta 1)")
def softplus_with_a_beta():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.softplus(g.dq(x), beta=2.0))))


# -- movement
@example("movement.concat_chain: the float result has other users", "concat", "concat_chain",
         "the float result has other users")
def concat_quantized_twice():
    def body(g, a, b):
        y = g(r.concat([g.dq(a), g.dq(b)], axis=1))
        return g.q(y), g.q(y, X)
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, body)


@example("movement.concat_chain: an input is not dequantized from int8", "concat",
         "concat_chain", "an input is not dequantized from int8")
def concat_with_a_float_input():
    return module({"a": i8(*NCHW), "b": f32(*NCHW)},
                  lambda g, a, b: g.q(g(r.concat([g.dq(a), b], axis=1))))


@example("movement.requantize_chain: int16 output with a non-zero zero point...",
         "requantize", "requantize_chain", "int16 output with a non-zero zero point (5): int16 "
         "input is TFLite's 16x8 int16 activations",
         numerics=TFLITE)
def int16_requantize_to_a_zero_point():
    return module({"x": (NCHW, "int16")}, lambda g, x: g.q(
        g.dq(x, INT16), QParams.make(0.002, 5, dtype="int16")), source="tflite")


# -- pooling
@example("pool.nchw: layout", "avg_pool2d", "nchw", "layout NHWC is not NCHW")
def channels_last_average_pool():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.avg_pool2d(
        g.dq(x), (2, 2), layout="NHWC"))))


@example("pool.undilated: dilated average pooling", "avg_pool2d", "undilated",
         "dilated average pooling")
def dilated_average_pool():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.avg_pool2d(
        g.dq(x), (2, 2), dilation=(2, 2)))))


@example("pool.spatial_mean: mean over axes", "global_avg_pool2d", "spatial_mean",
         "mean over axes [1] (only H, W of NCHW fold)")
def mean_over_channels():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g.q(g(r.mean(g.dq(x), axis=[1], keepdims=True))))


def mean_by_sum(g: G, x, count: float = 4.0):
    total = g(r.sum(x, axis=[1], keepdims=True))
    return total, g(r.divide(total, scalar(count)))


@example("pool.reduce_mean_chain: the float result has other users", "reduce_mean",
         "reduce_mean_chain", "the float result has other users")
def mean_whose_sum_is_quantized_too():
    def body(g, x):
        total, mean = mean_by_sum(g, g.dq(x))
        return g.q(mean), g.q(total)
    return module({"x": i8(*NCHW)}, body)


@example("pool.reduce_mean_chain: input is not dequantized from", "reduce_mean",
         "reduce_mean_chain", "input is not dequantized from int8")
def mean_of_a_float_input():
    return module({"x": f32(*NCHW)}, lambda g, x: g.q(mean_by_sum(g, x)[1]))


@example("pool.reduce_mean_chain: sum divided by something other than its...",
         "reduce_mean", "reduce_mean_chain", "sum divided by something other than its count 4")
def sum_divided_by_another_count():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(mean_by_sum(g, g.dq(x), 3.0)[1]))


# -- reductions
@example("reduce._argmax_input: argmax over the flattened tensor (no...", "argmax_last",
         "argmax_last_chain", "argmax over the flattened tensor")
def last_argmax_of_the_flattened_tensor():
    """(The argmax rule declines there too, at argmax's int64 result:
    ``test_an_argmax_left_in_float_is_a_named_island``.)"""
    def body(g, x):
        flipped = g(r.flip(g.dq(x), axis=1))
        return g(r.subtract(scalar(3, np.int64), g(r.argmax(flipped)))), flipped
    return module({"x": i8(*NCHW)}, body)


@example("reduce.argmax_last_chain: the reversed tensor or its argmax has...",
         "argmax_last", "argmax_last_chain", "the reversed tensor or its argmax has other users")
def last_argmax_whose_reversed_tensor_is_an_output():
    def body(g, x):
        flipped = g(r.flip(g.dq(x), axis=1))
        index = g(r.argmax(flipped, axis=1))
        return g(r.subtract(scalar(3, np.int64), index)), flipped
    return module({"x": i8(*NCHW)}, body)


# -- resize
def resized(g: G, x, size=(8, 8), **attrs):
    return g(r.image.resize2d(x, size, **attrs))


@example("resize._geometry: layout", "resize2d", "resize_geometry", "layout NHWC is not NCHW")
def channels_last_resize():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g.q(resized(g, g.dq(x), layout="NHWC")))


@example("resize._geometry: {a['method']} resize (nearest and...", "resize2d",
         "resize_geometry", "cubic resize (nearest and linear fold)")
def cubic_resize():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(resized(g, g.dq(x), method="cubic")))


@example("resize._geometry#3", "resize2d", "resize_geometry",
         "coordinate_transformation_mode 'tf_crop_and_resize' is not supported")
def crop_and_resize():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(resized(
        g, g.dq(x), coordinate_transformation_mode="tf_crop_and_resize")))


def nearest_resize_rounding_half_away():
    """(resize._geometry#3 again, the op's nearest_mode refused: see the test below)"""
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(resized(
        g, g.dq(x), method="nearest_neighbor", rounding_method="round")))


@example("resize._geometry: resize to", "resize2d", "resize_geometry", "resize to float16")
def resize_to_half_precision():
    return module({"x": i8(*NCHW)},
                  lambda g, x: g.q(resized(g, g.dq(x), out_dtype="float16")))


def truncated_resize(g: G, x, **attrs):
    return g(r.trunc(resized(g, x, **attrs)))


STORED = QParams.make(1.0, 3)


@example("resize.integer_resize_chain: the float result has other users", "resize2d_integer",
         "integer_resize_chain", "the float result has other users")
def truncated_resize_quantized_twice():
    def body(g, x):
        y = truncated_resize(g, g.dq(x, STORED))
        return g.q(y, STORED), g.q(y, X)
    return module({"x": i8(*NCHW)}, body)


@example("resize.integer_resize_chain: input is not dequantized from int8", "resize2d_integer",
         "integer_resize_chain", "input is not dequantized from int8")
def truncated_resize_of_a_float_input():
    return module({"x": f32(*NCHW)}, lambda g, x: g.q(truncated_resize(g, x), STORED))


@example("resize.integer_resize_chain: truncated resize whose stored-value...",
         "resize2d_integer", "integer_resize_chain",
         "truncated resize whose stored-value parameters change")
def truncated_resize_to_another_zero_point():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(
        truncated_resize(g, g.dq(x, STORED)), ONE))


@example("resize.integer_resize_chain: truncated nearest resize", "resize2d_integer",
         "integer_resize_chain", "truncated nearest resize")
def truncated_nearest_resize():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(truncated_resize(
        g, g.dq(x, STORED), method="nearest_neighbor", rounding_method="floor"), STORED))


@example("resize.integer_resize_chain: onnxruntime's integer bilinear Resize...",
         "resize2d_integer", "integer_resize_chain", "folded only where the weights are "
         "multiples of 1/256")
def truncated_resize_by_a_third():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(
        truncated_resize(g, g.dq(x, STORED), size=(6, 6)), STORED))


# -- selection
@example("select._operand: {what} is neither dequantized from int8...",
         "extremum", "extremum_operands", "operand 1 is neither dequantized from int8")
def maximum_with_a_float_input():
    return module({"a": i8(*NCHW), "b": f32(*NCHW)},
                  lambda g, a, b: g.q(g(r.maximum(g.dq(a), b))))


@example("select._operand: {what} holds NaN", "extremum", "extremum_operands",
         "operand 2 holds NaN")
def maximum_of_two_tensors_and_nan():
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, lambda g, a, b: g.q(g(r.maximum(
        g(r.maximum(g.dq(a), g.dq(b))), scalar(math.nan)))))


@example("select.extremum_operands: every operand is a constant", "extremum",
         "extremum_operands", "every operand is a constant")
def maximum_of_constants():
    return module({"a": i8(*NCHW)},
                  lambda g, a: (g.q(g(r.maximum(scalar(1.0), scalar(2.0)))), g.q(g.dq(a))))


@example("select.extremum_operands: a scalar constant changes the output's...", "extremum",
         "extremum_operands", "a scalar constant changes the output's rank")
def maximum_with_a_constant_of_higher_rank():
    return module({"a": i8(4)},
                  lambda g, a: g.q(g(r.maximum(g.dq(a), scalar([[0.5]])))))


@example("select.extremum_operands#3",
         "extremum", "extremum_operands",
         "operands with other parameters than the output's under q31_double", numerics=TFLITE)
def tflite_maximum_of_differently_quantized_operands():
    return module({"a": i8(*NCHW), "b": i8(*NCHW)}, lambda g, a, b: g.q(g(r.maximum(
        g.dq(a), g.dq(b, W)))), source="tflite")


# -- softmax
def softmax(g: G, x, **attrs):
    return g(r.nn.softmax(x, **attrs))


@example("softmax.tflite_softmax: the softmax result has other users...",
         "softmax", "softmax_chain", "TFLite's SOFTMAX writes only the quantized result",
         numerics=TFLITE)
def tflite_softmax_quantized_twice():
    def body(g, x):
        y = softmax(g, g.dq(x))
        return g.q(y, SOFTMAX_OUT), g.q(y, Y)
    return module({"x": i8(*NCHW)}, body, source="tflite")


@example("softmax.tflite_softmax: input is not dequantized from", "softmax", "softmax_chain",
         "input is not dequantized from int8 (times a float32 beta)", numerics=TFLITE)
def tflite_softmax_of_a_float_input():
    return module({"x": f32(*NCHW)}, lambda g, x: g.q(softmax(g, x), SOFTMAX_OUT),
                  source="tflite")


@example("softmax.tflite_softmax: TFLite's 8-bit SOFTMAX needs one type:", "softmax",
         "softmax_chain", "TFLite's 8-bit SOFTMAX needs one type: uint8 input, int8 output",
         numerics=TFLITE)
def tflite_softmax_from_uint8_to_int8():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(softmax(g, g.dq(x, stored="uint8")),
                                                     SOFTMAX_OUT), source="tflite")


@example("softmax.tflite_softmax: TFLite's int8 SOFTMAX requires output...",
         "softmax", "softmax_chain", "TFLite's int8 SOFTMAX requires output (1/256, -128)",
         numerics=TFLITE)
def tflite_softmax_to_another_scale():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(softmax(g, g.dq(x)), Y), source="tflite")


@example("softmax.tflite_softmax#5",
         "softmax", "softmax_chain", "TFLite's SOFTMAX requires in_scale * beta * 2^26 > 1",
         numerics=TFLITE)
def tflite_softmax_of_a_tiny_scale():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(softmax(
        g, g.dq(x, QParams.make(1e-9, 0))), SOFTMAX_OUT), source="tflite")


@example("softmax.softmax_chain: {UNFUSED}the softmax result has other...", "softmax",
         "softmax_chain", "does not fuse this group into QLinearSoftmax (it runs float "
         "Softmax then QuantizeLinear): the softmax result has other users")
def onnx_softmax_quantized_twice():
    def body(g, x):
        y = softmax(g, g.dq(x))
        return g.q(y, SOFTMAX_OUT), g.q(y, Y)
    return module({"x": i8(*NCHW)}, body)


@example("softmax.softmax_chain: input is not dequantized from int8", "softmax",
         "softmax_chain", "input is not dequantized from int8")
def onnx_softmax_of_a_float_input():
    return module({"x": f32(*NCHW)}, lambda g, x: g.q(softmax(g, x), SOFTMAX_OUT))


@example("softmax.softmax_chain: the softmax arithmetic of", "softmax", "softmax_chain",
         "the softmax arithmetic of torch is not implemented")
def softmax_of_a_torch_program():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(softmax(g, g.dq(x)), SOFTMAX_OUT),
                  source="torch")


@example("softmax.softmax_chain: {UNFUSED}a relu/clip the output...",
         "softmax", "softmax_chain", "a relu/clip the output quantization does not imply")
def onnx_softmax_then_a_relu_that_clamps():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(g(r.nn.relu(softmax(g, g.dq(x)))),
                                                     QParams.make(1 / 256, 0)))


@example("softmax.softmax_chain: {UNFUSED}{source} input,...",
         "softmax", "softmax_chain", "uint8 input, int8 output")
def onnx_softmax_from_uint8_to_int8():
    return module({"x": i8(*NCHW)}, lambda g, x: g.q(softmax(g, g.dq(x, stored="uint8")),
                                                     SOFTMAX_OUT))


# ---------------------------------------------------------------- sites no report shows
# Sites no well-formed module reaches: why, and what input it would take.
UNREACHED: dict[str, str] = {
    "compute.conv_transpose_checks: transposed convolution to an int32...": (
        "the conv2d_transpose rule roots only at relax.quantize (no astype root, unlike "
        "conv2d_integer), and relax.quantize refuses an int32 output ('Unsupported output "
        "datatype'), so its chain never ends in an int32 output; it would take an int32 "
        "quantize, or a conv2d_transpose_integer rule rooted at astype"),
    "compute.matmul_checks: 0-d matmul operand": (
        "Relax's matmul refuses 0-d operands ('Matmul operands must not be scalar'), so no "
        "matmul call has one"),
}

# Sites an example reaches (a rule returns the decline) whose reason the report never shows:
# what the decline names is no float island's variable. Their examples pin that they are
# reached.
UNREPORTED: dict[str, str] = {}


# ---------------------------------------------------------------- the tests
@functools.cache
def reported(site: str) -> tuple[tuple[Declined, bool], ...]:
    """Every decline the rules returned converting the example of ``site``, and whether the
    report shows it: a near miss of the island at the variable it names."""
    ex = EXAMPLES[site]
    report, returned = convert(ex.build(), ex.numerics)
    return tuple((d, d.var is not None and d.miss in report.near_misses.get(d.var, []))
                 for d in returned)


@pytest.mark.parametrize("site", sorted(EXAMPLES))
def test_each_example_reports_its_decline_as_a_near_miss(site):
    ex = EXAMPLES[site]
    ours = [(d, shown) for d, shown in reported(site) if d.site == site]
    assert ours, f"no rule returned a decline made at {site}: {reported(site)}"
    hits = [shown for d, shown in ours if (d.miss.rule, d.miss.step) == (ex.rule, ex.step)
            and ex.reason in d.miss.reason]
    assert hits, f"{site}: no {ex.rule}/{ex.step} decline with '{ex.reason}' in {ours}"
    if site in UNREPORTED:
        assert not any(hits), f"{site} is reported now: drop it from UNREPORTED"
    else:
        assert any(hits), f"{site} declined but the report shows no such near miss"


def test_every_decline_site_is_reported_by_an_example_or_listed_with_why_not():
    sites = set(decline_sites())
    shown = {d.site for site in EXAMPLES for d, seen in reported(site) if seen}
    reached = {d.site for site in EXAMPLES for d, _ in reported(site)}
    for listed, what in ((EXAMPLES, "examples"), (UNREACHED, "UNREACHED"),
                         (UNREPORTED, "UNREPORTED")):
        assert not set(listed) - sites, f"{what} names sites that no longer exist"
    assert not reached & set(UNREACHED), "UNREACHED lists sites an example reaches"
    assert not shown & set(UNREPORTED), "UNREPORTED lists sites a report shows"
    assert not set(UNREPORTED) - reached, "UNREPORTED lists sites no example reaches"
    missing = sites - shown - set(UNREACHED) - set(UNREPORTED)
    assert not missing, f"sites no example reports: {sorted(missing)}"


def test_site_names_are_unique_and_do_not_move_with_lines():
    for path in sorted(REWRITES.glob("*.py")):
        text = path.read_text()
        names = [s.name for s in sites_of(text, path.stem)]
        calls = [n for n in ast.walk(ast.parse(text)) if _is_decline(n)]
        assert len(names) == len(set(names)) == len(calls), path.stem
        shifted = "\n\n\ndef _elsewhere():\n    return None\n\n" + text + "\n# the end\n"
        assert [s.name for s in sites_of(shifted, path.stem)] == names, path.stem


def test_an_argmax_left_in_float_is_a_named_island():
    # an argmax of dequantized values computes in float though its result is int64: the report
    # names it, with the argmax rule's reason, rather than reporting no float island
    mod = module({"x": i8(*NCHW)}, lambda g, x: g(r.argmax(g.dq(x))))
    _, report = canonqnn.canonicalize(mod, numerics="exact")
    (island,) = report.float_islands
    assert island.op == "relax.argmax" and "argmax over the flattened tensor" in island.reason
    assert [m.rule for m in report.near_misses[island.var]] == ["argmax"]


def test_a_nearest_rounding_resize2d_refuses_is_declined_with_its_reason():
    _, report = canonqnn.canonicalize(nearest_resize_rounding_half_away(), numerics="exact")
    reasons = [m.reason for ms in report.near_misses.values() for m in ms if m.rule == "resize2d"]
    assert "nearest_mode 'round' is not supported" in reasons, reasons


def test_negative_padding_canonqnn_pad_refuses_is_declined_with_its_reason():
    _, report = canonqnn.canonicalize(pad_with_a_negative_width(), numerics="exact")
    reasons = [m.reason for ms in report.near_misses.values() for m in ms if m.rule == "pad"]
    assert "negative padding (cropping)" in reasons, reasons
