"""torch -> jln converters of the adaptive (conditioned) norms of diffusers and transformers:
adaLN-Zero, the continuous final norms, PixArt's adaLN-single, and the conditioned norms the
model files define for themselves (Sana's, CogView4's, EasyAnimate's, Mochi's, PI0.5's,
EsmFold2's...). Each is recognised by its computation and becomes one of the adaptive modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from jln import _convert as C


def _sd_adaptive(p: C.Params) -> dict[str, Any]:
    return {**C.sd_linear(p["linear"], "linear."), **C.sd_affine(p.get("norm", {}), "norm.")}


def _plain_norm_eps(m: Any, norm: Any, fn: str) -> float:
    """eps of a diffusers LayerNorm / FP32LayerNorm without affine (an adaLN-Zero's norm)."""
    ok = (
        type(norm).__name__ in ("LayerNorm", "FP32LayerNorm")
        and len(norm.normalized_shape) == 1
        and getattr(norm, "weight", None) is None
        and getattr(norm, "bias", None) is None
    )
    if not ok:
        raise C.unsupported(
            m,
            fn,
            f"its norm is {type(norm).__name__}, expected a LayerNorm without affine",
            "Only norm_type='layer_norm' / 'fp32_layer_norm' are supported.",
        )
    return float(norm.eps)


def _ada_zero(k: int) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        if getattr(m, "emb", None) is not None:
            raise C.unsupported(
                m,
                fn,
                "it embeds timesteps and labels itself (num_embeddings was set)",
                "Convert the embedding separately, build AdaLayerNormZero(embedding_dim) and call "
                "the jln module with the embedded condition: (x, emb).",
            )
        eps = _plain_norm_eps(m, m.norm, fn)
        d = int(m.norm.normalized_shape[0])
        lin = m.linear
        if lin.out_features != k * d:
            raise C.unsupported(m, fn, f"linear.out_features={lin.out_features} != {k}*{d}", "")
        p = {"linear": C.linear(lin, fn, "linear.")}
        opts = dict(
            num_chunks=k, eps=eps, use_bias=lin.bias is not None, param_dtype=C.param_dtype(p)
        )
        return C.Spec("AdaLNZero", {"features": d}, (int(lin.in_features), d), opts), p

    return convert


def _conv_ada_continuous(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    norm, lin = m.norm, m.linear
    name = type(norm).__name__
    if name == "LayerNorm" and len(norm.normalized_shape) == 1:
        norm_type, d, eps = "layer_norm", int(norm.normalized_shape[0]), float(norm.eps)
    elif name == "RMSNorm" and hasattr(norm, "dim") and len(norm.dim) == 1:
        norm_type, d, eps = "rms_norm", int(norm.dim[0]), float(norm.eps)
    else:
        raise C.unsupported(
            m, fn, f"its norm is {name}", "Only norm_type 'layer_norm' and 'rms_norm'."
        )
    affine = getattr(norm, "weight", None) is not None
    use_bias = lin.bias is not None
    if (
        norm_type == "layer_norm"
        and affine
        and (getattr(norm, "bias", None) is not None) != use_bias
    ):
        raise C.unsupported(
            m,
            fn,
            "its LayerNorm bias and its linear bias disagree (diffusers sets both from `bias`)",
            "Give both a bias or neither.",
        )
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C.affine(norm, fn, "norm.")
    opts = dict(
        eps=eps,
        elementwise_affine=affine,
        use_bias=use_bias,
        norm_type=norm_type,
        param_dtype=C.param_dtype(p),
    )
    return C.Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


def _rms_dim(m: Any, norm: Any, fn: str) -> int | None:
    """The single normalized size of a diffusers RMSNorm (``None`` for Mochi's ``RMSNorm(0)``,
    whose ``dim`` is unused without a weight)."""
    dim = tuple(int(s) for s in norm.dim)
    if len(dim) != 1:
        raise C.unsupported(m, fn, f"its RMSNorm has dim={dim}; diffusers reduces over the last axis only",
                           "Use a 1-D dim.")
    return dim[0] or None


def _norm_kind(m: Any, norm: Any, fn: str) -> tuple[str, float, bool]:
    """``(norm_type, eps, elementwise_affine)`` of a diffusers adaptive norm's inner norm: a
    ``LayerNorm`` over one axis or diffusers' ``RMSNorm`` (without bias)."""
    name = type(norm).__name__
    affine = getattr(norm, "weight", None) is not None
    if name == "LayerNorm" and len(norm.normalized_shape) == 1:
        return "layer_norm", float(norm.eps), affine
    if name == "RMSNorm" and hasattr(norm, "dim") and getattr(norm, "bias", None) is None:
        _rms_dim(m, norm, fn)
        return "rms_norm", float(norm.eps), affine
    raise C.unsupported(m, fn, f"its norm is {name}", "Only a 1-axis LayerNorm or diffusers' RMSNorm "
                       "without bias is supported.")


def _check_ln_bias(m: Any, norm: Any, norm_type: str, affine: bool, want: bool, fn: str) -> None:
    if norm_type == "layer_norm" and affine and (getattr(norm, "bias", None) is not None) != want:
        raise C.unsupported(m, fn, "its LayerNorm bias and its linear bias disagree (diffusers sets both "
                           "from `bias`)", "Give both a bias or neither.")


def _conv_omni_final(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """Qwen2.5-Omni's ``AdaLayerNormZero_Final``: SD3's continuous norm without affine, the
    projection in the condition's dtype."""
    eps = _plain_norm_eps(m, m.norm, fn)
    d, lin = int(m.norm.normalized_shape[0]), m.linear
    if lin.out_features != 2 * d:
        raise C.unsupported(m, fn, f"linear.out_features={lin.out_features} != 2*{d}", "")
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    opts = dict(eps=eps, elementwise_affine=False, use_bias=lin.bias is not None, norm_type="layer_norm",
                order="continuous", project_in="cond", param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_ada_layer_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``AdaLayerNorm``: ``norm(x) * (1 + scale) + shift``; chunk_dim=0 splits a 1-D
    condition as (scale, shift), chunk_dim=1 a ``[B, 2D]`` one as (shift, scale)."""
    if m.emb is not None:
        raise C.unsupported(
            m, fn, "it embeds timesteps itself (num_embeddings was set)",
            "Build AdaLayerNorm without num_embeddings (or look the timestep up in the embedding table "
            "yourself: emb = table[timestep]) and call the jln module with (x, emb).",
        )
    norm, lin = m.norm, m.linear
    if type(norm).__name__ != "LayerNorm" or len(norm.normalized_shape) != 1:
        raise C.unsupported(m, fn, f"its norm is {type(norm).__name__}", "Only a 1-axis LayerNorm.")
    d = int(norm.normalized_shape[0])
    if lin.out_features != 2 * d:
        raise C.unsupported(m, fn, f"linear.out_features={lin.out_features} != 2*{d} (an odd output_dim)",
                           "Use an even output_dim.")
    affine = norm.weight is not None
    _check_ln_bias(m, norm, "layer_norm", affine, lin.bias is not None, fn)
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C.affine(norm, fn, "norm.")
    opts = dict(eps=float(norm.eps), elementwise_affine=affine, use_bias=lin.bias is not None,
                norm_type="layer_norm", order="dit_final" if m.chunk_dim == 1 else "continuous",
                project_in="cond", param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_rms_zero(norm_type: str) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """diffusers ``LuminaRMSNormZero`` (``rms_norm``, the RMSNorm's weight) and
    ``MochiRMSNormZero`` (``fp32_rms_norm``, no weight): AdaLNZero with 4 chunks."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        norm, lin = m.norm, m.linear
        kind, eps, affine = _norm_kind(m, norm, fn)
        if kind != "rms_norm":
            raise C.unsupported(m, fn, f"its norm is {type(norm).__name__}", "Expected diffusers' RMSNorm.")
        if norm_type == "fp32_rms_norm" and affine:
            raise C.unsupported(m, fn, "its RMSNorm has a weight", "Mochi's RMSNorm(0, eps, False) has none.")
        if lin.out_features % 4:
            raise C.unsupported(m, fn, f"linear.out_features={lin.out_features} is not 4 chunks", "")
        d = int(lin.out_features) // 4
        dim = _rms_dim(m, norm, fn)
        if affine and dim != d:
            raise C.unsupported(m, fn, f"its RMSNorm has dim {dim} but linear gives 4*{d}", "")
        p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
        if affine:
            p["norm"] = C.affine(norm, fn, "norm.")
        opts = dict(num_chunks=4, eps=eps, use_bias=lin.bias is not None, norm_type=norm_type,
                    elementwise_affine=affine, param_dtype=C.param_dtype(p))
        return C.Spec("AdaLNZero", {"features": d}, (int(lin.in_features), d), opts), p

    return convert


def _conv_cogview3plus(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``CogView3PlusAdaLayerNormZeroTextImage``: two LayerNorms without affine of one
    eps compute as one."""
    eps = _plain_norm_eps(m, m.norm_x, fn)
    if _plain_norm_eps(m, m.norm_c, fn) != eps or m.norm_c.normalized_shape != m.norm_x.normalized_shape:
        raise C.unsupported(m, fn, "norm_x and norm_c differ", "Give both the same size and eps.")
    d, lin = int(m.norm_x.normalized_shape[0]), m.linear
    if lin.out_features != 12 * d:
        raise C.unsupported(m, fn, f"linear.out_features={lin.out_features} != 12*{d}", "")
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    opts = dict(num_chunks=12, eps=eps, elementwise_affine=False, use_bias=lin.bias is not None,
                param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_joint(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    norm, lin = m.norm, m.linear
    if type(norm).__name__ != "LayerNorm" or len(norm.normalized_shape) != 1:
        raise C.unsupported(m, fn, f"its norm is {type(norm).__name__}", "Only a 1-axis LayerNorm.")
    d = int(norm.normalized_shape[0])
    affine = norm.weight is not None
    if affine and norm.bias is None:
        raise C.unsupported(m, fn, "its LayerNorm has a weight but no bias", "Give it both (torch's default).")
    if lin.out_features != 6 * d:
        raise C.unsupported(m, fn, f"linear.out_features={lin.out_features} != 6*{d}", "")
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C.affine(norm, fn, "norm.")
    opts = dict(eps=float(norm.eps), elementwise_affine=affine, use_bias=lin.bias is not None,
                param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_scale(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``LuminaLayerNormContinuous`` / ``MochiLayerNormContinuous`` -> AdaLNScale."""
    lin1, lin2 = m.linear_1, getattr(m, "linear_2", None)
    d = int(lin1.out_features)
    use_bias = lin1.bias is not None
    if type(m.norm).__name__ == "MochiModulatedRMSNorm":
        norm_type, eps, affine, norm = "fp32_rms_norm", float(m.norm.eps), False, None
    else:
        norm = m.norm
        norm_type, eps, affine = _norm_kind(m, norm, fn)
        _check_ln_bias(m, norm, norm_type, affine, use_bias, fn)
        size = int(norm.normalized_shape[0]) if norm_type == "layer_norm" else _rms_dim(m, norm, fn)
        if affine and size != d:
            raise C.unsupported(m, fn, f"its norm has {size} features but linear_1 gives {d}", "")
    if lin2 is not None and (lin2.bias is not None) != use_bias:
        raise C.unsupported(m, fn, "linear_1 and linear_2 disagree on the bias", "Give both a bias or neither.")
    p: C.Params = {"linear_1": C.linear(lin1, fn, "linear_1.")}
    if affine:
        p["norm"] = C.affine(norm, fn, "norm.")
    if lin2 is not None:
        p["linear_2"] = C.linear(lin2, fn, "linear_2.")
    opts = dict(eps=eps, elementwise_affine=affine, use_bias=use_bias, norm_type=norm_type,
                out_features=None if lin2 is None else int(lin2.out_features), broadcast="torch",
                param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNScale", {"features": d}, (int(lin1.in_features), d), opts), p


def _conv_single(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``AdaLayerNormSingle`` (PixArt): its timestep embedding as built by diffusers
    (256 sinusoid channels, cos first, SiLU MLPs with biases) and its ``linear``."""
    e = m.emb
    tp = e.time_proj
    mlps = ["timestep_embedder"] + (["resolution_embedder", "aspect_ratio_embedder"]
                                    if e.use_additional_conditions else [])
    projs = [tp] + ([e.additional_condition_proj] if e.use_additional_conditions else [])
    standard = all(
        (t.num_channels, t.flip_sin_to_cos, float(t.downscale_freq_shift), float(t.scale)) == (256, True, 0.0, 1.0)
        for t in projs
    ) and all(
        type(getattr(e, n).act).__name__ == "SiLU" and getattr(e, n).cond_proj is None
        and getattr(e, n).post_act is None and getattr(e, n).linear_1.bias is not None
        for n in mlps
    )
    if not standard or m.linear.bias is None:
        raise C.unsupported(m, fn, "its timestep embedding is not PixArt's (256 sinusoid channels, cos "
                           "first, SiLU MLPs with biases)", "Only the configuration diffusers builds.")
    d = int(m.linear.in_features)
    if m.linear.out_features % d:
        raise C.unsupported(m, fn, f"linear.out_features={m.linear.out_features} is not a multiple of {d}", "")
    emb = {n: {k: C.linear(getattr(getattr(e, n), k), fn, f"emb.{n}.{k}.") for k in ("linear_1", "linear_2")}
           for n in mlps}
    p: C.Params = {"emb": emb, "linear": C.linear(m.linear, fn, "linear.")}
    opts = dict(use_additional_conditions=bool(e.use_additional_conditions),
                num_chunks=int(m.linear.out_features) // d, param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNSingle", {"features": d}, (d,), opts), p


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
    raise C.unsupported(m, fn, f"its activation is {act!r}", "jln takes SiLU, Mish, ReLU or GELU (exact).")


def _ln(m: Any, norm: Any, fn: str, names: tuple[str, ...] = ("LayerNorm", "FP32LayerNorm"),
        ) -> tuple[int, float, bool, bool]:
    """``(d, eps, affine, bias)`` of a torch / FP32 LayerNorm (class name in ``names``) over one axis."""
    if type(norm).__name__ not in names or len(norm.normalized_shape) != 1:
        raise C.unsupported(m, fn, f"its norm is {type(norm).__name__}", "Only a 1-axis LayerNorm.")
    return (int(norm.normalized_shape[0]), float(norm.eps), norm.weight is not None,
            getattr(norm, "bias", None) is not None)


def _out(m: Any, lin: Any, k: int, d: int, fn: str) -> None:
    if lin.out_features != k * d:
        raise C.unsupported(m, fn, f"its linear gives {lin.out_features} features, expected {k}*{d}", "")


def _conv_ada_group(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``AdaGroupNorm``: ``linear(act(emb))`` -> scale, shift; ``group_norm(x)`` modulated."""
    lin = m.linear
    d = int(lin.out_features) // 2
    _out(m, lin, 2, d, fn)
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    opts = dict(num_groups=int(m.num_groups), eps=float(m.eps), activation=_act_name(m, m.act, fn),
                use_bias=lin.bias is not None, param_dtype=C.param_dtype(p))
    return C.Spec("AdaGroupNorm", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_kandinsky3(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """Kandinsky 3's ``Kandinsky3ConditionalGroupNorm``: ``context_mlp = (SiLU, Linear)``."""
    import torch

    norm, mlp = m.norm, m.context_mlp
    ok = (isinstance(norm, torch.nn.GroupNorm) and not norm.affine and len(mlp) == 2
          and isinstance(mlp[1], torch.nn.Linear))
    if not ok:
        raise C.unsupported(m, fn, "its norm is not a GroupNorm without affine or its context_mlp is not "
                             "(activation, Linear)", "Only the layers Kandinsky 3 builds.")
    d, lin = int(norm.num_channels), mlp[1]
    _out(m, lin, 2, d, fn)
    p: C.Params = {"context_mlp": C.linear(lin, fn, "context_mlp.1.")}
    opts = dict(num_groups=int(norm.num_groups), eps=float(norm.eps), activation=_act_name(m, mlp[0], fn),
                use_bias=lin.bias is not None, proj_name="context_mlp", param_dtype=C.param_dtype(p))
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
        raise C.unsupported(m, fn, "its LayerNorm bias and its linear bias disagree", "Give both a bias or "
                             "neither (jln's AdaLNContinuous sets both from `use_bias`, as diffusers).")
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C.affine(m.norm, fn, "norm.")
    opts = dict(eps=eps, elementwise_affine=affine, use_bias=use_bias, norm_type="layer_norm", order=order,
                project_in=project_in, activation=activation, param_dtype=C.param_dtype(p))
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
    spec, p = _conv_ada_continuous(m, fn)
    return dataclasses.replace(spec, options={**spec.options, "activation": None}), p


def _conv_cogview4_zero(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """CogView4's / GLM-Image's adaLN-Zero: two LayerNorms without affine, ``linear(temb)`` (no
    activation) -> twelve chunks, the image's and the text's interleaved."""
    eps = _plain_norm_eps(m, m.norm, fn)
    if _plain_norm_eps(m, m.norm_context, fn) != eps or m.norm_context.normalized_shape != m.norm.normalized_shape:
        raise C.unsupported(m, fn, "norm and norm_context differ", "Give both the same size and eps.")
    d, lin = int(m.norm.normalized_shape[0]), m.linear
    _out(m, lin, 12, d, fn)
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    opts = dict(num_chunks=12, layout="cogview4", activation=None, eps=eps, elementwise_affine=False,
                use_bias=lin.bias is not None, param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_easyanimate(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """EasyAnimate's ``EasyAnimateLayerNormZero``: CogVideoX's, its gates returned ``[B, d]``."""
    d, eps, affine, bias = _ln(m, m.norm, fn)
    if affine and not bias:
        raise C.unsupported(m, fn, "its LayerNorm has a weight but no bias", "Give it both (torch's default).")
    lin = m.linear
    _out(m, lin, 6, d, fn)
    p: C.Params = {"linear": C.linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = C.affine(m.norm, fn, "norm.")
    opts = dict(layout="easyanimate", eps=eps, elementwise_affine=affine, use_bias=lin.bias is not None,
                param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_sana(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``SanaModulatedNorm`` (Sana, Sana-Video): ``LN(x)`` modulated by ``table + temb``."""
    d, eps, affine, bias = _ln(m, m.norm, fn)
    p: C.Params = {"norm": C.affine(m.norm, fn, "norm.")} if affine else {}
    opts = dict(eps=eps, elementwise_affine=affine, use_bias=bias or not affine,
                param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNTable", {"features": d}, (d,), opts), p


def _conv_mochi_modulated(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``MochiModulatedRMSNorm``: diffusers' RMSNorm without weight on float32 x, times
    ``scale``, one rounding."""
    norm = m.norm
    if getattr(norm, "weight", None) is not None or float(norm.eps) != float(m.eps):
        raise C.unsupported(m, fn, "its RMSNorm has a weight or an eps of its own", "Only the layer Mochi "
                             "builds (RMSNorm(0, eps, False)).")
    return C.Spec("ModulatedRMSNorm", {}, (), dict(eps=float(m.eps))), {}


def _conv_pi05(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """transformers ``PI05AdaptiveRMSNorm``: ``dense(t)`` -> scale, shift, gate; float32 RMSNorm."""
    lin = m.dense
    d = int(lin.out_features) // 3
    _out(m, lin, 3, d, fn)
    p: C.Params = {"dense": C.linear(lin, fn, "dense.")}
    opts = dict(eps=float(m.eps), use_bias=lin.bias is not None, param_dtype=C.param_dtype(p))
    return C.Spec("AdaRMSNorm", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_spatial(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``SpatialNorm`` / transformers ``Emu3VQVAESpatialNorm``: an affine GroupNorm of
    ``x`` times ``conv_y(zq)`` plus ``conv_b(zq)``, two 1x1 convolutions of the resized ``zq``."""
    import torch

    if getattr(m, "add_conv", False):
        raise C.unsupported(m, fn, "add_conv=True runs a 3x3 replicate-padded convolution on zq first, which "
                            "jln's SpatialNorm does not", "Only add_conv=False converts.")
    norm, cy, cb = m.norm_layer, m.conv_y, m.conv_b
    convs_ok = all(isinstance(c, torch.nn.Conv2d) and tuple(c.kernel_size) == (1, 1) and tuple(c.stride) == (1, 1)
                   and tuple(c.padding) == (0, 0) and tuple(c.dilation) == (1, 1) and c.groups == 1
                   and (c.bias is None) == (cy.bias is None) for c in (cy, cb))
    if not (isinstance(norm, torch.nn.GroupNorm) and norm.affine and convs_ok):
        raise C.unsupported(m, fn, "its norm_layer is not an affine GroupNorm or conv_y/conv_b are not plain 1x1 "
                             "convolutions", "Only the layers diffusers' SpatialNorm and Emu3 build.")
    d, dz = int(norm.num_channels), int(cy.in_channels)
    if (cy.out_channels, cb.out_channels, cb.in_channels) != (d, d, dz):
        raise C.unsupported(m, fn, f"conv_y/conv_b map {cy.in_channels}/{cb.in_channels} channels to "
                            f"{cy.out_channels}/{cb.out_channels}, expected zq's channels to {d}", "")

    def conv(c: Any, name: str) -> C.Params:
        out: C.Params = {"kernel": C.to_jax(c.weight, name + ".weight", fn)[:, :, 0, 0].T}
        if c.bias is not None:
            out["bias"] = C.to_jax(c.bias, name + ".bias", fn)
        return out

    p: C.Params = {"norm_layer": C.affine(norm, fn, "norm_layer."), "conv_y": conv(cy, "conv_y"),
                   "conv_b": conv(cb, "conv_b")}
    opts = dict(num_groups=int(norm.num_groups), eps=float(norm.eps), use_bias=cy.bias is not None,
                param_dtype=C.param_dtype(p))
    return C.Spec("SpatialNorm", {"features": d}, (dz, d), opts), p


def _sd_spatial(p: C.Params) -> dict[str, Any]:
    out = {f"norm_layer.{t}": p["norm_layer"][j] for j, t in (("scale", "weight"), ("bias", "bias"))}
    for name in ("conv_y", "conv_b"):  # torch's Conv2d weight is [out, in, 1, 1]
        sd = C.sd_linear(p[name], name + ".")
        sd[name + ".weight"] = jnp.asarray(sd[name + ".weight"])[:, :, None, None]
        out.update(sd)
    return out


def _conv_esmfold2(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """transformers ``EsmFold2AdaptiveLayerNorm``: a sigmoid gate and a shift from ``LN(cond)``."""
    cn, g, s = m.cond_norm, m.gate_proj, m.shift_proj
    # EsmFold2LayerNorm: torch's LayerNorm on float32 input, cast back (as FP32LayerNorm)
    _, eps, affine, bias = _ln(m, cn, fn, ("EsmFold2LayerNorm", "FP32LayerNorm"))
    if not affine or bias or eps != float(m.eps) or g.bias is None or s.bias is not None:
        raise C.unsupported(m, fn, "its cond_norm is not a LayerNorm with a weight, no bias and the layer's "
                             "eps, or gate_proj lacks a bias, or shift_proj has one",
                             "Only the layers EsmFold2 builds.")
    d = int(m.hidden_size)
    if (g.out_features, s.out_features) != (d, d) or s.in_features != g.in_features:
        raise C.unsupported(m, fn, "gate_proj and shift_proj do not map the condition to hidden_size", "")
    p: C.Params = {"cond_norm": {"scale": C.to_jax(cn.weight, "cond_norm.weight", fn)},
                   "gate_proj": C.linear(g, fn, "gate_proj."), "shift_proj": C.linear(s, fn, "shift_proj.")}
    opts = dict(eps=float(m.eps), param_dtype=C.param_dtype(p))
    return C.Spec("AdaLNSigmoidGate", {"features": d}, (int(g.in_features), d), opts), p


def _sd_group(p: C.Params) -> dict[str, Any]:
    if "context_mlp" in p:  # Kandinsky 3: nn.Sequential(SiLU, Linear)
        return C.sd_linear(p["context_mlp"], "context_mlp.1.")
    return C.sd_linear(p["linear"], "linear.")


_COGVIEW4 = (f"{C.D}.transformers.transformer_cogview4", f"{C.D}.transformers.transformer_glm_image")


LAYOUTS: dict[str, C.Layout] = {
    "AdaLNZero": C.Layout("AdaLNZero", _sd_adaptive),
    "AdaLNContinuous": C.Layout("AdaLNContinuous", _sd_adaptive),
    "AdaLNZeroJoint": C.Layout("AdaLNZeroJoint", C.sd_named),
    "AdaLNScale": C.Layout("AdaLNScale", C.sd_named),
    "AdaLNSingle": C.Layout("AdaLNSingle", C.sd_named),
    "AdaGroupNorm": C.Layout("AdaGroupNorm", _sd_group),
    "AdaLNTable": C.Layout("AdaLNTable", C.sd_named),
    "ModulatedRMSNorm": C.Layout("ModulatedRMSNorm", lambda p: {}),
    "AdaRMSNorm": C.Layout("AdaRMSNorm", C.sd_named),
    "AdaLNSigmoidGate": C.Layout("AdaLNSigmoidGate", C.sd_named),
    "SpatialNorm": C.Layout("SpatialNorm", _sd_spatial),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "diffusers AdaLayerNormZero (num_embeddings=None)",
        "AdaLNZero(num_chunks=6)",
        C.named(("AdaLayerNormZero",), ("linear", "norm", "emb")),
        _ada_zero(6),
        LAYOUTS["AdaLNZero"],
    ),
    C.Converter(
        "diffusers AdaLayerNormZeroSingle",
        "AdaLNZero(num_chunks=3)",
        C.named(("AdaLayerNormZeroSingle",), ("linear", "norm")),
        _ada_zero(3),
        LAYOUTS["AdaLNZero"],
    ),
    C.Converter(
        "diffusers AdaLayerNormContinuous",
        "AdaLNContinuous",
        C.named(("AdaLayerNormContinuous",), ("linear", "norm")),
        _conv_ada_continuous,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "transformers Qwen2_5_OmniAdaLayerNormZero",
        "AdaLNZero(num_chunks=6)",
        C.named(("Qwen2_5_OmniAdaLayerNormZero",), ("linear", "norm"), package="transformers"),
        _ada_zero(6),
        LAYOUTS["AdaLNZero"],
    ),
    C.Converter(
        "transformers Qwen2_5_OmniAdaLayerNormZero_Final",
        "AdaLNContinuous(elementwise_affine=False, project_in='cond')",
        C.named(("Qwen2_5_OmniAdaLayerNormZero_Final",), ("linear", "norm"), package="transformers"),
        _conv_omni_final,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "diffusers AdaLayerNorm (num_embeddings=None)",
        "AdaLNContinuous(project_in='cond', order='continuous' or 'dit_final')",
        C.named(("AdaLayerNorm",), ("linear", "norm", "emb", "chunk_dim"), package="diffusers"),
        _conv_ada_layer_norm,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "diffusers SD35AdaLayerNormZeroX",
        "AdaLNZero(num_chunks=9)",
        C.named(("SD35AdaLayerNormZeroX",), ("linear", "norm"), package="diffusers"),
        _ada_zero(9),
        LAYOUTS["AdaLNZero"],
    ),
    C.Converter(
        "diffusers LuminaRMSNormZero",
        "AdaLNZero(num_chunks=4, norm_type='rms_norm', elementwise_affine=True)",
        C.named(("LuminaRMSNormZero",), ("linear", "norm"), package="diffusers"),
        _conv_rms_zero("rms_norm"),
        LAYOUTS["AdaLNZero"],
    ),
    C.Converter(
        "diffusers MochiRMSNormZero",
        "AdaLNZero(num_chunks=4, norm_type='fp32_rms_norm')",
        C.named(("MochiRMSNormZero",), ("linear", "norm"), package="diffusers"),
        _conv_rms_zero("fp32_rms_norm"),
        LAYOUTS["AdaLNZero"],
    ),
    C.Converter(
        "diffusers CogVideoXLayerNormZero",
        "AdaLNZeroJoint",
        C.named(("CogVideoXLayerNormZero",), ("linear", "norm"), package="diffusers"),
        _conv_joint,
        LAYOUTS["AdaLNZeroJoint"],
    ),
    C.Converter(
        "diffusers LuminaLayerNormContinuous / MochiLayerNormContinuous",
        "AdaLNScale",
        C.named(("LuminaLayerNormContinuous", "MochiLayerNormContinuous"), ("linear_1", "norm"), package="diffusers"),
        _conv_scale,
        LAYOUTS["AdaLNScale"],
    ),
    C.Converter(
        "diffusers AdaLayerNormSingle (PixArt), and any diffusers class whose code is its (LTX-2's)",
        "AdaLNSingle",
        C.diffusers_same_code("diffusers.models.normalization", "AdaLayerNormSingle", ("emb", "linear")),
        _conv_single,
        LAYOUTS["AdaLNSingle"],
    ),
    C.Converter(
        "diffusers CogView3PlusAdaLayerNormZeroTextImage",
        "AdaLNZeroJoint(num_chunks=12)",
        C.named(("CogView3PlusAdaLayerNormZeroTextImage",), ("linear", "norm_x", "norm_c"), package="diffusers"),
        _conv_cogview3plus,
        LAYOUTS["AdaLNZeroJoint"],
    ),
    C.Converter(
        "diffusers AdaGroupNorm and its copies",
        "AdaGroupNorm",
        C.computes_as(((f"{C.D}.normalization", "AdaGroupNorm"),), ("linear", "num_groups", "eps", "act")),
        _conv_ada_group,
        LAYOUTS["AdaGroupNorm"],
    ),
    C.Converter(
        "diffusers Kandinsky3ConditionalGroupNorm and its copies",
        "AdaGroupNorm(activation='silu', proj_name='context_mlp')",
        C.computes_as(((f"{C.D}.unets.unet_kandinsky3", "Kandinsky3ConditionalGroupNorm"),), ("norm", "context_mlp")),
        _conv_kandinsky3,
        LAYOUTS["AdaGroupNorm"],
    ),
    C.Converter(
        "diffusers AdaLayerNormShift (Hunyuan-DiT) and its copies",
        "AdaLNContinuous(order=('shift',), project_in='cond')",
        C.computes_as(((f"{C.D}.transformers.hunyuan_transformer_2d", "AdaLayerNormShift"),), ("linear", "norm")),
        _conv_shift,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "diffusers SanaModulatedNorm (Sana, Sana-Video) and its copies",
        "AdaLNTable",
        C.computes_as(((f"{C.D}.transformers.sana_transformer", "SanaModulatedNorm"),
                     (f"{C.D}.transformers.transformer_sana_video", "SanaModulatedNorm")), ("norm",)),
        _conv_sana,
        LAYOUTS["AdaLNTable"],
    ),
    C.Converter(
        "diffusers CogView4AdaLayerNormContinuous / GlmImageAdaLayerNormContinuous and their copies",
        "AdaLNContinuous(activation=None)",
        C.computes_as(tuple((mod, f"{name}AdaLayerNormContinuous") for mod, name in
                          zip(_COGVIEW4, ("CogView4", "GlmImage"), strict=True)), ("linear", "norm")),
        _conv_no_act,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "diffusers CogView4AdaLayerNormZero / GlmImageAdaLayerNormZero and their copies",
        "AdaLNZeroJoint(num_chunks=12, layout='cogview4', activation=None)",
        C.computes_as(tuple((mod, f"{name}AdaLayerNormZero") for mod, name in
                          zip(_COGVIEW4, ("CogView4", "GlmImage"), strict=True)), ("linear", "norm", "norm_context")),
        _conv_cogview4_zero,
        LAYOUTS["AdaLNZeroJoint"],
    ),
    C.Converter(
        "diffusers EasyAnimateLayerNormZero and its copies",
        "AdaLNZeroJoint(layout='easyanimate')",
        C.computes_as(((f"{C.D}.transformers.transformer_easyanimate", "EasyAnimateLayerNormZero"),), ("linear", "norm")),
        _conv_easyanimate,
        LAYOUTS["AdaLNZeroJoint"],
    ),
    C.Converter(
        "diffusers Flux3AdaLayerNorm, AudioDiTAdaLayerNormZeroFinal (LongCat-AudioDiT) and their copies",
        "AdaLNContinuous(elementwise_affine=False, project_in='cond')",
        C.computes_as(((f"{C.D}.transformers.transformer_flux3", "Flux3AdaLayerNorm"),
                     (f"{C.D}.transformers.transformer_longcat_audio_dit", "AudioDiTAdaLayerNormZeroFinal")),
                    ("linear", "norm")),
        _conv_final,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "diffusers QwenImage21AdaLayerNormContinuous and its copies (called without target_token_mask)",
        "AdaLNContinuous(order=('scale',))",
        C.computes_as(((f"{C.D}.transformers.transformer_qwenimage21", "QwenImage21AdaLayerNormContinuous"),),
                    ("linear", "norm")),
        _conv_scale_only,
        LAYOUTS["AdaLNContinuous"],
    ),
    C.Converter(
        "diffusers MochiModulatedRMSNorm and its copies",
        "ModulatedRMSNorm",
        C.computes_as(((f"{C.D}.transformers.transformer_mochi", "MochiModulatedRMSNorm"),), ("eps", "norm")),
        _conv_mochi_modulated,
        LAYOUTS["ModulatedRMSNorm"],
    ),
    C.Converter(
        "transformers PI05AdaptiveRMSNorm and its copies",
        "AdaRMSNorm",
        C.computes_as(((f"{C.T}.pi05.modeling_pi05", "PI05AdaptiveRMSNorm"),), ("dense", "eps")),
        _conv_pi05,
        LAYOUTS["AdaRMSNorm"],
    ),
    C.Converter(
        "transformers EsmFold2AdaptiveLayerNorm and its copies",
        "AdaLNSigmoidGate",
        C.computes_as(((f"{C.T}.esmfold2.modeling_esmfold2", "EsmFold2AdaptiveLayerNorm"),),
                    ("cond_norm", "gate_proj", "shift_proj", "eps", "hidden_size")),
        _conv_esmfold2,
        LAYOUTS["AdaLNSigmoidGate"],
    ),
    C.Converter(
        "diffusers SpatialNorm (MoVQ's spatially conditioned GroupNorm) and KVAEDecoderSpatialNorm2D "
        "(add_conv=False)",
        "SpatialNorm",
        C.named(("SpatialNorm", "KVAEDecoderSpatialNorm2D"), ("norm_layer", "conv_y", "conv_b"), package="diffusers"),
        _conv_spatial,
        LAYOUTS["SpatialNorm"],
    ),
    C.Converter(
        "transformers Emu3VQVAESpatialNorm and its copies",
        "SpatialNorm",
        C.computes_as(((f"{C.T}.emu3.modeling_emu3", "Emu3VQVAESpatialNorm"),), ("norm_layer", "conv_y", "conv_b")),
        _conv_spatial,
        LAYOUTS["SpatialNorm"],
    ),
)

#: Classes recognised by computation but not reproduced (:data:`jln._convert.NearMisses`)
NEAR_MISSES: C.NearMisses = (
    (((f"{C.T}.vibevoice.modeling_vibevoice", "VibeVoiceDiffusionHeadAdaLayerNorm"),),
     "it is a residual layer, not a norm: x + gate * ffn(rms_norm(x) * (1 + scale) + shift); the nearest "
     "jln family, AdaLNContinuous, returns only the modulated norm. Convert its `norm` (VibeVoiceRMSNorm) "
     "and build the residual and the MLP around it"),
    (((f"{C.T}.voxtral_realtime.modeling_voxtral_realtime", "VoxtralRealtimeTextAdaRmsNorm"),),
     "it normalizes nothing: it is an MLP, linear2(gelu(linear1(x))), that produces a scale for the "
     "caller's RMSNorm; build it with flax Dense layers"),
)
