"""canonqnn.conv2d_transpose with Q31 roundings against the TFLite interpreter's reference
TRANSPOSE_CONV kernel (int8, per-channel and per-tensor weights, with and without bias), its
numpy reference and its TVM build. TFLite weights are OHWI, data NHWC; the op gets IOHW/NCHW.
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import MultiOp, rand_q
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn.ops import conv_transpose
from canonqnn.qparams import QParams


class Case:
    def __init__(self, rng, name, *, h=5, w=4, c=3, o=4, k=3, stride=(2, 2), padding="SAME",
                 per_channel=True, bias=True):
        self.name, self.stride, self.padding = name, stride, padding
        self.x_shape = (1, h, w, c)
        self.w = rand_q(rng, (o, k, k, c), np.int8, -127, 127)
        self.ws = np.asarray(rng.uniform(0.002, 0.02, o) if per_channel
                             else rng.uniform(0.002, 0.02), np.float32)
        self.xs, self.ys = (float(np.float32(rng.uniform(a, b))) for a, b in
                            ((0.01, 0.1), (0.02, 0.2)))
        self.zx, self.zy = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
        self.bias = rng.integers(-3000, 3000, o) if bias else None
        if padding == "SAME":
            self.out_hw = (h * stride[0], w * stride[1])
        else:
            self.out_hw = ((h - 1) * stride[0] + k, (w - 1) * stride[1] + k)

    def model(self) -> bytes:
        o = self.w.shape[0]
        per_channel = self.ws.ndim == 1
        zeros = np.zeros(o, np.int64) if per_channel else 0
        bscale = (np.float32(self.xs) * self.ws).astype(np.float32)
        out_shape = np.array([1, *self.out_hw, o], np.int32)
        inputs = [T((4,), "int32", data=out_shape), T(self.w.shape, "int8", self.ws, zeros,
                                                      data=self.w),
                  T(self.x_shape, "int8", self.xs, self.zx),
                  None if self.bias is None else T((o,), "int32", bscale, zeros,
                                                   data=self.bias.astype(np.int32))]
        return single_op("TRANSPOSE_CONV", inputs[:3] if self.bias is None else inputs,
                         [T((1, *self.out_hw, o), "int8", self.ys, self.zy)],
                         padding=self.padding, strideH=self.stride[0], strideW=self.stride[1])

    def geometry(self):
        """TFLite's transposed-conv padding (top/left = total // 2, the output cropped to the
        requested size) as canonqnn padding + output_padding."""
        k = self.w.shape[1]
        pads, extra = [], []
        for size, out, s in zip(self.x_shape[1:3], self.out_hw, self.stride):
            total = max((size - 1) * s + k - out, 0) if self.padding == "SAME" else 0
            before = total // 2
            natural = (size - 1) * s + k - before
            pads.append((before, max(natural - out, 0)))
            extra.append(max(out - natural, 0))
        return dict(strides=list(self.stride), padding=[pads[0][0], pads[1][0], pads[0][1],
                                                        pads[1][1]],
                    output_padding=extra, dilation=[1, 1], groups=1)

    def canonical(self, x, rounding):
        o = self.w.shape[0]
        w_qp = (QParams.make(self.ws, np.zeros(o), axis=1) if self.ws.ndim
                else QParams.make(self.ws, 0))
        bias = np.zeros(o, np.int32) if self.bias is None else self.bias
        return conv_transpose.conv2d_transpose(
            x, _tvm.const(self.w.transpose(3, 0, 1, 2).copy(), "int8"), bias,
            QParams.make(self.xs, self.zx), w_qp, QParams.make(self.ys, self.zy),
            rounding=rounding, **self.geometry())

    def nchw_shape(self):
        n, h, w, c = self.x_shape
        return (n, c, h, w)


def check(cases, rounding, seeds=(0,), against_tflite=True) -> int:
    mod = MultiOp(lambda *xs: [c.canonical(x, rounding) for c, x in zip(cases, xs)],
                  {c.name: (c.nchw_shape(), "int8") for c in cases})
    compared = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        raw = [rand_q(rng, c.x_shape) for c in cases]
        feeds = {c.name: x.transpose(0, 3, 1, 2).copy() for c, x in zip(cases, raw)}
        for c, x, ref, out in zip(cases, raw, mod.references(**feeds), mod.tvm(**feeds)):
            np.testing.assert_array_equal(out, ref, err_msg=f"{c.name}: tvm vs reference")
            if against_tflite:
                y = run_tflite(c.model(), [x])[0].transpose(0, 3, 1, 2)
                np.testing.assert_array_equal(ref, y, err_msg=f"{c.name} vs TFLite")
            compared += ref.size
    return compared


def _cases(seed):
    rng = np.random.default_rng(seed)
    return [Case(rng, "a"), Case(rng, "b", per_channel=False, bias=False),
            Case(rng, "c", padding="VALID", stride=(1, 2), k=2),
            Case(rng, "d", stride=(1, 1), bias=False, k=5, h=4, w=6),
            Case(rng, "e", padding="VALID", stride=(3, 2), per_channel=False)]


def test_conv_transpose_q31_double_matches_tflite_reference():
    assert check(_cases(0), "q31_double", seeds=(0, 1)) > 500


def test_conv_transpose_q31_double_rounds_ties_away_like_tflite():
    """Multiplier 1/8 (x 0.5, w 0.25, y 1): many accumulators are exact ties."""
    rng = np.random.default_rng(3)
    cases = [Case(rng, "t", per_channel=False), Case(rng, "u", padding="VALID")]
    for c in cases:
        c.xs, c.ys = 0.5, 1.0
        c.ws = np.full(c.ws.shape, 0.25, np.float32)
        c.zy = 0
        c.w = (c.w // 16).astype(np.int8)  # small products keep the outputs in range
    check(cases, "q31_double", seeds=(0,))


def test_conv_transpose_q31_single_reference_equals_tvm_build():
    """q31_single cannot be run by this interpreter: reference vs TVM build only."""
    check(_cases(1)[:3], "q31_single", against_tflite=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 6))
def test_conv_transpose_q31_double_random_sweep_matches_tflite(seed):
    check(_cases(seed), "q31_double", seeds=(seed, seed + 100))
