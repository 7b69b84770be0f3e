"""jln's one precision policy and its row statistics.

Policy (the README's numerics table states the same):

* Statistics are computed in float32 for float16, bfloat16 and float32 input, and in float64
  for float64 input. ``stats_dtype`` is the only place that rule lives.
* The mean is taken about a per-row pivot (the row's first element) and the variance is the
  mean of squared deviations from that mean (two passes over data already in registers or
  cache). Subtracting the pivot is exact for data clustered around a large offset, so
  ``x = 3e5 + N(0, 1)`` keeps full float32 accuracy where ``E[x^2] - E[x]^2`` (flax's
  ``use_fast_variance``) loses every digit. The variance is a mean of squares, so it is never
  negative, and float16 squares are taken in float32, so they never overflow.
* Reverse mode keeps only the input (in its own dtype), the per-row statistics tagged with
  ``checkpoint_name`` below, and the per-feature parameters: :data:`REMAT_POLICY` drops
  everything else and the backward pass recomputes it from ``x``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

Array = jax.Array

#: Names of the per-row statistics that reverse mode saves (everything else is recomputed).
STAT_NAMES = ("jln.mean", "jln.rstd")
REMAT_POLICY = jax.checkpoint_policies.save_only_these_names(*STAT_NAMES)

_LOW_PRECISION = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def stats_dtype(dtype: Any) -> jnp.dtype:
    """float64 for float64 input, float32 for everything else (float16, bfloat16, float32)."""
    return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


def promote(*dtypes: Any) -> jnp.dtype:
    """torch-style promotion of floating dtypes (bfloat16 with float16 gives float32).

    Promotion of dtypes (not arrays) is a static rule, so it runs under "standard" promotion:
    ``jnp.promote_types`` raises for bfloat16 with float32 under ``jax_numpy_dtype_promotion=
    "strict"``, which would make strict-mode users (and jln's tests) fail on mixed dtypes.
    """
    with jax.numpy_dtype_promotion("standard"):
        return functools.reduce(jnp.promote_types, dtypes[1:], jnp.dtype(dtypes[0]))


def is_low_precision(dtype: Any) -> bool:
    return jnp.dtype(dtype) in _LOW_PRECISION


def round_to(v: Array, dtype: Any) -> Array:
    """Round ``v`` to ``dtype``'s precision but keep ``v``'s (wider) dtype.

    This reproduces one rounding step of an eager framework inside a float32 computation.
    For bfloat16 it uses ``lax.reduce_precision``, which XLA never elides (a round trip
    through ``astype`` may be dropped under ``xla_allow_excess_precision``). For float16 it
    uses the round trip, because ``reduce_precision`` flushes float16 subnormals.
    """
    dtype = jnp.dtype(dtype)
    if jnp.finfo(dtype).bits >= jnp.finfo(v.dtype).bits:
        return v
    if dtype == jnp.bfloat16:
        fi = jnp.finfo(dtype)
        return lax.reduce_precision(v, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
    return v.astype(dtype).astype(v.dtype)


def count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _pivot(x: Array, axes: tuple[int, ...]) -> Array:
    """The first element of each row (keepdims), outside autodiff.

    The normalized result is invariant to the pivot, so stopping its gradient is exact and
    keeps the pivot out of every derivative, at every order.
    """
    index = tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))
    return lax.stop_gradient(x[index])


@jax.custom_jvp
def _rsqrt(v: Array) -> Array:
    return lax.rsqrt(v)


@_rsqrt.defjvp
def _rsqrt_jvp(primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    # d rsqrt(v) = -1/2 rsqrt(v)^3 dv: written with the result alone, so that reverse mode
    # needs only the saved rstd and never recomputes the variance in the backward pass.
    (v,), (dv,) = primals, tangents
    r = lax.rsqrt(v)
    return r, -0.5 * (r * r * r) * dv


def centered(x32: Array, axes: tuple[int, ...]) -> tuple[Array, Array, Array]:
    """Return ``(mean, d, var)``: the row mean, ``x - mean`` and the biased variance.

    ``x32`` is already in the statistics dtype. ``mean`` and ``var`` keep the reduced axes
    (size 1) so they broadcast against ``x32``.
    """
    pivot = _pivot(x32, axes)
    xs = x32 - pivot
    m = checkpoint_name(jnp.mean(xs, axis=axes, keepdims=True), STAT_NAMES[0])
    d = xs - m
    var = jnp.mean(d * d, axis=axes, keepdims=True)
    return pivot + m, d, var


def inv_std(var: Array, eps: float) -> Array:
    """``1 / sqrt(var + eps)`` with the derivative rule above, tagged for the remat policy."""
    return checkpoint_name(_rsqrt(var + eps), STAT_NAMES[1])


def mean_square(x32: Array, axes: tuple[int, ...]) -> Array:
    """``mean(x^2)`` over ``axes`` (keepdims), in ``x32``'s dtype."""
    return jnp.mean(x32 * x32, axis=axes, keepdims=True)


def safe_sqrt(v: Array) -> Array:
    """``sqrt(v)`` whose derivative at ``v == 0`` is 0 instead of ``inf`` (so ``0 * inf``
    never produces a NaN gradient for an all-zero row)."""
    positive = v > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, v, 1)), 0)


def remat(fn: Any) -> Any:
    """Wrap a norm body so reverse mode saves only its inputs and the named statistics.

    ``jax.checkpoint`` (unlike a plain ``custom_vjp``) keeps forward mode, grad-of-grad,
    vmap and scan working. Arguments after the arrays are static.
    """

    @functools.wraps(fn)
    def wrapped(*args: Any, **static: Any) -> Any:
        body = functools.partial(fn, **static)
        return jax.checkpoint(body, policy=REMAT_POLICY)(*args)

    return wrapped
