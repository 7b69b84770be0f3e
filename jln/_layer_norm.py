"""LayerNorm and fused residual add + LayerNorm: the only place their formula lives."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _checks, _dispatch, _eager, _stats
from jln._checks import Axis

Array = jax.Array


def expand_param(p: Array, ndim: int, axes: tuple[int, ...]) -> Array:
    """Reshape a per-feature parameter (shape of x at ``axes``) so it broadcasts against x."""
    shape = []
    it = iter(p.shape)
    for i in range(ndim):
        shape.append(next(it) if i in axes else 1)
    return p.reshape(shape)


def modulation_rounded(y: Array, shift: Array | None, mscale: Array | None, offset: float, y_dtype: Any) -> Array:
    """``y * (offset + mscale) + shift`` with an eager framework's rounding after each op.

    ``y`` holds values of dtype ``y_dtype`` in the (wider) statistics dtype. As torch
    evaluates ``x * (1 + scale) + shift`` op by op: ``1 + scale`` rounds to ``scale``'s dtype,
    the product to the promotion of ``y_dtype`` and ``scale``'s dtype, the sum to the
    promotion of that and ``shift``'s dtype. Returns values of that last dtype, still held
    in the statistics dtype.
    """
    after_scale, after_shift = modulation_dtypes(
        y_dtype, None if shift is None else shift.dtype, None if mscale is None else mscale.dtype
    )
    if mscale is not None:
        factor = _stats.round_to(offset + mscale.astype(y.dtype), mscale.dtype)
        y = _stats.round_to(y * factor, after_scale)
    if shift is not None:
        y = _stats.round_to(y + shift.astype(y.dtype), after_shift)
    return y


def modulation_dtypes(y_dtype: Any, shift_dtype: Any, mscale_dtype: Any) -> tuple[jnp.dtype, jnp.dtype]:
    """The dtypes :func:`modulation_rounded` rounds to: after ``* (offset + mscale)`` and after
    ``+ shift`` (each is the previous one when that operand is absent)."""
    after_scale = jnp.dtype(y_dtype) if mscale_dtype is None else _stats.promote(y_dtype, mscale_dtype)
    after_shift = after_scale if shift_dtype is None else _stats.promote(after_scale, shift_dtype)
    return after_scale, after_shift


@_stats.remat
def ln_body(
    x: Array,
    scale: Array | None,
    bias: Array | None,
    shift: Array | None,
    mscale: Array | None,
    *,
    axes: tuple[int, ...],
    eps: float,
    out_dtype: Any,
    mod_offset: float,
    mod_dtype: Any,
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> Array:
    """``(x - mean) * rsqrt(var + eps) * scale + bias``, then optional modulation.

    Arrays arrive already broadcastable against ``x``. Runs under the remat policy, so reverse
    mode keeps ``x`` (own dtype), per-row mean/rstd and the parameters, nothing else (plus the
    gathered per-shard row statistics when the rows are split across ``axis_name``).
    """
    x32 = _stats.upcast(x)
    _, d, var = _stats.centered(x32, axes, axis_name, axis_index_groups)
    y = _stats.normalized(x32, axes, eps, (d, var), axis_name, axis_index_groups)
    return ln_affine(y, scale, bias, shift, mscale, out_dtype=out_dtype, mod_offset=mod_offset, mod_dtype=mod_dtype)


def ln_affine(
    y: Array,
    scale: Array | None,
    bias: Array | None,
    shift: Array | None,
    mscale: Array | None,
    *,
    out_dtype: Any,
    mod_offset: float,
    mod_dtype: Any,
) -> Array:
    """Everything after ``y = (x - mean) * rstd``: affine, output rounding, modulation.

    ``y`` is in the statistics dtype; the other arrays are cast to it (exactly), so callers may
    pass them in any floating dtype. Shared by :func:`ln_body` and the Pallas kernels.
    """
    sd = y.dtype
    if scale is not None:
        y = y * scale.astype(sd)
    if bias is not None:
        y = y + bias.astype(sd)
    modulated = shift is not None or mscale is not None
    if modulated:
        y = modulation_rounded(_stats.round_to(y, out_dtype), shift, mscale, mod_offset, out_dtype)
    return y.astype(result_dtype(out_dtype, mod_dtype, modulated))


def result_dtype(out_dtype: Any, mod_dtype: Any, modulated: bool) -> jnp.dtype:
    """The dtype of LayerNorm's result: ``mod_dtype`` when a modulation (shift or scale)
    follows the norm, else ``out_dtype`` (the kernels size their outputs with it)."""
    return jnp.dtype(mod_dtype if modulated else out_dtype)


def ln_apply(
    fn: str,
    impl: str,
    x: Array,
    scale: Array | None,
    bias: Array | None,
    shift: Array | None,
    mscale: Array | None,
    *,
    axes: tuple[int, ...],
    eps: float,
    out_dtype: Any,
    mod_offset: float = 1.0,
    mod_dtype: Any = None,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    addends: tuple[Array, Array] | None = None,
) -> Any:
    """Run the LayerNorm contract through XLA (:func:`ln_body`) or a Pallas kernel; with
    ``addends`` (``x`` being their sum), ``(y, s)`` (see :func:`jln._dispatch.apply`)."""
    static = dict(axes=axes, eps=eps, out_dtype=out_dtype, mod_offset=mod_offset, mod_dtype=mod_dtype)
    return _dispatch.apply(
        fn, impl, "layer_norm", ln_body, "ln", x, (scale, bias, shift, mscale), static,
        axis_name, axis_index_groups, addends,
    )


def prepare(
    fn: str, x: Any, scale: Any, bias: Any, axis: Axis, eps: Any
) -> tuple[tuple[int, ...], float, Array | None, Array | None]:
    """Validate a LayerNorm call; return (axes, eps, scale, bias) with params broadcastable."""
    axes, s, b = prepare_params(fn, x, scale, bias, axis)
    return axes, _checks.check_eps(eps, fn), s, b


def prepare_params(
    fn: str, x: Any, scale: Any, bias: Any, axis: Axis
) -> tuple[tuple[int, ...], Array | None, Array | None]:
    """Check ``x``, ``axis`` and the per-feature params; return (axes, scale, bias) reshaped
    to broadcast against ``x``. Shared by every norm's argument check."""
    _checks.check_floating(x, fn)
    axes = _checks.normalize_axes(axis, x.ndim, fn)
    _checks.check_param(scale, "scale", x.shape, axes, fn)
    _checks.check_param(bias, "bias", x.shape, axes, fn)
    s = None if scale is None else expand_param(jnp.asarray(scale), x.ndim, axes)
    b = None if bias is None else expand_param(jnp.asarray(bias), x.ndim, axes)
    return axes, s, b


