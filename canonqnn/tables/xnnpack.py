"""XNNPACK's int8 lookup tables, as ExecuTorch's XNNPACK delegate builds them for PT2E programs.

ExecuTorch 1.5.1 lowers ``dequantize -> f -> quantize`` to XNNPACK as a convert (int8 -> float32),
the float32 op and a convert back; XNNPACK fuses such a chain of unary float ops between two
8-bit values into a 256-entry table, filled by running the chain on the 256 input codes with the
float32 kernels it picks for the host's CPU (``table``). The kernels reproduced here are the
ones it picks on x86-64 with AVX2 and FMA3 and without AVX-512F (numerics profile
``xnnpack-x86-avx2``); ``canonqnn.tables.xnnpack_avx512`` has those of AVX-512F hosts, which
share all but sigmoid (and so silu) and leaky_relu's handling of denormals:

    sigmoid     f32 vsigmoid  avx2_rr1_p5_div       exp by range reduction, degree-5 polynomial
    tanh        f32 vtanh     fma3_rational_9_8_div rational approximation, one division
    gelu        f32 vgelu     fma3_rational_12_10_div  x * (1 + erf(x / sqrt 2)) / 2
    gelu_tanh   the same gelu kernel (ExecuTorch serializes aten.gelu without ``approximate``)
    silu        x * sigmoid(x), the sigmoid kernel then a multiply
    hardswish   x * min(max(x * 1/6 + 1/2, 0), 1), the multiply-add fused
    leaky_relu  f32 vlrelu avx: x * slope where the sign bit of x is set, else x

ELU has none: ExecuTorch 1.5.1's XnnpackPartitioner leaves ``aten.elu`` out of its configs, so
ExecuTorch runs it with its own CPU kernel, outside XNNPACK.

XNNPACK runs every kernel with the DAZ and FTZ bits set (``_f32.flush``). Which class a host
is in is found by running the kernels (``canonqnn.frontends.torch.runtime.profile``).

Pure numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..qparams import INT8_CODES, INT8_MAX, INT8_MIN, QParams
from ._f32 import F32, f32, flush, from_bits, ftz_add, ftz_div, ftz_fma, ftz_mul, ftz_sub
from .onnxruntime import NotEvaluable


def dequantize(codes, scale, zero_point) -> np.ndarray:
    """``f32(f32(q - zp) * scale)`` (XNNPACK's int8 -> float32 convert)."""
    diff = (np.asarray(codes, np.int32) - np.asarray(zero_point, np.int32)).astype(F32)
    return ftz_mul(diff, f32(scale))


def quantize(values, scale: float, zero_point: int) -> np.ndarray:
    """XNNPACK's float32 -> int8 convert on x86 (AVX2 and AVX-512 alike): ``v = min(f32(x *
    f32(1 / scale)), 32767)``, where a NaN gives 32767 (``minps`` returns its second operand
    when either is NaN), rounded to nearest even as an int32 (values below the int32 range
    give its minimum), the zero point added after rounding, saturated to int8."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = ftz_mul(values, F32(1.0) / F32(scale))
    v = np.where(np.isnan(v) | (v > F32(32767.0)), F32(32767.0), v)
    low = v < -2.0 ** 31
    q = np.where(low, -2 ** 31, np.rint(np.where(low, 0, v))).astype(np.int64)
    return np.clip(q + int(zero_point), INT8_MIN, INT8_MAX).astype(np.int8)


# ---------------------------------------------------------------- the AVX2+FMA3 float kernels
# Constants as XNNPACK stores them (float32 bit patterns); each operation rounds once.
_SIGMOID = dict(magic_bias=0x4B40007F, log2e=0x3FB8AA3B, minus_ln2=0xBF317218,
                c5=0x3C07CFCE, c4=0x3D2B9D0D, c3=0x3E2AAD40, c2=0x3EFFFEE3, c1=0x3F7FFFFB,
                denorm_cutoff=0xC2AEAC4F)
_TANH_MAX = 0x40FF620B
_TANH_P = (0x3274CB6A, 0x37B22329, 0x3B678AC7, 0x3E0957D5)   # a9, a7, a5, a3 (then 1)
_TANH_Q = (0x355A6A41, 0x39AF7EAC, 0x3CD525CC, 0x3EEF5692)   # b8, b6, b4, b2 (then 1)
_ERF_MAX = 0x40A53E15
_ERF_P = (0x3344DC78, 0x37538E9C, 0x39ACDFC4, 0x3C187A59, 0x3D8928B5, 0x3F4C4229)  # a11..a1
_ERF_Q = (0x35A0E939, 0x38978E67, 0x3AF417E4, 0x3CE8EA2E, 0x3E804F1B)  # b10..b2 (then 1)
_SIXTH = 0x3E2AAAAB
_ONE = F32(1.0)
SIGN = np.uint32(0x80000000)


def minus_abs(x: np.ndarray) -> np.ndarray:
    """-|x| by setting the sign bit (a bitwise op: a denormal keeps its bits)."""
    return (f32(x).view(np.uint32) | SIGN).view(F32)


def _horner(x2: np.ndarray, coefficients: tuple[int, ...], last=None) -> np.ndarray:
    """``((c0 * x2 + c1) * x2 + ...)`` with an FMA per step, ending with ``last`` if given."""
    c = [from_bits(b) for b in coefficients] + ([last] if last is not None else [])
    p = ftz_fma(x2, c[0], c[1])
    for coefficient in c[2:]:
        p = ftz_fma(x2, p, coefficient)
    return p


def sigmoid(x) -> np.ndarray:
    """f32 vsigmoid avx2_rr1_p5_div: e = exp(-|x|) by one-step range reduction and a
    degree-5 polynomial, f = e / (e + 1), 1 - f for x >= 0, 0 below the denormal cutoff."""
    x = f32(x)
    k = {name: from_bits(bits) for name, bits in _SIGMOID.items()}
    z = minus_abs(x)
    with np.errstate(all="ignore"):  # below the cutoff the lanes overflow; they are replaced
        n = ftz_fma(z, k["log2e"], k["magic_bias"])
        s = (n.view(np.uint32) << np.uint32(23)).view(F32)      # 2^round(z * log2 e)
        n = ftz_sub(n, k["magic_bias"])
        t = ftz_fma(n, k["minus_ln2"], z)
        p = ftz_fma(k["c5"], t, k["c4"])
        for c in ("c3", "c2", "c1"):
            p = ftz_fma(p, t, k[c])
        t = ftz_mul(t, s)
        e = ftz_fma(t, p, s)
        f = ftz_div(e, ftz_add(e, _ONE))
    f = np.where(flush(z) < k["denorm_cutoff"], F32(0.0), f)
    return np.where(np.signbit(x), f, ftz_sub(_ONE, f)).astype(F32)


def tanh(x) -> np.ndarray:
    """f32 vtanh fma3_rational_9_8_div (and avx512f_rational_9_8_div, the same arithmetic):
    x clamped to +-7.98, x * P(x^2) / Q(x^2)."""
    bound = from_bits(_TANH_MAX)
    x = np.maximum(-bound, np.minimum(bound, flush(x)))
    x2 = ftz_mul(x, x)
    return ftz_div(ftz_mul(x, _horner(x2, _TANH_P, _ONE)), _horner(x2, _TANH_Q, _ONE))


def gelu(x) -> np.ndarray:
    """f32 vgelu fma3_rational_12_10_div (and avx512f_rational_12_10_div, the same
    arithmetic): (x * 0.5) * (1 + erf(x / sqrt 2)), the erf a rational function
    c * P(c^2) / Q(c^2) of x clamped to +-5.16."""
    x = flush(x)
    bound = from_bits(_ERF_MAX)
    c = np.maximum(-bound, np.minimum(bound, x))
    c2 = ftz_mul(c, c)
    erf = ftz_div(ftz_mul(c, _horner(c2, _ERF_P)), _horner(c2, _ERF_Q, _ONE))
    return ftz_mul(ftz_mul(x, F32(0.5)), ftz_add(erf, _ONE))


def hardswish(x) -> np.ndarray:
    """f32 vhswish fma3 (and avx512f, the same arithmetic): x * min(max(fma(x, 1/6, 0.5), 0),
    1)."""
    x = flush(x)
    gate = np.minimum(np.maximum(ftz_fma(x, from_bits(_SIXTH), F32(0.5)), F32(0.0)), _ONE)
    return ftz_mul(gate, x)


def silu(x) -> np.ndarray:
    """ExecuTorch lowers silu as x * sigmoid(x): the sigmoid kernel, then a multiply."""
    return ftz_mul(x, sigmoid(x))


def leaky_relu(x, alpha: float) -> np.ndarray:
    """f32 vlrelu avx: x * slope where the sign bit of x is set, else x (a blend on the sign
    bit: a negative denormal gives the product, -0)."""
    x = f32(x)
    return np.where(np.signbit(x), ftz_mul(x, F32(alpha)), x).astype(F32)


# ---------------------------------------------------------------- the canonqnn.tables interface
RUNTIME = "XNNPACK"  # in messages
KERNELS: dict[str, str] = {"sigmoid": "vsigmoid", "tanh": "vtanh", "gelu": "vgelu",
                           "gelu_tanh": "vgelu", "hardswish": "vhswish", "silu": "vsigmoid",
                           "leaky_relu": "vlrelu"}
EVALUATORS: dict[str, Callable] = {}  # whole kernels only, no per-op evaluation


def make_table(functions: dict[str, Callable], leaky: Callable) -> Callable[..., np.ndarray]:
    """The ``table`` function of a class of hosts whose kernels are ``functions`` (one float32
    argument) and ``leaky`` (x, alpha)."""

    def table(function: str, in_qp: QParams, out_qp: QParams, *, alpha: float | None = None,
              source_dtype: str = "int8") -> np.ndarray:
        """The int8[256] table XNNPACK builds for ``function`` (a key of ``KERNELS``) between
        per-tensor ``in_qp`` and ``out_qp`` (entry i: input code i - 128). uint8 tensors,
        held as int8 with the zero point shifted by -128, give the same table shifted: the
        zero points enter only as ``q - zp`` and after rounding."""
        if in_qp.dtype != "int8" or out_qp.dtype != "int8":
            raise NotEvaluable(f"XNNPACK builds int8 tables only, not {in_qp.dtype} -> "
                               f"{out_qp.dtype}")
        if function == "leaky_relu":
            if alpha is None:
                raise NotEvaluable("leaky_relu needs alpha")
            def fn(x): return leaky(x, alpha)  # noqa: E704
        elif function in functions:
            fn = functions[function]
        else:
            raise NotEvaluable(f"XNNPACK has no int8 table kernel computing {function!r} "
                               f"(its table kernels: {', '.join(sorted(KERNELS))})")
        x = dequantize(INT8_CODES, in_qp.scalar_scale, in_qp.scalar_zp)
        with np.errstate(over="ignore"):  # a product beyond float32 saturates as XNNPACK's
            return quantize(fn(x), out_qp.scalar_scale, out_qp.scalar_zp)

    return table


# ExecuTorch's XNNPACK GELU ignores ``approximate``: gelu_tanh runs the erf kernel.
FUNCTIONS: dict[str, Callable] = {"sigmoid": sigmoid, "tanh": tanh, "gelu": gelu,
                                  "gelu_tanh": gelu, "hardswish": hardswish, "silu": silu}
table = make_table(FUNCTIONS, leaky_relu)


def evaluate(op: str, args: list, attrs: dict) -> np.ndarray:
    raise NotEvaluable(f"XNNPACK has no kernel for {op} inside a float chain; only whole "
                       f"kernels ({', '.join(sorted(KERNELS))}) have tables")
