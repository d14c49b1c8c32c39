"""Numerics profiles: how a source runtime computes on a class of host, named and versioned.

A canonical op means one thing on every host. Where a source runtime's arithmetic goes beyond
that meaning (onnxruntime's x86 uint8 x int8 GEMM saturates int16 pair sums unless the CPU has
VNNI; its QLinearAdd is float FMA on AVX2 and fixed point on SSE/NEON), the choice is named
here, once, in a ``Profile``. A module is converted for one profile, records its name
(``ModelIO.numerics``), and rewrite rules read their choices from it and from nothing else:
no rule looks at the host. ``exact`` is the profile an accelerator implements: integer
accumulation and the single documented rounding of docs/spec.md.

Which profile the runtime installed on this host follows is found by running it (each format's
probe, ``profile`` of ``canonqnn.frontends.<format>.runtime``; ``source_profile`` here), never
guessed from CPU flags.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .. import progress
from ..errors import CanonqnnError

# How a uint8 x int8 product whose int8 operand is a runtime tensor accumulates
# (canonqnn.matmul ``accumulate``).
EXACT, PAIR_SAT16 = "exact", "u8s8_pair_sat16"

# Where a profile's arithmetic comes from.
MEASURED = "measured: the runtime was run on this host class and the tests pin it"
# ARM64: the runtime's own AArch64 build, run under qemu (tools/arm-device, docs/devices.md)
MEASURED_EMULATED = ("measured under emulation (qemu's Neoverse N1, tools/arm-device): its u8 x "
                     "s8 sums, its QLinearAdd and QLinearMul on every pair of inputs, its "
                     "sigmoid, tanh and leaky relu tables and its float bilinear Resize, pinned "
                     "by recorded outputs; tables of other functions are not built")
MEASURED_EMULATED_TFLITE = ("measured under emulation (qemu's Neoverse N1, tools/arm-device): "
                            "the example networks and every table code, pinned by "
                            "tests/tools/test_arm_device.py")
SPECIFIED = "specified: docs/spec.md, host-independent"


@dataclass(frozen=True)
class Profile:
    """One runtime's arithmetic on one class of host. Every field after ``provenance`` is a
    choice some rule or legalization reads; docs/parity.md tabulates them."""

    name: str
    runtime: str          # "onnxruntime", "tflite", "xnnpack", or "canonqnn" for exact
    version: str          # of the runtime whose arithmetic this is
    host: str             # "x86-avx2" (AVX2+FMA, no VNNI), "x86-vnni", "arm64", "any"
    provenance: str
    # Requantization: the rounding of docs/spec.md every rounding op of the module uses.
    rounding: str = "rne_f32"
    # uint8 x int8 matmul with a runtime int8 operand: EXACT or PAIR_SAT16 (MLAS vpmaddubsw).
    u8s8_runtime_b: str = EXACT
    # Quantized add and mul with a float32 rounding: "f32_fma" (add: MLAS's AVX2 QLinearAdd,
    # float ratios, FMA, RNE) and "f32" (mul: MLAS's QLinearMul, no FMA) are what canonqnn.add
    # and canonqnn.mul implement under rounding rne_f32; "mlas_neon" (MLAS's AArch64 kernels:
    # a fixed-point add, a fused mul) their rounding mlas_neon; "unverified" (not read or
    # measured) none. Q31 roundings use TFLite's kernels instead ("q31");
    # "xnnpack": XNNPACK's add (20-bit integer multipliers, one shift) and mul (the zero point
    # added after rounding), rounding xnnpack.
    add: str = "f32_fma"
    mul: str = "f32"
    # The float functions behind lookup tables (sigmoid, tanh, gelu, ...): "x86" (MLAS's
    # AVX2+FMA and Eigen's SSE code paths, as canonqnn/tables reproduces them), "tflite" (the
    # reference kernels), "xnnpack_avx2" / "xnnpack_avx512" (XNNPACK's AVX2+FMA3 / AVX-512F
    # float32 kernels), "tflite_xnnpack" (TFLite's XNNPACK delegate), "tflite_builtin"
    # (TFLite's built-in optimized kernels), "onnxruntime_arm64" (onnxruntime's AArch64 build,
    # for the functions measured there), "unverified"
    # (another ISA's kernels, not reproduced: no table is built).
    tables: str = "x86"
    # A float32 conv bias (no dequantize) quantized to the accumulator's scale s: "divide"
    # (onnxruntime's WeightBiasQuantization: RNE(f32(b / s))) or "reciprocal" (XNNPACK:
    # RNE(f32(b * f32(1 / s)))). ``matmul_float_bias``: a matmul's float bias is quantized the
    # same way (XNNPACK's fully connected) rather than added in float (onnxruntime).
    float_bias: str = "divide"
    matmul_float_bias: bool = False
    # relax.quantize of a float tensor (a model input, a float island's result): "divide"
    # (ONNX QuantizeLinear: RNE(f32(x / scale))) or "reciprocal" (XNNPACK's and PyTorch's:
    # RNE(f32(x * f32(1 / scale)))).
    quantize: str = "divide"
    # Intra-op threads of the runtime: onnxruntime's float ReduceMean picks its summation order
    # by thread count (canonqnn.ops.mean.onnxruntime_summation), so parity runs it with these.
    threads: int = 2
    # A change of scale/zero point of int8 data (an int8 QUANTIZE, data movement between
    # different parameters): "rounding" (canonqnn.requantize with the profile's rounding: under
    # xnnpack XNNPACK's convert) or "unverified" (how the runtime computes it was not measured).
    requantize: str = "rounding"
    # onnxruntime's float linear Resize between DequantizeLinear and QuantizeLinear
    # (canonqnn.resize2d's float kernel): "x86" (its x86-64 build: each product and sum rounded,
    # rounding rne_f32) or "fma" (its AArch64 build, whose compiler contracts the sum into
    # fused multiply-adds: rounding mlas_neon); both measured.
    float_resize: str = "x86"
    # A runtime that hands some operators to another engine (TFLite's default interpreter
    # gives the XNNPACK delegate the operators it takes and runs the rest with its built-in
    # kernels): ``delegated`` names the source operators this profile's choices apply to, and
    # every other operator computes as the profile named ``others`` says (``for_operator``).
    delegated: frozenset[str] = frozenset()
    others: str | None = None
    description: str = ""

    def for_operator(self, source_op: str | None, dtype: str | None = None) -> Profile:
        """The profile whose arithmetic the source operator ``source_op`` writing ``dtype``
        data follows: this one, unless it delegates only some operators and ``source_op`` is
        known and not one of them, or writes wider than 8-bit data (the delegates measured
        take int8 and uint8 operators only: TFLite 16x8 runs the built-in kernels)."""
        if self.others is None:
            return self
        if dtype not in (None, "int8", "uint8"):
            return get(self.others)
        return self if source_op is None or source_op in self.delegated else get(self.others)

    def differences(self, other: Profile) -> list[str]:
        """The arithmetic choices in which ``other`` computes differently, one line each."""
        def shown(value: Any) -> Any:
            return ", ".join(sorted(value)) or "none" if isinstance(value, frozenset) else value

        return [f"{f.name}: {shown(getattr(self, f.name))} here, "
                f"{shown(getattr(other, f.name))} there"
                for f in fields(self)[5:-1] if getattr(self, f.name) != getattr(other, f.name)]

    def require(self, choice: str, implemented: tuple[str, ...], what: str) -> None:
        """Raise unless this profile's ``choice`` is one canonqnn implements."""
        value = getattr(self, choice)
        if value not in implemented:
            raise UnsupportedNumerics(f"{REFUSAL}{self.name}: {what} is not implemented "
                                      f"({choice}={value})")


