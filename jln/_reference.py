"""torch references for every jln op: what jln's numbers are checked against.

Each function takes torch tensors and mirrors the public reference it names, op by op and
dtype by dtype (the formulas are the ones transformers, diffusers and torch ship, restated
here in torch). They serve the test suite, ``jln.testing`` and ``jln parity``. torch is
imported lazily: importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any

Tensor = Any


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise ImportError(
            "jln's torch references need PyTorch. Install it with `pip install 'jln[torch]'` "
            "(CPU builds are enough)."
        ) from e
    return torch


def _dims(k: int) -> tuple[int, ...]:
    return tuple(range(-k, 0))


def layer_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, k: int = 1, eps: float = 1e-5, zero_centered: bool = False) -> Tensor:
    """``torch.nn.functional.layer_norm`` over the trailing ``k`` axes (``zero_centered``:
    with ``scale + 1`` in ``scale``'s dtype, as Nemotron's ``LayerNorm1P``)."""
    if zero_centered and scale is not None:
        scale = scale + 1.0
    torch = _torch()
    return torch.nn.functional.layer_norm(x, tuple(x.shape[-k:]), scale, bias, eps)


def rms_norm(x: Tensor, scale: Tensor | None = None, *, k: int = 1, eps: float | None = None, convention: str = "torch", bias: Tensor | None = None) -> Tensor:
    """The reference of each RMSNorm convention (see ``jln.rms_norm``)."""
    torch = _torch()
    dims = _dims(k)
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


def adaptive_layer_norm(x: Tensor, emb: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, order: tuple[str, ...], eps: float = 1e-5) -> Tensor:
    """``LN(x) * (1 + scale_c) + shift_c`` with the chunks of ``emb`` named by ``order``."""
    chunks = dict(zip(order, emb.chunk(len(order), dim=-1), strict=True))
    sh, sc = ("shift", "scale") if "shift" in chunks else ("shift_msa", "scale_msa")
    return modulate(layer_norm(x, scale, bias, eps=eps), chunks[sh], chunks[sc])


def add_norm(x: Tensor, residual: Tensor, *params: Tensor | None, norm: str, residual_in_fp32: bool = False, **kw: Any) -> tuple[Tensor, Tensor]:
    """``s = x + residual``; returns ``(norm(s), s)``.

    jln casts ``norm(s)`` to the dtype its norm gives for an ``x.dtype`` input; compare after
    casting this reference to that dtype.
    """
    torch = _torch()
    dtype = torch.promote_types(x.dtype, residual.dtype)
    if residual_in_fp32:
        dtype = torch.promote_types(dtype, torch.float32)
    s = x.to(dtype) + residual.to(dtype)
    y = layer_norm(s, *params, **kw) if norm == "layer_norm" else rms_norm(s, *params, **kw)
    return y, s


def gated_rms_norm(x: Tensor, gate: Tensor | None = None, scale: Tensor | None = None, *, k: int = 1, eps: float = 1e-6, group_size: int | None = None, norm_before_gate: bool | None = None, convention: str = "mamba", activation: str = "silu") -> Tensor:
    """The reference of each gated RMSNorm convention (see ``jln.gated_rms_norm``): transformers'
    ``MambaRMSNormGated`` ("mamba"), ``Qwen3NextRMSNormGated`` ("qwen3_next") and
    ``FalconH1RMSNormGated`` / ``KimiLinearRMSNormGated`` ("float32"), restated with a
    ``group_size`` and either gate order, and with float64 statistics for float64 input."""
    torch = _torch()
    if convention not in ("mamba", "qwen3_next", "float32"):
        raise ValueError(f"no torch reference for gated convention {convention!r}")
    dt = x.dtype
    sd = torch.float64 if dt == torch.float64 else torch.float32
    act = torch.nn.functional.silu if activation == "silu" else torch.sigmoid
    before = (convention != "mamba") if norm_before_gate is None else norm_before_gate
    v = x.to(sd)
    if gate is not None and not before:
        v = v * act(gate.to(sd))
    dims = _dims(k)
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


def batch_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, eps: float = 1e-5,
               training: bool = True, channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.batch_norm`` on batch statistics (no running statistics), the
    channels at ``channel_axis`` (moved to torch's axis 1 and back)."""
    torch = _torch()
    assert training, "the reference takes batch statistics"
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.batch_norm(xt, None, None, scale, bias, True, 0.1, eps).movedim(1, channel_axis)


