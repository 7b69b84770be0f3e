"""Dynamic Tanh (DyT), the normalization-free replacement of LayerNorm: the public function
(the formula and its conventions are :mod:`jln.families.dyt.spec`'s)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _eager, _validate
from jln._validate import Axis
from jln.families.dyt.spec import ALIASES as ALIASES
from jln.families.dyt.spec import DyTConvention, DyTSpec, resolve_convention

Array = jax.Array


def check_alpha(alpha: Any, fn: str) -> Array:
    """``alpha`` as an array of shape ``()``: ``TypeError`` unless it is a floating array,
    ``ValueError`` unless it holds one value (shape ``()`` or torch's ``[1]``)."""
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        raise TypeError(
            f"{fn}: `alpha` must be an array (the learned scalar; its dtype takes part in the "
            f"torch convention's promotion); received the number {alpha!r}. Pass "
            f"jnp.asarray({alpha!r}, jnp.float32), or jnp.full((1,), {alpha!r}) as torch stores it."
        )
    _validate.check_floating(alpha, fn, "alpha")
    if tuple(alpha.shape) not in ((), (1,)):
        raise ValueError(
            f"{fn}: `alpha` must hold one value, shape () or torch's (1,); received "
            f"alpha.shape={tuple(alpha.shape)}. DyT's alpha is one scalar for the whole tensor; "
            f"gamma (`scale`) and beta (`bias`) are the per-feature parameters."
        )
    return jnp.asarray(alpha).reshape(())


@_eager.compiled_when_eager("x", "alpha", "scale", "bias")
def dyt(
    x: Array,
    alpha: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    convention: DyTConvention = "torch",
) -> Array:
    r"""Dynamic Tanh, with the numbers of diffusers' ``DynamicTanh`` or Liger's ``LigerDyT``.

    .. math:: y = \gamma \cdot \tanh(\alpha \cdot x) + \beta

    with ``alpha`` one learned scalar, ``gamma`` (``scale``) and ``beta`` (``bias``) per-feature
    parameters of ``x``'s shape at ``axis``. There are no statistics and no eps: DyT replaces a
    norm layer by an elementwise squashing.

    ===============================  =============================================================
    convention                       computation
    ===============================  =============================================================
    ``"torch"`` (``"diffusers"``)    op by op as torch evaluates ``gamma * tanh(alpha * x) + beta``:
                                     each op in its operands' promoted dtype, rounded there (a
                                     float32 ``alpha`` with bfloat16 ``x`` gives float32, as
                                     torch's ``[1]``-shaped parameter does); bfloat16 results
                                     are bit-exact with torch's
    ``"float32"`` (``"liger"``)      everything in float32 (float64 for float64 input), rounded
                                     once to ``x.dtype``: Liger's fused kernel
    ===============================  =============================================================

    Args:
      x: floating array.
      alpha: floating array holding one value (shape ``()``, or ``(1,)`` as torch stores it);
        0.5 at init in the paper and Liger, 4.0 in diffusers' ``DynamicTanh``.
      scale: optional ``gamma`` with ``x``'s shape at ``axis`` (ones at init).
      bias: optional ``beta`` with ``x``'s shape at ``axis`` (zeros at init).
      axis: int or tuple of ints the per-feature parameters span (the features).
      convention: one of the names above.

    Returns:
      Array of ``x.shape``; dtype ``x.dtype`` (``"float32"``) or every operand's promoted
      dtype (``"torch"``).

    Raises:
      TypeError: ``x``, ``alpha`` or a parameter is not a floating array (``alpha`` given as a
        Python number).
      ValueError: ``alpha`` holds more than one value, a parameter's shape is not ``x``'s at
        ``axis``, a bad ``axis``, an unknown ``convention``.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> x = jnp.array([[-2.0, 0.0, 2.0]])
      >>> np.asarray(jln.dyt(x, jnp.asarray(0.5), jnp.ones(3), jnp.zeros(3))).round(4)
      array([[-0.7616,  0.    ,  0.7616]], dtype=float32)

    Reference: Zhu, Chen, He, LeCun and Liu, "Transformers without Normalization" (2025),
    arXiv:2503.10622.
    """
    fn = "jln.dyt"
    _, _, s, b = _validate.norm_layout(fn, x, scale, bias, axis)
    a = check_alpha(alpha, fn)
    conv = resolve_convention(convention, fn)
    spec = DyTSpec(
        convention=conv, x_dtype=jnp.dtype(x.dtype), alpha_dtype=a.dtype,
        scale_dtype=None if s is None else s.dtype, bias_dtype=None if b is None else b.dtype,
    )
    with jax.named_scope(fn):
        return spec.body(x, a, s, b)
