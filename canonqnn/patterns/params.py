"""Typed quantization parameters and attributes of one canonical op call.

``params_of(call)`` reads any ``relax.canonqnn.*`` call into an ``OpParams``: the per-tensor
quantization of each int8 input and of the output, the weight quantization per output channel,
the integer clamp, the rounding mode, the layouts, the shapes, the constant tensors and every
attribute verbatim. The mapping follows the registry's naming contract (``docs/spec.md``):

    x_scale/x_zp, in_scale/in_zp      the one quantized input
    a_scale/a_zp [, b_scale/b_zp]     the quantized inputs of binary ops (matmul: only ``a``)
    in_scales/in_zps                  one per input of a variadic op (concat)
    scale/zp                          ops that keep their input's parameters
    out_scale/out_zp                  the output
    w_scale/w_zp, b_scale/b_zp args   the weights of conv2d, conv2d_transpose and matmul
    act_min/act_max                   the integer clamp of the output

Every registered op is checked against this contract by the tests, so a new op that does not
follow it fails there rather than in a pattern author's check function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import _tvm
from ..ops import REGISTRY, lookup


@dataclass(frozen=True)
class Quant:
    """Per-tensor quantization: ``real = scale * (q - zero_point)``."""

    scale: float
    zero_point: int


@dataclass(frozen=True, eq=False)
class WeightQuant:
    """Weight quantization along the output-channel axis.

    ``scale`` (float32) and ``zero_point`` (int32) always have one entry per output channel;
    ``per_channel`` says whether the model gave one value per channel or one for the tensor.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    per_channel: bool

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WeightQuant):
            return NotImplemented
        return (self.per_channel == other.per_channel
                and np.array_equal(self.scale, other.scale)
                and np.array_equal(self.zero_point, other.zero_point))

    __hash__ = None  # type: ignore[assignment]  # arrays: mutable, unhashable

    @property
    def symmetric(self) -> bool:
        """All zero points are 0."""
        return not bool(np.any(self.zero_point))


@dataclass(frozen=True, eq=False)
class OpParams:
    """What a pattern author needs to know about one canonical op call (compare fields, not
    whole objects: ``constants`` holds arrays).

    ``epilogue`` is set for fused groups (``conv2d`` followed by ``lut``, ...): the compute
    op's own parameters are the fields of this object, the lookup table's are
    ``epilogue``'s, and ``final_output`` is the group's output quantization.
    """

    op: str                                  # canonical op name, e.g. "conv2d"
    inputs: tuple[Quant, ...]                # each int8 activation input, in argument order
    output: Quant | None                     # None when the result is not quantized (argmax)
    weight: WeightQuant | None               # conv2d, conv2d_transpose, matmul
    clamp: tuple[int, int] | None            # (act_min, act_max) in output integers
    rounding: str | None                     # "rne_f32" | "q31_double" | "q31_single"
    layout: str | None                       # "NCHW" for 4-D activation ops
    weight_layout: str | None                # "OIHW" | "IOHW" | "KN"
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    output_dtype: str
    attrs: Mapping[str, Any]                 # every attribute of the call, as Python values
    constants: Mapping[str, np.ndarray]      # constant tensor arguments by argument name
    weight_shape: tuple[int, ...] | None = None  # w (conv) or b (matmul), constant or not
    epilogue: OpParams | None = field(default=None)

    # -- the names pattern authors look for
    @property
    def input_scale(self) -> float:
        return self._single_input().scale

    @property
    def input_zp(self) -> int:
        return self._single_input().zero_point

    @property
    def output_scale(self) -> float:
        return self._output().scale

    @property
    def output_zp(self) -> int:
        return self._output().zero_point

    @property
    def weight_scale(self) -> np.ndarray:
        return self._weight().scale

    @property
    def weight_zp(self) -> np.ndarray:
        return self._weight().zero_point

    @property
    def act_min(self) -> int | None:
        return None if self.clamp is None else self.clamp[0]

    @property
    def act_max(self) -> int | None:
        return None if self.clamp is None else self.clamp[1]

    @property
    def final_output(self) -> Quant | None:
        """The quantization of what the matched group returns."""
        return self.epilogue.final_output if self.epilogue is not None else self.output

    @property
    def depthwise(self) -> bool:
        """A grouped conv2d with one input and one output channel per group."""
        if self.op != "conv2d":
            return False
        groups = int(self.attrs["groups"])
        return groups > 1 and self.input_shapes[0][1] == groups == self.output_shape[1]

    def summary(self) -> str:
        """One line: op, quantization, clamp, rounding, layouts (and the epilogue's)."""
        parts = [self.op, "in " + ", ".join(f"{q.scale:.6g}/{q.zero_point}" for q in self.inputs)]
        if self.weight is not None:
            kind = f"per-channel[{self.weight.scale.size}]" if self.weight.per_channel \
                else f"{float(self.weight.scale[0]):.6g}"
            parts.append(f"w {kind}{' symmetric' if self.weight.symmetric else ' zp'}")
        if self.output is not None:
            parts.append(f"out {self.output.scale:.6g}/{self.output.zero_point}")
        if self.clamp is not None:
            parts.append(f"clamp [{self.clamp[0]}, {self.clamp[1]}]")
        parts.extend(v for v in (self.rounding, self.layout, self.weight_layout) if v)
        line = " ".join(parts)
        return line if self.epilogue is None else f"{line} -> {self.epilogue.summary()}"

    # -- helpers raising clear errors instead of returning a wrong field
    def _single_input(self) -> Quant:
        if len(self.inputs) != 1:
            raise AttributeError(f"{self.op} has {len(self.inputs)} quantized inputs; "
                                 f"read them from .inputs")
        return self.inputs[0]

    def _output(self) -> Quant:
        if self.output is None:
            raise AttributeError(f"{self.op} has no quantized output")
        return self.output

    def _weight(self) -> WeightQuant:
        if self.weight is None:
            raise AttributeError(f"{self.op} has no weights")
        return self.weight


