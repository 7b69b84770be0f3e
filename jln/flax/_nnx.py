"""The classes of :mod:`jln.flax.nnx`: flax.nnx's five statistics norms computed by jln.

Each is a subclass of flax's own class that keeps flax's ``__init__`` unchanged (constructor,
defaults, ``Param``/``BatchStat`` variables with their metadata, the keys drawn from
``rngs``); only ``__call__`` is jln's, and computes through :mod:`jln.flax._norm` after
running ``promote_dtype`` as flax does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes as nnx_dtypes

from jln.flax import _norm

Array = jax.Array

__all__ = ["BatchNorm", "GroupNorm", "InstanceNorm", "LayerNorm", "RMSNorm"]


def _value(p: Any) -> Array | None:
    return None if p is None else p[...]


def _promoted(module: Any, x: Any, *arrays: Array | None) -> tuple[Array, tuple[Any, ...], jnp.dtype, jnp.dtype]:
    """Run ``module.promote_dtype`` on ``(x, *arrays)`` as flax does; return ``(x to
    normalize, the promoted tuple, statistics dtype, compute dtype)``.

    flax casts ``x`` to the promoted dtype before its statistics; where that is an exact
    widening of a float ``x`` (flax's own ``promote_dtype``), ``x`` is kept in its own dtype:
    jln widens it itself, and reverse mode then saves ``x`` at its own size (2 bytes per
    element for bfloat16).
    """
    with jax.numpy_dtype_promotion("standard"):  # flax's promotion, as flax users run it
        promoted = tuple(module.promote_dtype((x, *arrays), dtype=module.dtype))
    px, x = promoted[0], jnp.asarray(x)
    if not (
        module.promote_dtype is nnx_dtypes.promote_dtype
        and jnp.issubdtype(x.dtype, jnp.floating)
        and _norm.widest(x.dtype, px.dtype) == px.dtype
    ):
        x = px
    stats = _norm.widest(module.dtype if module.dtype is not None else px.dtype, jnp.float32)
    return x, promoted, stats, _norm.widest(stats, px.dtype)


def _call(module: Any, x: Any, mask: Any, centered: bool, fn: str) -> Array:
    """LayerNorm/RMSNorm: promote as flax does, then normalize with jln's statistics."""
    scale = _value(module.scale) if module.use_scale else None
    bias = _value(module.bias) if centered and module.use_bias else None
    x, (px, scale, bias), _, compute = _promoted(module, x, scale, bias)
    return _norm.normalize(
        fn, x, scale, bias, centered=centered, reduction_axes=module.reduction_axes,
        feature_axes=module.feature_axes, epsilon=module.epsilon,
        out_dtype=_norm.result_dtype(px, scale, bias, dtype=module.dtype), compute_dtype=compute,
        axis_name=module.axis_name, axis_index_groups=module.axis_index_groups, mask=mask,
    )


class LayerNorm(nnx.LayerNorm):
    r"""flax's ``nnx.LayerNorm`` (same constructor, parameters and RNG draws) with jln's
    statistics.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale}
        + \mathrm{bias}

    over ``reduction_axes`` (biased variance, ``epsilon`` inside the square root, default
    1e-6); ``scale``/``bias`` have ``x``'s sizes at ``feature_axes``.

    Args:
      num_features: the number of features (the product of ``x``'s sizes at
        ``feature_axes``).
      epsilon: added to the variance inside the square root; default 1e-6.
      rngs: two keys are drawn from ``rngs.params()``, scale's then bias's (as flax does,
        ones/zeros initializers included).

    The other arguments are flax's, with flax's defaults (``use_fast_variance`` has no
    effect): ``dtype``, ``param_dtype``, ``use_bias``, ``use_scale``, ``bias_init``,
    ``scale_init``, ``reduction_axes``, ``feature_axes``, ``axis_name``,
    ``axis_index_groups``, ``use_fast_variance``, ``promote_dtype``, ``bias_metadata``,
    ``scale_metadata``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx as fnnx
      >>> from jln.flax.nnx import LayerNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (2, 8))
      >>> y = LayerNorm(8, rngs=fnnx.Rngs(0))(x)
      >>> bool(jnp.allclose(y.std(-1), 1.0, atol=1e-3))
      True
    """

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
        return _call(self, x, mask, True, "jln.flax.nnx.LayerNorm")


class RMSNorm(nnx.RMSNorm):
    r"""flax's ``nnx.RMSNorm`` (same constructor, parameter and RNG draw) with jln's statistics.

    .. math::

        y = \frac{x}{\sqrt{\mathrm{E}[x^2] + \epsilon}} \cdot \mathrm{scale}

    over ``reduction_axes`` (``epsilon`` inside the square root, default 1e-6). Rounded once
    to the result dtype.

    Args:
      num_features: the number of features (the product of ``x``'s sizes at
        ``feature_axes``).
      epsilon: added to the mean square inside the square root; default 1e-6.
      rngs: one key is drawn from ``rngs.params()``, scale's (as flax does).

    The other arguments are flax's, with flax's defaults: ``dtype``, ``param_dtype``,
    ``use_scale``, ``scale_init``, ``reduction_axes``, ``feature_axes``, ``axis_name``,
    ``axis_index_groups``, ``use_fast_variance``, ``promote_dtype``, ``scale_metadata``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx as fnnx
      >>> from jln.flax.nnx import RMSNorm
      >>> y = RMSNorm(2, rngs=fnnx.Rngs(0))(jnp.array([[3.0, 4.0]]))
      >>> [round(float(v), 4) for v in y[0]]
      [0.8485, 1.1314]
    """

    def __call__(self, x: Any, mask: Array | None = None) -> Array:
        """Normalize ``x``: as :meth:`LayerNorm.__call__`, without centring or bias."""
        if jnp.iscomplexobj(x):
            return super().__call__(x, mask=mask)
        return _call(self, x, mask, False, "jln.flax.nnx.RMSNorm")


class GroupNorm(nnx.GroupNorm):
    r"""flax's ``nnx.GroupNorm`` (same constructor, parameters and RNG draws) with jln's
    statistics.

    .. math::

        y = \frac{x - \mathrm{E}_g[x]}{\sqrt{\mathrm{Var}_g[x] + \epsilon}} \cdot
        \mathrm{scale}_c + \mathrm{bias}_c

    The ``num_features`` channels (``x``'s last axis) are split into ``num_groups`` groups of
    consecutive channels (or groups of ``group_size``); each group's statistics are taken over
    its channels and the other ``reduction_axes`` (by default every axis but the leading
    batch axis), with the biased variance and ``epsilon`` inside the square root (default
    1e-6). ``scale``/``bias`` are per channel. With ``reduction_axes`` that leave out a
    non-batch axis, each group is still made of consecutive channels (as flax.linen's
    GroupNorm and the paper have it; flax.nnx's own class mixes the groups up there).

    Args:
      num_features: the number of channels.
      num_groups: the number of groups (default 32), or ``None`` with ``group_size``.
      group_size: the channels per group, with ``num_groups=None``.
      reduction_axes: the axes reduced, the last axis among them; default all but axis 0.

    The other arguments are flax's, with flax's defaults (``rngs`` gives two keys, scale's
    and bias's; ``use_fast_variance`` has no effect): ``epsilon``, ``dtype``,
    ``param_dtype``, ``use_bias``, ``use_scale``, ``bias_init``, ``scale_init``,
    ``axis_name``, ``axis_index_groups``, ``use_fast_variance``, ``promote_dtype``,
    ``rngs``, ``bias_metadata``, ``scale_metadata``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx as fnnx
      >>> from jln.flax.nnx import GroupNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (2, 4, 4, 8))
      >>> y = GroupNorm(8, num_groups=2, rngs=fnnx.Rngs(0))(x)
      >>> bool(jnp.allclose(y[0, ..., :4].std(), 1.0, atol=1e-3))
      True
    """

    def __call__(self, x: Any, *, mask: Array | None = None) -> Array:
        """Normalize ``x``.

        Args:
          x: the input ``[..., num_features]`` (real; complex input is computed by flax's own
            ``__call__``).
          mask: optional boolean array broadcastable to ``x``: each group's statistics are
            taken over its ``True`` elements only.

        Returns:
          Array of ``x.shape``; dtype ``dtype``, else the promotion of ``x`` and the params.

        Raises:
          ValueError: ``x``'s last axis is not ``num_features`` long; ``reduction_axes``
            without the last axis or out of range; a negative ``epsilon``.
          NameError: ``axis_name`` is not bound.
        """
        if jnp.iscomplexobj(x):
            return super().__call__(x, mask=mask)
        fn = "jln.flax.nnx.GroupNorm"
        shape = jnp.shape(x)
        if not shape or shape[-1] != self.num_groups * self.group_size:
            raise ValueError(
                f"{fn}: x's last axis must hold the {self.num_groups * self.group_size} channels "
                f"(num_features); received x.shape={tuple(shape)}."
            )
        _, raxes = _norm.check_group_norm(fn, shape, None, self.group_size, self.reduction_axes)
        x, (px, scale, bias), _, compute = _promoted(self, x, _value(self.scale), _value(self.bias))
        y, _, _ = _norm.stat_normalize(
            x, scale, bias, mask, fn=fn, reduction_axes=raxes, feature_axes=(x.ndim - 1,), epsilon=self.epsilon,
            out_dtype=_norm.result_dtype(px, scale, bias, dtype=self.dtype), compute_dtype=compute,
            axis_name=self.axis_name, axis_index_groups=self.axis_index_groups,
            num_groups=self.num_groups,
        )
        return y


class InstanceNorm(nnx.InstanceNorm):
    r"""flax's ``nnx.InstanceNorm`` (same constructor, parameters and RNG draws) with jln's
    statistics.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale}
        + \mathrm{bias}

    per sample (axis 0) and feature (``feature_axes``, default the last axis), the statistics
    over every other axis (biased variance, ``epsilon`` inside the square root, default 1e-6).

    Args:
      num_features: the number of features (the product of ``x``'s sizes at
        ``feature_axes``).
      feature_axes: the axes the parameters span (not axis 0); default -1.

    The other arguments are flax's, with flax's defaults (``rngs`` gives two keys, scale's
    and bias's; ``use_fast_variance`` has no effect): ``epsilon``, ``dtype``,
    ``param_dtype``, ``use_bias``, ``use_scale``, ``bias_init``, ``scale_init``,
    ``axis_name``, ``axis_index_groups``, ``use_fast_variance``, ``promote_dtype``,
    ``rngs``, ``bias_metadata``, ``scale_metadata``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx as fnnx
      >>> from jln.flax.nnx import InstanceNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (2, 16, 3))
      >>> y = InstanceNorm(3, rngs=fnnx.Rngs(0))(x)
      >>> bool(jnp.allclose(y.std(axis=1), 1.0, atol=1e-3))
      True
    """

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
        fn = "jln.flax.nnx.InstanceNorm"
        x, (px, scale, bias), _, compute = _promoted(self, x, _value(self.scale), _value(self.bias))
        raxes, faxes = _norm.instance_axes(fn, x.ndim, self.feature_axes)
        y, _, _ = _norm.stat_normalize(
            x, scale, bias, mask, fn=fn, reduction_axes=raxes, feature_axes=faxes, epsilon=self.epsilon,
            out_dtype=_norm.result_dtype(px, scale, bias, dtype=self.dtype), compute_dtype=compute,
            axis_name=self.axis_name, axis_index_groups=self.axis_index_groups,
        )
        return y


class BatchNorm(nnx.BatchNorm):
    r"""flax's ``nnx.BatchNorm`` (same constructor, ``Param``/``BatchStat`` variables and RNG
    draws, ``train()``/``eval()``) with jln's statistics.

    .. math::

        y = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \cdot \mathrm{scale} + \mathrm{bias}

    per feature (``axis``, default -1), ``epsilon`` inside the square root (flax's default
    1e-5). In training (``use_running_average=False``, the constructor's default, or
    ``.train()``) ``mu`` and ``sigma^2`` are the batch's mean and biased variance over every
    other axis (global across ``axis_name``), and the ``mean``/``var`` ``BatchStat`` variables
    (zeros and ones, float32) are updated as flax does, with flax's ``momentum`` (0.99)::

        mean = momentum * mean + (1 - momentum) * batch_mean
        var  = momentum * var  + (1 - momentum) * batch_var      # the biased batch variance

    With ``use_running_average=True`` (or ``.eval()``) the stored statistics, promoted with
    ``x`` and the parameters as flax promotes them, normalize ``x`` and nothing is updated.

    Args:
      num_features: the number of features (``x``'s size at ``axis``).
      use_running_average: flax's (default ``False``); the call's argument overrides it.
      axis: the feature axis; default -1.
      momentum: flax's decay of the running statistics, 0.99 (torch's momentum is
        ``1 - momentum``).
      epsilon: added to the variance inside the square root; flax's BatchNorm default 1e-5.

    The other arguments are flax's, with flax's defaults (``rngs`` gives two keys, scale's
    and bias's; ``use_fast_variance`` has no effect): ``dtype``, ``param_dtype``,
    ``use_bias``, ``use_scale``, ``bias_init``, ``scale_init``, ``axis_name``,
    ``axis_index_groups``, ``use_fast_variance``, ``promote_dtype``, ``rngs``,
    ``bias_metadata``, ``scale_metadata``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx as fnnx
      >>> from jln.flax.nnx import BatchNorm
      >>> x = 1e4 + jax.random.normal(jax.random.key(0), (64, 3))
      >>> bn = BatchNorm(3, rngs=fnnx.Rngs(0))
      >>> y = bn(x)                                 # training: updates bn.mean and bn.var
      >>> bool(jnp.allclose(bn.mean[...], 0.01 * x.mean(0)))
      True
      >>> bn.eval()
      >>> mean, var = bn.mean[None], bn.var[None]   # the running statistics, now used
      >>> bool(jnp.allclose(bn(x), (x - mean) / jnp.sqrt(var + 1e-5)))
      True
    """

    def __call__(
        self, x: Any, use_running_average: bool | None = None, *, mask: Array | None = None
    ) -> Array:
        """Normalize ``x`` with the batch's statistics (and update ``mean``/``var``) or with the
        running ones.

        Args:
          x: the input (real; complex input is computed by flax's own ``__call__``).
          use_running_average: overrides the constructor's (or ``.train()``/``.eval()``'s).
          mask: optional boolean array broadcastable to ``x``: the batch statistics are taken
            over its ``True`` elements only.

        Returns:
          Array of ``x.shape``; dtype ``dtype``, else the promotion of ``x``, the running
          statistics and the params.

        Raises:
          ValueError: ``use_running_average`` is ``None`` here and in the constructor;
            ``axis`` out of range; a negative ``epsilon``.
          NameError: ``axis_name`` is not bound.
        """
        if jnp.iscomplexobj(x):
            return super().__call__(x, use_running_average, mask=mask)
        fn = "jln.flax.nnx.BatchNorm"
        running = use_running_average if use_running_average is not None else self.use_running_average
        if running is None:
            raise ValueError(
                f"{fn}: no use_running_average: pass it to the constructor or the call, or set it "
                f"with .train() / .eval() (or nnx.view(model, use_running_average=...))."
            )
        x, (px, mean, var, scale, bias), _, compute = _promoted(
            self, x, self.mean[...], self.var[...], _value(self.scale), _value(self.bias)
        )
        faxes = _norm.canonical_axes(self.axis, x.ndim, fn, "axis")
        raxes = tuple(a for a in range(x.ndim) if a not in faxes)
        out_dtype = _norm.result_dtype(px, scale, bias, dtype=self.dtype)
        if running:
            return _norm.running_normalize(
                x, scale, bias, mean, var, fn=fn, reduction_axes=raxes, feature_axes=faxes,
                epsilon=self.epsilon, out_dtype=out_dtype, compute_dtype=compute,
            )
        y, batch_mean, batch_var = _norm.stat_normalize(
            x, scale, bias, mask, fn=fn, reduction_axes=raxes, feature_axes=faxes, epsilon=self.epsilon,
            out_dtype=out_dtype, compute_dtype=compute, axis_name=self.axis_name,
            axis_index_groups=self.axis_index_groups,
        )
        for ra, batch in ((self.mean, batch_mean), (self.var, batch_var)):
            old = ra[...]  # flax's in-place assignment keeps the variable's dtype (float32)
            ra[...] = _norm.running_update(old, batch, self.momentum, old.dtype)
        return y
