"""A canonical module written as a TFLite flatbuffer: the same network, with the same weights and
quantization parameters, for TFLite's interpreter (``benchmarks/runtime.py`` times it beside
canonqnn's build of the module).

    mod, _ = canonqnn.canonicalize(canonqnn.load(quantized_onnx))
    form = tflite_from_canonical.write(mod)          # TfliteForm
    interpreter = Interpreter(model_content=form.data)
    interpreter.set_tensor(..., form.inputs([x])[0])  # NCHW -> NHWC where the module has images

Each canonical op becomes the TFLite builtin that computes it: ``conv2d`` a CONV_2D, or a
DEPTHWISE_CONV_2D when each group is one input channel (OIHW weights to OHWI / 1HWO, the
per-channel scales on the output-channel axis, the int32 bias at ``x_scale * w_scale``, the op's
clamp as the fused activation it equals); ``add``/``mul`` ADD/MUL (a constant operand a constant
tensor); ``global_avg_pool2d`` a MEAN over H and W; ``max_pool2d``, ``reshape``, ``transpose``,
``softmax`` their builtins; ``matmul`` a FULLY_CONNECTED when its weights are constant (per-channel
int8 weights, keep_num_dims), else a BATCH_MATMUL; ``lut`` the builtin of the function its table
computes (GELU). The model's float boundary stays float: QUANTIZE after the input, DEQUANTIZE
before the output. A float layer normalization (a float island of the module) is written as
TFLite's float ops (MEAN, SUB, MUL, RSQRT, ADD) between DEQUANTIZE and QUANTIZE.

Image tensors are NHWC (``TfliteForm`` records each input's and output's permutation); an
explicit padding that TFLite's SAME does not cover becomes a PAD in front of a VALID op (before
a max pool: with -128, a PADV2 unless -128 is the zero point). Where TFLite fixes an op's output
parameters (int8 SOFTMAX: 1/256, -128) or a consumer reads a tensor at other parameters than its
producer wrote, a requantizing QUANTIZE keeps the canonical parameters. The arithmetic is
TFLite's, so outputs differ from canonqnn's by rounding steps; the network is the same. Anything
else raises ``NotExpressible`` naming the op and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _tvm
from ..errors import CanonqnnError
from .tflite_writer import GraphWriter

NHWC = (0, 2, 3, 1)  # the TFLite tensor of a canonical NCHW tensor: np.transpose(x, NHWC)
INT8 = (-128, 127)
SOFTMAX_OUT = (1.0 / 256, -128)  # int8 SOFTMAX's output parameters, fixed by its kernel
LUT_BUILTINS: dict[str, tuple[str, dict[str, Any]]] = {"gelu": ("GELU", {"approximate": False})}


class NotExpressible(CanonqnnError):
    """A canonical op, or its parameters, that no TFLite builtin computes."""


@dataclass
class TfliteForm:
    """The flatbuffer and the layout of its inputs and outputs: TFLite tensor =
    ``np.transpose(canonical tensor, perm)``."""

    data: bytes
    input_perms: list[tuple[int, ...]]
    output_perms: list[tuple[int, ...]]

    def inputs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.transpose(a, p)) for a, p in zip(arrays, self.input_perms)]

    def outputs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [np.transpose(a, np.argsort(p)) for a, p in zip(arrays, self.output_perms)]


@dataclass
class _Value:
    """A tensor written so far: its index, its permutation from the canonical layout, the
    canonical shape, dtype and (quantized) parameters."""

    index: int
    perm: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    scale: float | None = None
    zp: int | None = None

    @property
    def tflite_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[p] for p in self.perm)


def write(mod: Any) -> TfliteForm:
    """``mod``'s ``main`` as a TFLite flatbuffer (see the module doc)."""
    return _Writer(mod).form


def _identity(ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim))


def _f32(x: Any) -> float:
    return float(np.float32(x))


def _round_away(x: float) -> int:
    """TFLite's ``TfLiteRound``: half away from zero."""
    return int(np.sign(x) * np.floor(abs(x) + 0.5))