REFUSAL = "numerics profile "  # how a profile's refusal begins


class UnsupportedNumerics(CanonqnnError):
    """A numerics profile asks for arithmetic canonqnn does not implement, or does not exist."""


ORT_VERSION = "1.31"


def _xnnpack_profiles() -> tuple[Profile, ...]:
    """XNNPACK as ExecuTorch runs it (the PyTorch frontend's runtime). Its integer kernels
    compute the same on every host; its int8 lookup tables are built with the float32 kernels
    it picks for the CPU, which canonqnn reproduces for x86-64 with AVX2+FMA3 and with
    AVX-512F (the probe, ``canonqnn.frontends.torch.runtime.profile``, tells them apart)."""
    common: dict[str, Any] = dict(rounding="xnnpack", add="xnnpack", mul="xnnpack",
                                  float_bias="reciprocal", matmul_float_bias=True,
                                  quantize="reciprocal", requantize="unverified")
    integer = ("XNNPACK's int8 kernels as ExecuTorch runs them: exact sums, a float32 "
               "multiplier rounded to nearest even, float biases quantized by the reciprocal "
               "of their scale, a fixed-point add")
    return (
        Profile("xnnpack-x86-avx2", "xnnpack", "ExecuTorch 1.5", "x86-avx2", MEASURED,
                tables="xnnpack_avx2", **common,
                description=f"{integer}; lookup tables from its AVX2+FMA3 float kernels "
                            "(x86-64 without AVX-512: AMD Zen 3, Intel Haswell-Skylake)"),
        Profile("xnnpack-x86-avx512", "xnnpack", "ExecuTorch 1.5", "x86-avx512", MEASURED,
                tables="xnnpack_avx512", **common,
                description=f"{integer}; lookup tables from its AVX-512F float kernels "
                            "(x86-64 with AVX-512F: AMD Zen 4/5, Intel Skylake-SP and later "
                            "Xeons)"),
        Profile("xnnpack", "xnnpack", "ExecuTorch 1.5", "any", MEASURED, tables="unverified",
                **common, description=f"{integer}; lookup tables not built (the float kernels "
                                      "XNNPACK picks on this host class were not reproduced)"),
    )

