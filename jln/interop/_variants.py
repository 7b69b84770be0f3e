"""Converters for the LayerNorm and RMSNorm variants of transformers and diffusers model files.

Each is recognised by computation: a class whose ``forward`` (and ``_norm``) is, as code, that
of a reference class in the installed transformers or diffusers (:func:`computes_as`), so the
model files that copy a reference under their own name convert too. Each maps onto an option
of :class:`jln.linen.LayerNorm` / :class:`jln.linen.RMSNorm`; none adds a formula:

* channels-first LayerNorm (``data_format="channels_first"``, ``LayerNorm2d``): ``axis=1``;
* zero-centred gamma (Nemotron's ``LayerNorm1P``): ``zero_centered=True``;
* LayerNorm with float32 statistics and one cast at the end (OLMo, Cohere, diffusers'
  ``FP32LayerNorm``...): torch's LayerNorm numbers, jln's ``LayerNorm``;
* RMSNorm whose weight multiplies in float32 before the one cast (Gemma 3n/4 with
  ``with_scale``, Moshi, Helium, NemotronH...), with or without a weight (the weightless
  QK-norms of Llama 4, FalconMamba...): ``convention="torch"``.
* the dtype flows of model files that round where ``F.layer_norm``/``F.rms_norm`` do not: the
  LayerNorm conventions ``"deberta"`` (DeBERTa; MoonshineStreaming with ``zero_centered``) and
  ``"eager"`` (VitDet), the RMSNorm conventions ``"eager"`` (ImageGPT, LTX-2), ``"round_rstd"``
  (DeepSeek-V4, GLM-5-Next) and ``"input_scaled"`` (MuseSpark).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from jln.interop import _converters as C
from jln.interop._arrays import to_jax

_T = "transformers.models"


def _torch_class(name: str) -> Any:
    import torch

    return getattr(torch.nn, name)


def computes_as(
    refs: tuple[tuple[str, str], ...], attrs: tuple[str, ...] = (), base: str | None = None
) -> Callable[[Any], bool]:
    """A transformers or diffusers class (every attribute in ``attrs`` present) whose
    ``forward`` and ``_norm`` are, as code, those of one of ``refs`` (``(module, class)``) in
    the installed packages. ``base``: the ``torch.nn`` class the class must extend directly (its
    code calls ``super().forward``). Reference modules are imported only for a candidate."""

    def recognise(m: Any) -> bool:
        t = type(m)
        package = t.__module__.split(".")[0]
        if package not in ("transformers", "diffusers") or not all(hasattr(m, a) for a in attrs):
            return False
        if base is not None and (len(t.__mro__) < 2 or t.__mro__[1] is not _torch_class(base)):
            return False
        mine = C._code(t)
        if mine is None:
            return False
        # the same package's references first: a transformers class never imports diffusers
        for mod, name in sorted(refs, key=lambda r: r[0].split(".")[0] != package):
            try:
                ref = getattr(importlib.import_module(mod), name)
            except (ImportError, AttributeError):
                continue
            if ref is t or C._code(ref) == mine:
                return True
        return False

    return recognise


def _weight(m: Any, name: str = "weight") -> Any:
    """The module's own parameter ``name`` (a buffer of that name, e.g. FalconMamba's unused
    ones, is not a parameter), or None."""
    return getattr(m, "_parameters", {}).get(name)


def _one_axis(m: Any, shape: tuple[int, ...], fn: str, what: str) -> None:
    if len(shape) != 1:
        raise C._unsupported(
            m, fn, f"normalized_shape={shape} has {len(shape)} axes, but {what} normalizes one axis",
            "Use a 1-D normalized_shape.",
        )


# --------------------------------------------------------------------------- LayerNorm


def _ln_channels(first: Callable[[Any], bool]) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """torch LayerNorm parameters; ``axis=1`` when ``first(m)`` (the channels of NC... input)."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        spec, p = C._conv_layer_norm(m, fn)
        if not first(m):
            return spec, p
        shape = tuple(int(s) for s in m.normalized_shape)
        _one_axis(m, shape, fn, "a channels-first LayerNorm")
        return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, "axis": 1}), p

    return convert


