"""The one computation behind :mod:`jln.flax.linen` and :mod:`jln.flax.nnx`.

flax's ``LayerNorm``/``RMSNorm`` (linen and NNX) differ only in how they hold parameters and
promote dtypes; once the parameters and the result dtype are known, both compute

    y = (x - mean) / sqrt(var + epsilon) * scale + bias        (RMSNorm: mean = 0, no bias)

over ``reduction_axes``, with ``scale``/``bias`` laid out along ``feature_axes``, the
statistics over the elements where ``mask`` is true, and one rounding to the result dtype at
the end. :func:`normalize` is that computation with jln's statistics: the unmasked case is
:class:`jln._contract.layer_norm.LayerNormSpec` (or ``RMSNormSpec``'s torch convention, which
rounds once, as flax does) run through :func:`jln._dispatch.apply`, so jln's kernels take it
where they apply; the masked case is written here, with the same remat policy.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from jln import _checks, _dispatch, _stats
from jln._contract.layer_norm import LayerNormSpec
from jln._contract.rms_norm import RMSNormSpec

Array = jax.Array


def canonical_axes(axes: Any, ndim: int, fn: str, what: str) -> tuple[int, ...]:
    """flax's ``Axes`` (an int or an iterable of ints, negative allowed, repeats merged) as
    sorted non-negative axes."""
    if isinstance(axes, int):
        axes = (axes,)
    try:
        merged = sorted({int(a) + ndim if int(a) < 0 else int(a) for a in axes})
    except TypeError as e:
        raise TypeError(f"{fn}: {what} must be an int or a sequence of ints; got {axes!r}.") from e
    return _checks.normalize_axes(tuple(merged), ndim, fn)


def feature_shape(x_shape: tuple[int, ...], feature_axes: tuple[int, ...]) -> tuple[int, ...]:
    """The parameters' broadcast shape: ``x``'s sizes at ``feature_axes``, 1 elsewhere."""
    return tuple(n if i in feature_axes else 1 for i, n in enumerate(x_shape))


def result_dtype(*arrays: Any, dtype: Any = None) -> jnp.dtype:
    """flax's result dtype rule (``canonicalize_dtype``): ``dtype`` when given, else the JAX
    promotion of the arrays (at least float32 for integer input).

    Computed under "standard" promotion, as flax users run it: under "strict" flax's own
    modules raise for a bfloat16 input with float32 parameters.
    """
    if dtype is not None:
        return jnp.dtype(dtype)
    with jax.numpy_dtype_promotion("standard"):
        dt = jnp.result_type(*[jnp.asarray(a) for a in arrays if a is not None])
        if not jnp.issubdtype(dt, jnp.inexact):
            dt = jnp.promote_types(jnp.float32, dt)
    return jnp.dtype(dt)


def widest(*dtypes: Any) -> jnp.dtype:
    """The standard JAX promotion of ``dtypes`` (``None`` skipped)."""
    with jax.numpy_dtype_promotion("standard"):
        dt = jnp.result_type(*[jnp.dtype(d) for d in dtypes if d is not None])
        if not jnp.issubdtype(dt, jnp.inexact):
            dt = jnp.promote_types(jnp.float32, dt)
    return jnp.dtype(dt)


def normalize(
    fn: str,
    x: Array,
    scale: Array | None,
    bias: Array | None,
    *,
    centered: bool,
    reduction_axes: Any,
    feature_axes: Any,
    epsilon: float,
    out_dtype: Any,
    compute_dtype: Any,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    mask: Array | None = None,
) -> Array:
    """flax's LayerNorm (``centered``) or RMSNorm with jln's statistics.

    Args:
      fn: the caller's name, for error messages.
      x: real input of any shape; integer input is computed in ``compute_dtype``.
      scale, bias: the parameters as flax stores them (shape: ``x``'s sizes at
        ``feature_axes``), already in the dtype flax multiplies with, or ``None``.
      centered: LayerNorm (mean and variance) or RMSNorm (mean square).
      reduction_axes, feature_axes: flax's ``Axes``.
      epsilon: added to the variance inside the square root.
      out_dtype: the result dtype (flax's rule, :func:`result_dtype`).
      compute_dtype: the dtype flax computes ``y`` in; float64 there makes jln's statistics
        float64 too (otherwise they are float32, as jln's policy states).
      axis_name, axis_index_groups: the mapped axis (``shard_map``/``pmap``/``vmap``) across
        which each row is split; statistics are those of the whole row.
      mask: boolean array broadcastable to ``x``: the statistics are taken over the ``True``
        elements; every element is normalized with them.

    Returns:
      Array of ``x.shape`` and ``out_dtype``.
    """
    raxes = canonical_axes(reduction_axes, x.ndim, fn, "reduction_axes")
    faxes = canonical_axes(feature_axes, x.ndim, fn, "feature_axes")
    fshape = feature_shape(x.shape, faxes)
    ops = tuple(None if p is None else jnp.reshape(p, fshape) for p in (scale, bias))
    name, groups = _checks.check_axis_name(axis_name, axis_index_groups, fn)
    eps = _checks.check_eps(epsilon, fn)
    compute = jnp.dtype(compute_dtype)
    if not jnp.issubdtype(x.dtype, jnp.floating) or (
        compute == jnp.float64 and _stats.stats_dtype(x.dtype) != jnp.float64
    ):
        x = x.astype(compute)  # exact widening; flax computes these in compute_dtype too
    spec: LayerNormSpec | RMSNormSpec
    if centered:
        spec = LayerNormSpec(
            axes=raxes, eps=eps, out_dtype=jnp.dtype(out_dtype), axis_name=name, axis_index_groups=groups
        )
        operands: tuple[Array | None, ...] = (*ops, None, None)
    else:
        spec = RMSNormSpec(
            axes=raxes, eps=eps, convention="torch", io_dtype=x.dtype, out_dtype=jnp.dtype(out_dtype),
            scale_dtype=None if ops[0] is None else ops[0].dtype, axis_name=name, axis_index_groups=groups,
        )
        operands = (ops[0], None)
    if mask is not None:
        m = jnp.broadcast_to(jnp.asarray(mask, dtype=bool), x.shape)
        with jax.named_scope(fn):
            return jax.checkpoint(_masked, policy=_stats.REMAT_POLICY, static_argnums=(0,))(
                spec, x, m, *operands
            )
    if faxes == raxes:
        # the parameters are per normalized element: the shape jln's kernels take
        return _dispatch.apply(fn, "auto", spec, x, operands)
    with jax.named_scope(fn):
        return spec.body(x, *operands)


def _masked(spec: LayerNormSpec | RMSNormSpec, x: Array, mask: Array, *operands: Array | None) -> Array:
    """``spec``'s formula with statistics over the ``mask``-ed elements only.

    The deviations are taken about a per-row pivot (the masked mean, rounded), as the
    unmasked statistics are, so a large common offset costs no accuracy; the variance is the
    masked mean of squared deviations. With ``axis_name`` the sums and the counts are
    psummed, so the statistics are those of the masked elements of the whole row.
    """
    axes, name, groups = spec.axes, spec.axis_name, spec.axis_index_groups
    x32 = _stats.upcast(x)
    w = mask.astype(x32.dtype)
    count = _global_sum(w, axes, name, groups)

    def masked_mean(v: Array) -> Array:
        return _global_sum(jnp.where(mask, v, 0), axes, name, groups) / count

    if spec.centered:
        # about a pivot: the masked mean rounded to the statistics dtype, so x - pivot is
        # exact for data clustered around a large offset (the unmasked path's per-row pivot
        # is the row's first element, which a mask may exclude)
        pivot = lax.stop_gradient(masked_mean(x32))
        xs = x32 - pivot
        mean = checkpoint_name(masked_mean(xs), _stats.STAT_NAMES[0])
        d = xs - mean
        r = _stats.inv_std(masked_mean(d * d), spec.eps)
    else:
        d = x32
        r = _stats.inv_std(masked_mean(x32 * x32), spec.eps)
    return spec.tail(d * r, *operands)


def _global_sum(v: Array, axes: tuple[int, ...], axis_name: Any, groups: Any) -> Array:
    s = jnp.sum(v, axis=axes, keepdims=True)
    if axis_name is None:
        return s
    return lax.psum(s, axis_name, axis_index_groups=groups)
