"""Statistics monitor: per-row statistics of a norm's input and output, for watching drift.

The seed's debugging advice ("print(t.mean(), t.std()) before and after LN") turned into a
Flax intermediate. Every module in :mod:`jln.linen` and :mod:`jln.nnx` built with
``monitor=True`` records :func:`row_stats` of its input and output, so both front-ends report
exactly the same numbers. A LayerNorm output row with unit scale has mean 0, variance
``1 - eps/(var+eps)`` and norm ``sqrt(d)``: ``in_norm / sqrt_d`` drifting far from the
typical activation scale is the signal to look at.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from jln import _stats

Array = jax.Array

#: Keys of the dict :func:`row_stats` returns.
STAT_KEYS = ("in_mean", "in_var", "in_norm", "out_mean", "out_var", "out_norm", "sqrt_d")


def _one(v: Array, axes: tuple[int, ...]) -> tuple[Array, Array, Array]:
    v = lax.stop_gradient(v)
    v = v.astype(_stats.stats_dtype(v.dtype))
    mean, _, var = _stats.centered(v, axes)  # the precision policy's mean and biased variance
    n = _stats.count(v.shape, axes)
    norm = jnp.sqrt(n * _stats.mean_square(v, axes))
    f32 = jnp.float32
    return (
        jnp.squeeze(mean, axes).astype(f32),
        jnp.squeeze(var, axes).astype(f32),
        jnp.squeeze(norm, axes).astype(f32),
    )


def row_stats(x: Array, y: Array, axes: tuple[int, ...]) -> dict[str, Array]:
    """Per-row float32 statistics of a norm's input ``x`` and output ``y``.

    A row is one slice of ``x`` over the normalized ``axes`` (non-negative, sorted). For each
    row: mean, biased variance (divide by ``d``, the row size), and the Euclidean norm
    ``||x||_2 = sqrt(sum x^2)``, which a normalized row keeps near ``sqrt(d)``. Computed
    outside autodiff (``stop_gradient``), so recording never changes a gradient.

    Args:
      x: the norm's input.
      y: the norm's output, same shape as ``x``.
      axes: the normalized axes.

    Returns:
      dict with keys :data:`STAT_KEYS`; every entry except ``sqrt_d`` has shape
      ``x.shape`` without ``axes`` and dtype float32; ``sqrt_d`` is a float32 scalar.

    Example:
      >>> import jax.numpy as jnp
      >>> s = row_stats(jnp.ones((2, 4)), jnp.zeros((2, 4)), (1,))
      >>> s["in_norm"], s["sqrt_d"]
      (Array([2., 2.], dtype=float32), Array(2., dtype=float32))
    """
    im, iv, inrm = _one(x, axes)
    om, ov, onrm = _one(y, axes)
    d = _stats.count(x.shape, axes)
    return {
        "in_mean": im,
        "in_var": iv,
        "in_norm": inrm,
        "out_mean": om,
        "out_var": ov,
        "out_norm": onrm,
        "sqrt_d": jnp.asarray(math.sqrt(d), jnp.float32),
    }
