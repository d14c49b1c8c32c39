"""canonqnn.matmul with Q31 roundings against the TFLite interpreter's reference kernels
(FULLY_CONNECTED int8/uint8, per-tensor and per-column weights, with and without bias;
BATCH_MATMUL int8 x int8, both operands runtime), its numpy reference and its TVM build.

Measured: the reference FULLY_CONNECTED rounds ``f64(acc) * M`` half away from zero in double
(not a Q31 multiplier); BATCH_MATMUL is gemmlowp double rounding of a multiplier derived from
the float32 product of the scales (source_op, matmul module doc).
"""

from __future__ import annotations

import numpy as np
import pytest

from _ort import MultiOp, accumulators_telling_apart, rand_q
from _tflite import T, run_tflite, single_op
from canonqnn import _tvm
from canonqnn.numerics import q31
from canonqnn.ops import _requant, matmul
from canonqnn.qparams import QParams, activation_bounds, quantize_multipliers

ACTIVATIONS = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0)}


def fc_model(m, k, n, dtype, xs, zx, w, ws, zw, bias, ys, zy, act="NONE") -> bytes:
    per_channel = np.ndim(ws) == 1
    bscale = (np.float32(xs) * np.asarray(ws, np.float32)).astype(np.float32)
    inputs = [T((m, k), dtype, xs, zx),
              T((n, k), dtype, ws, np.zeros(n, np.int64) if per_channel else zw, data=w),
              None if bias is None else T((n,), "int32", bscale, np.zeros(n, np.int64)
                                          if per_channel else 0, data=bias.astype(np.int32))]
    return single_op("FULLY_CONNECTED", inputs, [T((m, n), dtype, ys, zy)],
                     fusedActivationFunction=act)


class FC:
    """A FULLY_CONNECTED model ([M, K] x [N, K]^T) and the equivalent canonqnn.matmul."""

    def __init__(self, rng, name, m=3, k=24, n=10, dtype="int8", per_channel=False, bias=True,
                 act="NONE", w=None, bias_values=None, scales=None):
        self.name, self.m, self.k, self.n, self.dtype, self.act = name, m, k, n, dtype, act
        self.off = 128 if dtype == "uint8" else 0
        lo, hi = (0, 255) if dtype == "uint8" else (-127, 127)
        self.w = rand_q(rng, (n, k), np.dtype(dtype), lo, hi) if w is None else w
        xs, ws, ys = scales or (rng.uniform(0.01, 0.1), rng.uniform(0.002, 0.02, n)
                                if per_channel else rng.uniform(0.002, 0.02),
                                rng.uniform(0.05, 0.5))
        self.xs, self.ys = float(np.float32(xs)), float(np.float32(ys))
        self.ws = np.asarray(ws, np.float32)
        self.zx = int(rng.integers(lo, hi + 1)) + (0 if dtype == "uint8" else 0)
        self.zy = int(rng.integers(lo, hi + 1))
        self.zw = int(rng.integers(1, 256)) if dtype == "uint8" else 0
        self.bias = (rng.integers(-5000, 5000, n) if bias_values is None else bias_values) \
            if bias else None

    def model(self) -> bytes:
        return fc_model(self.m, self.k, self.n, self.dtype, self.xs, self.zx, self.w, self.ws,
                        self.zw, self.bias, self.ys, self.zy, self.act)

    def canonical(self, x, rounding):
        w_qp = (QParams.make(self.ws, np.zeros(self.n), axis=1) if self.ws.ndim
                else QParams.make(self.ws, self.zw - self.off))
        out_qp = QParams.make(self.ys, self.zy - self.off)
        wt = (self.w.astype(np.int32) - self.off).astype(np.int8).T.copy()
        return matmul.matmul(x, _tvm.const(wt, "int8"), self.bias, QParams.make(
            self.xs, self.zx - self.off), w_qp, out_qp, act=activation_bounds(
                *ACTIVATIONS[self.act], out_qp, rounding), rounding=rounding,
            source_op="fully_connected")

    def inputs(self):
        return {self.name: ((self.m, self.k), "int8")}

    def feeds(self, rng):
        x = rand_q(rng, (self.m, self.k), np.dtype(self.dtype))
        return [x], {self.name: (x.astype(np.int32) - self.off).astype(np.int8)}

    def tflite(self, raw, reference=True):
        y = run_tflite(self.model(), raw, reference=reference)[0]
        return (y.astype(np.int32) - self.off).astype(np.int8)


