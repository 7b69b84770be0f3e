"""The one computation behind :mod:`jln.flax.linen` and :mod:`jln.flax.nnx`.

flax's ``LayerNorm``/``RMSNorm`` (linen and NNX) differ only in how they hold parameters and
promote dtypes; once the parameters and the result dtype are known, both compute

    y = (x - mean) / sqrt(var + epsilon) * scale + bias        (RMSNorm: mean = 0, no bias)

over ``reduction_axes``, with ``scale``/``bias`` laid out along ``feature_axes``, the
statistics over the elements where ``mask`` is true, and one rounding to the result dtype at
the end. :func:`normalize` is that computation with jln's statistics: the unmasked case is
:class:`jln.families.layer_norm.spec.LayerNormSpec` (or ``RMSNormSpec``'s torch convention, which
rounds once, as flax does) run through :func:`jln._dispatch.apply`, so jln's kernels take it
where they apply; the masked case is :func:`jln._stats.masked_normalized`, under the same remat policy.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _dispatch, _stats, _validate
from jln.families.layer_norm.spec import LayerNormSpec
from jln.families.rms_norm.spec import RMSNormSpec

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
    return _validate.normalize_axes(tuple(merged), ndim, fn)


def feature_shape(x_shape: tuple[int, ...], feature_axes: tuple[int, ...]) -> tuple[int, ...]:
    """The parameters' broadcast shape: ``x``'s sizes at ``feature_axes``, 1 elsewhere."""
    return tuple(n if i in feature_axes else 1 for i, n in enumerate(x_shape))


def result_dtype(*arrays: Any, dtype: Any = None) -> jnp.dtype:
    """flax's result dtype rule (``canonicalize_dtype``): ``dtype`` when given, else
    :func:`widest` of the arrays' dtypes.

    Computed under "standard" promotion, as flax users run it: under "strict" flax's own
    modules raise for a bfloat16 input with float32 parameters.
    """
    if dtype is not None:
        return jnp.dtype(dtype)
    return widest(*[jnp.asarray(a).dtype for a in arrays if a is not None])


def widest(*dtypes: Any) -> jnp.dtype:
    """The standard JAX promotion of ``dtypes`` (``None`` skipped; at least float32 for
    integers)."""
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
    name, groups = _validate.check_axis_name(axis_name, axis_index_groups, fn)
    eps = _validate.check_eps(epsilon, fn)
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
    """``spec``'s formula with statistics over the ``mask``-ed elements only
    (:func:`jln._stats.masked_normalized`), then its tail."""
    y = _stats.masked_normalized(
        _stats.upcast(x), mask, spec.axes, spec.eps, spec.centered, spec.axis_name, spec.axis_index_groups
    )
    return spec.tail(y, *operands)
