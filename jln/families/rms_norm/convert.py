"""torch -> jln converters of the RMSNorm family: ``torch.nn.RMSNorm``, transformers' LLaMA, Gemma,
T5 and OLMo-2 norms (and every class whose code is theirs), diffusers' RMSNorms and the dtype-flow
variants of model files, each a convention of :class:`jln.linen.RMSNorm`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jln import _convert as C


def _conv_torch_rms(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    p = C.affine(m, fn)
    # eps=None stays None: jln's "torch" convention applies torch's finfo rule per input dtype
    opts = dict(
        eps=None if m.eps is None else float(m.eps),
        convention="torch",
        axis=C.axis_of(shape),
        use_scale="scale" in p,
        param_dtype=C.param_dtype(p),
    )
    return C.Spec("RMSNorm", {}, (C.features_of(shape),), opts), p


def _hf_rms(convention: str, eps_attr: str) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        d = C.one_axis_weight(m, fn)
        p = {"scale": C.to_jax(m.weight, "weight", fn)}
        opts = dict(
            eps=float(getattr(m, eps_attr)),
            convention=convention,
            axis=-1,
            use_scale=True,
            param_dtype=C.param_dtype(p),
        )
        return C.Spec("RMSNorm", {}, (d,), opts), p

    return convert


def _width(dim: int, p: C.Params) -> int | None:
    """NNX's ``num_features`` of a diffusers RMSNorm: its ``dim``, ``None`` for a weightless one
    built with ``dim=0`` (Mochi's ``RMSNorm(0, eps, False)``, whose width nothing records)."""
    return dim if p or dim > 0 else None


def _conv_diffusers_rms(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    dim = tuple(int(s) for s in m.dim)
    if len(dim) != 1:
        raise C.unsupported(
            m,
            fn,
            f"dim={dim} has several axes but diffusers reduces over the last axis only",
            "Use a 1-D dim.",
        )
    p = C.affine(m, fn)
    opts = dict(
        eps=float(m.eps),
        convention="diffusers",
        axis=-1,
        use_scale="scale" in p,
        use_bias="bias" in p,
        param_dtype=C.param_dtype(p),
    )
    return C.Spec("RMSNorm", {}, (_width(dim[0], p),), opts), p


def _conv_mochi_rms(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``MochiRMSNorm``: ``(x * rsqrt(mean(f(x)^2) + eps) * w).to(dt)``, torch's
    ``rms_norm`` with its own eps (float64 x: statistics in float32 there, float64 here)."""
    dim = tuple(int(s) for s in m.dim)
    if len(dim) != 1:
        raise C.unsupported(m, fn, f"dim={dim}: MochiRMSNorm reduces over the last axis only", "Use a 1-D dim.")
    p = C.affine(m, fn)
    opts = dict(eps=float(m.eps), convention="torch", axis=-1, use_scale="scale" in p, param_dtype=C.param_dtype(p))
    return C.Spec("RMSNorm", {}, (_width(dim[0], p),), opts), p


_LLAMA = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")


_GEMMA = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")


def _rms(convention: str, eps_attr: str, *, rounded_offset: bool = False) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """An RMSNorm over the last axis in ``convention``, with its weight if it has one.
    ``rounded_offset``: the class adds 1 to the weight in the weight's own dtype before
    upcasting: the gemma convention for a float32 (or float64) weight, ``"gemma_rounded"``
    (which rounds ``1 + w`` to a half weight's dtype) for a half one."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        w = C.own_weight(m)
        eps = float(getattr(m, eps_attr))
        if w is None:
            size = getattr(m, "hidden_size", None) or _buffer_size(m)
            opts = dict(eps=eps, convention=convention, axis=-1, use_scale=False)
            return C.Spec("RMSNorm", {}, (size,), opts), {}
        if w.ndim != 1:
            raise C.unsupported(m, fn, f"its weight has shape {tuple(w.shape)}", "Use a 1-D weight.")
        conv = convention
        if rounded_offset and str(w.dtype) not in ("torch.float32", "torch.float64"):
            conv = "gemma_rounded"
        p = {"scale": C.to_jax(w, "weight", fn)}
        opts = dict(eps=eps, convention=conv, axis=-1, use_scale=True, param_dtype=C.param_dtype(p))
        return C.Spec("RMSNorm", {}, (int(w.shape[0]),), opts), p

    return convert


def _conv_xlstm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """transformers ``xLSTMRMSNorm``: with ``force_float32_reductions`` (its default) LLaMA's
    computation (float32 statistics, cast to x's dtype, then ``* weight``); without a bias."""
    if not m.force_float32_reductions:
        raise C.unsupported(m, fn, "force_float32_reductions=False takes x * rsqrt(mean(x^2) + eps) op by op in "
                            "x's dtype, which no jln convention rounds as (convention='eager' divides by the sqrt)",
                            "Keep force_float32_reductions=True (xLSTM's default).")
    if getattr(m, "bias", None) is not None:
        raise C.unsupported(m, fn, "it has a bias, added after LLaMA's `w * h` in the promoted dtype; jln's llama "
                            "convention has none (the diffusers convention adds one after other roundings)",
                            "Build it with use_bias=False (xLSTM's default).")
    return _rms("llama", "eps")(m, fn)


def _buffer_size(m: Any) -> int | None:
    """The width of a weightless norm where it records one (FalconMamba's unused ones buffer)."""
    b = getattr(m, "weight", None)
    return int(b.shape[0]) if b is not None and getattr(b, "ndim", 0) == 1 else None


def _conv_mochi(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    dim = tuple(int(s) for s in m.dim)
    if len(dim) != 1:
        raise C.unsupported(m, fn, f"dim={dim} has several axes but it reduces over the last axis only",
                             "Use a 1-D dim.")
    spec, p = _rms("torch", "eps")(m, fn)
    # a weightless RMSNorm(0, eps, False) (Mochi's) records no width: NNX takes num_features=None
    return C.Spec("RMSNorm", {}, (_width(dim[0], p),), spec.options), p


def _conv_cpmant(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    return _rms("llama", "eps")(m, fn)


def _conv_grouped_gemma(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    if m.group_size is not None:
        raise C.unsupported(
            m, fn,
            f"group_size={m.group_size}: its statistics are per group of {m.group_size} channels, while "
            f"jln's RMSNorm takes them over the whole normalized axis",
            "Reshape x to (..., hidden_size // group_size, group_size) and use jln.rms_norm(..., "
            "convention='gemma') with the weight reshaped alike.",
        )
    return _rms("gemma", "eps")(m, fn)


def _conv_pixel_rms(dim_attr: str) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """LTX-2's weightless RMSNorm over axis ``getattr(m, dim_attr)``, op by op in x's dtype."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        axis = getattr(m, dim_attr)
        if not isinstance(axis, int):
            raise C.unsupported(m, fn, f"{dim_attr}={axis!r} is not one axis", f"Use an int {dim_attr}.")
        opts = dict(eps=float(m.eps), convention="eager", axis=axis, use_scale=False)
        return C.Spec("RMSNorm", {}, (None,), opts), {}

    return convert


def _conv_stable_audio3(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    if not m.force_fp32:
        raise C.unsupported(
            m, fn, "force_fp32=False computes op by op in the input's dtype (no float32 statistics), "
            "while jln's RMSNorm conventions take the statistics in float32",
            "Build it with force_fp32=True (its default), or run it in float32.",
        )
    w = m.gamma
    if w.ndim != 1:
        raise C.unsupported(m, fn, f"its gamma has shape {tuple(w.shape)}", "Use a 1-D gamma.")
    p = {"scale": C.to_jax(w, "gamma", fn)}
    opts = dict(eps=float(m.eps), convention="torch", axis=-1, use_scale=True, param_dtype=C.param_dtype(p),
                torch_names=(("weight", "gamma"),))
    return C.Spec("RMSNorm", {}, (int(w.shape[0]),), opts), p


LAYOUTS: dict[str, C.Layout] = {
    "RMSNorm": C.Layout("RMSNorm", C.sd_affine),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "torch.nn.RMSNorm",
        "RMSNorm(convention='torch')",
        C.torch_nn("RMSNorm"),
        _conv_torch_rms,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers " + " / ".join(_LLAMA) + ", and any transformers class whose code is LlamaRMSNorm's",
        "RMSNorm(convention='llama')",
        C.hf_norm(_LLAMA, "llama", ("weight", "variance_epsilon")),
        _hf_rms("llama", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers " + " / ".join(_GEMMA) + ", and any transformers class whose code is GemmaRMSNorm's",
        "RMSNorm(convention='gemma')",
        C.hf_norm(_GEMMA, "gemma", ("weight", "eps")),
        _hf_rms("gemma", "eps"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers Olmo2RMSNorm, and any transformers class whose code is Olmo2RMSNorm's",
        "RMSNorm(convention='torch', eps=variance_epsilon)",
        # weight * h in float32, then the cast to x's dtype: torch's rms_norm with its own eps
        C.hf_norm(("Olmo2RMSNorm",), "olmo2", ("weight", "variance_epsilon")),
        _hf_rms("torch", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers T5LayerNorm, and any transformers class whose code is T5LayerNorm's",
        "RMSNorm(convention='t5')",
        C.hf_norm(("T5LayerNorm",), "t5", ("weight", "variance_epsilon")),
        _hf_rms("t5", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers RMSNorm",
        "RMSNorm(convention='diffusers')",
        C.named(("RMSNorm",), ("weight", "bias", "eps", "dim"), package="diffusers"),
        _conv_diffusers_rms,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers MochiRMSNorm",
        "RMSNorm(convention='torch', eps=eps)",
        C.named(("MochiRMSNorm",), ("weight", "eps", "dim"), package="diffusers"),
        _conv_mochi_rms,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers Gemma3nRMSNorm (with_scale) and its copies (Gemma 4, DiffusionGemma, NeoMME...): float32 "
        "weight product, one cast",
        "RMSNorm(convention='torch')",
        C.computes_as(((f"{C.T}.gemma3n.modeling_gemma3n", "Gemma3nRMSNorm"),), ("variance_epsilon", "with_scale")),
        _rms("torch", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers MoshiRMSNorm, ErgoRMSNorm, diffusers Cosmos3NemotronRMSNorm and their copies (Kyutai...)",
        "RMSNorm(convention='torch')",
        C.computes_as(((f"{C.T}.moshi.modeling_moshi", "MoshiRMSNorm"),
                     (f"{C.T}.ergo.modeling_ergo", "ErgoRMSNorm"),
                     ("diffusers.models.transformers.transformer_cosmos3", "Cosmos3NemotronRMSNorm")),
                    ("weight", "eps")),
        _rms("torch", "eps"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers HeliumRMSNorm and its copies (NemotronH, LaraMini...)",
        "RMSNorm(convention='torch')",
        C.computes_as(((f"{C.T}.helium.modeling_helium", "HeliumRMSNorm"),), ("weight", "variance_epsilon")),
        _rms("torch", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers weightless RMSNorms: Llama4TextL2Norm, FalconMambaWeightlessRMSNorm, Inkling2UnweightedRMSNorm "
        "and their copies (x in float32 * rsqrt(mean(x^2) + eps), one cast)",
        "RMSNorm(convention='torch', use_scale=False)",
        C.computes_as(((f"{C.T}.llama4.modeling_llama4", "Llama4TextL2Norm"),
                     (f"{C.T}.falcon_mamba.modeling_falcon_mamba", "FalconMambaWeightlessRMSNorm"),
                     (f"{C.T}.inkling2.modeling_inkling2", "Inkling2UnweightedRMSNorm")),
                    ("variance_epsilon",)),
        _rms("torch", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers MochiRMSNorm and its copies",
        "RMSNorm(convention='torch')",
        C.computes_as((("diffusers.models.normalization", "MochiRMSNorm"),), ("weight", "eps", "dim")),
        _conv_mochi,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers Llama4TextRMSNorm and its copies (cast to x's dtype, then the weight)",
        "RMSNorm(convention='llama')",
        C.computes_as(((f"{C.T}.llama4.modeling_llama4", "Llama4TextRMSNorm"),), ("weight", "variance_epsilon")),
        _rms("llama", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers CpmAntLayerNorm and its copies",
        "RMSNorm(convention='llama')",
        C.computes_as(((f"{C.T}.cpmant.modeling_cpmant", "CpmAntLayerNorm"),), ("weight", "eps", "dim_norm")),
        _conv_cpmant,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers Qwen4ExpTextRMSNorm (group_size=None) and its copies",
        "RMSNorm(convention='gemma')",
        C.computes_as(((f"{C.T}.qwen4_exp.modeling_qwen4_exp", "Qwen4ExpTextRMSNorm"),), ("weight", "eps", "group_size")),
        _conv_grouped_gemma,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers MuseSparkTextCenteredRMSNorm, diffusers Krea2RMSNorm (1 + weight in the weight's dtype) "
        "and their copies",
        "RMSNorm(convention='gemma'; 'gemma_rounded' for a half weight)",
        C.computes_as(((f"{C.T}.muse_spark.modeling_muse_spark", "MuseSparkTextCenteredRMSNorm"),
                     ("diffusers.models.transformers.transformer_krea2", "Krea2RMSNorm")), ("weight", "eps")),
        _rms("gemma", "eps", rounded_offset=True),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers xLSTMRMSNorm (force_float32_reductions, no bias) and its copies",
        "RMSNorm(convention='llama')",
        C.computes_as(((f"{C.T}.xlstm.modeling_xlstm", "xLSTMRMSNorm"),), ("eps", "force_float32_reductions")),
        _conv_xlstm,
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers ImageGPTLayerNorm and its copies (an RMSNorm op by op in x's dtype)",
        "RMSNorm(convention='eager')",
        C.computes_as(((f"{C.T}.imagegpt.modeling_imagegpt", "ImageGPTLayerNorm"),), ("weight", "eps")),
        _rms("eager", "eps"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers PerChannelRMSNorm (LTX-2's VAE) and its copies (weightless RMSNorm over channel_dim, op by op "
        "in x's dtype)",
        "RMSNorm(convention='eager', use_scale=False, axis=channel_dim)",
        C.computes_as((("diffusers.models.autoencoders.autoencoder_kl_ltx2", "PerChannelRMSNorm"),),
                    ("channel_dim", "eps")),
        _conv_pixel_rms("channel_dim"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers LTX2AudioPixelNorm and its copies (weightless RMSNorm over dim, op by op in x's dtype)",
        "RMSNorm(convention='eager', use_scale=False, axis=dim)",
        C.computes_as((("diffusers.models.autoencoders.autoencoder_kl_ltx2_audio", "LTX2AudioPixelNorm"),),
                    ("dim", "eps")),
        _conv_pixel_rms("dim"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers QwenImage21ZeroCenterRMSNorm and its copies (float32 `x * rrms * (weight.float() + 1)`, one "
        "cast)",
        "RMSNorm(convention='gemma')",
        C.computes_as((("diffusers.models.transformers.transformer_qwenimage21", "QwenImage21ZeroCenterRMSNorm"),),
                    ("weight", "eps")),
        _rms("gemma", "eps"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers DeepseekV4UnweightedRMSNorm, Glm5NextTextUnweightedRMSNorm and their copies (rsqrt rounded "
        "to x's dtype, then `x * rstd`)",
        "RMSNorm(convention='round_rstd', use_scale=False)",
        C.computes_as(((f"{C.T}.deepseek_v4.modeling_deepseek_v4", "DeepseekV4UnweightedRMSNorm"),
                     (f"{C.T}.glm5_next.modeling_glm5_next", "Glm5NextTextUnweightedRMSNorm")),
                    ("variance_epsilon",)),
        _rms("round_rstd", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "transformers MuseSparkTextInputScaledRMSNorm and its copies (x scaled by `1 + weight` and cast to x's "
        "dtype before the statistics)",
        "RMSNorm(convention='input_scaled')",
        C.computes_as(((f"{C.T}.muse_spark.modeling_muse_spark", "MuseSparkTextInputScaledRMSNorm"),), ("weight", "eps")),
        _rms("input_scaled", "eps"),
        LAYOUTS["RMSNorm"],
    ),
    C.Converter(
        "diffusers StableAudio3RMSNorm and its copies (force_fp32=True)",
        "RMSNorm(convention='torch', torch_names weight -> gamma)",
        C.of_package("diffusers", C.computes_as(((f"{C.D}.transformers.transformer_stable_audio3", "StableAudio3RMSNorm"),),
                                     ("gamma", "eps", "force_fp32"))),
        _conv_stable_audio3,
        LAYOUTS["RMSNorm"],
    ),
)

#: Classes recognised by computation but not reproduced (:data:`jln._convert.NearMisses`)
NEAR_MISSES: C.NearMisses = (
    (((f"{C.T}.hy_v4.modeling_hy_v4", "HYV4UnweightedRMSNorm"),
      (f"{C.T}.hy_v4_vl.modeling_hy_v4_vl", "HYV4VLUnweightedRMSNorm")),
     "it returns only the statistic, rsqrt(mean(f(x)^2) + eps) cast to x's dtype, of shape [..., 1], not a "
     "normalized x: no jln module returns the inverse RMS alone. Compute it with "
     "jax.lax.rsqrt(jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + eps).astype(x.dtype)"),
    (((f"{C.T}.gradium_phonon_tts.modeling_gradium_phonon_tts", "GradiumPhononTTSTimestepNorm"),),
     "it computes weight * x * rsqrt(mean(x^2) + eps) op by op in the input's dtype (no float32 "
     "statistics, the weight applied first): RMSNorm(convention='torch') gives its float32 numbers but "
     "not its bfloat16/float16 rounding"),
    (((f"{C.T}.pocket_tts.modeling_pocket_tts", "PocketTTSTimestepNorm"),),
     "it divides x by sqrt(unbiased variance + eps) without centring, op by op in the input's dtype; "
     "jln's LayerNorm centres and takes the biased variance, its RMSNorm takes the mean square"),
)
