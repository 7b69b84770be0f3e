"""The elementwise affine ``((x - center) * scale) + bias``: the public function (the formula
and its rounding are :mod:`jln.families.affine.spec`'s)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jln import _eager, _validate
from jln._validate import Axis
from jln.families.affine.spec import AffineSpec

Array = jax.Array


@_eager.compiled_when_eager("x", "scale", "bias", "center")
def affine(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    center: Array | None = None,
    axis: Axis = -1,
) -> Array:
    r"""A per-feature elementwise affine with torch's op-by-op numbers: MobileBERT's ``NoNorm``
    and Phi-4-multimodal's audio mean-variance normalization.

    .. math:: y = ((x - c) \cdot s) + b

    with ``c`` (``center``), ``s`` (``scale``) and ``b`` (``bias``) per-feature operands of
    ``x``'s shape at ``axis``, each optional (an absent one is skipped, not applied as its
    identity). There are no statistics and no eps: nothing is computed from ``x``'s values.

    Each present op runs in order (``center`` subtracted first, then ``scale``, then ``bias``)
    as torch evaluates ``(x - global_mean) * global_invstd`` or ``x * weight + bias``: in its
    operands' promoted dtype, rounded there (a float32 ``scale`` with bfloat16 ``x`` gives
    float32, as torch's ``[C]`` tensors do; bfloat16 ones give bfloat16, rounded after every
    op, never fused). bfloat16 and float16 results are bit-exact with torch's.

    Args:
      x: floating array.
      scale: optional multiplier with ``x``'s shape at ``axis`` (NoNorm's ``weight``,
        Phi-4's ``global_invstd``).
      bias: optional addend with ``x``'s shape at ``axis`` (NoNorm's ``bias``).
      center: optional, keyword-only: subtracted first, with ``x``'s shape at ``axis``
        (Phi-4's ``global_mean``).
      axis: int or tuple of ints the per-feature operands span (the features).

    Returns:
      Array of ``x.shape``; dtype every present operand's dtype promoted as torch does.

    Raises:
      TypeError: ``x`` or an operand is not a floating array (a Python number included).
      ValueError: an operand's shape is not ``x``'s at ``axis``, a bad ``axis``.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> x = jnp.array([[1.0, 2.0, 3.0]])
      >>> np.asarray(jln.affine(x, jnp.full(3, 2.0), jnp.ones(3), center=jnp.ones(3)))
      array([[1., 3., 5.]], dtype=float32)
    """
    fn = "jln.affine"
    layout = _validate.norm_layout(fn, x, scale, bias, axis)
    _validate.check_param(center, "center", x.shape, layout.axes, fn)
    c = None if center is None else _validate.expand_param(jnp.asarray(center), x.ndim, layout.axes)
    s, b = layout.scale, layout.bias
    spec = AffineSpec(
        x_dtype=jnp.dtype(x.dtype), center_dtype=None if c is None else c.dtype,
        scale_dtype=None if s is None else s.dtype, bias_dtype=None if b is None else b.dtype,
    )
    with jax.named_scope(fn):
        return spec.body(x, c, s, b)
