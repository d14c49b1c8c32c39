"""Random quantized graphs in onnxruntime's QDQ form: the hypothesis strategy ``graphs``.

A graph has 1-2 int8 or uint8 inputs (NCHW, or 2-D / 3-D for matmul-like ops), then 2-8 ops
from the menu (``_menu.MENU``), each consuming earlier tensors: the latest one most often
(chains), any earlier one otherwise (fan-out), and a second earlier tensor for binary ops and
Concat (joins). Every tensor nobody consumes is a graph output. One activation dtype per graph:
onnxruntime fuses QDQ groups only when their input and output types agree.

``support`` says which menu entries canonqnn handles, by importing and canonicalizing a one-op
probe model; ``active_menu`` is the menu a test draws from.
"""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st

from _draft import INT_RANGE, Draft, GraphSpec, f32
from _menu import MENU, OpKind

OPSETS = (13, 17, 21)
DTYPES = ("uint8", "int8")
KINDS = {k.name: k for k in MENU}


def input_shapes() -> st.SearchStrategy:
    """NCHW with N = 1, C <= 8, H, W <= 9 (one time in two); or [M, K] / [B, M, K] for
    matmul-like ops."""
    nchw = st.tuples(st.just(1), st.integers(1, 8), st.integers(1, 9), st.integers(1, 9))
    return st.one_of(
        nchw, nchw,
        st.tuples(st.integers(1, 9), st.integers(1, 16)),
        st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 16)),
    )


def zero_points(dtype: str) -> st.SearchStrategy:
    lo, hi = INT_RANGE[dtype]
    return st.one_of(st.just((lo + hi + 1) // 2), st.integers(lo, hi))


@st.composite
def graphs(draw, menus: dict[str, tuple[OpKind, ...]], *, min_ops: int = 2, max_ops: int = 8,
           shapes: list[tuple[int, ...]] | None = None, dtype: str | None = None,
           opset: int | None = None) -> GraphSpec:
    """A random QDQ model drawing its ops from ``menus[dtype]``."""
    dtype = dtype or draw(st.sampled_from(DTYPES))
    opset = opset or draw(st.sampled_from(OPSETS))
    kinds = [k for k in menus[dtype] if opset >= k.min_opset]
    d = Draft(dtype, opset, share_dq=draw(st.booleans()))
    for shape in shapes or [draw(input_shapes()) for _ in range(draw(st.integers(1, 2)))]:
        d.add_input(shape, f32(2.0 ** draw(st.floats(-10.0, -1.0))), draw(zero_points(dtype)))
    for _ in range(draw(st.integers(min_ops, max_ops))):
        usable = d.usable()
        x = usable[-1 - draw(st.integers(0, len(usable) - 1))]
        choices = [k for k in kinds if k.accepts(d, x) for _ in range(k.weight)]
        if choices:
            draw(st.sampled_from(choices)).build(draw, d, x)
    if not d.ops:  # nothing accepted the inputs: a Transpose takes anything
        KINDS["Transpose"].build(draw, d, d.inputs[0])
    return d.finish(draw(st.sampled_from(["uniform", "extremes", "narrow"])),
                    draw(st.integers(0, 2**32 - 1)))


def probe(kind: OpKind, dtype: str) -> GraphSpec:
    """A one-op graph of ``kind``: hypothesis' first example, the one made of the simplest
    choices (deterministic; generating it costs milliseconds, shrinking would cost seconds)."""
    strategy = graphs({dtype: (kind,)}, min_ops=1, max_ops=1, shapes=[kind.probe_shape],
                      dtype=dtype, opset=max(OPSETS))
    return find(strategy, lambda spec: True,
                settings=settings(database=None, max_examples=1, phases=[Phase.generate],
                                  suppress_health_check=list(HealthCheck)))


@functools.cache
def support(name: str, dtype: str) -> str | None:
    """None when canonqnn turns menu entry ``name`` into canonical ops for ``dtype``
    activations; otherwise why not (no converter, import error, or a float island)."""
    import canonqnn
    from canonqnn.frontends.onnx import importer  # noqa: F401  (registers the converters)
    from canonqnn.frontends.onnx._context import CONVERTERS

    kind = KINDS[name]
    missing = [op for op in kind.onnx_ops if op not in CONVERTERS]
    if missing:
        return f"no ONNX converter for {', '.join(missing)}"
    spec = probe(kind, dtype)
    try:
        _, report = canonqnn.canonicalize(canonqnn.load(spec.model))
    except Exception as exc:  # noqa: BLE001  (anything that stops the probe means "not yet")
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if report.float_islands:
        return "; ".join(f"{i.op}: {i.reason}" for i in report.float_islands)
    return None


def active_menu(dtype: str) -> tuple[OpKind, ...]:
    """Every supported-today entry, and the pending ones whose probe canonicalizes."""
    return tuple(k for k in MENU if not k.pending or support(k.name, dtype) is None)


def menu_status() -> dict[str, dict[str, str]]:
    """Per entry and dtype: "active", or the reason a pending entry is left out."""
    return {k.name: {dt: ("active" if not k.pending or support(k.name, dt) is None
                          else f"pending: {support(k.name, dt)}") for dt in DTYPES}
            for k in MENU}
