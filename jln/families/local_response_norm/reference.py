"""The torch reference of local response normalization."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def local_response_norm(x: Tensor, size: int, *, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0,
                        channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.local_response_norm``, the channels at ``channel_axis``."""
    torch = R.torch()
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.local_response_norm(xt, size, alpha, beta, k).movedim(1, channel_axis)