def _fused_activation(act_min: int, act_max: int, scale: float, zp: int) -> str | None:
    """The fused activation whose clamp TFLite computes as [act_min, act_max] for an output at
    (scale, zp) (``CalculateActivationRangeQuantized``), None if none does."""
    def q(v: float) -> int:
        return zp + _round_away(_f32(v / np.float32(scale)))

    lo = max(INT8[0], zp)
    ranges = {"NONE": INT8, "RELU": (lo, INT8[1]), "RELU6": (lo, min(INT8[1], q(6.0))),
              "RELU_N1_TO_1": (max(INT8[0], q(-1.0)), min(INT8[1], q(1.0)))}
    return next((name for name, r in ranges.items() if r == (act_min, act_max)), None)


def _padding(size: tuple[int, int], kernel: tuple[int, int], strides, dilation,
             pads) -> str | None:
    """"VALID" or "SAME" when TFLite's padding of that name is ``pads`` (top, left, bottom,
    right), else None."""
    if not any(pads):
        return "VALID"
    same = []
    for n, k, s, d in zip(size, kernel, strides, dilation):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        same.append((total // 2, total - total // 2))
    return "SAME" if tuple(pads) == (same[0][0], same[1][0], same[0][1], same[1][1]) else None


class _Writer:
    def __init__(self, mod: Any) -> None:
        self.g = GraphWriter()
        self.env: dict[Any, _Value | np.ndarray] = {}
        self.count = 0
        self.var: Any = None  # the binding being written, and its op (how refusals name it)
        self.op = ""
        func = mod["main"]
        inputs = []
        for param in _tvm.function_params(func):
            shape = _tvm.shape_of(param)
            perm = NHWC if len(shape) == 4 else _identity(len(shape))
            value = self._new(_tvm.var_name(param), shape, _tvm.dtype_of(param), perm)
            self.env[param] = value
            inputs.append(value)
        for var, expr in _tvm.function_bindings(func):
            self.var = var
            self.env[var] = self._bind(expr)
        body = func.body.body
        results = [self.env[v] for v in (_tvm.tuple_fields(body) or [body])]
        outputs = [o for o in results if isinstance(o, _Value)]
        if len(outputs) != len(results):
            raise NotExpressible("the module returns a constant")
        self.form = TfliteForm(self.g.finish([v.index for v in inputs],
                                             [o.index for o in outputs]),
                               [v.perm for v in inputs], [o.perm for o in outputs])

    # ------------------------------------------------------------------ tensors
    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def _new(self, name: str, shape, dtype: str, perm: tuple[int, ...],
             scale: float | None = None, zp: int | None = None) -> _Value:
        shape = tuple(int(d) for d in shape)
        value = _Value(-1, tuple(perm), shape, dtype,
                       None if scale is None else _f32(scale), None if zp is None else int(zp))
        value.index = self.g.tensor(name, value.tflite_shape, dtype, scale=value.scale,
                                    zero_point=value.zp)
        return value

    def _out(self, shape, perm, scale: float | None, zp: int | None,
             dtype: str = "int8") -> _Value:
        return self._new(_tvm.var_name(self.var), shape, dtype, perm, scale, zp)

    def _const(self, name: str, data: Any, dtype: str, scale=None, zp=None,
               axis: int = 0) -> int:
        data = np.asarray(data)
        return self.g.tensor(self._name(name), data.shape, dtype, data, scale=scale,
                             zero_point=zp, quantized_dimension=axis)

    def _ints(self, values) -> int:
        return self._const("ints", np.asarray(values, np.int32), "int32")

    def refuse(self, why: str) -> NotExpressible:
        return NotExpressible(f"{self.op} (bound to {_tvm.var_name(self.var)}): {why}")

    # ------------------------------------------------------------------ reading operands
    def _read(self, expr: Any, scale: float | None = None, zp: int | None = None,
              perm: tuple[int, ...] | None = None) -> _Value:
        """``expr``'s tensor, at the parameters (scale, zp) and the permutation asked for
        (a requantizing QUANTIZE, a TRANSPOSE, where the tensor has others)."""
        value = self.env.get(expr) if _tvm.is_var(expr) else None
        if not isinstance(value, _Value):
            raise self.refuse("a constant where TFLite's builtin takes a run-time tensor")
        if scale is not None and (value.scale, value.zp) != (_f32(scale), int(zp or 0)):
            out = self._new(self._name("requantized"), value.shape, value.dtype, value.perm,
                            scale, zp)
            self.g.op("QUANTIZE", [value.index], [out.index])
            value = out
        if perm is not None and value.perm != tuple(perm):
            out = self._new(self._name("transposed"), value.shape, value.dtype, perm,
                            value.scale, value.zp)
            order = [value.perm.index(p) for p in perm]
            self.g.op("TRANSPOSE", [value.index, self._ints(order)], [out.index])
            value = out
        return value

    def _constant(self, expr: Any) -> np.ndarray:
        if _tvm.is_const(expr):
            return _tvm.const_value(expr)
        value = self.env.get(expr)
        if isinstance(value, np.ndarray):
            return value
        raise self.refuse("a run-time tensor where TFLite's builtin takes a constant")

    def _flat_order(self, value: _Value) -> bool:
        """Whether ``value``'s TFLite tensor holds its elements in the canonical order (the
        permutation moves only dimensions of 1)."""
        moved = [p for p in value.perm if value.shape[p] != 1]
        return moved == sorted(moved)

    # ------------------------------------------------------------------ ops
    def _bind(self, expr: Any) -> _Value | np.ndarray:
        if _tvm.is_var(expr):
            return self.env[expr]
        self.op = _tvm.op_name(expr) or type(expr).__name__
        handler = _HANDLERS.get(self.op)
        if handler is None:
            raise self.refuse("no TFLite builtin is written for it")
        return handler(self, expr, _tvm.attrs_dict(expr))

    def _quantize(self, call: Any, a: dict) -> _Value:
        x, scale, zp = call.args
        s, z = self._constant(scale), self._constant(zp)
        if s.size != 1 or a["out_dtype"] != "int8":
            raise self.refuse("only per-tensor int8 quantization is written")
        value = self._read(x)
        out = self._out(value.shape, value.perm, s.item(), int(z.item()))
        self.g.op("QUANTIZE", [value.index], [out.index])
        return out

    def _dequantize(self, call: Any, a: dict) -> _Value | np.ndarray:
        q, scale, zp = call.args
        s, z = self._constant(scale), self._constant(zp)
        if _tvm.is_const(q):  # a float constant (a layer norm's gamma, beta)
            data = _tvm.const_value(q)
            shape = [1] * data.ndim
            if data.ndim:
                shape[a["axis"]] = -1

            def along(v: np.ndarray) -> np.ndarray:
                return v.reshape(shape) if v.size > 1 else v.reshape(())

            diff = data.astype(np.int64) - along(z.astype(np.int64))
            return (diff.astype(np.float32) * along(s.astype(np.float32))).astype(np.float32)
        if s.size != 1:
            raise self.refuse("per-channel dequantization of a run-time tensor")
        value = self._read(q, s.item(), int(z.item()))
        out = self._out(value.shape, value.perm, None, None, "float32")
        self.g.op("DEQUANTIZE", [value.index], [out.index])
        return out

    def _layer_norm(self, call: Any, a: dict) -> _Value:
        x, gamma, beta = call.args
        value = self._read(x)
        last = len(value.shape) - 1
        if [d % len(value.shape) for d in a["axes"]] != [last] or value.perm[-1] != last:
            raise self.refuse("only a layer norm over the last axis is written")

        reduced = (*value.shape[:-1], 1)

        def float_op(kind: str, inputs: list[int], shape=value.shape, **options: Any) -> int:
            out = self._new(self._name("layer_norm"), shape, "float32", value.perm)
            self.g.op(kind, inputs, [out.index], **options)
            return out.index

        axis = self._ints([last])
        mean = float_op("MEAN", [value.index, axis], reduced, keepDims=True)
        diff = float_op("SUB", [value.index, mean], fusedActivationFunction="NONE")
        square = float_op("MUL", [diff, diff], fusedActivationFunction="NONE")
        variance = float_op("MEAN", [square, axis], reduced, keepDims=True)
        eps = self._const("epsilon", np.float32(a["epsilon"]), "float32")
        inverse = float_op("RSQRT", [float_op("ADD", [variance, eps], reduced,
                                              fusedActivationFunction="NONE")], reduced)
        y = float_op("MUL", [diff, inverse], fusedActivationFunction="NONE")
        if a.get("scale", True):
            g = self._const("gamma", self._constant(gamma), "float32")
            y = float_op("MUL", [y, g], fusedActivationFunction="NONE")
        if a.get("center", True):
            b = self._const("beta", self._constant(beta), "float32")
            y = float_op("ADD", [y, b], fusedActivationFunction="NONE")
        out = _Value(y, value.perm, value.shape, "float32")
        return out

    def _activation(self, a: dict, scale_key: str = "out_scale", zp_key: str = "out_zp") -> str:
        fused = _fused_activation(a["act_min"], a["act_max"], a[scale_key], a[zp_key])
        if fused is None:
            raise self.refuse(f"clamp [{a['act_min']}, {a['act_max']}] is no fused activation "
                              "of TFLite at this output's parameters")
        return fused

    def _conv2d(self, call: Any, a: dict) -> _Value:
        x, w, bias, w_scale, w_zp = call.args
        weights, scales = self._constant(w), self._constant(w_scale).astype(np.float32)
        if np.any(self._constant(w_zp)) or a["out_dtype"] != "int8":
            raise self.refuse("weights with a zero point or a non-int8 output")
        value = self._read(x, a["x_scale"], a["x_zp"], NHWC)
        o, cg, kh, kw = weights.shape
        channels = value.shape[1]
        scales = np.broadcast_to(scales.reshape(-1), (o,)).astype(np.float32)
        name = _tvm.var_name(self.var)
        if a["groups"] == 1:
            kind, axis = "CONV_2D", 0
            filt = weights.transpose(0, 2, 3, 1)
        elif a["groups"] == channels and cg == 1:
            kind, axis = "DEPTHWISE_CONV_2D", 3
            filt = weights.reshape(o, kh, kw).transpose(1, 2, 0)[None]
        else:
            raise self.refuse(f"grouped convolution ({a['groups']} groups)")
        wt = self._const(name + "_w", filt, "int8", scales, np.zeros(o, np.int64), axis)
        bias_scales = (np.float32(a["x_scale"]) * scales).astype(np.float32)
        bt = self._const(name + "_b", self._constant(bias).astype(np.int32), "int32",
                         bias_scales, np.zeros(o, np.int64))
        padding, source = self._pad(value, (kh, kw), a["strides"], a["dilation"],
                                    a["padding"], None)
        n, _, h, wd = self._shape()
        out = self._out((n, o, h, wd), NHWC, a["out_scale"], a["out_zp"])
        options: dict[str, Any] = dict(
            padding=padding, strideH=a["strides"][0], strideW=a["strides"][1],
            dilationHFactor=a["dilation"][0], dilationWFactor=a["dilation"][1],
            fusedActivationFunction=self._activation(a))
        if kind == "DEPTHWISE_CONV_2D":
            options["depthMultiplier"] = o // channels
        self.g.op(kind, [source, wt, bt], [out.index], **options)
        return out

    def _shape(self) -> tuple[int, ...]:
        """The canonical shape of the value being written."""
        return tuple(_tvm.shape_of(self.var))

    def _pad(self, value: _Value, kernel, strides, dilation, pads,
             pad_value: int | None) -> tuple[str, int]:
        """The padding option, and the input (a PAD's output when TFLite's SAME does not
        pad as ``pads`` does). ``pad_value`` None pads with the zero point."""
        size = (value.shape[2], value.shape[3])
        named = _padding(size, kernel, strides, dilation, pads)
        if named is not None:
            return named, value.index
        top, left, bottom, right = pads
        n, c, h, w = value.shape
        padded = self._new(self._name("padded"), (n, c, h + top + bottom, w + left + right),
                           "int8", NHWC, value.scale, value.zp)
        widths = self._ints([[0, 0], [top, bottom], [left, right], [0, 0]])
        if pad_value is None or pad_value == value.zp:  # PAD pads with the zero point
            self.g.op("PAD", [value.index, widths], [padded.index])
        else:
            fill = self._const("pad_value", np.int8(pad_value), "int8", value.scale, value.zp)
            self.g.op("PADV2", [value.index, widths, fill], [padded.index])
        return "VALID", padded.index

    def _max_pool2d(self, call: Any, a: dict) -> _Value:
        if a["ceil_mode"] or tuple(a["dilation"]) != (1, 1):
            raise self.refuse("ceil mode or dilation")
        value = self._read(call.args[0], a["scale"], a["zp"], NHWC)
        kh, kw = a["pool_size"]
        padding, source = self._pad(value, (kh, kw), a["strides"], (1, 1), a["padding"],
                                    INT8[0])
        out = self._out(self._shape(), NHWC, a["scale"], a["zp"])
        self.g.op("MAX_POOL_2D", [source], [out.index], padding=padding,
                  strideH=a["strides"][0], strideW=a["strides"][1], filterHeight=kh,
                  filterWidth=kw, fusedActivationFunction="NONE")
        return out

    def _global_avg_pool2d(self, call: Any, a: dict) -> _Value:
        if (a["act_min"], a["act_max"]) != INT8:
            raise self.refuse("a clamp after the mean (MEAN has no fused activation)")
        value = self._read(call.args[0], a["x_scale"], a["x_zp"], NHWC)
        out = self._out(self._shape(), NHWC, a["out_scale"], a["out_zp"])
        self.g.op("MEAN", [value.index, self._ints([1, 2])], [out.index], keepDims=True)
        return out

    def _reshape(self, call: Any, a: dict) -> _Value:
        value = self._read(call.args[0], a["scale"], a["zp"])
        if not self._flat_order(value):
            value = self._read(call.args[0], a["scale"], a["zp"], _identity(len(value.shape)))
        shape = [int(d) for d in a["newshape"]]
        out = self._out(shape, _identity(len(shape)), a["scale"], a["zp"])
        self.g.op("RESHAPE", [value.index, self._ints(shape)], [out.index], newShape=shape)
        return out

    def _transpose(self, call: Any, a: dict) -> _Value:
        value = self._read(call.args[0], a["scale"], a["zp"])
        order = [value.perm.index(axis) for axis in a["axes"]]
        out = self._out(self._shape(), _identity(len(order)), a["scale"], a["zp"])
        self.g.op("TRANSPOSE", [value.index, self._ints(order)], [out.index])
        return out

    def _matmul(self, call: Any, a: dict) -> _Value:
        lhs, rhs, bias, b_scale, b_zp = call.args
        if a["alpha"] != 1.0 or a["out_dtype"] != "int8":
            raise self.refuse(f"alpha {a['alpha']} or a non-int8 output")
        value = self._read(lhs, a["a_scale"], a["a_zp"], _identity(len(_tvm.shape_of(lhs))))
        scales = self._constant(b_scale).astype(np.float32).reshape(-1)
        zps, biases = self._constant(b_zp).reshape(-1), self._constant(bias)
        shape = self._shape()
        out = self._out(shape, _identity(len(shape)), a["out_scale"], a["out_zp"])
        if _tvm.is_var(rhs) and isinstance(self.env.get(rhs), _Value):
            if np.any(biases) or (a["act_min"], a["act_max"]) != INT8 or scales.size != 1:
                raise self.refuse("a bias, a clamp or per-channel scales on a matmul of two "
                                  "run-time tensors (BATCH_MATMUL has none)")
            other = self._read(rhs, scales.item(), int(zps.item()),
                               _identity(len(_tvm.shape_of(rhs))))
            self.g.op("BATCH_MATMUL", [value.index, other.index], [out.index], adjX=False,
                      adjY=False)
            return out
        weights = self._constant(rhs)
        if weights.ndim != 2 or np.any(zps):
            raise self.refuse("constant weights that are not a [K, N] matrix with zero point 0")
        n = weights.shape[1]
        scales = np.broadcast_to(scales, (n,)).astype(np.float32)
        per = scales if np.unique(scales).size > 1 else scales[:1]
        name = _tvm.var_name(self.var)
        wt = self._const(name + "_w", np.ascontiguousarray(weights.T), "int8", per,
                         np.zeros(per.size, np.int64), 0)
        bias_scales = (np.float32(a["a_scale"]) * per).astype(np.float32)
        bt = self._const(name + "_b", np.broadcast_to(biases, (n,)).astype(np.int32), "int32",
                         bias_scales, np.zeros(per.size, np.int64))
        self.g.op("FULLY_CONNECTED", [value.index, wt, bt], [out.index],
                  fusedActivationFunction=self._activation(a), keepNumDims=True)
        return out

    def _binary(self, kind: str, call: Any, a: dict) -> _Value:
        left, right = call.args
        value = self._read(left, a["a_scale"], a["a_zp"])
        if _tvm.is_var(right) and isinstance(self.env.get(right), _Value):
            other = self._read(right, a["b_scale"], a["b_zp"], value.perm).index
        else:
            data = self._constant(right)
            if data.ndim == len(value.shape):
                data = np.transpose(data, value.perm)
            elif data.size != 1 and value.perm != _identity(len(value.shape)):
                raise self.refuse("a broadcast constant against a permuted tensor")
            other = self._const("operand", data, "int8", a["b_scale"], a["b_zp"])
        out = self._out(value.shape, value.perm, a["out_scale"], a["out_zp"])
        self.g.op(kind, [value.index, other], [out.index],
                  fusedActivationFunction=self._activation(a))
        return out

    def _softmax(self, call: Any, a: dict) -> _Value:
        value = self._read(call.args[0], a["in_scale"], a["in_zp"])
        axis = a["axis"] % len(value.shape)
        if value.perm[-1] != axis:
            value = self._read(call.args[0], a["in_scale"], a["in_zp"],
                               _identity(len(value.shape)))
            if axis != len(value.shape) - 1:
                raise self.refuse("a softmax over another axis than the last")
        out = self._out(value.shape, value.perm, *SOFTMAX_OUT)
        self.g.op("SOFTMAX", [value.index], [out.index], beta=float(a.get("beta", 1.0)))
        return out

    def _lut(self, call: Any, a: dict) -> _Value:
        builtin = LUT_BUILTINS.get(str(a["function"]))
        if builtin is None or a["axis"] != -1:
            raise self.refuse(f"a table of {a['function']!r} (axis {a['axis']}): no builtin "
                              "of that function is written")
        value = self._read(call.args[0], a["in_scale"], a["in_zp"])
        out = self._out(value.shape, value.perm, a["out_scale"], a["out_zp"])
        kind, options = builtin
        self.g.op(kind, [value.index], [out.index], **options)
        return out


_HANDLERS: dict[str, Callable[[_Writer, Any, dict], Any]] = {
    "relax.quantize": _Writer._quantize,
    "relax.dequantize": _Writer._dequantize,
    "relax.nn.layer_norm": _Writer._layer_norm,
    "relax.canonqnn.conv2d": _Writer._conv2d,
    "relax.canonqnn.max_pool2d": _Writer._max_pool2d,
    "relax.canonqnn.global_avg_pool2d": _Writer._global_avg_pool2d,
    "relax.canonqnn.reshape": _Writer._reshape,
    "relax.canonqnn.transpose": _Writer._transpose,
    "relax.canonqnn.matmul": _Writer._matmul,
    "relax.canonqnn.add": lambda w, call, a: w._binary("ADD", call, a),
    "relax.canonqnn.mul": lambda w, call, a: w._binary("MUL", call, a),
    "relax.canonqnn.softmax": _Writer._softmax,
    "relax.canonqnn.lut": _Writer._lut,
}
