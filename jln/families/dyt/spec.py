"""Dynamic Tanh's contract: its spec, formula and the two rounding conventions real torch code
uses for ``y = gamma * tanh(alpha * x) + beta``.

* ``"torch"``: the module as written in torch (diffusers' ``DynamicTanh``:
  ``self.gamma * torch.tanh(self.alpha * x) + self.beta``), evaluated op by op. Each op's
  result has its operands' promoted dtype (torch's promotion of dimensioned tensors: alpha
  is a ``[1]`` parameter, so a float32 alpha with a bfloat16 ``x`` gives float32) and is
  rounded to it once. torch's half-precision elementwise kernels compute in float32 and
  round (*measured*, torch 2.13 CPU: bfloat16 and float16 ``torch.tanh`` equal float32 tanh
  rounded on 200,000 samples), and a product of two bfloat16 or float16 values is exact in
  float32, so each op here is: upcast, compute in float32, round to the op's dtype.
* ``"float32"`` (alias ``"liger"``): Liger's ``LigerDyT``: every operand upcast to float32,
  ``gamma * tanh(alpha * x) + beta`` there, one rounding to ``x.dtype`` (the output is always
  ``x.dtype``).

float64 input computes in float64 in both (the roundings are no-ops). In float32, XLA may fuse
``gamma * t + beta`` into one multiply-add where torch rounds twice: one float32 ulp apart. No statistics: reverse
mode keeps what XLA chooses; alpha's gradient is the sum over every element.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jln import _stats

Array = jax.Array

#: the conventions and their aliases -> the convention
ALIASES: dict[str, str] = {"torch": "torch", "diffusers": "torch", "float32": "float32", "liger": "float32"}
CONVENTIONS: tuple[str, ...] = ("torch", "float32")
DyTConvention = Literal["torch", "diffusers", "float32", "liger"]


def resolve_convention(convention: Any, fn: str) -> str:
    """The convention ``convention`` names; ``ValueError`` naming the choices otherwise."""
    if not isinstance(convention, str) or convention not in ALIASES:
        raise ValueError(
            f"{fn}: `convention` must be one of {list(ALIASES)} (\"torch\"/\"diffusers\": op by op in the "
            f"operands' dtype; \"float32\"/\"liger\": float32 throughout, rounded once); received {convention!r}."
        )
    return ALIASES[convention]


def output_dtype(convention: str, x_dtype: Any, alpha_dtype: Any, scale_dtype: Any, bias_dtype: Any) -> jnp.dtype:
    """``x.dtype`` (``"float32"``), or every operand's dtype promoted as torch does (``"torch"``)."""
    if convention == "float32":
        return jnp.dtype(x_dtype)
    return _stats.promote(*(d for d in (x_dtype, alpha_dtype, scale_dtype, bias_dtype) if d is not None))


@jax.custom_jvp
def tanh(z: Array) -> Array:
    """``jnp.tanh`` whose derivative is ``sech(z)^2`` computed from ``z``: ``1 - tanh(z)^2`` cancels
    where ``|tanh(z)|`` is near 1 and turns tanh's own rounding (XLA's float32 tanh is within
    ~2 ulp) into a large relative error of the derivative, which alpha's gradient sums over
    every element."""
    return jnp.tanh(z)


@tanh.defjvp
def _tanh_jvp(primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    (z,), (dz,) = primals, tangents
    c = jnp.cosh(z)  # inf past |z| ~ 89: sech^2 is then 0, its limit
    return tanh(z), dz / (c * c)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DyTSpec:
    """Everything static about one call (hashable): the convention and the operands' dtypes
    (``None`` for an absent scale or bias)."""

    convention: str
    x_dtype: Any
    alpha_dtype: Any
    scale_dtype: Any = None
    bias_dtype: Any = None

    op = "dyt"

    @property
    def result_dtype(self) -> jnp.dtype:
        return output_dtype(self.convention, self.x_dtype, self.alpha_dtype, self.scale_dtype, self.bias_dtype)

    def formula(self, x: Array, alpha: Array, scale: Array | None, bias: Array | None) -> Array:
        """``scale * tanh(alpha * x) + bias``, ``alpha`` of shape ``()``, ``scale`` and ``bias``
        laid out to broadcast against ``x``."""
        out = self.result_dtype
        wide = _stats.stats_dtype(out)  # float64 only when some operand is float64

        def up(v: Array) -> Array:
            return _stats.upcast(v).astype(wide)

        if self.convention == "float32":
            h = tanh(up(alpha) * up(x))
            if scale is not None:
                h = up(scale) * h
            if bias is not None:
                h = h + up(bias)
            return h.astype(out)
        # op by op: each result rounded to its operands' promoted dtype
        dt = _stats.promote(self.x_dtype, self.alpha_dtype)
        h = _stats.round_to(up(alpha) * up(x), dt)
        h = _stats.round_to(tanh(h), dt)
        if scale is not None:
            dt = _stats.promote(dt, self.scale_dtype)
            h = _stats.round_to(up(scale) * h, dt)
        if bias is not None:
            dt = _stats.promote(dt, self.bias_dtype)
            h = _stats.round_to(h + up(bias), dt)
        return h.astype(out)

    def body(self, x: Array, alpha: Array, scale: Array | None, bias: Array | None) -> Array:
        """The XLA body (the formula; there is no kernel)."""
        return self.formula(x, alpha, scale, bias)
