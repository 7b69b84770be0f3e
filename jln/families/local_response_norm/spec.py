"""Local response normalization's contract: its spec, formula and dtype rule, in torch's
semantics (``torch.nn.functional.local_response_norm``).

``y = x / (k + alpha * mean_window(x^2)) ** beta``, the mean over a window of ``size``
neighbouring channels, zero-padded with ``size // 2`` channels before and ``(size - 1) // 2``
after, always divided by ``size`` (torch's ``avg_pool`` with ``count_include_pad``).

torch evaluates it op by op in ``x``'s dtype; for bfloat16/float16 each op computes in float32
and rounds to ``x``'s dtype, and the Python scalars enter so (*measured*, torch 2.13 CPU, each
step bit-exact against torch's own intermediate):

* ``x * x`` rounded; the window sum in float32 of those rounded squares, divided by ``size``,
  rounded (``avg_pool``'s float accumulator);
* ``* alpha`` with alpha in float32, rounded;
* ``+ k`` with **k rounded to x's dtype** first, rounded;
* ``** beta`` with **beta rounded to x's dtype** first, rounded (with beta=0.77 unrounded,
  ~10% of bfloat16 elements differ);
* ``x / div`` in float32, rounded once.

float32 and float64 input compute in their own dtype (the roundings are no-ops). torch's CPU
``avg_pool3d`` has no bfloat16/float16 kernel, so for 4-D and wider half-precision input torch
raises on CPU; jln applies the same op-by-op rule as for 3-D input.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jln import _stats

Array = jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalResponseNormSpec:
    """Everything static about one call (hashable): the channel axis (non-negative), the window
    ``size``, ``alpha``, ``beta``, ``k`` and the output dtype (``x``'s)."""

    channel_axis: int
    size: int
    alpha: float
    beta: float
    k: float
    out_dtype: Any

    op = "local_response_norm"

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    def formula(self, x: Array) -> Array:
        dt = jnp.dtype(self.out_dtype)
        sd = _stats.stats_dtype(dt)

        def r(v: Array) -> Array:  # one op of torch's, rounded to x's dtype
            return _stats.round_to(v, dt)

        def scalar(v: float, rounded: bool) -> Array:
            s = jnp.asarray(v, sd)
            return s if not rounded else r(s)

        x32 = _stats.upcast(x)
        sq = r(x32 * x32)
        c = self.channel_axis
        window = [1] * x.ndim
        window[c] = self.size
        pad = [(0, 0)] * x.ndim
        pad[c] = (self.size // 2, (self.size - 1) // 2)
        # (a Python 0.0 init: lax then takes its differentiable windowed-sum primitive)
        total = lax.reduce_window(sq, 0.0, lax.add, tuple(window), (1,) * x.ndim, pad)
        div = r(total / scalar(float(self.size), False))
        div = r(div * scalar(self.alpha, False))
        div = r(div + scalar(self.k, True))
        div = r(div ** scalar(self.beta, True))
        return (x32 / div).astype(dt)

    def body(self, x: Array) -> Array:
        """The XLA body (no saved statistics to name: reverse mode keeps what XLA chooses)."""
        return self.formula(x)
