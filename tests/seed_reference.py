"""The seeds' own torch classes, kept verbatim in behaviour, as references for jln.

From the two seed documents jln grew from: the from-scratch LayerNorm walk-through
(``MyLayerNorm``) and the PyTorch guide (``layer_norm_process``, the 2021-style ``RMSNorm``
with ``eps=1e-8`` and ``AdaptiveLN``).
"""

from __future__ import annotations

import torch
from torch import nn


class MyLayerNorm(nn.Module):
    """Seed 1: mean, biased variance, ``(x - mean) / sqrt(var + eps)``, ``gamma * x + beta``."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        x_norm = (x - mean) / torch.sqrt(var + self.eps)
        return self.gamma * x_norm + self.beta


def layer_norm_process(feature: torch.Tensor, beta: float = 0.0, gamma: float = 1.0, eps: float = 1e-5) -> torch.Tensor:
    """Seed 2: the hand-written LayerNorm built on ``torch.var_mean``."""
    var_mean = torch.var_mean(feature, dim=-1, unbiased=False)
    mean = var_mean[1]
    var = var_mean[0]
    feature = (feature - mean[..., None]) / torch.sqrt(var[..., None] + eps)
    return feature * gamma + beta


class RMSNorm(nn.Module):
    """Seed 2: ``x / clamp(||x|| * dim^-1/2, min=eps) * g``."""

    def __init__(self, dim: int, eps: float = 1e-8):
        super().__init__()
        self.scale = dim**-0.5
        self.eps = eps
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.norm(x, dim=-1, keepdim=True) * self.scale
        return x / norm.clamp(min=self.eps) * self.g


class AdaptiveLN(nn.Module):
    """Seed 2: ``gamma, beta = proj(condition).chunk(2)``; ``ln(x) * (1 + gamma) + beta``."""

    def __init__(self, d_model: int, condition_dim: int):
        super().__init__()
        self.proj = nn.Linear(condition_dim, 2 * d_model)
        self.ln = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.proj(condition).chunk(2, dim=-1)
        return self.ln(x) * (1 + gamma) + beta
