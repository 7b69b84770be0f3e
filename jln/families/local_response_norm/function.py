"""Local response normalization (AlexNet's), numerically ``torch.nn.LocalResponseNorm``'s: the
public function (the formula is :mod:`jln.families.local_response_norm.spec`'s)."""

from __future__ import annotations

import math
import operator
from typing import Any

import jax
import numpy as np

from jln import _eager, _validate
from jln.families.local_response_norm.spec import LocalResponseNormSpec

Array = jax.Array


def _number(value: Any, name: str, fn: str, *, positive: bool = False) -> float:
    """``value`` as a finite Python float (``TypeError`` for a non-number, a bool or an array,
    ``ValueError`` for a non-finite one, or one <= 0 where ``positive``)."""
    bad = isinstance(value, (str, bytes, bool, np.bool_)) or (hasattr(value, "shape") and tuple(value.shape) != ())
    try:
        v = float(value)
    except (TypeError, ValueError):
        bad = True
    if bad:
        raise TypeError(f"{fn}: `{name}` must be a Python float (a concrete number); received {value!r}.") from None
    if not math.isfinite(v) or (positive and v <= 0):
        want = "finite and > 0" if positive else "finite"
        raise ValueError(f"{fn}: `{name}` must be {want}; received {name}={value!r}.")
    return v


@_eager.compiled_when_eager("x")
def local_response_norm(
    x: Array,
    size: int,
    *,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    channel_axis: int = 1,
) -> Array:
    r"""Local response normalization across channels, numerically
    ``torch.nn.functional.local_response_norm``'s.

    .. math::

        y_c = x_c \Big/ \Big(k + \frac{\alpha}{n} \sum_{c' = c - \lfloor n/2 \rfloor}^{c + \lfloor (n-1)/2 \rfloor} x_{c'}^2\Big)^{\beta}

    with ``n = size``, channels outside ``[0, C)`` counting as zeros (the sum is always divided
    by ``n``, torch's zero-padded average); ``k`` plays the role of eps (added to the scaled
    sum, before the power). There are no parameters and no statistics over other axes.

    dtypes: float32/float64 compute in their own dtype. bfloat16/float16 follow torch's op-by-op
    rounding: each op computes in float32 and rounds to ``x.dtype``, with ``k`` and ``beta``
    rounded to ``x.dtype`` first, as torch does with a Python scalar (``alpha`` is not); see
    :mod:`jln.families.local_response_norm.spec`. Bit-exact with torch's CPU kernels on 3-D
    half-precision input (torch has no CPU kernel for 4-D and wider half-precision input; jln
    applies the same rule there).

    Args:
      x: floating array ``[N, C, *spatial]`` with at least one spatial axis (rank >= 3, as
        torch requires), or channels-last with ``channel_axis=-1``.
      size: the number of neighbouring channels in the window (torch's ``size``), a positive
        int; it may exceed ``C``.
      alpha: the multiplicative factor (torch's default 1e-4).
      beta: the exponent (torch's default 0.75).
      k: the additive factor (torch's default 1.0).
      channel_axis: the channel axis (1: torch's layout; -1: channels-last). Not 0 (the batch).

    Returns:
      Array of ``x.shape`` and ``x.dtype``.

    Raises:
      TypeError: non-floating ``x``; ``size`` not an int; ``alpha``, ``beta`` or ``k`` not a
        number; ``channel_axis`` not an int.
      ValueError: ``x`` of rank < 3; ``size`` < 1; a non-finite ``alpha``/``beta``/``k``;
        ``channel_axis`` 0 or out of range.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> x = jnp.ones((1, 3, 1))
      >>> np.asarray(jln.local_response_norm(x, 2, alpha=1.0, beta=1.0, k=1.0)[0, :, 0]).round(3)
      array([0.667, 0.5  , 0.5  ], dtype=float32)

    Reference: Krizhevsky, Sutskever and Hinton, "ImageNet Classification with Deep
    Convolutional Neural Networks" (2012), section 3.3.
    """
    fn = "jln.local_response_norm"
    c = _validate.channel_axis(
        fn, x, channel_axis, min_ndim=3, need="a batch, a channel and at least one spatial axis, as torch requires",
        fix="For [N, C] input use x[..., None].",
    )
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"{fn}: `size` must be an int (the number of channels in the window); received {size!r}.")
    n = operator.index(size)
    if n < 1:
        raise ValueError(f"{fn}: `size` must be >= 1; received size={size!r}.")
    spec = LocalResponseNormSpec(
        channel_axis=c, size=n, alpha=_number(alpha, "alpha", fn), beta=_number(beta, "beta", fn),
        k=_number(k, "k", fn), out_dtype=x.dtype,
    )
    with jax.named_scope(fn):
        return spec.body(x)
