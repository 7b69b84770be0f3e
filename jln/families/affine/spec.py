"""The elementwise affine's contract: ``y = ((x - center) * scale) + bias``, each present
operand applied op by op as torch evaluates the modules that write it out.

transformers' MobileBERT ``NoNorm`` computes ``x * weight + bias`` and Phi-4-multimodal's audio
``MeanVarianceNormLayer`` computes ``(x - global_mean) * global_invstd``: no statistics, no eps,
nothing normalized from ``x`` itself. torch evaluates them op by op: each op's result has its
operands' promoted dtype (per-feature ``[C]`` tensors are dimensioned, so a float32 parameter
with a bfloat16 ``x`` gives float32) and is rounded to it once. torch's half-precision
elementwise kernels compute in float32 and round, and a difference, product or sum of two
bfloat16 or float16 values rounded from float32 equals the exactly rounded one (float32 has
more than twice their significand bits plus two), so each op here is: upcast, compute in
float32, round to the op's dtype with :func:`jln._stats.round_to` (which XLA keeps under
``jit``, where an ``astype`` round trip may be dropped). Two roundings for ``x * w + b``,
never a fused multiply-add, except in float32, where the rounding is a no-op and XLA may fuse
the multiply and the add: one float32 ulp from torch at most.

float64 input computes in float64 (the roundings are no-ops). No statistics: the gradients are
``ct * scale`` for ``x`` and sums over the rows for the per-feature operands.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jln import _stats

Array = jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class AffineSpec:
    """Everything static about one call (hashable): the operands' dtypes (``None`` for an
    absent one)."""

    x_dtype: Any
    center_dtype: Any = None
    scale_dtype: Any = None
    bias_dtype: Any = None

    op = "affine"

    @property
    def result_dtype(self) -> jnp.dtype:
        """Every present operand's dtype promoted as torch does."""
        present = (self.x_dtype, self.center_dtype, self.scale_dtype, self.bias_dtype)
        return _stats.promote(*(d for d in present if d is not None))

    def formula(self, x: Array, center: Array | None, scale: Array | None, bias: Array | None) -> Array:
        """``((x - center) * scale) + bias``, the operands laid out to broadcast against ``x``:
        each op in float32 (float64 for float64 operands), rounded to its operands' promoted
        dtype."""
        out = self.result_dtype
        wide = _stats.stats_dtype(out)  # float64 only when some operand is float64

        def up(v: Array) -> Array:
            return _stats.upcast(v).astype(wide)

        dt = jnp.dtype(self.x_dtype)
        h = up(x)
        if center is not None:
            dt = _stats.promote(dt, self.center_dtype)
            h = _stats.round_to(h - up(center), dt)
        if scale is not None:
            dt = _stats.promote(dt, self.scale_dtype)
            h = _stats.round_to(h * up(scale), dt)
        if bias is not None:
            dt = _stats.promote(dt, self.bias_dtype)
            h = _stats.round_to(h + up(bias), dt)
        return h.astype(out)

    def body(self, x: Array, center: Array | None, scale: Array | None, bias: Array | None) -> Array:
        """The XLA body (the formula; there is no kernel)."""
        return self.formula(x, center, scale, bias)