def group_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, num_groups: int,
               eps: float = 1e-5, channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.group_norm``, the channels at ``channel_axis``."""
    torch = _torch()
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.group_norm(xt, num_groups, scale, bias, eps).movedim(1, channel_axis)
def instance_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, eps: float = 1e-5,
                  training: bool = True, channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.instance_norm`` on each sample's statistics (no running
    statistics), the channels at ``channel_axis``."""
    torch = _torch()
    assert training, "the reference takes each sample's statistics"
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.instance_norm(xt, None, None, scale, bias, True, 0.1, eps).movedim(1, channel_axis)


def frozen_batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor, scale: Tensor, bias: Tensor, *,
                      eps: float = 1e-5, channel_axis: int = 1) -> Tensor:
    """transformers' ``DetrFrozenBatchNorm2d.forward``, op by op, the channels at ``channel_axis``."""
    shape = [1] * x.dim()
    shape[channel_axis] = -1
    s = scale.reshape(shape) * (running_var.reshape(shape) + eps).rsqrt()
    return x * s + (bias.reshape(shape) - running_mean.reshape(shape) * s)


def local_response_norm(x: Tensor, size: int, *, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0,
                        channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.local_response_norm``, the channels at ``channel_axis``."""
    torch = _torch()
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.local_response_norm(xt, size, alpha, beta, k).movedim(1, channel_axis)


def lp_normalize(x: Tensor, *, p: float = 2.0, axis: Any = -1, eps: float = 1e-12) -> Tensor:
    """``torch.nn.functional.normalize`` (diffusers ``LpNorm``)."""
    torch = _torch()
    return torch.nn.functional.normalize(x, p=p, dim=axis, eps=eps)


def global_response_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, *, spatial_axes: Any = (1, 2), eps: float = 1e-6) -> Tensor:
    """diffusers / ConvNeXt-V2 ``GlobalResponseNorm.forward`` with ``[C]`` parameters."""
    torch = _torch()
    gx = torch.norm(x, p=2, dim=spatial_axes, keepdim=True)
    nx = gx / (gx.mean(dim=-1, keepdim=True) + eps)
    y = x * nx
    term = None if gamma is None else gamma * y
    if beta is not None:
        term = beta if term is None else term + beta
    return x if term is None else term + x


def adaptive_rms_norm(x: Tensor, emb: Tensor, scale: Tensor | None = None, *, order: tuple[str, ...], eps: float, modulation: str = "rounded") -> Tensor:
    """diffusers ``LuminaRMSNormZero`` (``"rounded"``) / ``MochiRMSNormZero`` (``"float32"``):
    diffusers' RMSNorm, then ``* (1 + scale_c) (+ shift_c)`` with per-example chunks."""
    torch = _torch()
    chunks = dict(zip(order, emb.chunk(len(order), dim=-1), strict=True))
    sh = next((chunks[n] for n in ("shift", "shift_msa") if n in chunks), None)
    sc = next((chunks[n] for n in ("scale", "scale_msa") if n in chunks), None)
    if modulation == "rounded":
        return modulate(rms_norm(x, scale, eps=eps, convention="diffusers"), sh, sc)
    f32 = torch.float32
    n = rms_norm(x.to(f32), scale, eps=eps, convention="diffusers")
    y = modulate(n, None if sh is None else sh.to(f32), None if sc is None else sc.to(f32))
    return y.to(x.dtype)
