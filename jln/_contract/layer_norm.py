"""LayerNorm's contract: its spec, formula, affine and modulation epilogue, dtype rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jln import _stats
from jln._contract import NormSpec

Array = jax.Array


def modulation_dtypes(y_dtype: Any, shift_dtype: Any, mscale_dtype: Any) -> tuple[jnp.dtype, jnp.dtype]:
    """The dtypes :func:`modulation_rounded` rounds to: after ``* (offset + mscale)`` and after
    ``+ shift`` (each is the previous one when that operand is absent)."""
    after_scale = jnp.dtype(y_dtype) if mscale_dtype is None else _stats.promote(y_dtype, mscale_dtype)
    after_shift = after_scale if shift_dtype is None else _stats.promote(after_scale, shift_dtype)
    return after_scale, after_shift


def modulation_rounded(
    y: Array, shift: Array | None, mscale: Array | None, offset: float, y_dtype: Any,
    shift_dtype: Any = None, mscale_dtype: Any = None,
) -> Array:
    """``y * (offset + mscale) + shift`` with an eager framework's rounding after each op.

    ``y`` holds values of dtype ``y_dtype`` in the (wider) statistics dtype. As torch
    evaluates ``x * (1 + scale) + shift`` op by op: ``1 + scale`` rounds to ``scale``'s dtype,
    the product to the promotion of ``y_dtype`` and ``scale``'s dtype, the sum to the
    promotion of that and ``shift``'s dtype. ``shift_dtype``/``mscale_dtype`` are the
    conditions' own dtypes (default: the arrays', which a kernel may hold widened). Returns
    values of that last dtype, still held in the statistics dtype.
    """
    sd = None if shift is None else jnp.dtype(shift_dtype or shift.dtype)
    md = None if mscale is None else jnp.dtype(mscale_dtype or mscale.dtype)
    after_scale, after_shift = modulation_dtypes(y_dtype, sd, md)
    if mscale is not None:
        factor = _stats.round_to(offset + mscale.astype(y.dtype), md)
        y = _stats.round_to(y * factor, after_scale)
    if shift is not None:
        y = _stats.round_to(y + shift.astype(y.dtype), after_shift)
    return y


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerNormSpec(NormSpec):
    """LayerNorm, optionally modulated (adaptive LayerNorm):
    ``y = (x - mean) / sqrt(var + eps) * scale + bias``, rounded to ``out_dtype``, then
    ``y * (mod_offset + mscale) + shift`` rounded op by op (``shift_dtype``/``mscale_dtype``:
    the conditions' dtypes, ``None`` when absent), returned in ``mod_dtype``."""

    out_dtype: Any
    mod_offset: float = 1.0
    mod_dtype: Any = None
    shift_dtype: Any = None
    mscale_dtype: Any = None

    op = "layer_norm"
    operands = ("scale", "bias", "shift", "mscale")
    centered = True

    @property
    def modulated(self) -> bool:
        return self.shift_dtype is not None or self.mscale_dtype is not None

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.mod_dtype if self.modulated else self.out_dtype)

    def formula(self, x: Array, *operands: Array | None) -> Array:
        """``(x - mean) * rsqrt(var + eps)``, statistics about a per-row pivot in the statistics
        dtype (global rows with ``axis_name``), then :meth:`tail`."""
        x32 = _stats.upcast(x)
        groups = self.axis_index_groups
        _, d, var = _stats.centered(x32, self.axes, self.axis_name, groups)
        y = _stats.normalized(x32, self.axes, self.eps, (d, var), self.axis_name, groups)
        return self.tail(y, *operands)

    def tail(self, y: Array, *operands: Array | None) -> Array:
        """Affine, output rounding, modulation. ``y`` is in the statistics dtype; the operands
        are cast to it (exactly), so a kernel may pass them widened."""
        scale, bias, shift, mscale = (*operands, None, None, None, None)[:4]
        sd = y.dtype
        if scale is not None:
            y = y * scale.astype(sd)
        if bias is not None:
            y = y + bias.astype(sd)
        if self.modulated:
            y = modulation_rounded(
                _stats.round_to(y, self.out_dtype), shift, mscale, self.mod_offset, self.out_dtype,
                self.shift_dtype, self.mscale_dtype,
            )
        return y.astype(self.result_dtype)
