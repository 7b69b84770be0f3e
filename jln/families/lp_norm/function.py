"""Norm-based rescalings that are not row standardisation: Lp normalization (torch's
``F.normalize``) and ConvNeXt-V2's global response normalization.

Both follow torch's dtype flow op by op: a vector norm is reduced in the statistics dtype and
rounded once to the input dtype, and every elementwise op after it rounds to the promoted
dtype of its operands, so bfloat16 results match torch bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jln import _eager, _stats, _validate
from jln._validate import Axis

Array = jax.Array


def _check_p(p: Any, fn: str) -> float:
    ok = isinstance(p, (int, float)) and not isinstance(p, bool) and (p > 0 or math.isinf(p) and p > 0)
    if not ok:
        raise ValueError(
            f"{fn}: `p` must be a positive number or float('inf'); received {p!r}. (torch also "
            f"accepts p=0 and negative p, which are not norms; jln does not.)"
        )
    return float(p)


def vector_norm(x32: Array, p: float, axes: tuple[int, ...]) -> Array:
    """``||x||_p`` over ``axes`` (keepdims) in ``x32``'s dtype; its derivative at an all-zero
    row is 0 (torch's), never ``inf * 0``."""
    a = jnp.abs(x32)
    if math.isinf(p):
        return jnp.max(a, axis=axes, keepdims=True)
    if p == 1.0:
        return jnp.sum(a, axis=axes, keepdims=True)
    if p == 2.0:
        return _stats.safe_sqrt(jnp.sum(x32 * x32, axis=axes, keepdims=True))
    s = jnp.sum(a**p, axis=axes, keepdims=True)
    positive = s > 0
    return jnp.where(positive, jnp.where(positive, s, 1) ** (1.0 / p), 0)


def _rounded_norm(x: Array, p: float, axes: tuple[int, ...]) -> Array:
    """torch's ``x.norm(p, dim, keepdim=True)``: reduced in the statistics dtype, rounded once
    to ``x.dtype`` (held in the statistics dtype)."""
    return _stats.round_to(vector_norm(_stats.upcast(x), p, axes), x.dtype)


@_eager.compiled_when_eager("x")
def lp_normalize(x: Array, *, p: float = 2.0, axis: Axis = -1, eps: float = 1e-12) -> Array:
    r"""Lp normalization with ``torch.nn.functional.normalize``'s numbers.

    .. math:: y = \frac{x}{\max(\lVert x \rVert_p, \epsilon)}

    with the norm over ``axis`` (eps outside the norm, as a floor). As torch: the norm is
    reduced in float32 (float64 for float64 input) and rounded to ``x.dtype``, ``eps`` is
    rounded to ``x.dtype`` too (float16 rounds the default 1e-12 to 0, so an all-zero float16
    row gives NaN, as in torch), and the quotient is rounded once. diffusers' ``LpNorm`` is
    this function.

    Args:
      x: floating array.
      p: the norm's exponent: a positive number or ``float('inf')`` (max-abs).
      axis: int or tuple of ints the norm runs over (torch's ``dim``).
      eps: the floor of the norm; torch's default 1e-12.

    Returns:
      Array of ``x.shape`` and ``x.dtype``.

    Raises:
      TypeError: ``x`` is not a floating array.
      ValueError: a bad ``axis``, negative ``eps``, or ``p`` not positive.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> jln.lp_normalize(jnp.array([3.0, 4.0]))
      Array([0.6, 0.8], dtype=float32)
    """
    fn = "jln.lp_normalize"
    _validate.check_floating(x, fn)
    axes = _validate.normalize_axes(axis, x.ndim, fn)
    eps_f = _validate.check_eps(eps, fn)
    pf = _check_p(p, fn)
    with jax.named_scope(fn):
        n = _rounded_norm(x, pf, axes)
        floor = jnp.asarray(eps_f, x.dtype).astype(n.dtype)  # torch clamps with eps in x's dtype
        denom = jnp.maximum(n, floor)
        return (_stats.upcast(x) / denom).astype(x.dtype)


def rsqrt_normalize_float32(x: Array, axes: tuple[int, ...], eps: float) -> Array:
    """``x * rsqrt(sum(x^2) + eps)`` with ``x`` in float32 (torch's ``x.float()``, also for
    float64 ``x``), rounded once to ``x.dtype``: eps under the root, not a floor (transformers'
    ``DoryL2Norm``, nGPT's projection onto the unit sphere)."""
    x32 = _stats.upcast(x).astype(jnp.float32)
    s = jnp.sum(x32 * x32, axis=axes, keepdims=True)
    return (x32 * jax.lax.rsqrt(s + jnp.float32(eps))).astype(x.dtype)


def scaled_normalize(x: Array, scale: Array, axis: int, eps: float, multiplier: float) -> Array:
    """Kandinsky 6's ``F.normalize(x.float(), dim=axis).to(x.dtype) * multiplier * scale`` with
    torch's rounding: the Lp (p=2) normalization of ``x`` in float32, rounded to ``x.dtype``;
    the product with the Python float ``multiplier`` rounded to ``x.dtype`` again; then the
    per-channel ``scale`` (``[C]``, at ``axis``), the product rounded to ``x.dtype`` promoted
    with ``scale``'s dtype."""
    dt = x.dtype
    n = lp_normalize(_stats.upcast(x).astype(jnp.float32), p=2.0, axis=axis, eps=eps)
    work = _stats.stats_dtype(dt)  # float32 (float64 for float64 x)
    n = _stats.round_to(n.astype(work), dt)
    y = _stats.round_to(n * jnp.asarray(multiplier, work), dt)
    shape = [1] * x.ndim
    shape[axis] = -1
    out = _stats.promote(dt, scale.dtype)
    s = jnp.asarray(scale).reshape(shape).astype(work)
    return _stats.round_to(y * s, out).astype(out)


def l2_rescale(x: Array, multiplier: float, eps: float) -> Array:
    """torch's ``x * (multiplier / x.norm(p=2, dim=-1, keepdim=True).clamp_min(eps))`` op by op
    (transformers' ``ZayaQKNorm``), held in ``x``'s statistics dtype: the norm reduced there and
    rounded to ``x.dtype``, floored at ``eps`` rounded to ``x.dtype``; torch evaluates
    ``multiplier / n`` as ``n.reciprocal() * multiplier``, so the reciprocal rounds to ``x.dtype``,
    then its product with ``multiplier`` (in float32 for half ``x``, as torch's opmath takes a
    Python scalar), then the product with ``x``."""
    dt = x.dtype
    n = _rounded_norm(x, 2.0, (x.ndim - 1,))
    n = jnp.maximum(n, jnp.asarray(eps, dt).astype(n.dtype))
    r = _stats.round_to(1 / n, dt)
    f = _stats.round_to(r * jnp.asarray(multiplier, n.dtype), dt)
    return _stats.round_to(_stats.upcast(x) * f, dt)


@_eager.compiled_when_eager("x", "gamma", "beta")
def global_response_norm(
    x: Array,
    gamma: Array | None = None,
    beta: Array | None = None,
    *,
    spatial_axes: Axis = (1, 2),
    eps: float = 1e-6,
) -> Array:
    r"""Global response normalization (ConvNeXt-V2) with torch's numbers, channels last.

    .. math::

        G = \lVert x \rVert_2 \text{ over the spatial axes}, \qquad
        N = \frac{G}{\mathrm{mean}_c(G) + \epsilon}, \qquad
        y = \gamma \cdot (x \cdot N) + \beta + x

    ``eps`` is added to the channel mean of ``G`` (outside any square root). Each step rounds
    as torch evaluates diffusers' / ConvNeXt-V2's ``GlobalResponseNorm.forward``: ``G`` is
    reduced in float32 and rounded to ``x.dtype``, its channel mean likewise, then each
    elementwise op rounds to its operands' promoted dtype (float32 ``gamma``/``beta`` promote
    a bfloat16 ``x``, as in torch). ``gamma = beta = 0`` (their init) is the identity.

    Args:
      x: floating array ``[N, H, W, C]`` (any rank; channels on the last axis).
      gamma, beta: per-channel ``[C]`` parameters (torch stores them as ``[1, 1, 1, C]``);
        ``None`` leaves that term out (``gamma=None``: no ``x * N`` term).
      spatial_axes: the axes ``G`` is taken over (torch's ``dim=(1, 2)``); never the last.
      eps: added to the channel mean; 1e-6 as diffusers.

    Returns:
      Array of ``x.shape``; dtype ``x.dtype`` promoted with ``gamma``'s and ``beta``'s.

    Raises:
      TypeError: a non-floating input.
      ValueError: bad ``spatial_axes`` (or one that is the channel axis), a parameter that is
        not ``[C]``, negative ``eps``.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> x = jnp.ones((1, 2, 2, 3))
      >>> bool((jln.global_response_norm(x, jnp.zeros(3), jnp.zeros(3)) == x).all())
      True

    Reference: Woo et al., "ConvNeXt V2: Co-designing and Scaling ConvNets with Masked
    Autoencoders" (2023).
    """
    fn = "jln.global_response_norm"
    _validate.check_floating(x, fn)
    axes = _validate.normalize_axes(spatial_axes, x.ndim, fn)
    if x.ndim - 1 in axes:
        raise ValueError(
            f"{fn}: `spatial_axes` must not include the channel (last) axis; received "
            f"spatial_axes={spatial_axes!r} for x.shape={tuple(x.shape)}. For channels-first "
            f"input, move the channels last (jnp.moveaxis(x, 1, -1))."
        )
    eps_f = _validate.check_eps(eps, fn)
    _, _, g, b = _validate.norm_layout(fn, x, gamma, beta, -1)
    with jax.named_scope(fn):
        return grn_body(x, g, b, axes, eps_f)


def grn_body(x: Array, g: Array | None, b: Array | None, axes: tuple[int, ...], eps_f: float) -> Array:
    """:func:`global_response_norm`'s computation, its arguments checked: ``G`` over ``axes``
    (which may hold the last axis, as torch's ``dim=(1, 2)`` on a 3-D input), the parameters
    broadcast against ``x`` as jnp (and torch) broadcast."""
    dt = x.dtype
    x32 = _stats.upcast(x)
    gx = _rounded_norm(x, 2.0, axes)
    mean = _stats.round_to(jnp.mean(gx, axis=-1, keepdims=True), dt)
    # + eps rounds to x's dtype (a Python float does not promote), then the quotient
    nx = _stats.round_to(gx / _stats.round_to(mean + eps_f, dt), dt)
    y = _stats.round_to(x32 * nx, dt)
    out = jnp.dtype(dt)
    term = None
    if g is not None:
        out = _stats.promote(out, g.dtype)
        term = _stats.round_to(g.astype(y.dtype) * y, out)
    if b is not None:
        out = _stats.promote(out, b.dtype)
        bb = b.astype(y.dtype)
        term = bb if term is None else _stats.round_to(term + bb, out)
    y = x32 if term is None else _stats.round_to(term + x32, out)
    return y.astype(out)
