"""The torch reference of PolyNorm: Liger's and vLLM's formula, restated in torch."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def poly_norm(x: Tensor, weight: Tensor, bias: Tensor, *, axis: Any = -1, eps: float = 1e-6) -> Tensor:
    """``w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b``, ``n(u) = u * rsqrt(mean(u^2) + eps)`` over
    ``axis``, evaluated as written in float32 (float64 for float64 input) and rounded once to
    ``x.dtype`` (no scaling: it overflows where ``mean(x^6)`` does)."""
    torch = R.torch()
    wide = torch.float64 if torch.float64 in (x.dtype, weight.dtype, bias.dtype) else torch.float32
    v = x.to(wide)
    w = weight.to(wide)

    def n(u: Tensor) -> Tensor:
        return u * torch.rsqrt(u.pow(2).mean(dim=axis, keepdim=True) + eps)

    y = w[0] * n(v * v * v) + w[1] * n(v * v) + w[2] * n(v) + bias.to(wide).reshape(())
    return y.to(x.dtype)
