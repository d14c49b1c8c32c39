"""What the op converters do not cover: constant folding and float ops through TVM's importer.

- **Folding**: a default-domain node whose inputs are all known at import time (initializers,
  shapes of static tensors, results of other folded nodes) is evaluated once by onnx's
  reference evaluator, so shape subgraphs (Shape -> Gather -> Concat -> Reshape, Range,
  ConstantOfShape, Cast of shapes) never reach the module. Quantization ops are never folded:
  a dequantized constant weight is the pattern the rules fold.
- **Float ops**: an op with no canonqnn converter is converted by TVM's own ONNX converter when
  TVM has one; it is float (or integer index) arithmetic outside the quantized regions, which the
  Report then names as a float island. canonqnn's converters take precedence: they write the
  forms the rules match (and reject attributes TVM would ignore).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from canonqnn import _tvm, budget

from . import _tvm_onnx
from ._context import ONNX_DTYPE, ImportContext, Unsupported, Value

# Never folded: the quantization structure the rules read, and ops with no fixed value.
QUANTIZATION_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                              "MatMulInteger", "ConvInteger", "QGemm"})
NONDETERMINISTIC = ("Random", "Bernoulli", "Multinomial")
# A folded tensor bigger than this stays a run-time op (a 2^30-element ConstantOfShape would
# otherwise be materialized at import and stored in the module).
MAX_FOLDED_ELEMENTS = 1 << 24


def foldable(node: onnx.NodeProto, inputs: list[Value | None]) -> bool:
    if node.domain not in ("", "ai.onnx") or _quantization_op(node.op_type) or \
            node.op_type.startswith(NONDETERMINISTIC):
        return False
    present = [v for v in inputs if v is not None]
    return all(v.const is not None and v.qparams is None for v in present)


def fold(ctx: ImportContext, node: onnx.NodeProto, inputs: list[Value | None]) -> list[Value]:
    """The node evaluated on its constant inputs."""
    feeds = {name: value.const for name, value in zip(node.input, inputs) if name}
    size = _result_size(node.op_type, [None if v is None else np.asarray(v.const)
                                       for v in inputs])
    if size is not None and size > MAX_FOLDED_ELEMENTS:  # known before it is made
        raise Unsupported(f"a constant result of {size} elements is too large to fold")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluator = ReferenceEvaluator(node, opsets={"": ctx.opset})
            results = evaluator.run(None, feeds)
    except Exception as exc:  # noqa: BLE001  (the evaluator's own message names the problem)
        raise Unsupported(f"cannot evaluate on its constant inputs: {type(exc).__name__}: "
                          f"{exc}") from None
    out = []
    for result in results:
        array = np.asarray(result)
        if array.size > MAX_FOLDED_ELEMENTS:
            raise Unsupported(f"a constant result of {array.size} elements is too large to fold")
        if str(array.dtype) not in ONNX_DTYPE.values():
            raise Unsupported(f"constant result of dtype {array.dtype}")
        out.append(Value(const=array, dtype=str(array.dtype)))
    return out


def _result_size(op_type: str, inputs: list[np.ndarray | None]) -> int | None:
    """The element count of what the ops that make tensors from their inputs' values would
    make (None for other ops, whose results are no larger than their inputs combined), in
    Python integers: a 16-byte shape can ask for 2^60 elements."""
    def dims(k: int) -> list[int]:
        value = inputs[k] if k < len(inputs) else None
        return [] if value is None else [max(int(d), 0) for d in value.reshape(-1)]

    def count(shape) -> int:
        return budget.elements([max(int(d), 0) for d in shape])

    x = inputs[0] if inputs else None
    if op_type == "ConstantOfShape":
        return count(dims(0))
    if op_type == "Expand" and x is not None:
        shape, given = list(x.shape), dims(1)
        rank = max(len(shape), len(given))
        shape, given = [1] * (rank - len(shape)) + shape, [1] * (rank - len(given)) + given
        return count(max(a, b) for a, b in zip(shape, given))
    if op_type == "Tile" and x is not None:
        return count(a * b for a, b in zip(x.shape, dims(1)))
    if op_type == "Pad" and x is not None:
        pads = dims(1)
        if len(pads) == 2 * x.ndim:
            return count(d + pads[k] + pads[k + x.ndim] for k, d in enumerate(x.shape))
    if op_type == "Range" and len(inputs) == 3 and all(v is not None for v in inputs):
        start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in inputs)
        if delta != 0 and np.isfinite([start, limit, delta]).all():
            return max(int(np.ceil((limit - start) / delta)), 0)
    return None


# Ops TVM converts whose ONNX result has a size known only at run time: TVM pads it to a fixed
# size (NonMaxSuppression: max_output_boxes per class for every class), which is not what
# onnxruntime returns and not a shape canonqnn's static interface can declare.
RUN_TIME_SIZED = {"NonMaxSuppression", "NonZero", "Unique", "Compress"}


def refusal(op_type: str, opset: int) -> str | None:
    """Why a default-domain op with no canonqnn converter cannot be imported, else None."""
    if op_type in RUN_TIME_SIZED:
        return ("its result has a size known only at run time (canonqnn builds static "
                "shapes; TVM would pad it)")
    if not has_float_converter(op_type, opset):
        return "operator is not supported by canonqnn or TVM's ONNX importer"
    return None


def has_float_converter(op_type: str, opset: int) -> bool:
    """TVM converts the op and it is not a quantization op (those need canonqnn's own forms:
    TVM's would hide the integer arithmetic from the rules)."""
    return not _quantization_op(op_type) and _tvm_onnx.onnx_converter(op_type, opset) is not None


def _quantization_op(op_type: str) -> bool:
    return op_type in QUANTIZATION_OPS or op_type.startswith("QLinear")


def float_op(ctx: ImportContext, node: onnx.NodeProto, inputs: list[Value | None]) -> list[Value]:
    """The node as TVM's ONNX importer converts it."""
    why = refusal(node.op_type, ctx.opset)
    if why is not None:
        raise Unsupported(why)
    converter = _tvm_onnx.onnx_converter(node.op_type, ctx.opset)
    exprs = _tvm_onnx.onnx_input_list([None if v is None else ctx.expr(v) for v in inputs])
    try:
        result = converter(ctx.bb, exprs, _tvm_onnx.onnx_attributes(node))
        outputs = _tvm.normalize_outputs(ctx.bb, result)
    except Exception as exc:  # noqa: BLE001  (TVM's converters assert; name the node instead)
        raise Unsupported(f"TVM's ONNX converter failed: {type(exc).__name__}: {exc}") from None
    if len(outputs) < len(node.output):
        raise Unsupported(f"TVM's converter gives {len(outputs)} outputs, the node has "
                          f"{len(node.output)}")
    return [Value(expr=o, dtype=_tvm.dtype_of(o)) for o in outputs]