class BMM:
    """A BATCH_MATMUL of two runtime int8 tensors (adj_x / adj_y as swapped last axes)."""

    def __init__(self, rng, name, a_shape=(2, 4, 16), b_shape=(2, 16, 6), adj_x=False,
                 adj_y=False, scales=None):
        self.name, self.adj_x, self.adj_y = name, adj_x, adj_y
        self.a_shape, self.b_shape = a_shape, b_shape  # after the adjoints
        xs, ws, ys = scales or (rng.uniform(0.01, 0.1), rng.uniform(0.01, 0.1),
                                rng.uniform(0.05, 0.5))
        self.xs, self.ws, self.ys = (float(np.float32(v)) for v in (xs, ws, ys))
        self.za, self.zb = int(rng.integers(-20, 20)), 0
        self.zy = int(rng.integers(-128, 128))

    def _stored(self, shape, adj):
        return (*shape[:-2], shape[-1], shape[-2]) if adj else shape

    def model(self):
        out = (*np.broadcast_shapes(self.a_shape[:-2], self.b_shape[:-2]), self.a_shape[-2],
               self.b_shape[-1])
        return single_op("BATCH_MATMUL", [
            T(self._stored(self.a_shape, self.adj_x), "int8", self.xs, self.za),
            T(self._stored(self.b_shape, self.adj_y), "int8", self.ws, self.zb)],
            [T(out, "int8", self.ys, self.zy)], adjX=self.adj_x, adjY=self.adj_y)

    def canonical(self, a, b, rounding):
        return matmul.matmul(a, b, None, QParams.make(self.xs, self.za), QParams.make(
            self.ws, self.zb), QParams.make(self.ys, self.zy), rounding=rounding,
            source_op="batch_matmul")

    def inputs(self):
        return {self.name + "_a": (self.a_shape, "int8"), self.name + "_b": (self.b_shape, "int8")}

    def feeds(self, rng, a=None, b=None):
        a = rand_q(rng, self.a_shape) if a is None else a
        b = rand_q(rng, self.b_shape) if b is None else b
        raw = [np.swapaxes(a, -1, -2).copy() if self.adj_x else a,
               np.swapaxes(b, -1, -2).copy() if self.adj_y else b]
        return raw, {self.name + "_a": a, self.name + "_b": b}

    def tflite(self, raw, reference=True):
        return run_tflite(self.model(), raw, reference=reference)[0]


def build(items, rounding):
    def make(*params):
        calls, i = [], 0
        for it in items:
            count = len(it.inputs())
            calls.append(it.canonical(*params[i:i + count], rounding))
            i += count
        return calls
    inputs = {}
    for it in items:
        inputs.update(it.inputs())
    return MultiOp(make, inputs)


def check(items, rounding, seeds=(0,), against_tflite=True, feeds=None) -> int:
    mod, compared = build(items, rounding), 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        pairs = feeds or [it.feeds(rng) for it in items]
        named = {k: v for _, f in pairs for k, v in f.items()}
        refs, built = mod.references(**named), mod.tvm(**named)
        for it, (raw, _), ref, out in zip(items, pairs, refs, built):
            np.testing.assert_array_equal(out, ref, err_msg=f"{it.name}: tvm vs reference")
            if against_tflite:
                np.testing.assert_array_equal(ref, it.tflite(raw), err_msg=f"{it.name} vs TFLite")
            compared += ref.size
    return compared


def _items(seed):
    rng = np.random.default_rng(seed)
    return [FC(rng, "f0"), FC(rng, "f1", per_channel=True, act="RELU6"),
            FC(rng, "f2", bias=False, act="RELU"), FC(rng, "f3", dtype="uint8"),
            FC(rng, "f4", dtype="uint8", bias=False, act="RELU6", m=1, k=40, n=7),
            BMM(rng, "b0"), BMM(rng, "b1", adj_x=True, adj_y=True),
            BMM(rng, "b2", a_shape=(3, 5, 8), b_shape=(1, 8, 4), adj_y=True)]


def test_matmul_q31_double_matches_tflite_fully_connected_and_batch_matmul():
    assert check(_items(0), "q31_double", seeds=(0, 1)) > 300


def _fc_accumulator_case(name, accs, dtype, per_channel, xs, ws, ys):
    """FULLY_CONNECTED with K = 1 whose accumulators are exactly ``accs``: x - x_zp = 1,
    w - w_zp = 1, bias = acc - 1."""
    n = len(accs)
    rng = np.random.default_rng(0)
    off = 128 if dtype == "uint8" else 0
    fc = FC(rng, name, m=1, k=1, n=n, dtype=dtype, per_channel=per_channel,
            bias_values=np.asarray(accs, np.int64) - 1,
            scales=(xs, np.full(n, ws) if per_channel else ws, ys))
    fc.zx, fc.zy = 5 + off, 3 + off
    fc.w = np.full((n, 1), fc.zw + 1, dtype)
    x = np.full((1, 1), 6 + off, dtype)
    return fc, ([x], {name: (x.astype(np.int32) - off).astype(np.int8)})


