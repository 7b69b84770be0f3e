"""The torch reference of every gated RMSNorm convention (see ``jln.gated_rms_norm``)."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def gated_rms_norm(x: Tensor, gate: Tensor | None = None, scale: Tensor | None = None, *, k: int = 1, eps: float = 1e-6, group_size: int | None = None, norm_before_gate: bool | None = None, convention: str = "mamba", activation: str = "silu") -> Tensor:
    """The reference of each gated RMSNorm convention (see ``jln.gated_rms_norm``): transformers'
    ``MambaRMSNormGated`` ("mamba"), ``Qwen3NextRMSNormGated`` ("qwen3_next") and
    ``FalconH1RMSNormGated`` / ``KimiLinearRMSNormGated`` ("float32"), restated with a
    ``group_size`` and either gate order, and with float64 statistics for float64 input."""
    torch = R.torch()
    if convention not in ("mamba", "qwen3_next", "float32"):
        raise ValueError(f"no torch reference for gated convention {convention!r}")
    dt = x.dtype
    sd = torch.float64 if dt == torch.float64 else torch.float32
    act = torch.nn.functional.silu if activation == "silu" else torch.sigmoid
    before = (convention != "mamba") if norm_before_gate is None else norm_before_gate
    v = x.to(sd)
    if gate is not None and not before:
        v = v * act(gate.to(sd))
    dims = R.dims(k)
    if group_size is not None:
        v = v.unflatten(-1, (-1, group_size))
        dims = (-1,)
    h = v * torch.rsqrt(v.pow(2).mean(dims, keepdim=True) + eps)
    if group_size is not None:
        h = h.flatten(-2)
    if convention == "float32":
        if scale is not None:
            h = scale.to(sd) * h
    else:
        h = h.to(dt)
        if scale is not None:
            h = scale * h
    if gate is not None and before:
        h = h * act(gate.to(sd))
    out = torch.promote_types(dt, scale.dtype) if convention == "mamba" and scale is not None else dt
    return h.to(out)
