"""Quantized outputs: every quantization rule jln knows, once (no family imports it back).

A norm that feeds an fp8/int8 matmul returns its output quantized: ``codes * scale`` is the
value, ``codes`` in the format's dtype, ``scale`` float32 (E8M0 for MXFP8). The rules:

* The scale jln exposes is always the **dequantization multiplier**: ``y ~ codes * scale``.
  The codes are ``saturate(y * (1 / scale))`` with ``1 / scale`` computed once in float32 and
  multiplied (vLLM's and flashinfer's kernels invert the scale and multiply, so jln does too;
  ``y / scale`` would differ from them in the last bit of some quotients). Delayed scaling
  (TransformerEngine) derives TE's multiplier ``m = (qmax / amax) / 2**margin`` and multiplies
  by it; the exposed scale is then ``1 / m`` (TE's ``scale_inv``).
* ``saturate``: clip to ``[-qmax, qmax]`` before the cast (qmax: e4m3fn 448, e5m2 57344, int8
  127, symmetric). fp8 casts round to nearest even; int8 rounds half to even, then clips.
* Non-finite values: the amax that sets a dynamic scale is taken over the finite values only,
  so a row with an ``inf`` or a ``NaN`` keeps a finite scale; ``+-inf`` saturate to ``+-qmax``;
  ``NaN`` stays NaN in fp8 (e4m3fn's and e5m2's NaN code) and becomes 0 in int8.
* Dynamic scales are floored at ``1 / (qmax * 512)`` (vLLM's per-token floor), so an all-zero
  row gets codes 0 and a finite, non-zero scale.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

QuantDtype = Literal["float8_e4m3fn", "float8_e5m2", "int8"]
Scaling = Literal["static", "tensor", "row", "mxfp8", "delayed"]
Source = Literal["output", "float32"]

#: The largest magnitude each format holds (the saturation bound).
QMAX: dict[str, float] = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "int8": 127.0}
#: The exponent of each fp8 format's largest power of two (OCP MX's ``emax_elem``).
EMAX: dict[str, int] = {"float8_e4m3fn": 8, "float8_e5m2": 15}
#: Formats named for a later release, so a request for one gets a precise answer.
_LATER = ("float4_e2m1fn", "nvfp4", "mxfp4")
#: OCP MX's block length (elements sharing one E8M0 scale).
MX_BLOCK = 32
#: vLLM's floor of a dynamic scale, as a fraction of ``1 / qmax``.
FLOOR_DIVISOR = 512.0
_SCALINGS = ("static", "tensor", "row", "mxfp8", "delayed")
_SOURCES = ("output", "float32")
_AMAX_ALGOS = ("max", "most_recent")


def _positive_float(value: Any, name: str, how: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"jln.Quant: `{name}` must be a Python float; received {value!r} "
                        f"({type(value).__name__}). {how}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"jln.Quant: `{name}` must be a finite float > 0; received {value!r}. {how}")
    return v


@dataclasses.dataclass(frozen=True, kw_only=True)
class Quant:
    """How a norm quantizes its output (frozen and hashable: a static argument under ``jit``).

    Args:
      dtype: ``"float8_e4m3fn"`` (qmax 448), ``"float8_e5m2"`` (57344) or ``"int8"`` (127).
      scaling: ``"static"`` (the given ``scale``), ``"tensor"`` (``amax(|y|) / qmax`` over the
        whole array), ``"row"`` (per row of the normalized axes: ``min(amax, scale_ub) / qmax``,
        vLLM's dynamic per-token scale, shape of ``y`` with the normalized axes of size 1),
        ``"mxfp8"`` (OCP MX v1.0: blocks of 32 along the last axis, E8M0 scales
        ``2**(floor(log2(amax)) - emax)``; fp8 dtypes only) or ``"delayed"``
        (TransformerEngine: the multiplier ``(qmax / amax) / 2**margin`` from an amax history
        the call takes and returns updated).
      scale: the dequantization scale of ``"static"`` (a Python float > 0): codes are
        ``saturate(y * (1 / scale))``.
      scale_ub: ``"row"``/``"tensor"`` only: an upper bound on the amax (vLLM's ``scale_ub``).
      source: ``"output"`` quantizes the norm's output as its convention rounds it (vLLM's
        order: LLaMA's ``(T)(x * rstd) * w`` then the scale); ``"float32"`` quantizes the
        unrounded float32 result of the convention's last step (flashinfer: ``x * rstd * w``
        all in float32).
      margin: ``"delayed"`` only: TE's margin (an int >= 0).
      amax_compute: ``"delayed"`` only: ``"max"`` over the history or its ``"most_recent"``
        entry.

    Raises:
      TypeError: an option of the wrong type.
      ValueError: an unknown name, a missing or stray ``scale``, an option another scaling
        owns, int8 with ``"mxfp8"``.
    """

    dtype: QuantDtype = "float8_e4m3fn"
    scaling: Scaling = "row"
    scale: float | None = None
    scale_ub: float | None = None
    source: Source = "output"
    margin: int = 0
    amax_compute: Literal["max", "most_recent"] = "max"

    def __post_init__(self) -> None:
        for name in ("dtype", "scaling", "source", "amax_compute"):
            v = getattr(self, name)
            if not isinstance(v, str):
                raise TypeError(f"jln.Quant: `{name}` must be a string; received {v!r} ({type(v).__name__}).")
        if self.dtype not in QMAX:
            later = f" ({self.dtype!r} is not supported yet)" if self.dtype in _LATER else ""
            raise ValueError(f"jln.Quant: unknown dtype {self.dtype!r}{later}; expected one of {sorted(QMAX)}.")
        if self.scaling not in _SCALINGS:
            raise ValueError(f"jln.Quant: unknown scaling {self.scaling!r}; expected one of {list(_SCALINGS)}.")
        if self.source not in _SOURCES:
            raise ValueError(f"jln.Quant: unknown source {self.source!r}; expected one of {list(_SOURCES)}.")
        if self.amax_compute not in _AMAX_ALGOS:
            raise ValueError(f"jln.Quant: unknown amax_compute {self.amax_compute!r}; expected one of "
                             f"{list(_AMAX_ALGOS)}.")
        if self.scaling == "static":
            if self.scale is None:
                raise ValueError("jln.Quant: scaling='static' needs `scale` (the dequantization scale, a float > 0); "
                                 "pass e.g. Quant(scaling='static', scale=0.02), or a dynamic scaling ('row', 'tensor').")
            object.__setattr__(self, "scale", _positive_float(self.scale, "scale", "Pass e.g. scale=0.02."))
        elif self.scale is not None:
            raise ValueError(f"jln.Quant: `scale` is only read by scaling='static'; received scale={self.scale!r} "
                             f"with scaling={self.scaling!r}. Drop `scale`, or use scaling='static'.")
        if self.scale_ub is not None:
            if self.scaling not in ("row", "tensor"):
                raise ValueError(f"jln.Quant: `scale_ub` bounds a dynamic amax ('row' or 'tensor'); received it "
                                 f"with scaling={self.scaling!r}. Drop `scale_ub`.")
            object.__setattr__(self, "scale_ub", _positive_float(self.scale_ub, "scale_ub", "Pass e.g. scale_ub=1200.0."))
        if self.scaling == "mxfp8" and self.dtype not in EMAX:
            raise ValueError(f"jln.Quant: scaling='mxfp8' stores fp8 data; received dtype={self.dtype!r}. "
                             f"Use dtype='float8_e4m3fn' (OCP MXFP8) or 'float8_e5m2'.")
        if isinstance(self.margin, bool) or not isinstance(self.margin, int):
            raise TypeError(f"jln.Quant: `margin` must be an int; received {self.margin!r}.")
        if self.margin < 0:
            raise ValueError(f"jln.Quant: `margin` must be >= 0; received {self.margin}.")
        if self.scaling != "delayed" and (self.margin != 0 or self.amax_compute != "max"):
            raise ValueError(f"jln.Quant: `margin` and `amax_compute` are read by scaling='delayed' only; received "
                             f"them with scaling={self.scaling!r}. Drop them, or use scaling='delayed'.")

    @property
    def qmax(self) -> float:
        """The format's largest magnitude: the saturation bound."""
        return QMAX[self.dtype]

    @property
    def jnp_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    @property
    def floor(self) -> float:
        """The smallest dynamic scale: ``1 / (qmax * 512)``."""
        return 1.0 / (self.qmax * FLOOR_DIVISOR)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Quantized:
    """A quantized array: ``values`` (the codes, in the format's dtype) and ``scale`` (float32
    dequantization multipliers; for MXFP8 E8M0 powers of two, one per block of ``block``
    elements along the last axis), so the value is ``values * scale``.

    ``amax_history`` is the updated history of a ``"delayed"`` call (``None`` otherwise).
    ``carrier`` is a zero array of the unquantized output's shape and dtype (``None`` in a
    ``Quantized`` built by hand): :meth:`dequantize` adds it, so reverse mode hands the
    cotangent of :meth:`dequantize`'s output to the norm unchanged (the straight-through
    estimator). Inside a ``jit`` that consumes it, it is a constant XLA folds into the add;
    returned from a ``jit`` or an eager call it is a real array, which :meth:`detach` drops.
    """

    values: Array
    scale: Array
    amax_history: Array | None = None
    carrier: Array | None = None
    block: int | None = None

    def tree_flatten(self) -> tuple[tuple[Any, ...], Any]:
        return (self.values, self.scale, self.amax_history, self.carrier), self.block

    @classmethod
    def tree_unflatten(cls, block: Any, leaves: Any) -> Quantized:
        values, scale, history, carrier = leaves
        return cls(values, scale, history, carrier, block)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def detach(self) -> Quantized:
        """This result without its ``carrier``: what to keep or return from a ``jit`` when no
        gradient will flow (a returned carrier is a real array of the output's size)."""
        return Quantized(self.values, self.scale, self.amax_history, None, self.block)

    def dequantize(self, dtype: Any = jnp.float32) -> Array:
        """``values * scale`` in float32, cast to ``dtype``.

        Differentiable straight through: the gradient of anything computed from the result
        reaches the norm's input and parameters as if the result were the unquantized output
        (the cotangent, cast to that output's dtype, enters the unquantized norm's backward
        pass). No gradient flows into ``values`` or ``scale`` themselves.
        """
        v = jax.lax.stop_gradient(self.values).astype(jnp.float32)
        s = jax.lax.stop_gradient(self.scale).astype(jnp.float32)
        if self.block is not None:
            blocks = v.reshape(*v.shape[:-1], v.shape[-1] // self.block, self.block)
            out = (blocks * s[..., None]).reshape(v.shape).astype(dtype)
        else:
            out = (v * s).astype(dtype)
        if self.carrier is not None:
            out = out + self.carrier.astype(dtype)  # -0.0: x + -0.0 == x for every x
        return out


class Stats(NamedTuple):
    """Per-row statistics a norm returns with ``return_stats=True``: in the statistics dtype
    (float32; float64 for float64 input), shape of ``x`` with the normalized axes of size 1.
    ``mean`` is ``None`` for the RMS families."""

    mean: Array | None
    rstd: Array


def saturate_cast(v: Array, dtype: str) -> Array:
    """``v`` (float32) clipped to ``[-qmax, qmax]`` and cast: fp8 rounds to nearest even and
    keeps NaN; int8 rounds half to even and maps NaN to 0."""
    q = QMAX[dtype]
    if dtype == "int8":
        r = jnp.clip(jnp.round(v), -q, q)
        return jnp.where(jnp.isnan(v), 0.0, r).astype(jnp.int8)
    return jnp.clip(v, -q, q).astype(jnp.dtype(dtype))


def finite_amax(v: Array, axis: Any = None, keepdims: bool = False) -> Array:
    """``max |v|`` over ``axis`` ignoring non-finite entries (0 where none is finite)."""
    a = jnp.where(jnp.isfinite(v), jnp.abs(v), 0.0)
    return jnp.max(a, axis=axis, keepdims=keepdims)


def divide(a: Array, c: float) -> Array:
    """``a / c`` correctly rounded. XLA rewrites a division by a constant into a multiplication
    by its (rounded) reciprocal, which differs in the last bit of half the quotients (measured:
    5462 of 10000 float32 values over 448 on CPU); the barrier hides the constant from it."""
    # (the divisor is built from `a` itself, so under vmap too it is no broadcast, which XLA
    # would also turn into a multiply; `a` here is finite, an amax)
    return a / jax.lax.optimization_barrier(a * 0 + jnp.asarray(c, a.dtype))


def dynamic_scale(amax: Array, quant: Quant) -> Array:
    """``max(min(amax, scale_ub) / qmax, 1 / (qmax * 512))``: vLLM's dynamic scale."""
    if quant.scale_ub is not None:
        amax = jnp.minimum(amax, jnp.float32(quant.scale_ub))
    return jnp.maximum(divide(amax, quant.qmax), jnp.float32(quant.floor))


def delayed_multiplier(history: Array, quant: Quant) -> Array:
    """TE's multiplier from an amax history: ``(qmax / amax) / 2**margin`` with ``amax`` the
    history's max (or entry 0, the most recent); 1 where that amax is 0 or not finite."""
    h = history.astype(jnp.float32)
    amax = jnp.max(h) if quant.amax_compute == "max" else h[0]
    m = (jnp.float32(quant.qmax) / amax) * jnp.float32(2.0**-quant.margin)  # (a power of two: exact)
    ok = jnp.isfinite(amax) & (amax > 0)
    return jnp.where(ok, m, jnp.float32(1.0))


def _mx(y32: Array, quant: Quant) -> tuple[Array, Array]:
    n = y32.shape[-1]
    blocks = y32.reshape(*y32.shape[:-1], n // MX_BLOCK, MX_BLOCK)
    amax = finite_amax(blocks, axis=-1, keepdims=True)
    _, e = jnp.frexp(amax)  # amax = m * 2**e, m in [0.5, 1): floor(log2(amax)) = e - 1
    e = jnp.clip(e - 1 - EMAX[quant.dtype], -127, 127)
    e = jnp.where(amax > 0, e, -127)
    # y / 2**e as two exact power-of-two factors (2**-e alone may overflow float32)
    one = jnp.ones_like(amax)
    half = -e // 2
    scaled = (blocks * jnp.ldexp(one, half)) * jnp.ldexp(one, -e - half)
    codes = saturate_cast(scaled, quant.dtype).reshape(y32.shape)
    # the E8M0 code is the biased exponent e + 127, written as bits (2**-127 is subnormal in
    # float32, which XLA flushes to 0)
    scale = jax.lax.bitcast_convert_type((e[..., 0] + 127).astype(jnp.uint8), jnp.float8_e8m0fnu)
    return codes, scale


def check_layout(fn: str, quant: Quant, shape: tuple[int, ...], axes: tuple[int, ...], history: Any) -> None:
    """Refuse a layout or argument ``quant`` cannot take, before tracing."""
    if quant.scaling == "mxfp8":
        last = len(shape) - 1
        if last not in axes or shape[-1] % MX_BLOCK:
            raise ValueError(
                f"{fn}: scaling='mxfp8' quantizes blocks of {MX_BLOCK} along the last axis, which must be normalized "
                f"and divisible by {MX_BLOCK}; received shape {tuple(shape)} normalized over axes {axes}. Pad the "
                f"features to a multiple of {MX_BLOCK}, or use scaling='row'."
            )
    if quant.scaling == "delayed":
        if history is None:
            raise ValueError(f"{fn}: scaling='delayed' needs `amax_history` (a float32 array [L]; zeros to start); "
                             f"pass amax_history=jnp.zeros(1024), then the returned Quantized.amax_history.")
        if getattr(history, "ndim", None) != 1 or not history.shape[0]:
            raise ValueError(f"{fn}: `amax_history` must be a non-empty 1-D array; received shape "
                             f"{getattr(history, 'shape', None)}.")
    elif history is not None:
        raise ValueError(f"{fn}: `amax_history` is read by scaling='delayed' only; received it with "
                         f"scaling={quant.scaling!r}. Drop it.")


def check_call(
    fn: str, quantize: Any, history: Any, return_stats: Any, shape: tuple[int, ...], axes: tuple[int, ...],
    axis_name: Any,
) -> Quant | None:
    """Check a norm call's ``quantize``, ``amax_history`` and ``return_stats`` (before tracing)."""
    if not isinstance(return_stats, bool):
        raise TypeError(f"{fn}: `return_stats` must be a bool; received {return_stats!r}.")
    if quantize is None:
        if history is not None:
            raise ValueError(f"{fn}: `amax_history` is read with quantize=jln.Quant(scaling='delayed') only; "
                             f"received it without `quantize`. Drop it, or pass quantize=.")
        return None
    if not isinstance(quantize, Quant):
        raise TypeError(f"{fn}: `quantize` must be a jln.Quant or None; received {quantize!r}. Pass e.g. "
                        f"quantize=jln.Quant(dtype='float8_e4m3fn', scaling='row').")
    if axis_name is not None and quantize.scaling in ("row", "tensor", "delayed"):
        raise ValueError(f"{fn}: scaling={quantize.scaling!r} takes an amax over the whole row or tensor, which "
                         f"jln does not gather across `axis_name` yet; quantize after the call, or use "
                         f"scaling='static' or 'mxfp8' (block-local).")
    check_layout(fn, quantize, shape, axes, history)
    return quantize


def _codes(y: Array, history: Array | None, quant: Quant, axes: tuple[int, ...]) -> tuple[Array, Array, Array | None]:
    y32 = y.astype(jnp.float32)
    new_history = None
    if quant.scaling == "mxfp8":
        codes, scale = _mx(y32, quant)
        return codes, scale, None
    if quant.scaling == "delayed":
        assert history is not None
        m = delayed_multiplier(history, quant)
        m = jax.lax.optimization_barrier(m)  # (else XLA folds 1 / ((c / a) * k) into a / (c * k))
        scale = 1.0 / m
        now = finite_amax(y32).astype(history.dtype)
        new_history = jnp.concatenate([now[None], history[:-1]])
        return saturate_cast(y32 * m, quant.dtype), scale, new_history
    if quant.scaling == "static":
        scale = jnp.float32(quant.scale)
    elif quant.scaling == "tensor":
        scale = dynamic_scale(finite_amax(y32), quant)
    else:
        scale = dynamic_scale(finite_amax(y32, axis=axes, keepdims=True), quant)
    return saturate_cast(y32 * (1.0 / scale), quant.dtype), scale, new_history


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _straight_through(y: Array, history: Array | None, quant: Quant, axes: tuple[int, ...]) -> Any:
    codes, scale, new_history = _codes(y, history, quant, axes)
    return codes, scale, new_history, jnp.full(y.shape, -0.0, y.dtype)


def _st_fwd(y: Array, history: Array | None, quant: Quant, axes: tuple[int, ...]) -> Any:
    return _straight_through(y, history, quant, axes), (None if history is None else jnp.zeros_like(history))


def _st_bwd(quant: Quant, axes: tuple[int, ...], res: Any, g: Any) -> Any:
    # the carrier's cotangent is the cotangent of dequantize()'s output: pass it straight to y
    return g[3], res


_straight_through.defvjp(_st_fwd, _st_bwd)


def quantize(y: Array, quant: Quant, axes: tuple[int, ...], history: Array | None = None) -> Quantized:
    """``y`` quantized by ``quant``'s rule (row scales over ``axes``), differentiable straight
    through :meth:`Quantized.dequantize`. Layout checks are :func:`check_layout`'s."""
    codes, scale, new_history, carrier = _straight_through(y, history, quant, axes)
    return Quantized(codes, scale, new_history, carrier, MX_BLOCK if quant.scaling == "mxfp8" else None)
