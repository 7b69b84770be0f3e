# Written by `python -m jln._faces` from the module kinds of jln/families/local_response_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The linen face of the local_response_norm family: :class:`LocalResponseNorm`."""

from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from jln import _linen
from jln._modules import Kind
from jln._platform import Impl
from jln.families.local_response_norm import module as kinds


class LocalResponseNorm(_linen.Module):
    """Local response normalization with torch's numbers (``nn.LocalResponseNorm(size, alpha, beta,
    k)``): ``x / (k + alpha * mean_window(x^2)) ** beta`` over ``size`` neighbouring channels; no
    parameters.

    Calls :func:`jln.local_response_norm` (its dtype rule: torch's op-by-op rounding for
    bfloat16/float16).

    Attributes:
      size: number of neighbouring channels in the window (torch's ``size``).
      alpha: multiplicative factor (torch's default 1e-4).
      beta: exponent (torch's default 0.75).
      k: additive factor (torch's default 1.0).
      channel_axis: the channel axis: 1 for torch's layout, -1 for channels-last.
      dtype: ``None``: output in ``x.dtype``; else ``x`` is cast to it first.
      param_dtype: unused (no parameters); accepted for symmetry.
      impl: ``"auto"`` or ``"xla"`` (no kernels for this family).

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: ``size`` not a positive int, ``alpha``/``beta``/``k`` not finite
        numbers, ``impl`` other than ``"auto"``/``"xla"``; as :func:`jln.local_response_norm`
        otherwise.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> x = jnp.ones((2, 4, 3))
      >>> jnn.LocalResponseNorm(size=2).apply({}, x).shape
      (2, 4, 3)
    """

    _kind: ClassVar[Kind] = kinds.LOCAL_RESPONSE_NORM

    size: int
    alpha: float = 0.0001
    beta: float = 0.75
    k: float = 1.0
    channel_axis: int = 1
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    impl: Impl = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _linen.forward(self, (x,), {})