# The TFLite operators whose int8/uint8 kernels TFLite's default interpreter (ai-edge-litert
# 2.3) hands to its XNNPACK delegate and whose arithmetic is not plain data movement;
# ``canonqnn.frontends.tflite.runtime`` checks, by running it, that the installed interpreter
# delegates exactly these. The others (AVERAGE_POOL_2D, SOFTMAX, HARD_SWISH, GELU, ...) and
# every 16x8 operator run its built-in optimized kernels (profile ``tflite-builtin``).
TFLITE_XNNPACK_DELEGATED = frozenset((
    "ADD", "CONV_2D", "DEPTHWISE_CONV_2D", "DEQUANTIZE", "ELU", "FULLY_CONNECTED",
    "LEAKY_RELU", "LOGISTIC", "MEAN", "MUL", "QUANTIZE", "RESIZE_BILINEAR", "SUB", "TANH",
    "TRANSPOSE_CONV"))


def _tflite_profiles() -> tuple[Profile, ...]:
    """TFLite's interpreter: its reference kernels (parity's specification for TFLite until
    XNNPACK was measured, and what the built-in kernels compute for the operators XNNPACK
    does not take), and its default configuration with the XNNPACK delegate."""
    xnnpack_delegate: dict[str, Any] = dict(
        rounding="xnnpack", add="xnnpack", mul="xnnpack", tables="tflite_xnnpack",
        quantize="reciprocal", delegated=TFLITE_XNNPACK_DELEGATED, others="tflite-builtin")
    return (
        Profile("tflite-reference", "tflite", "2.18", "any", MEASURED, rounding="q31_double",
                add="q31", mul="q31", tables="tflite",
                description="the TFLite interpreter's reference kernels (OpResolverType."
                            "BUILTIN_REF): Q31 multipliers, two roundings, ties away from zero"),
        Profile("tflite-builtin", "tflite", "ai-edge-litert 2.3", "any", MEASURED,
                rounding="q31_double", add="q31", mul="q31", tables="tflite_builtin",
                description="the TFLite interpreter's built-in optimized kernels (OpResolver"
                            "Type.BUILTIN_WITHOUT_DEFAULT_DELEGATES): the reference kernels' "
                            "arithmetic, but int16 LOGISTIC and TANH of power-of-two input "
                            "scales in gemmlowp fixed point"),
        Profile("tflite-xnnpack-x86", "tflite", "ai-edge-litert 2.3", "x86", MEASURED,
                **xnnpack_delegate,
                description="the TFLite interpreter as users run it by default (OpResolverType."
                            "BUILTIN) on x86-64: the int8/uint8 operators its XNNPACK delegate "
                            "takes requantize with a float32 multiplier rounded to nearest even "
                            "(fixed-point adds), the others (16x8 ones among them) run the "
                            "built-in optimized kernels (tflite-builtin)"),
        Profile("tflite-xnnpack-arm64", "tflite", "ai-edge-litert 2.3", "arm64",
                MEASURED_EMULATED_TFLITE, **xnnpack_delegate,
                description="the TFLite interpreter as users run it by default on AArch64: "
                            "the arithmetic of tflite-xnnpack-x86 (the delegate's NEON kernels "
                            "compute what its x86 ones do)"),
    )


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("exact", "canonqnn", "1", "any", SPECIFIED,
            description="integer accumulation, one float32 rounding per requantization "
                        "(docs/spec.md); what a pattern author or an NPU implements"),
    Profile(f"onnxruntime-{ORT_VERSION}-x86-avx2", "onnxruntime", ORT_VERSION, "x86-avx2",
            MEASURED, u8s8_runtime_b=PAIR_SAT16,
            description="MLAS on x86-64 with AVX2+FMA and no VNNI (AMD Zen 3, Intel "
                        "Haswell-Skylake): u8 x s8 GEMMs with a runtime B saturate int16 pair "
                        "sums (vpmaddubsw)"),
    Profile(f"onnxruntime-{ORT_VERSION}-x86-vnni", "onnxruntime", ORT_VERSION, "x86-vnni",
            MEASURED,
            description="MLAS on x86-64 with AVX512-VNNI or AVX-VNNI (AMD Zen 4/5, Intel Ice "
                        "Lake and later): u8 x s8 GEMMs sum exactly (vpdpbusd)"),
    Profile(f"onnxruntime-{ORT_VERSION}-arm64", "onnxruntime", ORT_VERSION, "arm64",
            MEASURED_EMULATED, add="mlas_neon", mul="mlas_neon", tables="onnxruntime_arm64",
            float_resize="fma",
            description="MLAS on ARM64 (NEON sdot/udot: exact sums; QLinearAdd in fixed "
                        "point, QLinearMul and the float Resize with fused multiply-adds)"),
    *_tflite_profiles(),
    *_xnnpack_profiles(),
)}


