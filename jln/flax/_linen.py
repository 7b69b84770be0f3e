"""The classes of :mod:`jln.flax.linen`: flax.linen's five statistics norms computed by jln.

Each is a subclass of flax's own class with flax's attributes and defaults, parameter names
(``scale``/``bias``, then ``batch_stats`` ``mean``/``var`` for BatchNorm), shapes, dtypes,
initializers (so the same RNG draws) and partitioning boxes; only ``__call__`` is jln's, and
computes through :mod:`jln.flax._norm`.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jln.flax import _norm

Array = jax.Array

__all__ = ["BatchNorm", "GroupNorm", "InstanceNorm", "LayerNorm", "RMSNorm"]


def _params(module: Any, shape: tuple[int, ...], use_bias: bool = True) -> tuple[Array | None, Array | None]:
    """Declare ``scale`` then ``bias`` as flax does (names, order, shape, ``param_dtype`` and
    initializers: the same RNG draws and boxes)."""
    scale = module.param("scale", module.scale_init, shape, module.param_dtype) if module.use_scale else None
    bias = module.param("bias", module.bias_init, shape, module.param_dtype) if use_bias and module.use_bias else None
    return scale, bias


def _dtypes(module: Any, x: Array, *arrays: Array | None) -> tuple[jnp.dtype, jnp.dtype, jnp.dtype]:
    """flax's ``(result dtype, statistics dtype, compute dtype)``: ``dtype``, else the promotion
    of ``x`` and the parameters; the statistics in ``dtype`` (else ``x``'s), at least float32
    under ``force_float32_reductions``; the arithmetic in the promotion of all of them."""
    out_dtype = _norm.result_dtype(x, *arrays[:2], dtype=module.dtype)
    stats = _norm.widest(module.dtype if module.dtype is not None else x.dtype)
    if module.force_float32_reductions:
        stats = _norm.widest(stats, jnp.float32)
    compute = _norm.widest(stats, x.dtype, *(None if p is None else p.dtype for p in arrays))
    return out_dtype, stats, compute


def _call(module: Any, x: Any, mask: Any, centered: bool, fn: str) -> Array:
    """LayerNorm/RMSNorm: declare the parameters as flax does and normalize ``x`` with jln's
    statistics."""
    x = jnp.asarray(x)
    faxes = _norm.canonical_axes(module.feature_axes, x.ndim, fn, "feature_axes")
    scale, bias = _params(module, tuple(x.shape[a] for a in faxes), use_bias=centered)
    out_dtype, _, compute = _dtypes(module, x, scale, bias)
    return _norm.normalize(
        fn, x, scale, bias, centered=centered, reduction_axes=module.reduction_axes,
        feature_axes=module.feature_axes, epsilon=module.epsilon, out_dtype=out_dtype,
        compute_dtype=compute, axis_name=module.axis_name,
        axis_index_groups=module.axis_index_groups, mask=mask,
    )


class LayerNorm(nn.LayerNorm):
    r"""flax's ``nn.LayerNorm`` (same attributes, defaults and parameters) with jln's statistics.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale}
        + \mathrm{bias}

    over ``reduction_axes`` (biased variance, ``epsilon`` inside the square root, default
    1e-6); ``scale``/``bias`` have ``x``'s sizes at ``feature_axes``.

    Attributes:
      epsilon: added to the variance inside the square root; default 1e-6.
      reduction_axes: the axes the statistics are taken over; default -1.
      feature_axes: the axes ``scale``/``bias`` span; default -1.

    The other attributes are flax's, with flax's defaults (``use_fast_variance`` has no
    effect: jln's statistics either way): ``dtype``, ``param_dtype``, ``use_bias``,
    ``use_scale``, ``bias_init``, ``scale_init``, ``axis_name``, ``axis_index_groups``,
    ``use_fast_variance``, ``force_float32_reductions``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln.flax.linen import LayerNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (2, 8))
      >>> variables = LayerNorm().init(jax.random.key(1), x)
      >>> y = LayerNorm().apply(variables, x)
      >>> bool(jnp.allclose(y.std(-1), 1.0, atol=1e-3))
      True
    """

    @nn.compact
    def __call__(self, x: Any, *, mask: Array | None = None) -> Array:
        """Normalize ``x``.

        Args:
          x: the input (real; complex input is computed by flax's own ``__call__``).
          mask: optional boolean array broadcastable to ``x``: the statistics are taken over
            its ``True`` elements only.

        Returns:
          Array of ``x.shape``; dtype ``dtype``, else the promotion of ``x`` and the params.

        Raises:
          ValueError: an axis is out of range or ``epsilon`` is negative.
          NameError: ``axis_name`` is not bound by an enclosing ``shard_map``/``pmap``/``vmap``.
        """
        if jnp.iscomplexobj(x):
            return super().__call__(x, mask=mask)
        return _call(self, x, mask, True, "jln.flax.linen.LayerNorm")


class RMSNorm(nn.RMSNorm):
    r"""flax's ``nn.RMSNorm`` (same attributes, defaults and parameters) with jln's statistics.

    .. math::

        y = \frac{x}{\sqrt{\mathrm{E}[x^2] + \epsilon}} \cdot \mathrm{scale}

    over ``reduction_axes`` (``epsilon`` inside the square root, default 1e-6); ``scale`` has
    ``x``'s sizes at ``feature_axes``. Rounded once to the result dtype.

    Attributes:
      epsilon: added to the mean square inside the square root; default 1e-6.
      reduction_axes: the axes the statistics are taken over; default -1.
      feature_axes: the axes ``scale`` spans; default -1.

    The other attributes are flax's, with flax's defaults: ``dtype``, ``param_dtype``,
    ``use_scale``, ``scale_init``, ``axis_name``, ``axis_index_groups``,
    ``use_fast_variance``, ``force_float32_reductions``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln.flax.linen import RMSNorm
      >>> x = jnp.array([[3.0, 4.0]])
      >>> y = RMSNorm().apply(RMSNorm().init(jax.random.key(0), x), x)
      >>> [round(float(v), 4) for v in y[0]]
      [0.8485, 1.1314]
    """

    @nn.compact
    def __call__(self, x: Any, *, mask: Array | None = None) -> Array:
        """Normalize ``x``: as :meth:`LayerNorm.__call__`, without centring or bias."""
        if jnp.iscomplexobj(x):
            return super().__call__(x, mask=mask)
        return _call(self, x, mask, False, "jln.flax.linen.RMSNorm")


class GroupNorm(nn.GroupNorm):
    r"""flax's ``nn.GroupNorm`` (same attributes, defaults and parameters) with jln's statistics.

    .. math::

        y = \frac{x - \mathrm{E}_g[x]}{\sqrt{\mathrm{Var}_g[x] + \epsilon}} \cdot
        \mathrm{scale}_c + \mathrm{bias}_c

    The channels (``x``'s last axis) are split into ``num_groups`` groups of consecutive
    channels (or groups of ``group_size``); each group's statistics are taken over its
    channels and the other ``reduction_axes`` (by default every axis but the leading batch
    axis), with the biased variance and ``epsilon`` inside the square root (default 1e-6).
    ``scale``/``bias`` are per channel.

    Attributes:
      num_groups: the number of groups (default 32), or ``None`` with ``group_size``.
      group_size: the channels per group, with ``num_groups=None``.
      reduction_axes: the axes reduced, the last axis among them; default all but axis 0.

    The other attributes are flax's, with flax's defaults (``use_fast_variance`` has no
    effect): ``epsilon``, ``dtype``, ``param_dtype``, ``use_bias``, ``use_scale``,
    ``bias_init``, ``scale_init``, ``axis_name``, ``axis_index_groups``,
    ``use_fast_variance``, ``force_float32_reductions``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln.flax.linen import GroupNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (2, 4, 4, 8))
      >>> gn = GroupNorm(num_groups=2)
      >>> variables = gn.init(jax.random.key(1), x)
      >>> jax.tree.map(jnp.shape, variables)
      {'params': {'bias': (8,), 'scale': (8,)}}
      >>> y = gn.apply(variables, x)
      >>> bool(jnp.allclose(y[0, ..., :4].std(), 1.0, atol=1e-3))
      True
    """

    @nn.compact
    def __call__(self, x: Any, *, mask: Array | None = None) -> Array:
        """Normalize ``x``.

        Args:
          x: the input ``[..., C]`` (real; complex input is computed by flax's own
            ``__call__``).
          mask: optional boolean array broadcastable to ``x``: each group's statistics are
            taken over its ``True`` elements only.

        Returns:
          Array of ``x.shape``; dtype ``dtype``, else the promotion of ``x`` and the params.

        Raises:
          ValueError: both or neither of ``num_groups`` and ``group_size``; a group count or
            size that does not divide ``C``; ``reduction_axes`` without the last axis or out
            of range; a negative ``epsilon``.
          NameError: ``axis_name`` is not bound.
        """
        if jnp.iscomplexobj(x):
            return super().__call__(x, mask=mask)
        fn = "jln.flax.linen.GroupNorm"
        x = jnp.asarray(x)
        groups, raxes = _norm.check_group_norm(fn, x.shape, self.num_groups, self.group_size, self.reduction_axes)
        scale, bias = _params(self, (x.shape[-1],))
        out_dtype, _, compute = _dtypes(self, x, scale, bias)
        y, _, _ = _norm.stat_normalize(
            x, scale, bias, mask, fn=fn, reduction_axes=raxes, feature_axes=(x.ndim - 1,), epsilon=self.epsilon,
            out_dtype=out_dtype, compute_dtype=compute, axis_name=self.axis_name,
            axis_index_groups=self.axis_index_groups, num_groups=groups,
        )
        return y


class InstanceNorm(nn.InstanceNorm):
    r"""flax's ``nn.InstanceNorm`` (same attributes, defaults and parameters) with jln's
    statistics.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale}
        + \mathrm{bias}

    per sample (axis 0) and feature (``feature_axes``, default the last axis), the statistics
    over every other axis (biased variance, ``epsilon`` inside the square root, default 1e-6);
    ``scale``/``bias`` have ``x``'s sizes at ``feature_axes``.

    Attributes:
      feature_axes: the axes the parameters span (not axis 0); default -1.

    The other attributes are flax's, with flax's defaults (``use_fast_variance`` has no
    effect): ``epsilon``, ``dtype``, ``param_dtype``, ``use_bias``, ``use_scale``,
    ``bias_init``, ``scale_init``, ``axis_name``, ``axis_index_groups``,
    ``use_fast_variance``, ``force_float32_reductions``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln.flax.linen import InstanceNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (2, 16, 3))
      >>> layer = InstanceNorm()
      >>> y = layer.apply(layer.init(jax.random.key(1), x), x)
      >>> bool(jnp.allclose(y.std(axis=1), 1.0, atol=1e-3))
      True
    """

    @nn.compact
    def __call__(self, x: Any, *, mask: Array | None = None) -> Array:
        """Normalize ``x``.

        Args:
          x: the input ``[N, ...]`` (real; complex input is computed by flax's own
            ``__call__``).
          mask: optional boolean array broadcastable to ``x``: the statistics are taken over
            its ``True`` elements only.

        Returns:
          Array of ``x.shape``; dtype ``dtype``, else the promotion of ``x`` and the params.

        Raises:
          ValueError: ``feature_axes`` includes axis 0 or is out of range; a negative
            ``epsilon``.
          NameError: ``axis_name`` is not bound.
        """
        if jnp.iscomplexobj(x):
            return super().__call__(x, mask=mask)
        fn = "jln.flax.linen.InstanceNorm"
        x = jnp.asarray(x)
        raxes, faxes = _norm.instance_axes(fn, x.ndim, self.feature_axes)
        scale, bias = _params(self, tuple(x.shape[a] for a in faxes))
        out_dtype, _, compute = _dtypes(self, x, scale, bias)
        y, _, _ = _norm.stat_normalize(
            x, scale, bias, mask, fn=fn, reduction_axes=raxes, feature_axes=faxes, epsilon=self.epsilon,
            out_dtype=out_dtype, compute_dtype=compute, axis_name=self.axis_name,
            axis_index_groups=self.axis_index_groups,
        )
        return y


class BatchNorm(nn.BatchNorm):
    r"""flax's ``nn.BatchNorm`` (same attributes, defaults, parameters and ``batch_stats``) with
    jln's statistics.

    .. math::

        y = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \cdot \mathrm{scale} + \mathrm{bias}

    per feature (``axis``, default -1), ``epsilon`` inside the square root (flax's default
    1e-5). In training (``use_running_average=False``) ``mu`` and ``sigma^2`` are the batch's
    mean and biased variance over every other axis (global across ``axis_name``), and the
    ``batch_stats`` collection (``mean`` zeros and ``var`` ones at init, float32) is updated
    as flax does, with flax's ``momentum`` (default 0.99)::

        mean = momentum * mean + (1 - momentum) * batch_mean
        var  = momentum * var  + (1 - momentum) * batch_var      # the biased batch variance

    (not during ``init``, which also leaves ``axis_name`` unused). With
    ``use_running_average=True`` the stored ``mean``/``var`` normalize ``x`` and nothing is
    updated.

    Attributes:
      use_running_average: flax's: ``None`` (give it at the call), ``True`` or ``False``.
      axis: the feature axis (or axes); default -1.
      momentum: flax's decay of the running statistics, 0.99 (torch's momentum is
        ``1 - momentum``).
      epsilon: added to the variance inside the square root; flax's BatchNorm default 1e-5.

    The other attributes are flax's, with flax's defaults (``use_fast_variance`` has no
    effect): ``dtype``, ``param_dtype``, ``use_bias``, ``use_scale``, ``bias_init``,
    ``scale_init``, ``axis_name``, ``axis_index_groups``, ``use_fast_variance``,
    ``force_float32_reductions``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln.flax.linen import BatchNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (64, 3))
      >>> bn = BatchNorm(use_running_average=False)
      >>> variables = bn.init(jax.random.key(1), x)
      >>> jax.tree.map(jnp.shape, variables)
      {'batch_stats': {'mean': (3,), 'var': (3,)}, 'params': {'bias': (3,), 'scale': (3,)}}
      >>> y, updates = bn.apply(variables, x, mutable=["batch_stats"])
      >>> bool(jnp.allclose(updates["batch_stats"]["mean"], 0.01 * x.mean(0)))
      True
    """

    @nn.compact
    def __call__(
        self, x: Any, use_running_average: bool | None = None, *, mask: Array | None = None
    ) -> Array:
        """Normalize ``x`` with the batch's statistics (and update ``batch_stats``) or with the
        running ones.

        Args:
          x: the input (real; complex input is computed by flax's own ``__call__``).
          use_running_average: overrides the attribute (one of them must be given).
          mask: optional boolean array broadcastable to ``x``: the batch statistics are taken
            over its ``True`` elements only.

        Returns:
          Array of ``x.shape``; dtype ``dtype``, else the promotion of ``x`` and the params.

        Raises:
          ValueError: ``use_running_average`` given neither here nor as an attribute, or both
            with different values (flax's ``merge_param``); ``axis`` out of range; a negative
            ``epsilon``.
          NameError: ``axis_name`` is not bound (outside ``init``).
          flax.errors.ModifyScopeVariableError: a training step whose ``batch_stats`` are not
            ``mutable``.
        """
        if jnp.iscomplexobj(x):
            return super().__call__(x, use_running_average, mask=mask)
        fn = "jln.flax.linen.BatchNorm"
        running = nn.merge_param("use_running_average", self.use_running_average, use_running_average)
        x = jnp.asarray(x)
        faxes = _norm.canonical_axes(self.axis, x.ndim, fn, "axis")
        raxes = tuple(a for a in range(x.ndim) if a not in faxes)
        shape = tuple(x.shape[a] for a in faxes)
        stat_dtype = jnp.float32 if self.force_float32_reductions else self.param_dtype
        ra_mean = self.variable("batch_stats", "mean", lambda s: jnp.zeros(s, stat_dtype), shape)
        ra_var = self.variable("batch_stats", "var", lambda s: jnp.ones(s, stat_dtype), shape)
        scale, bias = _params(self, shape)
        if running:
            mean, var = ra_mean.value, ra_var.value
            if not self.force_float32_reductions:
                mean, var = mean.astype(self.param_dtype), var.astype(self.param_dtype)
            out_dtype, _, compute = _dtypes(self, x, scale, bias, mean, var)
            return _norm.running_normalize(
                x, scale, bias, mean, var, fn=fn, reduction_axes=raxes, feature_axes=faxes,
                epsilon=self.epsilon, out_dtype=out_dtype, compute_dtype=compute,
            )
        out_dtype, stats, compute = _dtypes(self, x, scale, bias)
        initializing = self.is_initializing()
        y, mean, var = _norm.stat_normalize(
            x, scale, bias, mask, fn=fn, reduction_axes=raxes, feature_axes=faxes, epsilon=self.epsilon,
            out_dtype=out_dtype, compute_dtype=compute,
            axis_name=None if initializing else self.axis_name,
            axis_index_groups=None if initializing else self.axis_index_groups,
        )
        if not initializing:
            for ra, batch in ((ra_mean, mean), (ra_var, var)):
                old = jnp.asarray(ra.value)
                ra.value = _norm.running_update(old, batch, self.momentum, _norm.widest(old.dtype, stats))
        return y
