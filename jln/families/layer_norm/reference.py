"""The torch reference of LayerNorm: ``torch.nn.functional.layer_norm``, and the fused
residual step around it."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def layer_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, k: int = 1, eps: float = 1e-5, zero_centered: bool = False) -> Tensor:
    """``torch.nn.functional.layer_norm`` over the trailing ``k`` axes (``zero_centered``:
    with ``scale + 1`` in ``scale``'s dtype, as Nemotron's ``LayerNorm1P``)."""
    if zero_centered and scale is not None:
        scale = scale + 1.0
    torch = R.torch()
    return torch.nn.functional.layer_norm(x, tuple(x.shape[-k:]), scale, bias, eps)


def add_layer_norm(x: Tensor, residual: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *,
                   residual_in_fp32: bool = False, **kw: Any) -> tuple[Tensor, Tensor]:
    """``s = x + residual``; returns ``(layer_norm(s), s)`` (jln casts the norm to ``x.dtype``:
    compare after casting this reference to it)."""
    s = R.residual_sum(x, residual, residual_in_fp32)
    return layer_norm(s, scale, bias, **kw), s