def get(name: str) -> Profile:
    """The profile called ``name``, or an error listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UnsupportedNumerics(f"unknown numerics profile {name!r} (known: "
                                  f"{', '.join(PROFILES)})") from None


# Module attribute: the name of the profile a module was converted for (printed with it).
NUMERICS_ATTR = "canonqnn.numerics"


def recorded(mod: Any) -> Profile | None:
    """The profile ``mod`` records, or None (not converted by canonqnn's rewrites)."""
    attrs = mod.attrs
    if attrs is None or NUMERICS_ATTR not in attrs:
        return None
    return get(str(attrs[NUMERICS_ATTR]))


def quantizes_by_reciprocal(mod: Any) -> bool:
    """Whether ``mod``'s ``relax.quantize`` multiplies by the reciprocal of its scale (the
    profile it records says ``quantize="reciprocal"``)."""
    profile = recorded(mod)
    return profile is not None and profile.quantize == "reciprocal"


def record(mod: Any, profile: Profile) -> Any:
    """``mod`` recording ``profile``."""
    return mod.with_attr(NUMERICS_ATTR, profile.name)


# The profile of modules from no model format (built in code as Relax) wherever they run.
HOST_INDEPENDENT = {"relax": "exact"}


def source_profile(source: str) -> Profile:
    """The profile of the runtime a model of ``source`` (a ``ModelIO.source``: "onnx",
    "tflite", ...) runs on here: its format's probe (``canonqnn.formats``)."""
    if source in HOST_INDEPENDENT:
        return PROFILES[HOST_INDEPENDENT[source]]
    from .. import formats

    if source not in formats.names():
        raise UnsupportedNumerics(f"no numerics profile for models from {source!r}")
    fmt = formats.get(source)
    with progress.step(f"probing the numerics of {fmt.runtime or fmt.models} on this host"):
        return fmt.function("profile")()


__all__ = ["EXACT", "HOST_INDEPENDENT", "NUMERICS_ATTR", "PAIR_SAT16", "PROFILES", "Profile",
           "UnsupportedNumerics", "get", "quantizes_by_reciprocal", "record", "recorded",
           "source_profile"]
