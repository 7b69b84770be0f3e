"""torch -> jln converters of the LayerNorm family: ``torch.nn.LayerNorm`` and the LayerNorm
variants of transformers' and diffusers' model files (channels-first, zero-centred, float32,
per-head, wrapped), each an option of :class:`jln.linen.LayerNorm`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from jln import _convert as C
from jln.families.batch_norm.convert import strided_batch_norm


def _conv_layer_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    p = C.affine(m, fn)
    opts = dict(
        eps=float(m.eps),
        axis=C.axis_of(shape),
        use_scale="scale" in p,
        use_bias="bias" in p,
        param_dtype=C.param_dtype(p),
    )
    return C.Spec("LayerNorm", {}, (C.features_of(shape),), opts), p


def _conv_esmfold(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """transformers ``EsmFoldLayerNorm``: ``F.layer_norm`` with its weight and bias cast to
    bfloat16 for bfloat16 input, used as they are otherwise: ``LayerNorm`` with
    ``round_params_for_bf16`` (a no-op for bfloat16 parameters)."""
    p = C.affine(m, fn)
    opts = dict(eps=float(m.eps), axis=-1, use_scale=True, use_bias=True, param_dtype=C.param_dtype(p),
                round_params_for_bf16=True)
    return C.Spec("LayerNorm", {}, (int(m.c_in[0]),), opts), p


def _ln_channels(first: Callable[[Any], bool]) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """torch LayerNorm parameters; ``axis=1`` when ``first(m)`` (the channels of NC... input)."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        spec, p = _conv_layer_norm(m, fn)
        if not first(m):
            return spec, p
        shape = tuple(int(s) for s in m.normalized_shape)
        C.one_axis(m, shape, fn, "a channels-first LayerNorm")
        return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, "axis": 1}), p

    return convert


def _conv_zero_centered(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    spec, p = _conv_layer_norm(m, fn)
    if "scale" not in p:
        raise C.unsupported(
            m, fn, "it has no weight, but it multiplies by `weight + 1` (torch fails on it too)",
            "Build it with elementwise_affine=True.",
        )
    return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, "zero_centered": True}), p


