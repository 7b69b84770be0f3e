"""The public functions' shared argument handling: checks (from :mod:`jln._checks`), then the
operands laid out to broadcast against ``x``. Each public function calls these once."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _checks, _platform, _stats
from jln._checks import Axis
from jln._contract import add_in

Array = jax.Array


def expand_param(p: Array, ndim: int, axes: tuple[int, ...]) -> Array:
    """Reshape a per-feature parameter (shape of x at ``axes``) so it broadcasts against x."""
    shape = []
    it = iter(p.shape)
    for i in range(ndim):
        shape.append(next(it) if i in axes else 1)
    return p.reshape(shape)


def params(fn: str, x: Any, scale: Any, bias: Any, axis: Axis) -> tuple[tuple[int, ...], Array | None, Array | None]:
    """Check ``x``, ``axis`` and the per-feature params; return (axes, scale, bias) reshaped
    to broadcast against ``x``."""
    axes, _, s, b = laid_params(fn, x, scale, bias, axis, None)
    return axes, s, b


def laid_params(
    fn: str, x: Any, scale: Any, bias: Any, axis: Axis, param_axes: Axis | None,
) -> tuple[tuple[int, ...], tuple[int, ...] | None, Array | None, Array | None]:
    """:func:`params` with the parameters laid out over ``param_axes`` (see
    :func:`param_layout`): return (axes, param axes or None, scale, bias)."""
    _checks.check_floating(x, fn)
    axes = _checks.normalize_axes(axis, x.ndim, fn)
    laid = param_layout(fn, x.ndim, axes, param_axes)
    paxes, role = (axes, "normalized") if laid is None else (laid, "param_axes")
    _checks.check_param(scale, "scale", x.shape, paxes, fn, role)
    _checks.check_param(bias, "bias", x.shape, paxes, fn, role)
    s = None if scale is None else expand_param(jnp.asarray(scale), x.ndim, paxes)
    b = None if bias is None else expand_param(jnp.asarray(bias), x.ndim, paxes)
    return axes, laid, s, b


def param_layout(fn: str, ndim: int, axes: tuple[int, ...], param_axes: Axis | None) -> tuple[int, ...] | None:
    """The axes of ``x`` the parameters span (flax's ``feature_axes``), sorted and
    non-negative: every normalized axis plus, e.g., a heads axis (one LayerNorm per head).
    ``None`` when ``param_axes`` is ``None`` or names just the normalized axes (today's layout).

    Raises:
      TypeError, ValueError: as ``axis`` (not ints, out of range, repeated), or ``ValueError``
        when a normalized axis is missing from ``param_axes``.
    """
    if param_axes is None:
        return None
    paxes = _checks.normalize_axes(param_axes, ndim, fn, "param_axes")
    missing = [a for a in axes if a not in paxes]
    if missing:
        raise ValueError(
            f"{fn}: `param_axes` must contain every normalized axis (the parameters span the "
            f"normalized axes and, optionally, more, e.g. a heads axis); received "
            f"param_axes={param_axes!r}, which resolves to {paxes} for rank {ndim}, without the "
            f"normalized {missing}. Add them, e.g. param_axes={tuple(sorted({*paxes, *axes}))}."
        )
    return None if paxes == axes else paxes


def dist(fn: str, impl: str, axis_name: Any, axis_index_groups: Any) -> dict[str, Any]:
    """Check ``impl`` and the distributed arguments; return the spec's ``axis_name`` and
    ``axis_index_groups`` fields, normalized."""
    _checks.check_choice(impl, "impl", _platform.IMPLS, fn)
    name, groups = _checks.check_axis_name(axis_name, axis_index_groups, fn)
    return dict(axis_name=name, axis_index_groups=groups)


def residual_sum(fn: str, x: Any, residual: Any, residual_in_fp32: bool) -> Array:
    """``x + residual`` in their promoted dtype, or in float32 (float64 stays) when asked."""
    _checks.check_floating(x, fn)
    _checks.check_floating(residual, fn, "residual")
    _checks.check_same_shape(x, residual, ("x", "residual"), fn)
    dtype = _stats.promote(x.dtype, residual.dtype)
    if residual_in_fp32:
        dtype = _stats.promote(dtype, jnp.float32)
    return add_in(x, residual, dtype)


def zero_centered_scale(fn: str, scale: Array | None, zero_centered: bool) -> Array | None:
    """``1 + scale`` rounded to ``scale``'s dtype when ``zero_centered`` (torch's ``weight + 1``
    in the weight's dtype, before the norm); ``scale`` unchanged otherwise."""
    if not isinstance(zero_centered, bool):
        raise TypeError(f"{fn}: `zero_centered` must be a bool; received {zero_centered!r}.")
    if not zero_centered:
        return scale
    if scale is None:
        raise ValueError(
            f"{fn}: zero_centered=True multiplies by `1 + scale`, but no `scale` was given. Pass a "
            f"scale (zeros is the identity), or use zero_centered=False."
        )
    # round to scale's dtype with an op XLA keeps (a bfloat16 add would be fused into the
    # float32 norm unrounded)
    wide = _stats.promote(scale.dtype, jnp.float32)
    return _stats.round_to(scale.astype(wide) + jnp.ones((), wide), scale.dtype).astype(scale.dtype)
