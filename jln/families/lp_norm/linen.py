# Written by `python -m jln._faces` from the module kinds of jln/families/lp_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The linen face of the lp_norm family: :class:`GlobalResponseNorm`, :class:`LpNorm`."""

from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from jln import _linen
from jln._modules import Initializer, Kind
from jln._platform import Impl
from jln._validate import Axis
from jln.families.lp_norm import module as kinds


class GlobalResponseNorm(_linen.Module):
    """Global response normalization (ConvNeXt-V2; diffusers ``GlobalResponseNorm``), channels last.

    ``G = ||x||_2`` over ``spatial_axes``; ``y = gamma * (x * G / (mean_c(G) + eps)) + beta + x``
    with torch's rounding (:func:`jln.global_response_norm`); ``gamma`` and ``beta`` start at 0.

    Attributes:
      spatial_axes: the axes the response norm ``||x||_2`` runs over (torch's ``dim=(1, 2)`` for
        ``[N, H, W, C]``); channels are the last axis.
      eps: added to the channel mean of the response norm (1e-6).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      gamma_init: initializer of ``gamma``; ``None``: zeros (the identity).
      beta_init: initializer of ``beta``; ``None``: zeros.

    Returns (``__call__(x)``): array like ``x``; dtype ``x.dtype`` promoted with the parameters' (or
    ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.global_response_norm` (NNX: also an ``x`` whose last axis
        is not ``num_features``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> x = jnp.ones((1, 4, 4, 8))
      >>> m = jnn.GlobalResponseNorm()
      >>> bool((m.apply(m.init(jax.random.key(0), x), x) == x).all())
      True
    """

    _kind: ClassVar[Kind] = kinds.GLOBAL_RESPONSE_NORM

    spatial_axes: Axis = (1, 2)
    eps: float = 1e-06
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    impl: Impl = "auto"
    monitor: bool = False
    gamma_init: Initializer | None = None
    beta_init: Initializer | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x``; dtype ``x.dtype`` promoted with the parameters' (or ``dtype``).
        """
        return _linen.forward(self, (x,), {})


class LpNorm(_linen.Module):
    """Lp normalization, ``x / max(||x||_p, eps)`` (``torch.nn.functional.normalize``; diffusers
    ``LpNorm``); no parameters. Calls :func:`jln.lp_normalize`.

    Attributes:
      p: the norm's exponent (positive, or ``float('inf')``).
      axis: axis or axes the norm runs over (torch's ``dim``).
      eps: floor of the norm (torch's 1e-12).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).

    Returns (``__call__(x)``): array like ``x`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.lp_normalize`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> x = jnp.array([[3.0, 4.0]])
      >>> jnn.LpNorm().apply({}, x)
      Array([[0.6, 0.8]], dtype=float32)
    """

    _kind: ClassVar[Kind] = kinds.LP_NORM

    p: float = 2.0
    axis: Axis = -1
    eps: float = 1e-12
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x`` (or ``dtype``).
        """
        return _linen.forward(self, (x,), {})