def _conv_olmo(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    # OLMo's forward fixes eps=1e-5 and has no parameters
    opts = dict(eps=1e-5, axis=C.axis_of(shape), use_scale=False, use_bias=False)
    return C.Spec("LayerNorm", {}, (C.features_of(shape),), opts), {}


def _conv_cohere(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    w = m.weight
    p = {"scale": C.to_jax(w, "weight", fn)}
    opts = dict(eps=float(m.variance_epsilon), axis=-1, use_scale=True, use_bias=False,
                param_dtype=C.param_dtype(p))
    if w.ndim > 1:  # a per-head weight (Cohere's QK-norm): statistics over the last axis only
        opts["param_axes"] = tuple(range(-w.ndim, 0))
        return C.Spec("LayerNorm", {}, (tuple(int(s) for s in w.shape),), opts), p
    return C.Spec("LayerNorm", {}, (int(w.shape[0]),), opts), p


def _conv_deberta(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    w = m.weight
    if w.ndim != 1:
        raise C.unsupported(m, fn, f"its weight has shape {tuple(w.shape)}", "Use a 1-D weight.")
    p = C.affine(m, fn)
    opts = dict(eps=float(m.variance_epsilon), axis=-1, use_scale=True, use_bias="bias" in p,
                param_dtype=C.param_dtype(p), convention="deberta")
    return C.Spec("LayerNorm", {}, (int(w.shape[0]),), opts), p


def _conv_vitdet(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    C.one_axis(m, shape, fn, "VitDet's LayerNorm (over axis 1)")
    p = C.affine(m, fn)
    # mean over dim 1 and weight[:, None, None]: the channels of NCHW input, op by op in its dtype
    opts = dict(eps=float(m.eps), axis=1, use_scale=True, use_bias=True, param_dtype=C.param_dtype(p),
                convention="eager")
    return C.Spec("LayerNorm", {}, (shape[0],), opts), p


def _conv_moonshine(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    ln = m.ln
    if type(ln) is not C.torch_class("LayerNorm") or ln.weight is not None or ln.bias is not None:
        raise C.unsupported(
            m, fn, "its inner `ln` is not a torch nn.LayerNorm without affine parameters",
            "Build it as the model file does (nn.LayerNorm(dim, elementwise_affine=False)).",
        )
    shape = tuple(int(s) for s in ln.normalized_shape)
    C.one_axis(m, shape, fn, "MoonshineStreaming's LayerNorm")
    offset = float(m.unit_offset)
    if offset not in (0.0, 1.0):
        raise C.unsupported(
            m, fn, f"unit_offset={offset} (jln's LayerNorm multiplies by `scale` or by `1 + scale`)",
            "Use unit_offset=True or False.",
        )
    p = {"scale": C.to_jax(m.gamma, "gamma", fn)}
    opts = dict(eps=float(ln.eps), axis=-1, use_scale=True, use_bias=False, param_dtype=C.param_dtype(p),
                convention="deberta", zero_centered=offset == 1.0)
    return C.Spec("LayerNorm", {}, (shape[0],), opts), p


_NORM_ATTRS = ("normalized_shape", "eps", "weight", "bias")


def _conv_vidtok(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    norm = C.inner(m, "norm", "LayerNorm", fn)
    spec, p = _conv_layer_norm(norm, fn)
    if len(norm.normalized_shape) != 1:
        raise C.unsupported(m, fn, f"normalized_shape={tuple(norm.normalized_shape)} has several axes, but "
                             "it normalizes the channels (axis 1) only", "Use a 1-D normalized_shape.")
    return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, "axis": 1, **C.torch_names("norm.", p)}), p


def _conv_patchtsmixer_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    if "batch" in m.norm_mlp.lower():
        # its BatchNorm path: PatchTSMixerBatchNorm on [B * channels, patches, d_model], the same
        # statistics as over every axis but the last of the 4-D input
        inner = getattr(m.norm, "batchnorm", None)
        if inner is None or not C.computes_as(_PATCHTSMIXER_BN, ("batchnorm",))(m.norm):
            raise C.unsupported(m, fn, f"norm_mlp={m.norm_mlp!r} but its `norm` is a {type(m.norm).__name__}, "
                                "not a PatchTSMixerBatchNorm", "Build it as the model file does.")
        return strided_batch_norm(inner, fn, "norm.batchnorm.")
    norm = C.inner(m, "norm", "LayerNorm", fn)
    spec, p = _conv_layer_norm(norm, fn)
    return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, **C.torch_names("norm.", p)}), p


_PATCHTSMIXER_BN = ((f"{C.T}.patchtsmixer.modeling_patchtsmixer", "PatchTSMixerBatchNorm"),)


def _conv_stablelm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    norms = list(m.norms)
    layer_norm = C.torch_class("LayerNorm")
    if not norms or any(type(n) is not layer_norm for n in norms):
        raise C.unsupported(
            m, fn, "its `norms` are not all torch nn.LayerNorm (one per head)",
            "Build it as the model file does (nn.ModuleList of nn.LayerNorm(dim)).",
        )
    shapes = {tuple(int(s) for s in n.normalized_shape) for n in norms}
    eps = {float(n.eps) for n in norms}
    layout = {(n.weight is None, n.bias is None, None if n.weight is None else n.weight.dtype) for n in norms}
    if len(shapes) != 1 or len(eps) != 1 or len(layout) != 1 or len(next(iter(shapes))) != 1:
        raise C.unsupported(
            m, fn,
            f"its per-head LayerNorms differ in normalized_shape ({sorted(shapes)}), eps ({sorted(eps)}) "
            f"or which parameters they hold, or normalize more than one axis; jln's LayerNorm with "
            f"param_axes has one eps and one parameter layout for every head",
            "Use the same nn.LayerNorm(dim, eps, bias) for every head.",
        )
    dim = next(iter(shapes))[0]
    p: C.Params = {}
    names = []
    if norms[0].weight is not None:
        p["scale"] = jnp.stack([C.to_jax(n.weight, f"norms.{i}.weight", fn) for i, n in enumerate(norms)])
        names.append(("weight", "norms.{}.weight"))
    if norms[0].bias is not None:
        p["bias"] = jnp.stack([C.to_jax(n.bias, f"norms.{i}.bias", fn) for i, n in enumerate(norms)])
        names.append(("bias", "norms.{}.bias"))
    # torch.split(x, 1, dim=1): the heads are axis 1 of [batch, heads, seq, head_dim]
    opts: dict[str, Any] = dict(eps=eps.pop(), axis=-1, param_axes=(1, -1), use_scale="scale" in p,
                                use_bias="bias" in p, param_dtype=C.param_dtype(p))
    if names:
        opts["torch_names"] = tuple(names)
    return C.Spec("LayerNorm", {}, ((len(norms), dim),), opts), p


def _conv_chameleon(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    w, b = getattr(m, "weight", None), getattr(m, "bias", None)
    if w is None or b is None:
        raise C.unsupported(
            m, fn, "it has no weight or no bias, but its forward computes `x * self.weight + self.bias` "
            "(torch fails on it too)",
            "Build it with elementwise_affine=True and bias=True.",
        )
    if w.ndim < 2 or tuple(w.shape) != tuple(b.shape):
        raise C.unsupported(
            m, fn, f"its weight has shape {tuple(w.shape)} and its bias {tuple(b.shape)}; the per-head "
            f"layout is (heads, head_dim) for both",
            "Build it with hidden_size=(heads, head_dim).",
        )
    p = C.affine(m, fn)
    # the forward fixes eps=1e-5 and takes the statistics over the last axis only
    opts = dict(eps=1e-5, axis=-1, param_axes=tuple(range(-w.ndim, 0)), use_scale=True, use_bias=True,
                param_dtype=C.param_dtype(p), convention="deberta")
    return C.Spec("LayerNorm", {}, (tuple(int(s) for s in w.shape),), opts), p


LAYOUTS: dict[str, C.Layout] = {
    "LayerNorm": C.Layout("LayerNorm", C.sd_affine),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "torch.nn.LayerNorm",
        "LayerNorm",
        C.torch_nn("LayerNorm"),
        _conv_layer_norm,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers ConvNextLayerNorm and its copies (SAM 1/2/3, EdgeTAM, LW-DETR, RF-DETR, GOT-OCR2...: "
        "data_format='channels_last' / 'channels_first')",
        "LayerNorm (axis=1 for channels_first)",
        C.computes_as(((f"{C.T}.convnext.modeling_convnext", "ConvNextLayerNorm"),), (*_NORM_ATTRS, "data_format"),
                    base="LayerNorm"),
        _ln_channels(lambda m: m.data_format == "channels_first"),
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers EomtLayerNorm2d / SqueezeBertLayerNorm, diffusers SDCascadeLayerNorm, and their copies "
        "(LayerNorm over the channels of NC... input)",
        "LayerNorm(axis=1)",
        C.computes_as(((f"{C.T}.eomt.modeling_eomt", "EomtLayerNorm2d"),
                     (f"{C.T}.squeezebert.modeling_squeezebert", "SqueezeBertLayerNorm"),
                     ("diffusers.models.unets.unet_stable_cascade", "SDCascadeLayerNorm")),
                    _NORM_ATTRS, base="LayerNorm"),
        _ln_channels(lambda m: True),
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers NemotronLayerNorm1P / VideoPrismLayerNorm (F.layer_norm with weight + 1) and their copies",
        "LayerNorm(zero_centered=True)",
        C.computes_as(((f"{C.T}.nemotron.modeling_nemotron", "NemotronLayerNorm1P"),
                     (f"{C.T}.videoprism.modeling_videoprism", "VideoPrismLayerNorm")),
                    _NORM_ATTRS, base="LayerNorm"),
        _conv_zero_centered,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "diffusers FP32LayerNorm, transformers EsmcLayerNorm / EsmFold2LayerNorm (torch LayerNorm in float32, "
        "cast back) and their copies",
        "LayerNorm",
        C.computes_as((("diffusers.models.normalization", "FP32LayerNorm"),
                     (f"{C.T}.esmc.modeling_esmc", "EsmcLayerNorm"),
                     (f"{C.T}.esmfold2.modeling_esmfold2", "EsmFold2LayerNorm")),
                    _NORM_ATTRS, base="LayerNorm"),
        _conv_layer_norm,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers EsmFoldLayerNorm (parameters cast to bfloat16 for bfloat16 input) and its copies",
        "LayerNorm(round_params_for_bf16=True)",
        C.computes_as(((f"{C.T}.esm.modeling_esmfold", "EsmFoldLayerNorm"),), ("c_in", "eps", "weight", "bias")),
        _conv_esmfold,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers OlmoLayerNorm (no parameters, eps 1e-5, float32) and its copies",
        "LayerNorm(use_scale=False, use_bias=False)",
        C.computes_as(((f"{C.T}.olmo.modeling_olmo", "OlmoLayerNorm"),), ("normalized_shape",)),
        _conv_olmo,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers CohereLayerNorm (float32 statistics, weight without bias; a (heads, head_dim) weight: "
        "param_axes) and its copies",
        "LayerNorm(use_bias=False)",
        C.computes_as(((f"{C.T}.cohere.modeling_cohere", "CohereLayerNorm"),), ("weight", "variance_epsilon")),
        _conv_cohere,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers DebertaLayerNorm and its copies (float32 statistics, the row cast to x's dtype, then "
        "`weight * h + bias`)",
        "LayerNorm(convention='deberta')",
        C.computes_as(((f"{C.T}.deberta.modeling_deberta", "DebertaLayerNorm"),), ("weight", "bias", "variance_epsilon")),
        _conv_deberta,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers VitDetLayerNorm and its copies (LayerNorm over the channels of NCHW input, op by op in "
        "x's dtype)",
        "LayerNorm(axis=1, convention='eager')",
        C.computes_as(((f"{C.T}.vitdet.modeling_vitdet", "VitDetLayerNorm"),), _NORM_ATTRS),
        _conv_vitdet,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers MoonshineStreamingLayerNorm and its copies (nn.LayerNorm without affine, then "
        "`* (gamma + unit_offset)` in x's dtype)",
        "LayerNorm(convention='deberta', zero_centered=True)",
        C.computes_as(((f"{C.T}.moonshine_streaming.modeling_moonshine_streaming", "MoonshineStreamingLayerNorm"),),
                    ("ln", "gamma", "unit_offset")),
        _conv_moonshine,
        LAYOUTS["LayerNorm"],
        notes="to_torch_state_dict writes the parameter as `weight`; this class names it `gamma`",
    ),
    C.Converter(
        "diffusers VidTokLayerNorm and its copies (LayerNorm over the channels of NC... input)",
        "LayerNorm(axis=1, torch_names norm.*)",
        C.of_package("diffusers", C.computes_as(((f"{C.D}.autoencoders.autoencoder_vidtok", "VidTokLayerNorm"),), ("norm",))),
        _conv_vidtok,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers PatchTSMixerNormLayer and its copies (norm_mlp 'LayerNorm', or its BatchNorm path)",
        "LayerNorm(torch_names norm.*), or BatchNorm(channel_axis=-1, convention='strided', torch_names "
        "norm.batchnorm.*)",
        C.of_package("transformers", C.computes_as(((f"{C.T}.patchtsmixer.modeling_patchtsmixer", "PatchTSMixerNormLayer"),),
                                        ("norm_mlp", "norm"))),
        _conv_patchtsmixer_norm,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers StableLmLayerNormPerHead and its copies (one nn.LayerNorm per head of [batch, heads, "
        "seq, head_dim])",
        "LayerNorm(param_axes=(1, -1), torch_names norms.<i>.*)",
        C.computes_as(((f"{C.T}.stablelm.modeling_stablelm", "StableLmLayerNormPerHead"),), ("norms",)),
        _conv_stablelm,
        LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers ChameleonLayerNorm and its copies (F.layer_norm over the last axis rounded to x's dtype, "
        "then `x * weight + bias` with (heads, head_dim) parameters)",
        "LayerNorm(convention='deberta', param_axes=(-2, -1), eps=1e-5)",
        C.computes_as(((f"{C.T}.chameleon.modeling_chameleon", "ChameleonLayerNorm"),), ("weight", "bias")),
        _conv_chameleon,
        LAYOUTS["LayerNorm"],
    ),
)

#: Classes recognised by computation but not reproduced (:data:`jln._convert.NearMisses`)
NEAR_MISSES: C.NearMisses = (
    (((f"{C.T}.pocket_tts.modeling_pocket_tts", "PocketTTSFlowLayerNorm"),),
     "it takes mean and var(unbiased=False) in the input dtype, then `(x - mean) * rsqrt(var + eps)` in that "
     "dtype; torch's vectorized bfloat16/float16 rsqrt is not correctly rounded (its result depends on the "
     "element's position in the vector, ~1 in 8 differ), so no rounding rule reproduces it. Its float32 "
     "numbers are LayerNorm(convention='torch')'s; jln's nearest bfloat16 flow is convention='eager' "
     "(sqrt and a division)"),
)
