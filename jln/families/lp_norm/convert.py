"""torch -> jln converters of diffusers' ``LpNorm`` and ``GlobalResponseNorm`` (ConvNeXt-V2's GRN),
transformers' ``DoryL2Norm`` and ``ZayaQKNorm``, and Kandinsky 6's channel L2 norms.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln import _convert as C


def _sd_grn(p: C.Params, cfg: Any) -> dict[str, Any]:
    # torch keeps gamma and beta as [1, ..., 1, C] of rank broadcast_rank (ConvNeXt-V2's: 4)
    lead = (1,) * ((cfg.broadcast_rank or 4) - 1)
    return {n: jnp.asarray(p[n]).reshape((*lead, -1)) for n in ("gamma", "beta")}


def _grn(gamma: str, beta: str, spatial: tuple[int, ...] = (1, 2)) -> Any:
    """A GRN over ``spatial`` (``torch.norm``'s ``dim``) whose ``[1, ..., 1, C]`` parameters
    (rank ``len(spatial) + 2``) are ``m.<gamma>`` and ``m.<beta>`` (diffusers' ``gamma``/``beta``,
    ConvNeXt-V2's ``weight``/``bias``), with torch's broadcasting against them
    (``broadcast_rank``: an input of lower rank gains leading axes, a channel axis of 1
    broadcasts)."""
    rank = len(spatial) + 2

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        g, b = getattr(m, gamma), getattr(m, beta)
        want = (*(1,) * (rank - 1), "C")
        if g.ndim != rank or set(g.shape[:-1]) != {1} or tuple(b.shape) != tuple(g.shape):
            raise C.unsupported(m, fn, f"{gamma} has shape {tuple(g.shape)} and {beta} {tuple(b.shape)}, "
                               f"expected {want} both", "")
        p = {"gamma": C.to_jax(g, gamma, fn).reshape(-1), "beta": C.to_jax(b, beta, fn).reshape(-1)}
        opts: dict[str, Any] = dict(param_dtype=C.param_dtype(p), broadcast_rank=rank)
        if spatial != (1, 2):
            opts["spatial_axes"] = spatial
        if (gamma, beta) != ("gamma", "beta"):
            opts["torch_names"] = (("beta", beta), ("gamma", gamma))
        return C.Spec("GlobalResponseNorm", {}, (int(g.shape[-1]),), opts), p

    return convert


def _conv_lp(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    p = m.p
    if not isinstance(p, (int, float)) or not p > 0:
        raise C.unsupported(m, fn, f"p={p!r}", "jln takes a positive p or float('inf').")
    dim = m.dim if isinstance(m.dim, int) else tuple(int(a) for a in m.dim)
    return C.Spec("LpNorm", {}, (), dict(p=float(p), axis=dim, eps=float(m.eps))), {}


def _conv_dory(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    eps = m.variance_epsilon
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0:
        raise C.unsupported(m, fn, f"variance_epsilon={eps!r}", "jln takes a non-negative float eps.")
    return C.Spec("LpNorm", {}, (), dict(axis=-1, eps=float(eps), eps_mode="root")), {}


def _conv_kandinsky(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    g = m.gamma
    if g.ndim != 4 or tuple(g.shape[1:]) != (1, 1, 1):
        raise C.unsupported(m, fn, f"gamma has shape {tuple(g.shape)}, expected (C, 1, 1, 1)",
                            "jln converts the channel-first gain the class creates.")
    mult = m.scale
    if not isinstance(mult, (int, float)) or isinstance(mult, bool):
        raise C.unsupported(m, fn, f"its `scale` is {mult!r}, expected a Python number (sqrt(C))",
                            "Set it back to a float.")
    p = {"scale": C.to_jax(g, "gamma", fn).reshape(-1)}
    opts = dict(axis=1, multiplier=float(mult), param_dtype=C.param_dtype(p))
    return C.Spec("ScaledLpNorm", {}, (int(g.shape[0]),), opts), p


def _conv_zaya(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    t = m.temp
    if t.ndim != 1:
        raise C.unsupported(m, fn, f"temp has shape {tuple(t.shape)}, expected (num_key_value_heads,)",
                            "jln converts the per-key-head scale the class creates.")
    mult = m.head_dim_scale
    if not isinstance(mult, (int, float)) or isinstance(mult, bool):
        raise C.unsupported(m, fn, f"its `head_dim_scale` is {mult!r}, expected a Python number "
                            f"(sqrt(head_dim))", "Set it back to a float.")
    p = {"key_scale": C.to_jax(t, "temp", fn)}
    # temp[None, None, :, None]: the heads of a [B, S, heads, head_dim] key; eps is finfo(query.dtype).eps
    opts = dict(head_axis=2, multiplier=float(mult), param_dtype=C.param_dtype(p))
    return C.Spec("QKL2Norm", {}, (int(t.shape[0]),), opts), p


LAYOUTS: dict[str, C.Layout] = {
    "GlobalResponseNorm": C.Layout("GlobalResponseNorm", _sd_grn, takes_cfg=True),
    "LpNorm": C.Layout("LpNorm", lambda p: {}),
    # torch's gamma is [C, 1, 1, 1] (the channels of a [B, C, T, H, W] input)
    "ScaledLpNorm": C.Layout("ScaledLpNorm", lambda p: {"gamma": jnp.asarray(p["scale"]).reshape((-1, 1, 1, 1))}),
    "QKL2Norm": C.Layout("QKL2Norm", lambda p: {"temp": jnp.asarray(p["key_scale"])}),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "diffusers GlobalResponseNorm (normalization and Stable Cascade)",
        "GlobalResponseNorm",
        C.named(("GlobalResponseNorm",), ("gamma", "beta"), package="diffusers"),
        _grn("gamma", "beta"),
        LAYOUTS["GlobalResponseNorm"],
    ),
    C.Converter(
        "transformers ConvNextV2GRN and its copies (diffusers' GlobalResponseNorm with weight and bias)",
        "GlobalResponseNorm(torch_names=...)",
        C.computes_as(((f"{C.T}.convnextv2.modeling_convnextv2", "ConvNextV2GRN"),), ("weight", "bias")),
        _grn("weight", "bias"),
        LAYOUTS["GlobalResponseNorm"],
    ),
    C.Converter(
        "diffusers AudioDiTGRN (LongCat audio DiT: GRN over the time axis of [B, T, C], [1, 1, C] parameters) "
        "and its copies",
        "GlobalResponseNorm(spatial_axes=(1,), broadcast_rank=3)",
        C.computes_as(((f"{C.D}.transformers.transformer_longcat_audio_dit", "AudioDiTGRN"),), ("gamma", "beta")),
        _grn("gamma", "beta", spatial=(1,)),
        LAYOUTS["GlobalResponseNorm"],
    ),
    C.Converter(
        "diffusers LpNorm",
        "LpNorm",
        C.named(("LpNorm",), ("p", "dim", "eps"), package="diffusers"),
        _conv_lp,
        LAYOUTS["LpNorm"],
    ),
    C.Converter(
        "transformers DoryL2Norm and its copies (x * rsqrt(sum(x^2) + eps) in float32)",
        "LpNorm(eps_mode='root')",
        C.computes_as(((f"{C.T}.dory.modeling_dory", "DoryL2Norm"),), ("variance_epsilon",)),
        _conv_dory,
        LAYOUTS["LpNorm"],
    ),
    C.Converter(
        "diffusers Kandinsky6VAERMSNorm and Kandinsky6SRLatentUpscalerRMSNorm (F.normalize over the "
        "channels, times sqrt(C) and gamma)",
        "ScaledLpNorm(axis=1)",
        C.computes_as(((f"{C.D}.autoencoders.autoencoder_kandinsky6_sr", "Kandinsky6VAERMSNorm"),
                       (f"{C.D}.latent_upscaler.latent_upscaler_kandinsky6_sr",
                        "Kandinsky6SRLatentUpscalerRMSNorm")), ("gamma", "scale")),
        _conv_kandinsky,
        LAYOUTS["ScaledLpNorm"],
    ),
    C.Converter(
        "transformers ZayaQKNorm (q and k L2-normalized to sqrt(head_dim), k scaled per key head)",
        "QKL2Norm(head_axis=2)",
        C.computes_as(((f"{C.T}.zaya.modeling_zaya", "ZayaQKNorm"),), ("temp", "head_dim_scale")),
        _conv_zaya,
        LAYOUTS["QKL2Norm"],
    ),
)
