"""PolyNorm (a polynomial composition of RMS-normalized powers, Motif's and Liger's): the
public function (the formula is :mod:`jln.families.poly_norm.spec`'s)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _eager, _stats, _validate
from jln._validate import Axis
from jln.families.poly_norm.spec import PolyNormSpec

Array = jax.Array


def check_weight_bias(weight: Any, bias: Any, fn: str) -> tuple[Array, Array]:
    """``weight`` of shape ``(3,)`` and ``bias`` of shape ``()`` (given as ``()`` or ``(1,)``);
    ``TypeError`` for a non-floating one (or a Python number), ``ValueError`` for a bad shape."""
    for name, v in (("weight", weight), ("bias", bias)):
        if isinstance(v, (int, float, list, tuple)) and not isinstance(v, bool):
            raise TypeError(
                f"{fn}: `{name}` must be an array; received {v!r}. Pass it as a floating array, e.g. "
                f"jnp.full((3,), 1 / 3) for the weight and jnp.zeros(()) for the bias (Liger's init)."
            )
        _validate.check_floating(v, fn, name)
    if tuple(weight.shape) != (3,):
        raise ValueError(
            f"{fn}: `weight` must have shape (3,), the coefficients of n(x^3), n(x^2) and n(x); received "
            f"weight.shape={tuple(weight.shape)}."
        )
    if tuple(bias.shape) not in ((), (1,)):
        raise ValueError(
            f"{fn}: `bias` must hold one value, shape () or (1,) (one scalar added to every element); "
            f"received bias.shape={tuple(bias.shape)}."
        )
    return jnp.asarray(weight), jnp.asarray(bias).reshape(())


@_eager.compiled_when_eager("x", "weight", "bias")
def poly_norm(x: Array, weight: Array, bias: Array, *, axis: Axis = -1, eps: float = 1e-6) -> Array:
    r"""PolyNorm, with the numbers of Liger's ``LigerPolyNorm`` and vLLM's ``poly_norm``.

    .. math::

        y = w_0\, n(x^3) + w_1\, n(x^2) + w_2\, n(x) + b, \qquad
        n(u) = \frac{u}{\sqrt{\mathrm{mean}(u^2) + \epsilon}}

    with the mean over ``axis`` (eps inside the square root, added to the mean square of each
    power). Everything is computed in float32 (float64 for float64 input, or for float64
    parameters) and rounded once to ``x.dtype``, as the peers' kernels do. Unlike a plain
    float32 evaluation, whose ``mean(x^6)`` overflows once ``|x|`` passes about 2.6e6, each row
    is scaled by a power of two first: the same numbers bit for bit where the plain evaluation
    is finite, and finite, float32-accurate numbers beyond (see
    :mod:`jln.families.poly_norm.spec`).

    Args:
      x: floating array.
      weight: floating array of shape ``(3,)``: ``w0, w1, w2`` (``1/3`` each at Liger's init).
      bias: floating array holding one value (shape ``()`` or ``(1,)``; 0 at init).
      axis: int or tuple of ints the means run over (the peers: the last axis).
      eps: added to each mean square; Liger's default 1e-6.

    Returns:
      Array of ``x.shape`` and ``x.dtype``.

    Raises:
      TypeError: ``x``, ``weight`` or ``bias`` is not a floating array (a Python number), a
        non-number ``eps``.
      ValueError: ``weight`` not of shape ``(3,)``, ``bias`` holding more than one value, a bad
        ``axis``, a negative or non-finite ``eps``.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> x = jnp.array([[1.0, -1.0, 2.0, -2.0]])
      >>> y = jln.poly_norm(x, jnp.array([0.0, 0.0, 1.0]), jnp.zeros(()), eps=0.0)  # n(x) alone
      >>> np.asarray(y).round(4)
      array([[ 0.6325, -0.6325,  1.2649, -1.2649]], dtype=float32)

    Reference: Zhuo et al., "Polynomial Composition Activations: Unleashing the Dynamics of
    Large Language Models" (2024), arXiv:2411.03884.
    """
    fn = "jln.poly_norm"
    _validate.check_floating(x, fn)
    axes = _validate.normalize_axes(axis, x.ndim, fn)
    w, b = check_weight_bias(weight, bias, fn)
    eps_f = _validate.check_eps(eps, fn)
    spec = PolyNormSpec(axes=axes, eps=eps_f, compute_dtype=_stats.stats_dtype(_stats.promote(x.dtype, w.dtype, b.dtype)),
                        out_dtype=jnp.dtype(x.dtype))
    with jax.named_scope(fn):
        return spec.body(x, w, b)