def params_of(call: Any) -> OpParams:
    """The typed parameters of a ``relax.canonqnn.*`` call."""
    op = lookup(call)
    if op is None:
        raise TypeError(f"not a canonical op call: {_tvm.op_name(call) or type(call).__name__}")
    attrs = _tvm.attrs_dict(call)
    if op.args[0].startswith("*"):  # variadic (concat): every argument is an input
        args = {f"{op.args[0][1:]}{k}": arg for k, arg in enumerate(call.args)}
    else:
        args = dict(zip(op.args, call.args))
    inputs, input_names = _inputs(op.name, attrs)
    if input_names == ("*",):
        input_names = tuple(args)
    output = _output(attrs, call)
    weight = _weight(op.name, args, call)
    constants = {name: _tvm.const_value(expr) for name, expr in args.items()
                 if _tvm.is_const(expr)}
    shapes: list[tuple[int, ...]] = []
    for name in input_names:
        shapes.extend(shape for _, shape in _tvm.tensor_types(args[name]))
    (out_dtype, out_shape), = _tvm.tensor_types(call)
    weight_arg = next((name for name in ("w", "b") if f"{name}_scale" in args), None)
    weight_shape = _tvm.tensor_types(args[weight_arg])[0][1] if weight_arg else None
    clamp = (int(attrs["act_min"]), int(attrs["act_max"])) if "act_min" in attrs else None
    return OpParams(op=op.name, inputs=inputs, output=output, weight=weight, clamp=clamp,
                    rounding=attrs.get("rounding"), layout=op.layout,
                    weight_layout=op.weight_layout, input_shapes=tuple(shapes),
                    output_shape=out_shape, output_dtype=out_dtype, attrs=attrs,
                    constants=constants, weight_shape=weight_shape)


def with_epilogue(root: OpParams, epilogue: OpParams) -> OpParams:
    """``root`` with the parameters of the op fused after it."""
    return replace(root, epilogue=epilogue)


def _inputs(op: str, attrs: dict[str, Any]) -> tuple[tuple[Quant, ...], tuple[str, ...]]:
    """The quantized inputs and the argument names that hold them."""
    if "in_scales" in attrs:
        quants = tuple(Quant(float(s), int(z)) for s, z in zip(attrs["in_scales"],
                                                                attrs["in_zps"]))
        return quants, ("*",)
    for scale, zp in (("x_scale", "x_zp"), ("in_scale", "in_zp"), ("scale", "zp")):
        if scale in attrs:  # the one quantized input, argument x
            return (Quant(float(attrs[scale]), int(attrs[zp])),), ("x",)
    if "a_scale" in attrs:
        a = Quant(float(attrs["a_scale"]), int(attrs["a_zp"]))
        if "b_scale" in attrs:
            return (a, Quant(float(attrs["b_scale"]), int(attrs["b_zp"]))), ("a", "b")
        return (a,), ("a",)
    if REGISTRY[op].family == "dynamic":  # a float input, quantized at run time
        return (), ()
    raise TypeError(f"canonical op {op} does not follow the parameter naming contract")


def _output(attrs: dict[str, Any], call: Any) -> Quant | None:
    if "out_scale" in attrs:
        return Quant(float(attrs["out_scale"]), int(attrs["out_zp"]))
    (dtype, _), = _tvm.tensor_types(call)
    if "scale" in attrs and dtype in ("int8", "uint8", "int16"):
        return Quant(float(attrs["scale"]), int(attrs["zp"]))
    return None


def _weight(op: str, args: dict[str, Any], call: Any) -> WeightQuant | None:
    for prefix in ("w", "b"):
        scale_arg = f"{prefix}_scale"
        if scale_arg not in args:
            continue
        if not (_tvm.is_const(args[scale_arg]) and _tvm.is_const(args[f"{prefix}_zp"])):
            raise TypeError(f"{op}: weight scale and zero point must be constants")
        scale = _tvm.const_value(args[scale_arg]).astype(np.float32).reshape(-1)
        zp = _tvm.const_value(args[f"{prefix}_zp"]).astype(np.int32).reshape(-1)
        channels = _output_channels(op, call)
        return WeightQuant(np.broadcast_to(scale, (channels,)).copy(),
                           np.broadcast_to(zp, (channels,)).copy(),
                           per_channel=scale.size > 1 or zp.size > 1)
    return None


def _output_channels(op: str, call: Any) -> int:
    (_, shape), = _tvm.tensor_types(call)
    return shape[1] if REGISTRY[op].layout == "NCHW" else shape[-1]
