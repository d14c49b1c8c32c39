"""canonqnn.conv2d with Q31 roundings against the TFLite interpreter's reference kernels
(CONV_2D, DEPTHWISE_CONV_2D; int8 and uint8), its numpy reference and its TVM build: all three
identical. TFLite data is NHWC (weights OHWI / 1HW(C*mult)); the canonical op gets NCHW/OIHW.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from _ort import MultiOp, accumulators_telling_apart, rand_q
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn.numerics import q31
from canonqnn.ops import conv
from canonqnn.qparams import QParams, activation_bounds, quantize_multipliers

ACTIVATIONS = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0)}


@dataclass
class Case:
    """One CONV_2D / DEPTHWISE_CONV_2D model and the equivalent canonqnn.conv2d."""

    kind: str
    x_shape: tuple[int, ...]  # NHWC
    w: np.ndarray  # TFLite layout, stored dtype
    bias: np.ndarray | None
    xs: float
    zx: int
    ws: np.ndarray  # [O] or []
    zw: int
    ys: float
    zy: int
    dtype: str = "int8"
    padding: str = "SAME"
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    act: str = "NONE"
    mult: int = 1
    name: str = "x"
    options: dict = field(default_factory=dict)

    @property
    def off(self) -> int:
        return 128 if self.dtype == "uint8" else 0

    @property
    def channels(self) -> int:
        return self.w.shape[0] if self.kind == "CONV_2D" else self.w.shape[3]

    def model(self) -> bytes:
        o = self.channels
        per_channel = self.ws.ndim == 1
        qd = 0 if self.kind == "CONV_2D" else 3
        wzp = np.zeros(o, np.int64) if per_channel else self.zw
        bscale = (np.float32(self.xs) * self.ws.astype(np.float32)).astype(np.float32)
        inputs = [T(self.x_shape, self.dtype, self.xs, self.zx),
                  T(self.w.shape, self.dtype, self.ws, wzp, data=self.w, quantized_dimension=qd),
                  None if self.bias is None else
                  T((o,), "int32", bscale, np.zeros(o, np.int64) if per_channel else 0,
                    data=self.bias.astype(np.int32))]
        n, h, w, _ = self.x_shape
        oh, ow = self.out_hw(h, w)
        opts = dict(padding=self.padding, strideH=self.stride[0], strideW=self.stride[1],
                    dilationHFactor=self.dilation[0], dilationWFactor=self.dilation[1],
                    fusedActivationFunction=self.act)
        if self.kind == "DEPTHWISE_CONV_2D":
            opts["depthMultiplier"] = self.mult
        return single_op(self.kind, inputs, [T((n, oh, ow, o), self.dtype, self.ys, self.zy)],
                         **opts)

    def kernel_hw(self) -> tuple[int, int]:
        return self.w.shape[1], self.w.shape[2]

    def pads(self, h: int, w: int) -> list[int]:
        """TFLite SAME padding (the odd pixel after), as [top, left, bottom, right]."""
        if self.padding == "VALID":
            return [0, 0, 0, 0]
        out = []
        for size, k, s, d in zip((h, w), self.kernel_hw(), self.stride, self.dilation):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            out.append((total // 2, total - total // 2))
        return [out[0][0], out[1][0], out[0][1], out[1][1]]

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        kh, kw = self.kernel_hw()
        a = dict(strides=self.stride, dilation=self.dilation, padding=self.pads(h, w))
        return conv.out_hw(h, w, kh, kw, a)

    def canonical(self, x, rounding: str):
        n, h, w, c = self.x_shape
        wq = self.w.astype(np.int32) - self.off
        if self.kind == "CONV_2D":
            w_oihw, groups = wq.transpose(0, 3, 1, 2), 1
        else:
            w_oihw, groups = wq[0].transpose(2, 0, 1)[:, None], c
        o = self.channels
        per_channel = self.ws.ndim == 1
        w_qp = (QParams.make(self.ws, np.zeros(o), axis=0) if per_channel
                else QParams.make(self.ws, self.zw - self.off))
        out_qp = QParams.make(self.ys, self.zy - self.off)
        lo, hi = ACTIVATIONS[self.act]
        bias = np.zeros(o, np.int32) if self.bias is None else self.bias
        return conv.conv2d(
            x, _tvm.const(w_oihw.astype(np.int8), "int8"), bias,
            QParams.make(self.xs, self.zx - self.off), w_qp, out_qp, strides=self.stride,
            padding=self.pads(h, w), dilation=self.dilation, groups=groups,
            act=activation_bounds(lo, hi, out_qp, rounding), rounding=rounding,
            source_dtype=self.dtype)

    def feed(self, rng) -> np.ndarray:
        return rand_q(rng, self.x_shape, np.dtype(self.dtype))

    def nchw_int8(self, x_nhwc) -> np.ndarray:
        return (x_nhwc.astype(np.int32) - self.off).astype(np.int8).transpose(0, 3, 1, 2).copy()

    def tflite(self, x_nhwc, reference: bool = True) -> np.ndarray:
        y = run_tflite(self.model(), [x_nhwc], reference=reference)[0]
        return (y.astype(np.int32) - self.off).astype(np.int8).transpose(0, 3, 1, 2)


def random_case(rng, kind: str, *, dtype="int8", per_channel=True, name="x", **geometry) -> Case:
    n, h, w = 1, int(rng.integers(5, 10)), int(rng.integers(5, 10))
    c = int(rng.integers(1, 5))
    k = int(rng.choice([1, 3, 5]))
    mult = geometry.pop("mult", 1)
    o = int(rng.integers(1, 9)) if kind == "CONV_2D" else c * mult
    shape = (o, k, k, c) if kind == "CONV_2D" else (1, k, k, o)
    lo, hi = (0, 255) if dtype == "uint8" else (-127, 127)
    weights = rand_q(rng, shape, np.dtype(dtype), lo, hi)
    ws = np.asarray(rng.uniform(0.002, 0.02, o) if per_channel else rng.uniform(0.002, 0.02),
                    np.float32)
    zx = int(rng.integers(0, 256)) if dtype == "uint8" else int(rng.integers(-128, 128))
    zy = int(rng.integers(0, 256)) if dtype == "uint8" else int(rng.integers(-128, 128))
    zw = int(rng.integers(1, 256)) if dtype == "uint8" else 0
    return Case(kind, (n, h, w, c), weights, rng.integers(-3000, 3000, o), float(
        np.float32(rng.uniform(0.01, 0.1))), zx, ws, zw, float(np.float32(rng.uniform(0.02, 0.3))),
        zy, dtype=dtype, mult=mult, name=name, **geometry)


def check_cases(cases: list[Case], rounding: str, seeds=(0,), *, against_tflite=True) -> int:
    """Build every case into one module; compare TFLite / reference / TVM per seed. Returns the
    number of compared outputs."""
    mod = MultiOp(lambda *xs: [c.canonical(x, rounding) for c, x in zip(cases, xs)],
                  {c.name: ((c.x_shape[0], c.x_shape[3], *c.x_shape[1:3]), "int8")
                   for c in cases})
    compared = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        raw = [c.feed(rng) for c in cases]
        feeds = {c.name: c.nchw_int8(x) for c, x in zip(cases, raw)}
        refs, built = mod.references(**feeds), mod.tvm(**feeds)
        for c, x, ref, tvm_out in zip(cases, raw, refs, built):
            np.testing.assert_array_equal(tvm_out, ref, err_msg=f"{c} tvm vs reference")
            if against_tflite:
                np.testing.assert_array_equal(ref, c.tflite(x), err_msg=f"{c} vs TFLite")
            compared += ref.size
    return compared


GEOMETRIES = [
    dict(kind="CONV_2D", padding="SAME"),
    dict(kind="CONV_2D", padding="VALID", stride=(2, 2), act="RELU"),
    dict(kind="CONV_2D", padding="SAME", dilation=(2, 2), act="RELU6"),
    dict(kind="CONV_2D", padding="SAME", stride=(2, 1), per_channel=False),
    dict(kind="DEPTHWISE_CONV_2D", padding="SAME", act="RELU6"),
    dict(kind="DEPTHWISE_CONV_2D", padding="VALID", stride=(2, 2), mult=2),
    dict(kind="DEPTHWISE_CONV_2D", padding="SAME", dilation=(2, 2), mult=3, per_channel=False),
    dict(kind="CONV_2D", padding="SAME", dtype="uint8", per_channel=False, act="RELU6"),
    dict(kind="CONV_2D", padding="VALID", stride=(2, 2), dtype="uint8", per_channel=False),
    dict(kind="DEPTHWISE_CONV_2D", padding="SAME", dtype="uint8", per_channel=False, mult=2),
    dict(kind="DEPTHWISE_CONV_2D", padding="VALID", dtype="uint8", per_channel=False,
         act="RELU"),
]


def _cases(seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    out = []
    for i, g in enumerate(GEOMETRIES):
        g = dict(g)
        out.append(random_case(rng, g.pop("kind"), name=f"x{i}", **g))
    return out


def test_conv2d_q31_double_matches_tflite_reference_on_all_geometries():
    """int8 per-channel / per-tensor, depthwise with multipliers, uint8 with weight zero
    points, SAME/VALID, strides, dilation, fused RELU/RELU6: one build."""
    assert check_cases(_cases(1), "q31_double") > 500


def _tie_case(kind: str, dtype: str, accs: np.ndarray, xs, ws, ys, zy=0, name="x") -> Case:
    """A 1x1 single-pixel conv whose per-channel accumulators are exactly ``accs``
    (x - x_zp = 1, w - w_zp = 1, bias = acc - 1)."""
    o = len(accs)
    off = 128 if dtype == "uint8" else 0
    zw = 17 + off if dtype == "uint8" else 0
    shape = (o, 1, 1, 1) if kind == "CONV_2D" else (1, 1, 1, o)
    w = np.full(shape, zw + 1, dtype)
    ws_arr = np.asarray(ws, np.float32)
    case = Case(kind, (1, 1, 1, 1), w, np.asarray(accs, np.int64) - 1, xs, 5 + off, ws_arr, zw,
                ys, zy + off, dtype=dtype, padding="VALID", mult=o, name=name)
    case.feed = lambda rng: np.full((1, 1, 1, 1), 6 + off, dtype)
    return case


def test_conv2d_q31_double_rounds_exact_ties_away_from_zero_like_tflite():
    """Multiplier 1/8: accumulators 4 (mod 8) are exact ties at the last rounding, odd ones
    make gemmlowp's first rounding decide (double rounding)."""
    accs = np.array([4, -4, 12, -12, 20, -20, 27, -27, 3, -3, 5, -5, 1004, -1004], np.int64)
    assert np.any((accs / 8) % 1 == 0.5)
    cases = [_tie_case("CONV_2D", "int8", accs, 0.5, np.full(len(accs), 0.25), 1.0, name="a"),
             _tie_case("DEPTHWISE_CONV_2D", "int8", accs, 0.5, 0.25, 1.0, name="b"),
             _tie_case("CONV_2D", "uint8", accs, 0.5, 0.25, 1.0, name="c")]
    check_cases(cases, "q31_double")
    y = cases[0].tflite(cases[0].feed(None)).reshape(-1)
    assert y[:6].tolist() == [1, -1, 2, -2, 3, -3]  # ties away from zero


