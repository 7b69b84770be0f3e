# Written by `python -m jln._faces` from the module kinds of jln/families/lp_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The NNX face of the lp_norm family: :class:`GlobalResponseNorm`, :class:`LpNorm`."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import DTypeLike

from jln import _nnx
from jln._modules import Initializer, Kind
from jln._platform import Impl
from jln._validate import Axis
from jln.families.lp_norm import module as kinds


class GlobalResponseNorm(_nnx.Module):
    """Global response normalization (ConvNeXt-V2; diffusers ``GlobalResponseNorm``), channels last.

    ``G = ||x||_2`` over ``spatial_axes``; ``y = gamma * (x * G / (mean_c(G) + eps)) + beta + x``
    with torch's rounding (:func:`jln.global_response_norm`); ``gamma`` and ``beta`` start at 0.

    The NNX twin of :class:`jln.linen.GlobalResponseNorm` (same options, parameters and numbers).

    Args:
      num_features: channels, ``x``'s last axis.
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
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x)``): array like ``x``; dtype ``x.dtype`` promoted with the parameters' (or
    ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.global_response_norm` (NNX: also an ``x`` whose last axis
        is not ``num_features``).

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.GlobalResponseNorm(8)(jnp.ones((1, 4, 4, 8))).shape
      (1, 4, 4, 8)
    """

    _kind: ClassVar[Kind] = kinds.GLOBAL_RESPONSE_NORM

    num_features: int
    gamma: nnx.Param[jax.Array]
    beta: nnx.Param[jax.Array]
    spatial_axes: Axis
    eps: float
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    gamma_init: Initializer | None
    beta_init: Initializer | None

    def __init__(
        self,
        num_features: int,
        *,
        spatial_axes: Axis = (1, 2),
        eps: float = 1e-06,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        gamma_init: Initializer | None = None,
        beta_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                spatial_axes=spatial_axes,
                eps=eps,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                gamma_init=gamma_init,
                beta_init=beta_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x``; dtype ``x.dtype`` promoted with the parameters' (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {})


class LpNorm(_nnx.Module):
    """Lp normalization, ``x / max(||x||_p, eps)`` (``torch.nn.functional.normalize``; diffusers
    ``LpNorm``); no parameters. Calls :func:`jln.lp_normalize`.

    The NNX twin of :class:`jln.linen.LpNorm` (same options, parameters and numbers).

    Args:
      p: the norm's exponent (positive, or ``float('inf')``).
      axis: axis or axes the norm runs over (torch's ``dim``).
      eps: floor of the norm (torch's 1e-12).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      rngs: unused (no parameters).

    Returns (``__call__(x)``): array like ``x`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.lp_normalize`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.LpNorm()(jnp.array([[3.0, 4.0]]))
      Array([[0.6, 0.8]], dtype=float32)
    """

    _kind: ClassVar[Kind] = kinds.LP_NORM

    p: float
    axis: Axis
    eps: float
    dtype: DTypeLike | None
    param_dtype: DTypeLike

    def __init__(
        self,
        *,
        p: float = 2.0,
        axis: Axis = -1,
        eps: float = 1e-12,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(self, (), dict(p=p, axis=axis, eps=eps, dtype=dtype, param_dtype=param_dtype), rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x`` (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {})
