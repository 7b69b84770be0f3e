"""The torch references of Lp normalization (``F.normalize``) and ConvNeXt-V2's global
response norm."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def lp_normalize(x: Tensor, *, p: float = 2.0, axis: Any = -1, eps: float = 1e-12) -> Tensor:
    """``torch.nn.functional.normalize`` (diffusers ``LpNorm``)."""
    torch = R.torch()
    return torch.nn.functional.normalize(x, p=p, dim=axis, eps=eps)


def global_response_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, *, spatial_axes: Any = (1, 2), eps: float = 1e-6) -> Tensor:
    """diffusers / ConvNeXt-V2 ``GlobalResponseNorm.forward`` with ``[C]`` parameters."""
    torch = R.torch()
    gx = torch.norm(x, p=2, dim=spatial_axes, keepdim=True)
    nx = gx / (gx.mean(dim=-1, keepdim=True) + eps)
    y = x * nx
    term = None if gamma is None else gamma * y
    if beta is not None:
        term = beta if term is None else term + beta
    return x if term is None else term + x
