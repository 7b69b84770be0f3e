"""The one computation behind :mod:`jln.flax.linen` and :mod:`jln.flax.nnx`.

flax's norms (linen and NNX) differ only in how they hold parameters and running statistics
and promote dtypes; once the parameters and the result dtype are known, all five compute

    y = (x - mean) / sqrt(var + epsilon) * scale + bias        (RMSNorm: mean = 0, no bias)

over their reduction axes, with ``scale``/``bias`` laid out along the feature axes, the
statistics over the elements where ``mask`` is true, and one rounding to the result dtype at
the end.

* :func:`normalize` (LayerNorm, RMSNorm): the unmasked case is
  :class:`jln.families.layer_norm.spec.LayerNormSpec` (or ``RMSNormSpec``'s torch convention,
  which rounds once, as flax does) run through :func:`jln._dispatch.apply`, so jln's kernels
  take it where they apply; the masked case is :func:`jln._stats.masked_normalized`, under the
  same remat policy.
* :func:`stat_normalize` (GroupNorm, InstanceNorm, BatchNorm in training): the contract of
  ``jln.group_norm``/``jln.instance_norm``/``jln.batch_norm``,
  :class:`jln.families.batch_norm.spec.BatchStatSpec`, with flax's axes and result dtype; it
  also returns the batch statistics (biased variance), from which :func:`running_update` takes
  flax's running-statistics update ``m * running + (1 - m) * batch``.
* :func:`running_normalize` (BatchNorm with ``use_running_average``):
  :class:`jln.families.batch_norm.spec.RunningStatSpec`.

The core functions themselves take torch's layout and semantics (one channel axis, the output
in ``x``'s dtype, torch's unbiased running variance, half-precision statistics rounded as
torch's CPU kernels round them), so the flax classes call the specs those functions call.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jln import _dispatch, _eager, _stats, _validate
from jln.families.batch_norm.spec import BatchStatSpec, RunningStatSpec
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
    x = widened(x, compute_dtype)
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


# --- GroupNorm, InstanceNorm, BatchNorm ---------------------------------------------------------


def widened(x: Array, compute_dtype: Any) -> Array:
    """``x`` as jln's statistics take it: integers in ``compute_dtype``; floats in their own
    dtype (jln computes bfloat16/float16/float32 in float32) unless ``compute_dtype`` is
    float64 (exact widening either way; flax computes these in ``compute_dtype`` too)."""
    compute = jnp.dtype(compute_dtype)
    if not jnp.issubdtype(x.dtype, jnp.floating) or (
        compute == jnp.float64 and _stats.stats_dtype(x.dtype) != jnp.float64
    ):
        return x.astype(compute)
    return x


def check_group_norm(
    fn: str, x_shape: tuple[int, ...], num_groups: Any, group_size: Any, reduction_axes: Any
) -> tuple[int, tuple[int, ...]]:
    """flax's GroupNorm arguments checked against ``x``: ``(num_groups, reduction axes)``, the
    axes sorted and non-negative (by default every axis but the leading batch axis).

    Raises:
      ValueError: both or neither of ``num_groups``/``group_size``; a group count or size that
        does not divide the channels (``x``'s last axis); reduction axes without the last axis.
    """
    ndim = len(x_shape)
    given = [*range(1, ndim - 1), -1] if reduction_axes is None else reduction_axes
    raxes = canonical_axes(given, ndim, fn, "reduction_axes")
    if raxes[-1] != ndim - 1:
        raise ValueError(
            f"{fn}: the reduction axes must include the last axis (the channels, whose groups "
            f"are normalized); received reduction_axes={reduction_axes!r} for x of rank {ndim}."
        )
    if (num_groups is None) == (group_size is None):
        raise ValueError(
            f"{fn}: give exactly one of num_groups and group_size (to give group_size, pass "
            f"num_groups=None: its default is 32); received num_groups={num_groups!r}, "
            f"group_size={group_size!r}."
        )
    channels = x_shape[-1]
    if group_size is not None:
        if not isinstance(group_size, int) or group_size <= 0 or channels % group_size:
            raise ValueError(
                f"{fn}: group_size={group_size!r} does not divide the {channels} channels of x "
                f"(its last axis, x.shape={tuple(x_shape)})."
            )
        num_groups = channels // group_size
    if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups <= 0 or channels % num_groups:
        raise ValueError(
            f"{fn}: num_groups={num_groups!r} does not divide the {channels} channels of x "
            f"(its last axis, x.shape={tuple(x_shape)})."
        )
    return num_groups, raxes


def instance_axes(fn: str, ndim: int, feature_axes: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """InstanceNorm's ``(reduction axes, feature axes)``: every axis but the batch axis 0 and
    the feature axes is reduced."""
    faxes = canonical_axes(feature_axes, ndim, fn, "feature_axes")
    if 0 in faxes:
        raise ValueError(
            f"{fn}: feature_axes may not include axis 0, the batch axis (each sample is "
            f"normalized on its own); received feature_axes={feature_axes!r}."
        )
    return tuple(a for a in range(1, ndim) if a not in faxes), faxes


@_eager.compiled_when_eager("x", "scale", "bias", "mask")
def stat_normalize(
    x: Array,
    scale: Array | None,
    bias: Array | None,
    mask: Array | None = None,
    *,
    fn: str,
    reduction_axes: tuple[int, ...],
    feature_axes: tuple[int, ...],
    epsilon: float,
    out_dtype: Any,
    compute_dtype: Any,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    num_groups: int | None = None,
) -> tuple[Array, Array, Array]:
    """GroupNorm, InstanceNorm or BatchNorm (training) with jln's statistics (an eager call
    compiled whole, as jln's core functions are).

    Args:
      x: real input of any shape; integer input is computed in ``compute_dtype``.
      scale, bias: the parameters as flax stores them (``x``'s sizes at ``feature_axes``),
        already in the dtype flax multiplies with, or ``None``.
      mask: boolean array broadcastable to ``x``: the statistics are taken over its ``True``
        elements; every element is normalized with them.
      fn: the caller's name, for error messages.
      reduction_axes: sorted non-negative axes the statistics are taken over (may be empty:
        each element is its own row). With ``num_groups``, the last is ``x``'s last axis, the
        channels, of which each group's are reduced.
      feature_axes: sorted non-negative axes the parameters span (GroupNorm: the last).
      epsilon: added to the variance inside the square root.
      out_dtype: the result dtype (flax's rule, :func:`result_dtype`).
      compute_dtype: the dtype flax computes in (float64 there makes the statistics float64).
      axis_name, axis_index_groups: the mapped axis across which the reduced axes are split:
        statistics of the whole (global) rows.
      num_groups: GroupNorm: the last axis is split into this many groups of consecutive
        channels, each normalized with its own statistics.

    Returns:
      ``(y, mean, var)``: ``y`` of ``x.shape`` and ``out_dtype``; the statistics (biased
      variance, float32 or float64, no gradient) shaped to broadcast against ``x`` (reduced
      axes of size 1; for GroupNorm against the grouped ``x``).
    """
    name, groups = _validate.check_axis_name(axis_name, axis_index_groups, fn)
    eps = _validate.check_eps(epsilon, fn)
    x = widened(x, compute_dtype)
    shape = x.shape
    m = None if mask is None else jnp.broadcast_to(jnp.asarray(mask, dtype=bool), shape)
    if num_groups is None:
        axes = reduction_axes
        pshape = feature_shape(shape, feature_axes)
    else:
        c, g = x.ndim - 1, num_groups
        gs = shape[c] // g
        # the channels as (groups, channels per group), a part of size 1 left out (as
        # jln.group_norm: XLA:CPU's backward is slower with a unit axis between reduced ones)
        split = tuple(n for n in (g, gs) if n > 1) or (1,)
        x = x.reshape(shape[:c] + split)
        m = None if m is None else m.reshape(x.shape)
        reduce_last = gs > 1 or g == 1  # the group axis is kept where there are groups
        axes = tuple(a for a in reduction_axes if a != c) + ((x.ndim - 1,) if reduce_last else ())
        pshape = (1,) * c + split
    ops = tuple(None if p is None else jnp.reshape(p, pshape) for p in (scale, bias))
    spec = BatchStatSpec(axes=axes, eps=eps, out_dtype=jnp.dtype(out_dtype), axis_name=name, axis_index_groups=groups)
    with jax.named_scope(fn):
        if m is None:
            y, mean, var = spec.body(x, *ops)
        else:
            y, mean, var = spec.masked_body(x, m, *ops)
    return y.reshape(shape), mean, var


@_eager.compiled_when_eager("x", "scale", "bias", "mean", "var")
def running_normalize(
    x: Array,
    scale: Array | None,
    bias: Array | None,
    mean: Array,
    var: Array,
    *,
    fn: str,
    reduction_axes: tuple[int, ...],
    feature_axes: tuple[int, ...],
    epsilon: float,
    out_dtype: Any,
    compute_dtype: Any,
) -> Array:
    """BatchNorm with given (running) statistics: ``(x - mean) / sqrt(var + epsilon) * scale +
    bias``, the statistics and parameters laid out along ``feature_axes``, computed in float32
    (float64 where ``compute_dtype`` is) and rounded once to ``out_dtype``."""
    eps = _validate.check_eps(epsilon, fn)
    x = widened(x, compute_dtype)
    pshape = feature_shape(x.shape, feature_axes)
    ops = tuple(None if p is None else jnp.reshape(p, pshape) for p in (scale, bias, mean, var))
    spec = RunningStatSpec(axes=reduction_axes, eps=eps, out_dtype=jnp.dtype(out_dtype))
    with jax.named_scope(fn):
        return spec.body(x, *ops)


def running_update(old: Array, batch: Array, momentum: float, dtype: Any) -> Array:
    """flax's running-statistics update ``momentum * old + (1 - momentum) * batch`` (flax's
    ``momentum``, 0.99 by default; ``batch`` the batch mean, or its **biased** variance),
    computed in the wider of the two dtypes, reshaped to ``old``'s shape and rounded to
    ``dtype`` (flax's: the promotion of ``old``'s dtype and its statistics dtype). No gradient.
    """
    sd = widest(old.dtype, batch.dtype)
    # the two weights as flax's Python floats give them (1 - m taken before rounding)
    keep, take = jnp.asarray(momentum, sd), jnp.asarray(1 - momentum, sd)
    new = keep * old.astype(sd) + take * jnp.reshape(batch, old.shape).astype(sd)
    return lax.stop_gradient(new.astype(dtype))
