"""flax.nnx's ``LayerNorm`` and ``RMSNorm`` computed by jln: change the import, nothing else.

Each class here is a subclass of flax's own and keeps flax's ``__init__`` unchanged, so the
constructor signature and defaults (``num_features``, ``epsilon=1e-6``, ``use_bias``,
``use_scale``, ``scale_init``, ``*_metadata``, ``promote_dtype``, ``rngs``...), the ``Param``
variables with their metadata, and the keys drawn from ``rngs`` (LayerNorm: one for ``scale``
and one for ``bias``; RMSNorm: one) are flax's own: the layers after it see the same keys, and
checkpoints load both ways. Only ``__call__`` differs:

* ``promote_dtype`` runs as in flax (with ``dtype`` set, the parameters are cast to it first);
  the result dtype is flax's, rounded once.
* The statistics are jln's (mean about a per-row pivot, then the mean of squared deviations)
  in float32, float64 where flax computes in float64; ``use_fast_variance`` is accepted and
  has no effect.
* Reverse mode saves ``x`` in its own dtype and the per-row statistics, and jln's kernels run
  the call where they apply.

Complex input is computed by flax's own ``__call__``. ``GroupNorm``, ``InstanceNorm`` and
``BatchNorm`` are not here yet (a later change adds them).

Example:
  >>> import jax.numpy as jnp
  >>> from flax import nnx as fnnx
  >>> from jln.flax import nnx                  # was: from flax import nnx (for the norms)
  >>> ln = nnx.LayerNorm(4, rngs=fnnx.Rngs(0))
  >>> ln(jnp.ones((2, 4))).shape
  (2, 4)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes as nnx_dtypes

from jln.flax import _norm

Array = jax.Array

__all__ = ["LayerNorm", "RMSNorm"]


def _value(p: Any) -> Array | None:
    return None if p is None else p[...]


def _call(module: Any, x: Any, mask: Any, centered: bool, fn: str) -> Array:
    """Promote as flax does, then normalize with jln's statistics."""
    scale = _value(module.scale) if module.use_scale else None
    bias = _value(module.bias) if centered and module.use_bias else None
    with jax.numpy_dtype_promotion("standard"):  # flax's promotion, as flax users run it
        px, scale, bias = module.promote_dtype((x, scale, bias), dtype=module.dtype)
    x = jnp.asarray(x)
    if not (
        module.promote_dtype is nnx_dtypes.promote_dtype
        and jnp.issubdtype(x.dtype, jnp.floating)
        and _norm.widest(x.dtype, px.dtype) == px.dtype
    ):
        x = px
    # else: px is x widened (exact), and jln widens x itself: keeping x in its own dtype keeps
    # reverse mode's saved input at x's size (2 bytes per element for bfloat16)
    out_dtype = _norm.result_dtype(px, scale, bias, dtype=module.dtype)
    stats = _norm.widest(module.dtype if module.dtype is not None else px.dtype, jnp.float32)
    compute = _norm.widest(stats, px.dtype)
    return _norm.normalize(
        fn, x, scale, bias, centered=centered, reduction_axes=module.reduction_axes,
        feature_axes=module.feature_axes, epsilon=module.epsilon, out_dtype=out_dtype,
        compute_dtype=compute, axis_name=module.axis_name,
        axis_index_groups=module.axis_index_groups, mask=mask,
    )


class LayerNorm(nnx.LayerNorm):
    r"""flax's ``nnx.LayerNorm`` (same constructor, parameters and RNG draws) with jln's
    statistics.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale}
        + \mathrm{bias}

    over ``reduction_axes`` (biased variance, ``epsilon`` inside the square root, default
    1e-6); ``scale``/``bias`` have ``x``'s sizes at ``feature_axes``.

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