def test_fully_connected_q31_double_rounds_in_double_half_away_from_zero():
    """Ties (multiplier 1/8) go away from zero; next to rounding boundaries the interpreter
    follows f64(acc) * M, where a Q31 multiplier (double or single rounding) would not."""
    ties = np.array([4, -4, 12, -12, 20, -20, 27, -27, 3, -3], np.int64)
    xs, ws, ys = 0.03366, np.float32(1.92167e-05), 0.57608
    real = np.float64(np.float32(xs)) * np.float64(ws) / np.float64(np.float32(ys))
    m, s = quantize_multipliers([real])

    def in_double(acc):
        return _requant.requant_f64_away(acc, real, 3, -128, 127)

    def fixed_point(rounding):
        return lambda acc: q31.requant_q31(acc, m[0], s[0], 3, -128, 127, rounding)

    apart = (accumulators_telling_apart(in_double, fixed_point("q31_double"), [real], 3, 16)
             + accumulators_telling_apart(in_double, fixed_point("q31_single"), [real], 3, 4))
    assert len(apart) >= 8
    cases = [_fc_accumulator_case("t", ties, "int8", False, 0.5, 0.25, 1.0),
             _fc_accumulator_case("a", apart, "int8", True, xs, ws, ys),
             _fc_accumulator_case("b", apart, "int8", False, xs, ws, ys),
             _fc_accumulator_case("c", apart, "uint8", False, xs, ws, ys)]
    check([c for c, _ in cases], "q31_double", feeds=[f for _, f in cases])
    tie_out = cases[0][0].tflite(cases[0][1][0]).reshape(-1)
    assert (tie_out - 3)[:6].tolist() == [1, -1, 2, -2, 3, -3]


def test_batch_matmul_q31_double_uses_float32_scale_product():
    """Accumulators where QuantizeMultiplier(f64(f32(a_s * b_s)) / y_s) and the double product
    disagree: BATCH_MATMUL follows the float32 product."""
    rng = np.random.default_rng(5)
    for _ in range(50):  # scales with multiplier ~5e-5 that leave a few telling accumulators
        xs, ys = np.float32(rng.uniform(0.005, 0.05)), np.float32(rng.uniform(0.05, 2))
        ws = np.float32(rng.uniform(0.5, 2) * 5e-5 * ys / xs)
        f32 = float(np.float32(xs * ws)) / float(ys)
        f64 = float(xs) * float(ws) / float(ys)
        pairs = [quantize_multipliers([r]) for r in (f32, f64)]
        req = [lambda acc, p=p: q31.requant_q31(acc, p[0][0], p[1][0], 3, -128, 127,
                                                 "q31_double") for p in pairs]
        accs = [t for t in accumulators_telling_apart(req[0], req[1], [f32, f64], 3, 400)
                if abs(t) < 127 * 127 * 255][:24]
        if len(accs) >= 8:
            break
    assert len(accs) >= 8
    k = 256  # a = [127, ..., 127, 1]: acc = 127 * sum(b[:-1]) + b[-1]
    a = np.full((1, 1, k), 127, np.int8)
    a[0, 0, -1] = 1
    b = np.zeros((1, k, len(accs)), np.int8)
    for j, t in enumerate(accs):
        r = (t + 63) % 127 - 63
        q = (t - r) // 127
        b[0, -1, j] = r
        for i in range(k - 1):
            b[0, i, j] = step = int(np.clip(q, -127, 127))
            q -= step
    bmm = BMM(np.random.default_rng(0), "m", a_shape=(1, 1, k), b_shape=(1, k, len(accs)),
              scales=(xs, ws, ys))
    bmm.za, bmm.zy = 0, 3
    np.testing.assert_array_equal((a.astype(np.int64) @ b.astype(np.int64)).reshape(-1), accs)
    other = BMM(np.random.default_rng(1), "z")  # MultiOp with one output returns it nested
    check([bmm, other], "q31_double",
          feeds=[bmm.feeds(None, a, b), other.feeds(np.random.default_rng(2))])
    np.testing.assert_array_equal(bmm.tflite([a, b]).reshape(-1), req[0](np.array(accs)))


def test_matmul_q31_single_reference_equals_tvm_build():
    """q31_single cannot be run by this interpreter: reference vs TVM build only."""
    check(_items(3), "q31_single", against_tflite=False)


def test_matmul_q31_rejects_alpha_and_pair_saturation():
    from canonqnn.ops._registry import UnsupportedRounding
    qp = QParams.make(0.1, 0)
    b = _tvm.const(np.ones((4, 2), np.int8), "int8")
    x = _tvm.Var("x", _tvm.tensor_type((1, 4), "int8"))
    with pytest.raises(UnsupportedRounding):
        matmul.matmul(x, b, None, qp, qp, qp, alpha=0.5, rounding="q31_double")
    with pytest.raises(UnsupportedRounding):
        matmul.matmul(x, b, None, qp, qp, qp, accumulate="u8s8_pair_sat16", rounding="q31_double")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 9))
def test_matmul_q31_double_random_sweep_matches_tflite(seed):
    check(_items(seed), "q31_double", seeds=(seed, seed + 100))
