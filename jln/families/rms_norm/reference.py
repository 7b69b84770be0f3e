"""The torch reference of every RMSNorm convention (see ``jln.rms_norm``), as torch,
transformers and diffusers compute it, and the fused residual step around it."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def rms_norm(x: Tensor, scale: Tensor | None = None, *, k: int = 1, eps: float | None = None, convention: str = "torch", bias: Tensor | None = None) -> Tensor:
    """The reference of each RMSNorm convention (see ``jln.rms_norm``)."""
    torch = R.torch()
    dims = R.dims(k)
    dt = x.dtype
    if convention == "torch":
        return torch.nn.functional.rms_norm(x, tuple(x.shape[-k:]), scale, eps)
    if convention == "seed":  # the seed's RMSNorm(dim, eps=1e-8): no upcast
        n = 1
        for d in x.shape[-k:]:
            n *= d
        norm = torch.linalg.vector_norm(x, dim=dims, keepdim=True) * n**-0.5
        y = x / norm.clamp(min=eps)
        return y if scale is None else y * scale
    if convention == "eager":  # ImageGPT's LayerNorm, LTX-2's PerChannelRMSNorm: no upcast
        h = x / torch.sqrt(torch.mean(torch.square(x), dim=dims, keepdim=True) + eps)
        return h if scale is None else h * scale
    f = x.to(torch.float32) if dt in (torch.float16, torch.bfloat16, torch.float32) else x
    if convention == "input_scaled":  # MuseSparkTextInputScaledRMSNorm: 1 + w, then the statistics
        if scale is not None:
            x = (f * (1.0 + scale).to(f.dtype)).to(dt)
        g = x.to(f.dtype)
        return (g * torch.rsqrt(g.pow(2).mean(dims, keepdim=True) + eps)).to(dt)
    if convention == "round_rstd":  # DeepseekV4UnweightedRMSNorm / Glm5NextTextUnweightedRMSNorm
        h = x * torch.rsqrt(f.square().mean(dims, keepdim=True) + eps).to(dt)
        return h if scale is None else scale * h
    if convention == "llama":  # transformers LlamaRMSNorm / Qwen2RMSNorm / MistralRMSNorm
        h = f * torch.rsqrt(f.pow(2).mean(dims, keepdim=True) + eps)
        h = h.to(dt)
        return h if scale is None else scale * h
    if convention == "gemma_rounded":  # MuseSparkTextCenteredRMSNorm: (1 + w) in w's dtype, then f32
        o = f * torch.rsqrt(f.pow(2).mean(dims, keepdim=True) + eps)
        if scale is not None:
            o = o * (1.0 + scale).to(f.dtype)
        return o.type_as(x)
    if convention == "gemma":  # transformers GemmaRMSNorm (1, 2, 3)
        o = f * torch.rsqrt(f.pow(2).mean(dims, keepdim=True) + eps)
        if scale is not None:
            o = o * (1.0 + scale.to(f.dtype))
        return o.type_as(x)
    if convention in ("t5", "diffusers"):  # transformers T5LayerNorm / diffusers RMSNorm
        var = f.pow(2).mean(dims, keepdim=True)
        h = x * torch.rsqrt(var + eps)
        if scale is None:
            return h if convention == "t5" else h.to(dt)
        if scale.dtype in (torch.float16, torch.bfloat16):
            h = h.to(scale.dtype)
        h = h * scale if convention == "diffusers" else scale * h
        return h if bias is None else h + bias
    raise ValueError(f"no torch reference for convention {convention!r}")


def add_rms_norm(x: Tensor, residual: Tensor, scale: Tensor | None = None, *, residual_in_fp32: bool = False,
                 **kw: Any) -> tuple[Tensor, Tensor]:
    """``s = x + residual``; returns ``(rms_norm(s), s)`` (jln casts the norm to the dtype its
    convention gives for an ``x.dtype`` input: compare after casting this reference to it)."""
    s = R.residual_sum(x, residual, residual_in_fp32)
    return rms_norm(s, scale, **kw), s
