"""Converters of the conditioned (adaptive) norms that the model files of diffusers and
transformers define for themselves: Sana's, CogView4's, EasyAnimate's, Flux.3's, Mochi's,
PI0.5's, EsmFold2's... Each is recognised by its computation (the code of its ``forward``, so
copies under other names convert too) and becomes :class:`jln.linen.AdaLNContinuous`,
``AdaLNZeroJoint`` or one of :mod:`jln.families.adaptive.conditioned`'s modules. No formula lives here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jln.interop import _converters as C
from jln.interop._arrays import to_jax
from jln.interop._variants import computes_as

_D = "diffusers.models"
_T = "transformers.models"


def _act_name(m: Any, act: Any, fn: str) -> str | None:
    """The activation module ``act`` as :data:`jln._modules.COND_ACTIVATIONS` names it."""
    import torch

    if act is None:
        return None
    names = {torch.nn.SiLU: "silu", torch.nn.Mish: "mish", torch.nn.ReLU: "relu"}
    if type(act) in names:
        return names[type(act)]
    if type(act) is torch.nn.GELU and act.approximate == "none":
        return "gelu"
    raise C._unsupported(m, fn, f"its activation is {act!r}", "jln takes SiLU, Mish, ReLU or GELU (exact).")


def _ln(m: Any, norm: Any, fn: str, names: tuple[str, ...] = ("LayerNorm", "FP32LayerNorm"),
        ) -> tuple[int, float, bool, bool]:
    """``(d, eps, affine, bias)`` of a torch / FP32 LayerNorm (class name in ``names``) over one axis."""
    if type(norm).__name__ not in names or len(norm.normalized_shape) != 1:
        raise C._unsupported(m, fn, f"its norm is {type(norm).__name__}", "Only a 1-axis LayerNorm.")
    return (int(norm.normalized_shape[0]), float(norm.eps), norm.weight is not None,
            getattr(norm, "bias", None) is not None)


def _out(m: Any, lin: Any, k: int, d: int, fn: str) -> None:
    if lin.out_features != k * d:
        raise C._unsupported(m, fn, f"its linear gives {lin.out_features} features, expected {k}*{d}", "")


def _conv_ada_group(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``AdaGroupNorm``: ``linear(act(emb))`` -> scale, shift; ``group_norm(x)`` modulated."""
    lin = m.linear
    d = int(lin.out_features) // 2
    _out(m, lin, 2, d, fn)
    p: C.Params = {"linear": C._linear(lin, fn, "linear.")}
    opts = dict(num_groups=int(m.num_groups), eps=float(m.eps), activation=_act_name(m, m.act, fn),
                use_bias=lin.bias is not None, param_dtype=C._param_dtype(p))
    return C.Spec("AdaGroupNorm", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_kandinsky3(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """Kandinsky 3's ``Kandinsky3ConditionalGroupNorm``: ``context_mlp = (SiLU, Linear)``."""
    import torch

    norm, mlp = m.norm, m.context_mlp
    ok = (isinstance(norm, torch.nn.GroupNorm) and not norm.affine and len(mlp) == 2
          and isinstance(mlp[1], torch.nn.Linear))
    if not ok:
        raise C._unsupported(m, fn, "its norm is not a GroupNorm without affine or its context_mlp is not "
                             "(activation, Linear)", "Only the layers Kandinsky 3 builds.")
    d, lin = int(norm.num_channels), mlp[1]
    _out(m, lin, 2, d, fn)
    p: C.Params = {"context_mlp": C._linear(lin, fn, "context_mlp.1.")}
    opts = dict(num_groups=int(norm.num_groups), eps=float(norm.eps), activation=_act_name(m, mlp[0], fn),
                use_bias=lin.bias is not None, proj_name="context_mlp", param_dtype=C._param_dtype(p))
    return C.Spec("AdaGroupNorm", {"features": d}, (int(lin.in_features), d), opts), p


def _continuous(m: Any, fn: str, k: int, order: Any, project_in: str, activation: str | None,
                ) -> tuple[C.Spec, C.Params]:
    """A LayerNorm (own affine optional, its bias tied to the linear's) modulated by the ``k``
    chunks ``order`` of ``linear(activation(cond))`` -> AdaLNContinuous."""
    lin = m.linear
    d, eps, affine, bias = _ln(m, m.norm, fn)
    _out(m, lin, k, d, fn)
    use_bias = lin.bias is not None
    if affine and bias != use_bias:
        raise C._unsupported(m, fn, "its LayerNorm bias and its linear bias disagree", "Give both a bias or "
                             "neither (jln's AdaLNContinuous sets both from `use_bias`, as diffusers).")
    p: C.Params = {"linear": C._linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C._affine(m.norm, fn, "norm.")
    opts = dict(eps=eps, elementwise_affine=affine, use_bias=use_bias, norm_type="layer_norm", order=order,
                project_in=project_in, activation=activation, param_dtype=C._param_dtype(p))
    return C.Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_shift(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """Hunyuan-DiT's ``AdaLayerNormShift``: ``FP32LayerNorm(x) + linear(SiLU(f32(emb)))``."""
    return _continuous(m, fn, 1, ("shift",), "cond", "silu")


def _conv_final(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """Flux.3's ``Flux3AdaLayerNorm``, LongCat-AudioDiT's ``AudioDiTAdaLayerNormZeroFinal``:
    ``linear(SiLU(cond))`` in the condition's dtype -> scale, shift."""
    return _continuous(m, fn, 2, "continuous", "cond", "silu")


def _conv_scale_only(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """QwenImage-2.1's ``QwenImage21AdaLayerNormContinuous``: ``LN(x) * (1 + linear(SiLU(cond)))``."""
    return _continuous(m, fn, 1, ("scale",), "x", "silu")


def _conv_no_act(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """CogView4's / GLM-Image's final norm: diffusers' continuous norm without the SiLU."""
    spec, p = C._conv_ada_continuous(m, fn)
    return dataclasses.replace(spec, options={**spec.options, "activation": None}), p


def _conv_cogview4_zero(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """CogView4's / GLM-Image's adaLN-Zero: two LayerNorms without affine, ``linear(temb)`` (no
    activation) -> twelve chunks, the image's and the text's interleaved."""
    eps = C._plain_norm_eps(m, m.norm, fn)
    if C._plain_norm_eps(m, m.norm_context, fn) != eps or m.norm_context.normalized_shape != m.norm.normalized_shape:
        raise C._unsupported(m, fn, "norm and norm_context differ", "Give both the same size and eps.")
    d, lin = int(m.norm.normalized_shape[0]), m.linear
    _out(m, lin, 12, d, fn)
    p: C.Params = {"linear": C._linear(lin, fn, "linear.")}
    opts = dict(num_chunks=12, layout="cogview4", activation=None, eps=eps, elementwise_affine=False,
                use_bias=lin.bias is not None, param_dtype=C._param_dtype(p))
    return C.Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_easyanimate(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """EasyAnimate's ``EasyAnimateLayerNormZero``: CogVideoX's, its gates returned ``[B, d]``."""
    d, eps, affine, bias = _ln(m, m.norm, fn)
    if affine and not bias:
        raise C._unsupported(m, fn, "its LayerNorm has a weight but no bias", "Give it both (torch's default).")
    lin = m.linear
    _out(m, lin, 6, d, fn)
    p: C.Params = {"linear": C._linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C._affine(m.norm, fn, "norm.")
    opts = dict(layout="easyanimate", eps=eps, elementwise_affine=affine, use_bias=lin.bias is not None,
                param_dtype=C._param_dtype(p))
    return C.Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_sana(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``SanaModulatedNorm`` (Sana, Sana-Video): ``LN(x)`` modulated by ``table + temb``."""
    d, eps, affine, bias = _ln(m, m.norm, fn)
    p: C.Params = {"norm": C._affine(m.norm, fn, "norm.")} if affine else {}
    opts = dict(eps=eps, elementwise_affine=affine, use_bias=bias or not affine,
                param_dtype=C._param_dtype(p))
    return C.Spec("AdaLNTable", {"features": d}, (d,), opts), p


def _conv_mochi_modulated(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``MochiModulatedRMSNorm``: diffusers' RMSNorm without weight on float32 x, times
    ``scale``, one rounding."""
    norm = m.norm
    if getattr(norm, "weight", None) is not None or float(norm.eps) != float(m.eps):
        raise C._unsupported(m, fn, "its RMSNorm has a weight or an eps of its own", "Only the layer Mochi "
                             "builds (RMSNorm(0, eps, False)).")
    return C.Spec("ModulatedRMSNorm", {}, (), dict(eps=float(m.eps))), {}


def _conv_pi05(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """transformers ``PI05AdaptiveRMSNorm``: ``dense(t)`` -> scale, shift, gate; float32 RMSNorm."""
    lin = m.dense
    d = int(lin.out_features) // 3
    _out(m, lin, 3, d, fn)
    p: C.Params = {"dense": C._linear(lin, fn, "dense.")}
    opts = dict(eps=float(m.eps), use_bias=lin.bias is not None, param_dtype=C._param_dtype(p))
    return C.Spec("AdaRMSNorm", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_esmfold2(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """transformers ``EsmFold2AdaptiveLayerNorm``: a sigmoid gate and a shift from ``LN(cond)``."""
    cn, g, s = m.cond_norm, m.gate_proj, m.shift_proj
    # EsmFold2LayerNorm: torch's LayerNorm on float32 input, cast back (as FP32LayerNorm)
    _, eps, affine, bias = _ln(m, cn, fn, ("EsmFold2LayerNorm", "FP32LayerNorm"))
    if not affine or bias or eps != float(m.eps) or g.bias is None or s.bias is not None:
        raise C._unsupported(m, fn, "its cond_norm is not a LayerNorm with a weight, no bias and the layer's "
                             "eps, or gate_proj lacks a bias, or shift_proj has one",
                             "Only the layers EsmFold2 builds.")
    d = int(m.hidden_size)
    if (g.out_features, s.out_features) != (d, d) or s.in_features != g.in_features:
        raise C._unsupported(m, fn, "gate_proj and shift_proj do not map the condition to hidden_size", "")
    p: C.Params = {"cond_norm": {"scale": to_jax(cn.weight, "cond_norm.weight", fn)},
                   "gate_proj": C._linear(g, fn, "gate_proj."), "shift_proj": C._linear(s, fn, "shift_proj.")}
    opts = dict(eps=float(m.eps), param_dtype=C._param_dtype(p))
    return C.Spec("AdaLNSigmoidGate", {"features": d}, (int(g.in_features), d), opts), p


# --------------------------------------------------------------------------- layouts


def _sd_group(p: C.Params) -> dict[str, Any]:
    if "context_mlp" in p:  # Kandinsky 3: nn.Sequential(SiLU, Linear)
        return C._sd_linear(p["context_mlp"], "context_mlp.1.")
    return C._sd_linear(p["linear"], "linear.")


LAYOUTS: dict[str, C.Layout] = {
    name: C.Layout(name, f)
    for name, f in (
        ("AdaGroupNorm", _sd_group),
        ("AdaLNTable", C._sd_named),
        ("ModulatedRMSNorm", lambda p: {}),
        ("AdaRMSNorm", C._sd_named),
        ("AdaLNSigmoidGate", C._sd_named),
    )
}

# --------------------------------------------------------------------------- the table

_ADA = C.LAYOUTS["AdaLNContinuous"]
_JOINT = C.LAYOUTS["AdaLNZeroJoint"]
_COGVIEW4 = (f"{_D}.transformers.transformer_cogview4", f"{_D}.transformers.transformer_glm_image")

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "diffusers AdaGroupNorm and its copies",
        "AdaGroupNorm",
        computes_as(((f"{_D}.normalization", "AdaGroupNorm"),), ("linear", "num_groups", "eps", "act")),
        _conv_ada_group,
        LAYOUTS["AdaGroupNorm"],
    ),
    C.Converter(
        "diffusers Kandinsky3ConditionalGroupNorm and its copies",
        "AdaGroupNorm(activation='silu', proj_name='context_mlp')",
        computes_as(((f"{_D}.unets.unet_kandinsky3", "Kandinsky3ConditionalGroupNorm"),), ("norm", "context_mlp")),
        _conv_kandinsky3,
        LAYOUTS["AdaGroupNorm"],
    ),
    C.Converter(
        "diffusers AdaLayerNormShift (Hunyuan-DiT) and its copies",
        "AdaLNContinuous(order=('shift',), project_in='cond')",
        computes_as(((f"{_D}.transformers.hunyuan_transformer_2d", "AdaLayerNormShift"),), ("linear", "norm")),
        _conv_shift,
        _ADA,
    ),
    C.Converter(
        "diffusers SanaModulatedNorm (Sana, Sana-Video) and its copies",
        "AdaLNTable",
        computes_as(((f"{_D}.transformers.sana_transformer", "SanaModulatedNorm"),
                     (f"{_D}.transformers.transformer_sana_video", "SanaModulatedNorm")), ("norm",)),
        _conv_sana,
        LAYOUTS["AdaLNTable"],
    ),
    C.Converter(
        "diffusers CogView4AdaLayerNormContinuous / GlmImageAdaLayerNormContinuous and their copies",
        "AdaLNContinuous(activation=None)",
        computes_as(tuple((mod, f"{name}AdaLayerNormContinuous") for mod, name in
                          zip(_COGVIEW4, ("CogView4", "GlmImage"), strict=True)), ("linear", "norm")),
        _conv_no_act,
        _ADA,
    ),
    C.Converter(
        "diffusers CogView4AdaLayerNormZero / GlmImageAdaLayerNormZero and their copies",
        "AdaLNZeroJoint(num_chunks=12, layout='cogview4', activation=None)",
        computes_as(tuple((mod, f"{name}AdaLayerNormZero") for mod, name in
                          zip(_COGVIEW4, ("CogView4", "GlmImage"), strict=True)), ("linear", "norm", "norm_context")),
        _conv_cogview4_zero,
        _JOINT,
    ),
    C.Converter(
        "diffusers EasyAnimateLayerNormZero and its copies",
        "AdaLNZeroJoint(layout='easyanimate')",
        computes_as(((f"{_D}.transformers.transformer_easyanimate", "EasyAnimateLayerNormZero"),), ("linear", "norm")),
        _conv_easyanimate,
        _JOINT,
    ),
    C.Converter(
        "diffusers Flux3AdaLayerNorm, AudioDiTAdaLayerNormZeroFinal (LongCat-AudioDiT) and their copies",
        "AdaLNContinuous(elementwise_affine=False, project_in='cond')",
        computes_as(((f"{_D}.transformers.transformer_flux3", "Flux3AdaLayerNorm"),
                     (f"{_D}.transformers.transformer_longcat_audio_dit", "AudioDiTAdaLayerNormZeroFinal")),
                    ("linear", "norm")),
        _conv_final,
        _ADA,
    ),
    C.Converter(
        "diffusers QwenImage21AdaLayerNormContinuous and its copies (called without target_token_mask)",
        "AdaLNContinuous(order=('scale',))",
        computes_as(((f"{_D}.transformers.transformer_qwenimage21", "QwenImage21AdaLayerNormContinuous"),),
                    ("linear", "norm")),
        _conv_scale_only,
        _ADA,
    ),
    C.Converter(
        "diffusers MochiModulatedRMSNorm and its copies",
        "ModulatedRMSNorm",
        computes_as(((f"{_D}.transformers.transformer_mochi", "MochiModulatedRMSNorm"),), ("eps", "norm")),
        _conv_mochi_modulated,
        LAYOUTS["ModulatedRMSNorm"],
    ),
    C.Converter(
        "transformers PI05AdaptiveRMSNorm and its copies",
        "AdaRMSNorm",
        computes_as(((f"{_T}.pi05.modeling_pi05", "PI05AdaptiveRMSNorm"),), ("dense", "eps")),
        _conv_pi05,
        LAYOUTS["AdaRMSNorm"],
    ),
    C.Converter(
        "transformers EsmFold2AdaptiveLayerNorm and its copies",
        "AdaLNSigmoidGate",
        computes_as(((f"{_T}.esmfold2.modeling_esmfold2", "EsmFold2AdaptiveLayerNorm"),),
                    ("cond_norm", "gate_proj", "shift_proj", "eps", "hidden_size")),
        _conv_esmfold2,
        LAYOUTS["AdaLNSigmoidGate"],
    ),
)
