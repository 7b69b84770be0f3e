"""The torch references of Dynamic Tanh: the module as torch evaluates it (diffusers'
``DynamicTanh.forward``) and Liger's float32 formula, restated in torch."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def dyt(x: Tensor, alpha: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *,
        convention: str = "torch") -> Tensor:
    """``scale * tanh(alpha * x) + bias`` with ``[C]`` parameters over the last axis: op by op
    in torch's dtypes (``"torch"``, diffusers' ``DynamicTanh`` with ``alpha`` of shape ``[1]``),
    or upcast to float32 (float64 input: float64) and rounded once to ``x.dtype``
    (``"float32"``, Liger's ``LigerDyT``)."""
    torch = R.torch()
    alpha = alpha.reshape(1)  # torch's parameter shape: promotes as a dimensioned tensor
    if convention in ("torch", "diffusers"):
        h = torch.tanh(alpha * x)
        if scale is not None:
            h = scale * h
        return h if bias is None else h + bias
    if convention not in ("float32", "liger"):
        raise ValueError(f"no torch reference for DyT convention {convention!r}")
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    h = torch.tanh(alpha.to(wide) * x.to(wide))
    if scale is not None:
        h = scale.to(wide) * h
    if bias is not None:
        h = h + bias.to(wide)
    return h.to(x.dtype)