@_eager.compiled_when_eager("x", "scale", "bias")
def layer_norm(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    impl: str = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> Array:
    r"""Layer normalization, numerically identical in contract to ``torch.nn.functional.layer_norm``.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale} + \mathrm{bias}

    with the biased variance (divide by N) and ``eps`` inside the square root. Statistics are
    taken over ``axis`` in float32 (float64 for float64 input), about a per-row pivot, so large
    offsets keep full precision and the variance is never negative. Reverse mode keeps only
    ``x`` in its own dtype plus per-row mean and rstd (about 2 bytes per element for bfloat16).

    Args:
      x: floating array of any shape (float16, bfloat16, float32, float64).
      scale: optional multiplier with the shape of ``x`` at ``axis`` (torch's ``weight``).
      bias: optional offset with the same shape (torch's ``bias``).
      axis: int or tuple of ints to normalize over. torch's ``normalized_shape`` of length k
        is ``axis=tuple(range(-k, 0))``.
      eps: added to the variance inside the square root; torch's default 1e-5. Below
        2**-101 (e.g. 0) each row's squares are summed scaled by a power of two (on the XLA
        path), so a row whose variance lies outside float32's normal range still normalizes.
      impl: ``"auto"`` (on a single-device CPU backend jln's native CPU kernels where they
        apply; on a GPU the Pallas kernels, for rows up to 16384 wide; else XLA), ``"xla"``,
        ``"native"`` (the CPU kernels, or ``ValueError`` saying why not) or ``"pallas"``
        (interpret mode on CPU). All give the same contract (see the README's kernels section).
      axis_name: inside ``jax.shard_map``/``jax.pmap``: the mesh axis name (or tuple of
        names) across which the normalized axes are split (tensor parallelism). ``x`` is the
        local block; mean and variance are those of the whole row, merged with one
        all_gather of 3 values per row. ``scale``/``bias`` are the local blocks. Leave it
        ``None`` under plain ``jax.jit`` with ``NamedSharding`` (XLA partitions it).
      axis_index_groups: optional groups of indices of ``axis_name`` that each hold one row,
        as in ``jax.lax.psum`` (``jax.pmap`` or ``shard_map(check_vma=False)`` only).

    Returns:
      Array of ``x.shape`` and ``x.dtype`` (float32 params do not promote a bfloat16 ``x``).

    Raises:
      TypeError: ``x`` (or a parameter) is not a floating array.
      ValueError: ``scale``/``bias`` shape differs from ``x``'s shape at the normalized axes;
        an axis is out of range or repeated; ``axis`` is empty; ``eps`` is negative.
      NameError: ``axis_name`` is not bound (outside ``shard_map``/``pmap``).

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> np.asarray(jln.layer_norm(jnp.array([2.0, -1.0, 3.0, 0.0]))).round(3)
      array([ 0.632, -1.265,  1.265, -0.632], dtype=float32)

    Reference: Ba, Kiros and Hinton, "Layer Normalization" (2016).
    """
    fn = "jln.layer_norm"
    axes, eps_f, s, b = prepare(fn, x, scale, bias, axis, eps)
    name, groups = _checks.check_axis_name(axis_name, axis_index_groups, fn)
    return ln_apply(
        fn, impl, x, s, b, None, None, axes=axes, eps=eps_f, out_dtype=x.dtype,
        axis_name=name, axis_index_groups=groups,
    )


def residual_sum(fn: str, x: Any, residual: Any, residual_in_fp32: bool) -> Array:
    """``x + residual`` in their promoted dtype, or in float32 (float64 stays) when asked."""
    _checks.check_floating(x, fn)
    _checks.check_floating(residual, fn, "residual")
    _checks.check_same_shape(x, residual, ("x", "residual"), fn)
    dtype = _stats.promote(x.dtype, residual.dtype)
    if residual_in_fp32:
        dtype = _stats.promote(dtype, jnp.float32)
    return add_in(x, residual, dtype)


def add_in(x: Array, residual: Array, dtype: Any) -> Array:
    """``x + residual`` computed in ``dtype`` (the residual step of ``add_*_norm``; the Pallas
    kernels' forward-mode tangent uses it too)."""
    return x.astype(dtype) + residual.astype(dtype)


@_eager.compiled_when_eager("x", "residual", "scale", "bias")
def add_layer_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    residual_in_fp32: bool = False,
    impl: str = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> tuple[Array, Array]:
    r"""Pre-norm residual step fused: ``s = x + residual``; returns ``(layer_norm(s), s)``.

    .. math::

        s = x + r, \qquad y = \frac{s - \mathrm{E}[s]}{\sqrt{\mathrm{Var}[s] + \epsilon}}
        \cdot \mathrm{scale} + \mathrm{bias}

    Args:
      x: the branch output, floating array.
      residual: the residual stream, same shape as ``x``.
      scale, bias, axis, eps: as in :func:`layer_norm`.
      residual_in_fp32: compute and return ``s`` in float32 (float64 stays float64) so the
        residual stream does not accumulate bfloat16/float16 rounding across layers.
      impl, axis_name, axis_index_groups: as in :func:`layer_norm`.

    Returns:
      ``(normed, s)``: ``normed`` has ``x.shape`` and ``x.dtype``; ``s`` has the promoted dtype
      of ``x`` and ``residual`` (float32 at least with ``residual_in_fp32``). Reverse mode keeps
      ``s`` and per-row statistics only.

    Raises:
      TypeError, ValueError, NameError: as :func:`layer_norm`, and ``ValueError`` if ``x``
      and ``residual`` differ in shape.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> y, s = jln.add_layer_norm(jnp.ones((2, 4)), jnp.arange(8.0).reshape(2, 4))
      >>> s[0]
      Array([1., 2., 3., 4.], dtype=float32)
    """
    fn = "jln.add_layer_norm"
    s = residual_sum(fn, x, residual, residual_in_fp32)
    axes, eps_f, sc, b = prepare(fn, s, scale, bias, axis, eps)
    name, groups = _checks.check_axis_name(axis_name, axis_index_groups, fn)
    y, s = ln_apply(
        fn, impl, s, sc, b, None, None, axes=axes, eps=eps_f, out_dtype=x.dtype,
        axis_name=name, axis_index_groups=groups, addends=(x, residual),
    )
    return y, s
