"""The torch references of modulation and the adaptive norms (DiT, diffusers)."""

from __future__ import annotations

from typing import Any

from jln import _reference as R
from jln.families.layer_norm.reference import layer_norm
from jln.families.rms_norm.reference import rms_norm

Tensor = Any


def modulate(x: Tensor, shift: Tensor | None, scale: Tensor | None, *, scale_offset: float = 1.0) -> Tensor:
    """DiT's ``x * (1 + scale[:, None]) + shift[:, None]`` for per-example conditions."""

    def expand(c: Tensor) -> Tensor:
        while c.dim() < x.dim():
            c = c.unsqueeze(1)
        return c

    if scale is not None:
        x = x * (scale_offset + expand(scale))
    if shift is not None:
        x = x + expand(shift)
    return x


def adaptive_layer_norm(x: Tensor, emb: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *,
                        order: tuple[str, ...], eps: float = 1e-5, convention: str = "torch") -> Tensor:
    """``LN(x) * (1 + scale_c) + shift_c`` with the chunks of ``emb`` named by ``order``, the
    LayerNorm in ``convention`` (see the LayerNorm reference)."""
    chunks = dict(zip(order, emb.chunk(len(order), dim=-1), strict=True))
    sh, sc = ("shift", "scale") if "shift" in chunks else ("shift_msa", "scale_msa")
    return modulate(layer_norm(x, scale, bias, eps=eps, convention=convention), chunks[sh], chunks[sc])


def adaptive_rms_norm(x: Tensor, emb: Tensor, scale: Tensor | None = None, *, order: tuple[str, ...], eps: float, modulation: str = "rounded") -> Tensor:
    """diffusers ``LuminaRMSNormZero`` (``"rounded"``) / ``MochiRMSNormZero`` (``"float32"``):
    diffusers' RMSNorm, then ``* (1 + scale_c) (+ shift_c)`` with per-example chunks."""
    torch = R.torch()
    chunks = dict(zip(order, emb.chunk(len(order), dim=-1), strict=True))
    sh = next((chunks[n] for n in ("shift", "shift_msa") if n in chunks), None)
    sc = next((chunks[n] for n in ("scale", "scale_msa") if n in chunks), None)
    if modulation == "rounded":
        return modulate(rms_norm(x, scale, eps=eps, convention="diffusers"), sh, sc)
    f32 = torch.float32
    n = rms_norm(x.to(f32), scale, eps=eps, convention="diffusers")
    y = modulate(n, None if sh is None else sh.to(f32), None if sc is None else sc.to(f32))
    return y.to(x.dtype)
