"""flax.linen's ``LayerNorm`` and ``RMSNorm`` computed by jln: change the import, nothing else.

Each class here is a subclass of flax's own, with flax's attributes and defaults
(``epsilon=1e-6``, ``reduction_axes``/``feature_axes``, ``use_bias``/``use_scale``,
``dtype``/``param_dtype``, ``axis_name``/``axis_index_groups``, ``force_float32_reductions``),
so a model keeps its parameter tree (names ``scale``/``bias``, shapes, dtypes, partitioning
boxes), its RNG streams and its checkpoints in both directions. Only ``__call__`` differs:

* The statistics are jln's (mean about a per-row pivot, then the mean of squared deviations)
  in float32 (float64 where flax computes in float64), so a row at offset 1e4 keeps float32's
  accuracy where flax's default ``E[x^2] - E[x]^2`` loses about three digits.
  ``use_fast_variance`` is accepted and has no effect (both settings give jln's statistics).
* Reverse mode saves ``x`` in its own dtype and the per-row statistics (about 2 bytes per
  element for bfloat16), and jln's kernels run the call where they apply.
* The result dtype is flax's: ``dtype`` when given, else the promotion of ``x`` and the
  parameters (a bfloat16 ``x`` with float32 parameters gives float32), rounded once.

``force_float32_reductions=False`` is accepted; jln reduces in float32 regardless (flax then
reduces in the input dtype). Complex input is computed by flax's own ``__call__``.
``GroupNorm``, ``InstanceNorm`` and ``BatchNorm`` are not here yet (a later change adds them).

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jln.flax import linen as nn          # was: from flax import linen as nn
  >>> ln = nn.LayerNorm()
  >>> variables = ln.init(jax.random.key(0), jnp.ones((2, 4)))
  >>> jax.tree.map(jnp.shape, variables)
  {'params': {'bias': (4,), 'scale': (4,)}}
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jln.flax import _norm

Array = jax.Array

__all__ = ["LayerNorm", "RMSNorm"]


def _call(module: Any, x: Any, mask: Any, centered: bool, fn: str) -> Array:
    """Declare ``module``'s parameters as flax does (same names, order, shapes, dtypes and
    initializers, so the same RNG draws) and normalize ``x`` with jln's statistics."""
    x = jnp.asarray(x)
    faxes = _norm.canonical_axes(module.feature_axes, x.ndim, fn, "feature_axes")
    shape = tuple(x.shape[a] for a in faxes)
    scale = module.param("scale", module.scale_init, shape, module.param_dtype) if module.use_scale else None
    use_bias = centered and module.use_bias
    bias = module.param("bias", module.bias_init, shape, module.param_dtype) if use_bias else None
    out_dtype = _norm.result_dtype(x, scale, bias, dtype=module.dtype)
    stats = module.dtype if module.dtype is not None else x.dtype
    if module.force_float32_reductions:
        stats = _norm.widest(stats, jnp.float32)
    compute = _norm.widest(stats, x.dtype, *(None if p is None else p.dtype for p in (scale, bias)))
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