def _conv_zero_centered(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    spec, p = C._conv_layer_norm(m, fn)
    if "scale" not in p:
        raise C._unsupported(
            m, fn, "it has no weight, but it multiplies by `weight + 1` (torch fails on it too)",
            "Build it with elementwise_affine=True.",
        )
    return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, "zero_centered": True}), p


def _conv_olmo(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    # OLMo's forward fixes eps=1e-5 and has no parameters
    opts = dict(eps=1e-5, axis=C._axis(shape), use_scale=False, use_bias=False)
    return C.Spec("LayerNorm", {}, (C._features(shape),), opts), {}


def _conv_cohere(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    w = m.weight
    p = {"scale": to_jax(w, "weight", fn)}
    opts = dict(eps=float(m.variance_epsilon), axis=-1, use_scale=True, use_bias=False,
                param_dtype=C._param_dtype(p))
    if w.ndim > 1:  # a per-head weight (Cohere's QK-norm): statistics over the last axis only
        opts["param_axes"] = tuple(range(-w.ndim, 0))
        return C.Spec("LayerNorm", {}, (tuple(int(s) for s in w.shape),), opts), p
    return C.Spec("LayerNorm", {}, (int(w.shape[0]),), opts), p


# --------------------------------------------------------------------------- RMSNorm


def _rms(convention: str, eps_attr: str, *, float_weight: bool = False) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """An RMSNorm over the last axis in ``convention``, with its weight if it has one.
    ``float_weight``: the class adds 1 to the weight in the weight's own dtype, which only the
    gemma convention's float32 ``1 + w`` equals for a float32 (or float64) weight."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        w = _weight(m)
        eps = float(getattr(m, eps_attr))
        if w is None:
            size = getattr(m, "hidden_size", None) or _buffer_size(m)
            opts = dict(eps=eps, convention=convention, axis=-1, use_scale=False)
            return C.Spec("RMSNorm", {}, (size,), opts), {}
        if w.ndim != 1:
            raise C._unsupported(m, fn, f"its weight has shape {tuple(w.shape)}", "Use a 1-D weight.")
        if float_weight and str(w.dtype) not in ("torch.float32", "torch.float64"):
            raise C._unsupported(
                m, fn,
                f"it computes `1 + weight` in the weight's dtype ({w.dtype}) before upcasting, which "
                f"rounds; jln's gemma convention forms `1 + weight` in float32 (the same numbers only "
                f"for a float32 weight)",
                "Keep this norm's weight in float32 (as its model's _keep_in_fp32_modules does), or "
                "fold the rounded `1 + weight` into a convention='torch' RMSNorm's scale.",
            )
        p = {"scale": to_jax(w, "weight", fn)}
        opts = dict(eps=eps, convention=convention, axis=-1, use_scale=True, param_dtype=C._param_dtype(p))
        return C.Spec("RMSNorm", {}, (int(w.shape[0]),), opts), p

    return convert


def _buffer_size(m: Any) -> int | None:
    """The width of a weightless norm where it records one (FalconMamba's unused ones buffer)."""
    b = getattr(m, "weight", None)
    return int(b.shape[0]) if b is not None and getattr(b, "ndim", 0) == 1 else None


def _conv_mochi(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    dim = tuple(int(s) for s in m.dim)
    if len(dim) != 1:
        raise C._unsupported(m, fn, f"dim={dim} has several axes but it reduces over the last axis only",
                             "Use a 1-D dim.")
    spec, p = _rms("torch", "eps")(m, fn)
    return C.Spec("RMSNorm", {}, (dim[0],), spec.options), p


def _conv_cpmant(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    return _rms("llama", "eps")(m, fn)


def _conv_grouped_gemma(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    if m.group_size is not None:
        raise C._unsupported(
            m, fn,
            f"group_size={m.group_size}: its statistics are per group of {m.group_size} channels, while "
            f"jln's RMSNorm takes them over the whole normalized axis",
            "Reshape x to (..., hidden_size // group_size, group_size) and use jln.rms_norm(..., "
            "convention='gemma') with the weight reshaped alike.",
        )
    return _rms("gemma", "eps")(m, fn)


# ------------------------------------------------------------- dtype-flow variants (conventions)


def _conv_deberta(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    w = m.weight
    if w.ndim != 1:
        raise C._unsupported(m, fn, f"its weight has shape {tuple(w.shape)}", "Use a 1-D weight.")
    p = C._affine(m, fn)
    opts = dict(eps=float(m.variance_epsilon), axis=-1, use_scale=True, use_bias="bias" in p,
                param_dtype=C._param_dtype(p), convention="deberta")
    return C.Spec("LayerNorm", {}, (int(w.shape[0]),), opts), p


def _conv_vitdet(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    _one_axis(m, shape, fn, "VitDet's LayerNorm (over axis 1)")
    p = C._affine(m, fn)
    # mean over dim 1 and weight[:, None, None]: the channels of NCHW input, op by op in its dtype
    opts = dict(eps=float(m.eps), axis=1, use_scale=True, use_bias=True, param_dtype=C._param_dtype(p),
                convention="eager")
    return C.Spec("LayerNorm", {}, (shape[0],), opts), p


def _conv_moonshine(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    ln = m.ln
    if type(ln) is not _torch_class("LayerNorm") or ln.weight is not None or ln.bias is not None:
        raise C._unsupported(
            m, fn, "its inner `ln` is not a torch nn.LayerNorm without affine parameters",
            "Build it as the model file does (nn.LayerNorm(dim, elementwise_affine=False)).",
        )
    shape = tuple(int(s) for s in ln.normalized_shape)
    _one_axis(m, shape, fn, "MoonshineStreaming's LayerNorm")
    offset = float(m.unit_offset)
    if offset not in (0.0, 1.0):
        raise C._unsupported(
            m, fn, f"unit_offset={offset} (jln's LayerNorm multiplies by `scale` or by `1 + scale`)",
            "Use unit_offset=True or False.",
        )
    p = {"scale": to_jax(m.gamma, "gamma", fn)}
    opts = dict(eps=float(ln.eps), axis=-1, use_scale=True, use_bias=False, param_dtype=C._param_dtype(p),
                convention="deberta", zero_centered=offset == 1.0)
    return C.Spec("LayerNorm", {}, (shape[0],), opts), p


def _conv_pixel_rms(dim_attr: str) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """LTX-2's weightless RMSNorm over axis ``getattr(m, dim_attr)``, op by op in x's dtype."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        axis = getattr(m, dim_attr)
        if not isinstance(axis, int):
            raise C._unsupported(m, fn, f"{dim_attr}={axis!r} is not one axis", f"Use an int {dim_attr}.")
        opts = dict(eps=float(m.eps), convention="eager", axis=axis, use_scale=False)
        return C.Spec("RMSNorm", {}, (None,), opts), {}

    return convert


# --------------------------------------------------------------------------- the table

_LN = C.LAYOUTS["LayerNorm"]
_RMS = C.LAYOUTS["RMSNorm"]
_NORM_ATTRS = ("normalized_shape", "eps", "weight", "bias")

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "transformers ConvNextLayerNorm and its copies (SAM 1/2/3, EdgeTAM, LW-DETR, RF-DETR, GOT-OCR2...: "
        "data_format='channels_last' / 'channels_first')",
        "LayerNorm (axis=1 for channels_first)",
        computes_as(((f"{_T}.convnext.modeling_convnext", "ConvNextLayerNorm"),), (*_NORM_ATTRS, "data_format"),
                    base="LayerNorm"),
        _ln_channels(lambda m: m.data_format == "channels_first"),
        _LN,
    ),
    C.Converter(
        "transformers EomtLayerNorm2d / SqueezeBertLayerNorm, diffusers SDCascadeLayerNorm, and their copies "
        "(LayerNorm over the channels of NC... input)",
        "LayerNorm(axis=1)",
        computes_as(((f"{_T}.eomt.modeling_eomt", "EomtLayerNorm2d"),
                     (f"{_T}.squeezebert.modeling_squeezebert", "SqueezeBertLayerNorm"),
                     ("diffusers.models.unets.unet_stable_cascade", "SDCascadeLayerNorm")),
                    _NORM_ATTRS, base="LayerNorm"),
        _ln_channels(lambda m: True),
        _LN,
    ),
    C.Converter(
        "transformers NemotronLayerNorm1P / VideoPrismLayerNorm (F.layer_norm with weight + 1) and their copies",
        "LayerNorm(zero_centered=True)",
        computes_as(((f"{_T}.nemotron.modeling_nemotron", "NemotronLayerNorm1P"),
                     (f"{_T}.videoprism.modeling_videoprism", "VideoPrismLayerNorm")),
                    _NORM_ATTRS, base="LayerNorm"),
        _conv_zero_centered,
        _LN,
    ),
    C.Converter(
        "diffusers FP32LayerNorm, transformers EsmcLayerNorm / EsmFold2LayerNorm (torch LayerNorm in float32, "
        "cast back) and their copies",
        "LayerNorm",
        computes_as((("diffusers.models.normalization", "FP32LayerNorm"),
                     (f"{_T}.esmc.modeling_esmc", "EsmcLayerNorm"),
                     (f"{_T}.esmfold2.modeling_esmfold2", "EsmFold2LayerNorm")),
                    _NORM_ATTRS, base="LayerNorm"),
        C._conv_layer_norm,
        _LN,
    ),
    C.Converter(
        "transformers OlmoLayerNorm (no parameters, eps 1e-5, float32) and its copies",
        "LayerNorm(use_scale=False, use_bias=False)",
        computes_as(((f"{_T}.olmo.modeling_olmo", "OlmoLayerNorm"),), ("normalized_shape",)),
        _conv_olmo,
        _LN,
    ),
    C.Converter(
        "transformers CohereLayerNorm (float32 statistics, weight without bias; a (heads, head_dim) weight: "
        "param_axes) and its copies",
        "LayerNorm(use_bias=False)",
        computes_as(((f"{_T}.cohere.modeling_cohere", "CohereLayerNorm"),), ("weight", "variance_epsilon")),
        _conv_cohere,
        _LN,
    ),
    C.Converter(
        "transformers Gemma3nRMSNorm (with_scale) and its copies (Gemma 4, DiffusionGemma, NeoMME...): float32 "
        "weight product, one cast",
        "RMSNorm(convention='torch')",
        computes_as(((f"{_T}.gemma3n.modeling_gemma3n", "Gemma3nRMSNorm"),), ("variance_epsilon", "with_scale")),
        _rms("torch", "variance_epsilon"),
        _RMS,
    ),
    C.Converter(
        "transformers MoshiRMSNorm, ErgoRMSNorm, diffusers Cosmos3NemotronRMSNorm and their copies (Kyutai...)",
        "RMSNorm(convention='torch')",
        computes_as(((f"{_T}.moshi.modeling_moshi", "MoshiRMSNorm"),
                     (f"{_T}.ergo.modeling_ergo", "ErgoRMSNorm"),
                     ("diffusers.models.transformers.transformer_cosmos3", "Cosmos3NemotronRMSNorm")),
                    ("weight", "eps")),
        _rms("torch", "eps"),
        _RMS,
    ),
    C.Converter(
        "transformers HeliumRMSNorm and its copies (NemotronH, LaraMini...)",
        "RMSNorm(convention='torch')",
        computes_as(((f"{_T}.helium.modeling_helium", "HeliumRMSNorm"),), ("weight", "variance_epsilon")),
        _rms("torch", "variance_epsilon"),
        _RMS,
    ),
    C.Converter(
        "transformers weightless RMSNorms: Llama4TextL2Norm, FalconMambaWeightlessRMSNorm, Inkling2UnweightedRMSNorm "
        "and their copies (x in float32 * rsqrt(mean(x^2) + eps), one cast)",
        "RMSNorm(convention='torch', use_scale=False)",
        computes_as(((f"{_T}.llama4.modeling_llama4", "Llama4TextL2Norm"),
                     (f"{_T}.falcon_mamba.modeling_falcon_mamba", "FalconMambaWeightlessRMSNorm"),
                     (f"{_T}.inkling2.modeling_inkling2", "Inkling2UnweightedRMSNorm")),
                    ("variance_epsilon",)),
        _rms("torch", "variance_epsilon"),
        _RMS,
    ),
    C.Converter(
        "diffusers MochiRMSNorm and its copies",
        "RMSNorm(convention='torch')",
        computes_as((("diffusers.models.normalization", "MochiRMSNorm"),), ("weight", "eps", "dim")),
        _conv_mochi,
        _RMS,
    ),
    C.Converter(
        "transformers Llama4TextRMSNorm and its copies (cast to x's dtype, then the weight)",
        "RMSNorm(convention='llama')",
        computes_as(((f"{_T}.llama4.modeling_llama4", "Llama4TextRMSNorm"),), ("weight", "variance_epsilon")),
        _rms("llama", "variance_epsilon"),
        _RMS,
    ),
    C.Converter(
        "transformers CpmAntLayerNorm and its copies",
        "RMSNorm(convention='llama')",
        computes_as(((f"{_T}.cpmant.modeling_cpmant", "CpmAntLayerNorm"),), ("weight", "eps", "dim_norm")),
        _conv_cpmant,
        _RMS,
    ),
    C.Converter(
        "transformers Qwen4ExpTextRMSNorm (group_size=None) and its copies",
        "RMSNorm(convention='gemma')",
        computes_as(((f"{_T}.qwen4_exp.modeling_qwen4_exp", "Qwen4ExpTextRMSNorm"),), ("weight", "eps", "group_size")),
        _conv_grouped_gemma,
        _RMS,
    ),
    C.Converter(
        "transformers MuseSparkTextCenteredRMSNorm, diffusers Krea2RMSNorm (1 + weight in the weight's dtype; a "
        "float32 weight) and their copies",
        "RMSNorm(convention='gemma')",
        computes_as(((f"{_T}.muse_spark.modeling_muse_spark", "MuseSparkTextCenteredRMSNorm"),
                     ("diffusers.models.transformers.transformer_krea2", "Krea2RMSNorm")), ("weight", "eps")),
        _rms("gemma", "eps", float_weight=True),
        _RMS,
    ),
    C.Converter(
        "transformers DebertaLayerNorm and its copies (float32 statistics, the row cast to x's dtype, then "
        "`weight * h + bias`)",
        "LayerNorm(convention='deberta')",
        computes_as(((f"{_T}.deberta.modeling_deberta", "DebertaLayerNorm"),), ("weight", "bias", "variance_epsilon")),
        _conv_deberta,
        _LN,
    ),
    C.Converter(
        "transformers VitDetLayerNorm and its copies (LayerNorm over the channels of NCHW input, op by op in "
        "x's dtype)",
        "LayerNorm(axis=1, convention='eager')",
        computes_as(((f"{_T}.vitdet.modeling_vitdet", "VitDetLayerNorm"),), _NORM_ATTRS),
        _conv_vitdet,
        _LN,
    ),
    C.Converter(
        "transformers MoonshineStreamingLayerNorm and its copies (nn.LayerNorm without affine, then "
        "`* (gamma + unit_offset)` in x's dtype)",
        "LayerNorm(convention='deberta', zero_centered=True)",
        computes_as(((f"{_T}.moonshine_streaming.modeling_moonshine_streaming", "MoonshineStreamingLayerNorm"),),
                    ("ln", "gamma", "unit_offset")),
        _conv_moonshine,
        _LN,
        notes="to_torch_state_dict writes the parameter as `weight`; this class names it `gamma`",
    ),
    C.Converter(
        "transformers ImageGPTLayerNorm and its copies (an RMSNorm op by op in x's dtype)",
        "RMSNorm(convention='eager')",
        computes_as(((f"{_T}.imagegpt.modeling_imagegpt", "ImageGPTLayerNorm"),), ("weight", "eps")),
        _rms("eager", "eps"),
        _RMS,
    ),
    C.Converter(
        "diffusers PerChannelRMSNorm (LTX-2's VAE) and its copies (weightless RMSNorm over channel_dim, op by op "
        "in x's dtype)",
        "RMSNorm(convention='eager', use_scale=False, axis=channel_dim)",
        computes_as((("diffusers.models.autoencoders.autoencoder_kl_ltx2", "PerChannelRMSNorm"),),
                    ("channel_dim", "eps")),
        _conv_pixel_rms("channel_dim"),
        _RMS,
    ),
    C.Converter(
        "diffusers LTX2AudioPixelNorm and its copies (weightless RMSNorm over dim, op by op in x's dtype)",
        "RMSNorm(convention='eager', use_scale=False, axis=dim)",
        computes_as((("diffusers.models.autoencoders.autoencoder_kl_ltx2_audio", "LTX2AudioPixelNorm"),),
                    ("dim", "eps")),
        _conv_pixel_rms("dim"),
        _RMS,
    ),
    C.Converter(
        "diffusers QwenImage21ZeroCenterRMSNorm and its copies (float32 `x * rrms * (weight.float() + 1)`, one "
        "cast)",
        "RMSNorm(convention='gemma')",
        computes_as((("diffusers.models.transformers.transformer_qwenimage21", "QwenImage21ZeroCenterRMSNorm"),),
                    ("weight", "eps")),
        _rms("gemma", "eps"),
        _RMS,
    ),
    C.Converter(
        "transformers DeepseekV4UnweightedRMSNorm, Glm5NextTextUnweightedRMSNorm and their copies (rsqrt rounded "
        "to x's dtype, then `x * rstd`)",
        "RMSNorm(convention='round_rstd', use_scale=False)",
        computes_as(((f"{_T}.deepseek_v4.modeling_deepseek_v4", "DeepseekV4UnweightedRMSNorm"),
                     (f"{_T}.glm5_next.modeling_glm5_next", "Glm5NextTextUnweightedRMSNorm")),
                    ("variance_epsilon",)),
        _rms("round_rstd", "variance_epsilon"),
        _RMS,
    ),
    C.Converter(
        "transformers MuseSparkTextInputScaledRMSNorm and its copies (x scaled by `1 + weight` and cast to x's "
        "dtype before the statistics)",
        "RMSNorm(convention='input_scaled')",
        computes_as(((f"{_T}.muse_spark.modeling_muse_spark", "MuseSparkTextInputScaledRMSNorm"),), ("weight", "eps")),
        _rms("input_scaled", "eps"),
        _RMS,
    ),
)


# --------------------------------------------------------------------------- refusals

#: Classes jln recognises but cannot reproduce, by computation: (references, what differs from
#: the nearest jln family). :func:`explain` puts the reason into from_torch's refusal.
NEAR_MISSES: tuple[tuple[tuple[tuple[str, str], ...], str], ...] = (
    (((f"{_T}.dory.modeling_dory", "DoryL2Norm"),),
     "it divides by sqrt(sum(x^2) + eps), an L2 norm with eps on the sum; jln's RMSNorm takes the mean "
     "(RMSNorm(eps=eps/D) / sqrt(D) is the same in exact arithmetic, one rounding apart in float32), and "
     "jln.lp_normalize floors the norm, max(||x||, eps), instead of adding eps under the root"),
    (((f"{_T}.pocket_tts.modeling_pocket_tts", "PocketTTSFlowLayerNorm"),),
     "it takes mean and var(unbiased=False) in the input dtype, then `(x - mean) * rsqrt(var + eps)` in that "
     "dtype; torch's vectorized bfloat16/float16 rsqrt is not correctly rounded (its result depends on the "
     "element's position in the vector, ~1 in 8 differ), so no rounding rule reproduces it. Its float32 "
     "numbers are LayerNorm(convention='torch')'s; jln's nearest bfloat16 flow is convention='eager' "
     "(sqrt and a division)"),
    (((f"{_T}.esm.modeling_esmfold", "EsmFoldLayerNorm"),),
     "for bfloat16 input it first casts its weight and bias to bfloat16, so its numbers depend on the "
     "input's dtype, which a converted module does not know"),
    ((("diffusers.models.autoencoders.autoencoder_kandinsky6_sr", "Kandinsky6VAERMSNorm"),
      ("diffusers.models.latent_upscaler.latent_upscaler_kandinsky6_sr", "Kandinsky6SRLatentUpscalerRMSNorm")),
     "it is F.normalize over the channels (x / max(||x||, 1e-12)) rounded to x's dtype, then "
     "`* sqrt(C) * gamma` in that dtype; jln's RMSNorm divides by the root mean square with eps inside"),
    (((f"{_T}.mobilebert.modeling_mobilebert", "NoNorm"),),
     "it normalizes nothing (`x * weight + bias`, an elementwise affine); the nearest jln family, "
     "LayerNorm, subtracts the mean and divides by the standard deviation first. Write `x * weight + bias` "
     "in JAX"),
    (((f"{_T}.phi4_multimodal.modeling_phi4_multimodal", "Phi4MultimodalAudioMeanVarianceNormLayer"),),
     "it applies a fixed mean and inverse standard deviation (buffers), `(x - global_mean) * global_invstd`, "
     "with no statistics of x; the nearest jln family, FrozenBatchNorm (BatchNorm in eval mode), takes a "
     "variance and eps, `rsqrt(var + eps)`, not an inverse standard deviation. Write it in JAX"),
    (((f"{_T}.zaya.modeling_zaya", "ZayaQKNorm"),),
     "it L2-normalizes both q and k to sqrt(head_dim) with a clamp and scales k per head: two inputs"),
    (((f"{_T}.axk2.modeling_axk2", "AXK2GatedRMSNorm"),),
     "it is an RMSNorm followed by a learned gate, `y * sigmoid(fc2(silu(fc1(y))))` in float32 cast to y's "
     "dtype: a sub-network, not a norm. Its `norm` child (LLaMA's code) converts to RMSNorm(convention='llama'); "
     "write the gate with two flax Dense layers"),
    (((f"{_T}.vibevoice.modeling_vibevoice", "VibeVoiceDiffusionHeadAdaLayerNorm"),),
     "it is a residual layer, not a norm: x + gate * ffn(rms_norm(x) * (1 + scale) + shift); the nearest "
     "jln family, AdaLNContinuous, returns only the modulated norm. Convert its `norm` (VibeVoiceRMSNorm) "
     "and build the residual and the MLP around it"),
    (((f"{_T}.voxtral_realtime.modeling_voxtral_realtime", "VoxtralRealtimeTextAdaRmsNorm"),),
     "it normalizes nothing: it is an MLP, linear2(gelu(linear1(x))), that produces a scale for the "
     "caller's RMSNorm; build it with flax Dense layers"),
    (((f"{_T}.gradium_phonon_tts.modeling_gradium_phonon_tts", "GradiumPhononTTSTimestepNorm"),),
     "it computes weight * x * rsqrt(mean(x^2) + eps) op by op in the input's dtype (no float32 "
     "statistics, the weight applied first): RMSNorm(convention='torch') gives its float32 numbers but "
     "not its bfloat16/float16 rounding"),
    (((f"{_T}.pocket_tts.modeling_pocket_tts", "PocketTTSTimestepNorm"),),
     "it divides x by sqrt(unbiased variance + eps) without centring, op by op in the input's dtype; "
     "jln's LayerNorm centres and takes the biased variance, its RMSNorm takes the mean square"),
    (((f"{_T}.patchtst.modeling_patchtst", "PatchTSTBatchNorm"),
      (f"{_T}.patchtsmixer.modeling_patchtsmixer", "PatchTSMixerBatchNorm")),
     "it runs torch's BatchNorm1d on the transposed, non-contiguous input, whose bfloat16 path differs from "
     "torch's on contiguous input: jln's BatchNorm(channel_axis=-1) matches the contiguous path bit for bit "
     "but this class on only ~45-52% of bfloat16 elements (float32 agrees). In float32 use "
     "jln.batch_norm(x, ..., channel_axis=-1)"),
)


def explain(m: Any) -> str | None:
    """What differs between ``m`` and the nearest jln family, for a class no converter takes:
    a known near miss by its code, else a hint by its name; None for anything else."""
    for refs, why in NEAR_MISSES:
        if computes_as(refs)(m):
            return f"jln recognises its computation but cannot reproduce it: {why}."
    name = type(m).__name__
    if any(k in name for k in ("RMSNorm", "LayerNorm", "L2Norm")):
        return (
            "Its forward matches none of the computations jln recognises (the classes listed below and "
            "their copies). The nearest families are jln.linen.LayerNorm (axis, zero_centered, use_scale, "
            "use_bias, param_axes, convention: torch, deberta, eager) and jln.linen.RMSNorm (convention: torch, llama, "
            "gemma, t5, diffusers, seed, eager, round_rstd, input_scaled; see jln.layer_norm's and jln.rms_norm's tables of "
            "where each rounds): if one computes the same dtype flow, build it and "
            "load the weights with its layout."
        )
    return None
