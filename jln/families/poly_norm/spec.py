"""PolyNorm's contract: its spec and formula, with Liger's and vLLM's numbers
(``poly_norm(out, x, w, b, eps)``).

``y = w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b``, ``n(u) = u * rsqrt(mean(u^2) + eps)`` over
the normalized axes, all in float32 (float64 for float64 input), rounded once to ``x.dtype``,
as the peers' kernels compute it.

Range. Evaluated as written, float32 overflows early: ``mean((x^3)^2)`` is ``mean(x^6)``, which
is ``inf`` once ``|x|`` passes ``3.4e38 ** (1/6) ~ 2.6e6`` (and ``x^3`` itself past ``~7e12``), so
the peers' ``n(x^3)`` is 0 or NaN there. jln scales each row by a power of two first:
with ``2^e`` the power of two just above the row's ``max|x|`` and ``v = x * 2^-e`` (so
``|v| < 1``),

    n(x^p) = v^p * rsqrt(mean(v^(2p)) + eps * 2^(-2pe))

which is the same function in exact arithmetic for any ``e``. Scaling by a power of two is
exact (barring underflow), and it commutes with every rounding of the unscaled evaluation:
``v^p``, ``mean(v^(2p))`` and the ``+ eps`` term are the unscaled ones times ``2^(-pe)`` or
``2^(-2pe)``, and ``rsqrt`` of ``2^(-2pe) * t`` is ``2^(pe) * rsqrt(t)``. So wherever the
unscaled float32 evaluation neither overflows nor underflows the result is the same bit for
bit (*measured*: every element on ``2 * N(0, 1) + 0.5`` rows, XLA CPU), and past that it stays
finite and at float32 accuracy against float64 (``tests/families/poly_norm``). With ``eps > 0``
rows are only scaled down (``e >= 0``): below ``|x| = 1`` nothing overflows, and the powers that
underflow there are far below ``eps``, which then decides ``n``. With ``eps = 0`` every row is
scaled (``n`` is then scale-invariant; an all-zero row gives NaN, as the peers' ``0 / 0``).
``e`` is piecewise constant in ``x``: its derivative is 0, so gradients are those of the
formula as written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jln import _stats

Array = jax.Array


def _pow2(n: Array, dtype: jnp.dtype) -> Array:
    """``2.0 ** n`` in ``dtype``, exactly, for integer ``n`` in the normal range (built from its
    bits: XLA's ``exp2`` and ``ldexp`` are not exact everywhere)."""
    fi = jnp.finfo(dtype)
    bits = jnp.int64 if fi.bits == 64 else jnp.int32
    biased = (n.astype(bits) + (fi.maxexp - 1)) << fi.nmant
    return lax.bitcast_convert_type(biased, dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PolyNormSpec:
    """Everything static about one call (hashable): the normalized axes (sorted,
    non-negative), ``eps``, the compute dtype and the output dtype (``x``'s)."""

    axes: tuple[int, ...]
    eps: float
    compute_dtype: Any
    out_dtype: Any

    op = "poly_norm"

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    def _row_scale(self, x: Array) -> tuple[Array, Array, Array]:
        """``(f1, f2, e)``: ``2^-e = f1 * f2`` (each factor a normal float) with ``2^e`` the power of
        two above the row's ``max|x|`` (``e >= 0`` when ``eps > 0``)."""
        big = lax.stop_gradient(jnp.max(jnp.abs(x), axis=self.axes, keepdims=True))
        _, e = jnp.frexp(big)
        if self.eps > 0:
            e = jnp.maximum(e, 0)
        half = e // 2
        dt = jnp.dtype(self.compute_dtype)
        return _pow2(-half, dt), _pow2(half - e, dt), e

    def formula(self, x: Array, weight: Array, bias: Array) -> Array:
        """``x`` of any shape, ``weight`` of shape ``(3,)``, ``bias`` of shape ``()``."""
        dt = jnp.dtype(self.compute_dtype)
        xs = _stats.upcast(x).astype(dt)
        f1, f2 = self._row_scale(xs)[:2]
        v = (xs * f1) * f2
        v2 = v * v
        v3 = v2 * v
        w = _stats.upcast(weight).astype(dt)
        terms = []
        for p, u in ((3, v3), (2, v2), (1, v)):
            ms = jnp.mean(u * u, axis=self.axes, keepdims=True)
            if self.eps > 0:  # eps * 2^(-2pe): exact, or below anything it is added to
                scaled = jnp.asarray(self.eps, dt)
                for f in (f1, f2):
                    for _ in range(2 * p):
                        scaled = scaled * f
                ms = ms + scaled
            terms.append(u * lax.rsqrt(ms))
        y = w[0] * terms[0] + w[1] * terms[1] + w[2] * terms[2] + _stats.upcast(bias).astype(dt)
        return y.astype(self.out_dtype)

    def body(self, x: Array, weight: Array, bias: Array) -> Array:
        """The XLA body (no saved statistics to name: reverse mode keeps what XLA chooses)."""
        return self.formula(x, weight, bias)