def _derivations(xs, ws, ys, source_dtype):
    a = dict(x_scale=xs, out_scale=ys, source_dtype=source_dtype, rounding="q31_double")
    real = conv.q31_real_multiplier(a, np.asarray(ws, np.float32), 1)
    m, s = quantize_multipliers(real)
    return real, (lambda acc: q31.requant_q31(acc, m[0], s[0], 3, -128, 127, "q31_double"))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_conv2d_q31_multiplier_derivation_follows_source_dtype(dtype):
    """int8 kernels multiply the scales in double, uint8 kernels in float32 first: on
    accumulators that tell the two apart, only the matching source_dtype reproduces TFLite."""
    xs, ws, ys = 0.03196, np.float32(1.1977e-5), 0.1879
    real, own = _derivations(xs, ws, ys, dtype)
    other_dtype = "uint8" if dtype == "int8" else "int8"
    _, other = _derivations(xs, ws, ys, other_dtype)
    accs = np.array(accumulators_telling_apart(own, other, [real[0]], 3, limit=32))
    assert len(accs) >= 8
    per_channel = np.full(len(accs), ws) if dtype == "int8" else ws  # uint8: per tensor only
    cases = [_tie_case("CONV_2D", dtype, accs, xs, per_channel, ys, zy=3, name="a"),
             _tie_case("DEPTHWISE_CONV_2D", dtype, accs, xs, ws, ys, zy=3, name="b")]
    check_cases(cases, "q31_double")
    tfl = cases[0].tflite(cases[0].feed(None)).reshape(-1)
    assert np.array_equal(tfl, own(accs)) and not np.any(tfl == other(accs))


def test_conv2d_q31_single_reference_equals_tvm_build():
    """q31_single (TFLITE_SINGLE_ROUNDING builds) cannot be run by this interpreter: the
    reference and the TVM build are compared with each other only."""
    check_cases(_cases(2)[:6], "q31_single", seeds=(0,), against_tflite=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 8))
def test_conv2d_q31_double_random_sweep_matches_tflite(seed):
    check_cases(_cases(seed), "q31_double", seeds=(seed, seed + 100))
