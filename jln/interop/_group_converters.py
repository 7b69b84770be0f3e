"""Converters for torch's ``LocalResponseNorm`` and for the model files' wrappers of GroupNorm,
LayerNorm and RMSNorm that differ from torch's class only in layout.

Each wrapper is recognised by computation (:func:`jln.interop._variants.computes_as`: its
``forward`` is, as code, that of a reference class in the installed transformers/diffusers) and
maps onto options of an existing jln module; none adds a formula:

* per-frame video GroupNorm (the frames folded into the batch: diffusers' ``CosmosCausalGroupNorm``
  with one group, ``MochiChunkedGroupNorm3D``, ``MiniMaxH3VideoGroupNorm``): ``frame_axis=2``;
* GroupNorm then an activation (transformers' ``BitGroupNormActivation``): ``activation``;
* tensors held under other names (``norm.weight``, ``norm_layer.weight``, ``gamma``):
  ``torch_names``, which :func:`jln.interop.to_torch_state_dict` applies.
"""

from __future__ import annotations

import sys
from typing import Any

from jln.interop import _converters as C
from jln.interop._arrays import to_jax
from jln.interop._batch_converters import LAYOUTS as BATCH_LAYOUTS
from jln.interop._batch_converters import _conv_group_norm
from jln.interop._variants import computes_as

_T = "transformers.models"
_D = "diffusers.models"


def _names(prefix: str, p: C.Params) -> dict[str, Any]:
    """The ``torch_names`` option for a norm's tensors held under ``prefix`` (``{}``: none)."""
    pairs = tuple((t, prefix + t) for t, j in (("weight", "scale"), ("bias", "bias")) if j in p)
    return {"torch_names": pairs} if pairs else {}


def _inner(m: Any, attr: str, torch_cls: str, fn: str) -> Any:
    """The wrapped ``torch.nn.<torch_cls>`` at ``m.<attr>`` (its own forward), else refused."""
    inner = getattr(m, attr, None)
    if inner is None or not C._torch_nn(torch_cls)(inner):
        raise C._unsupported(
            m, fn, f"its `{attr}` is a {type(inner).__name__}, not a torch.nn.{torch_cls}",
            f"jln converts this class when `{attr}` is torch's own {torch_cls}.",
        )
    return inner


# --------------------------------------------------------------------------- LocalResponseNorm


def _conv_lrn(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    opts = dict(size=int(m.size), alpha=float(m.alpha), beta=float(m.beta), k=float(m.k))
    return C.Spec("LocalResponseNorm", {}, (), opts), {}


# --------------------------------------------------------------------------- GroupNorm wrappers


def _group_norm(norm: Any, fn: str, **options: Any) -> tuple[C.Spec, C.Params]:
    """torch ``GroupNorm`` ``norm`` (its parameters and options) with ``options`` added."""
    spec, variables = _conv_group_norm(norm, fn)
    return C.Spec("GroupNorm", {}, (), {**spec.options, **options}, collections=True), variables


def _wrapped_group_norm(attr: str, per_frame: Any) -> Any:
    """A class holding a torch GroupNorm at ``attr``; ``per_frame(m)``: it normalizes each frame
    of ``[N, C, T, H, W]`` input on its own."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        norm = _inner(m, attr, "GroupNorm", fn)
        spec, variables = _group_norm(norm, fn, frame_axis=2 if per_frame(m) else None)
        names = _names(attr + ".", variables["params"])
        return C.Spec("GroupNorm", {}, (), {**spec.options, **names}, collections=True), variables

    return convert


def _conv_minimax(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    return _group_norm(m, fn, frame_axis=2)


def _activation(act: Any) -> str | None | bool:
    """The jln name of a torch activation module (None for Identity), False for any other."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    t = type(act)
    if t is torch.nn.Identity:
        return None
    if t is torch.nn.ReLU:
        return "relu"
    if t is torch.nn.SiLU:
        return "silu"
    if t is torch.nn.GELU and act.approximate == "none":
        return "gelu"
    if t.__module__ == "transformers.activations":
        if t.__name__ == "SiLUActivation":
            return "silu"
        if t.__name__ == "GELUActivation" and getattr(act, "act", None) is torch.nn.functional.gelu:
            return "gelu"
    return False


def _conv_bit(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    act = _activation(m.activation)
    if act is False:
        raise C._unsupported(
            m, fn, f"its activation is {type(m.activation).__name__}; jln's GroupNorm applies ReLU, SiLU or "
            f"GELU (erf) computed in float32 and rounded once, as torch's own modules do",
            "Build it with hidden_act 'relu', 'silu' or 'gelu', or convert the GroupNorm alone "
            "(torch.nn.GroupNorm) and apply the activation yourself.",
        )
    return _group_norm(m, fn, activation=act)


# --------------------------------------------------------------------------- LayerNorm / RMSNorm wrappers


def _conv_vidtok(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    norm = _inner(m, "norm", "LayerNorm", fn)
    spec, p = C._conv_layer_norm(norm, fn)
    if len(norm.normalized_shape) != 1:
        raise C._unsupported(m, fn, f"normalized_shape={tuple(norm.normalized_shape)} has several axes, but "
                             "it normalizes the channels (axis 1) only", "Use a 1-D normalized_shape.")
    return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, "axis": 1, **_names("norm.", p)}), p


def _conv_patchtsmixer_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    if "batch" in m.norm_mlp.lower():
        raise C._unsupported(
            m, fn, f"norm_mlp={m.norm_mlp!r} takes its BatchNorm path: torch's BatchNorm1d on the "
            f"transposed, non-contiguous input, whose bfloat16 path differs from torch's on contiguous "
            f"input (jln's BatchNorm matches ~45-52% of its bfloat16 elements; float32 agrees)",
            "Its LayerNorm path (norm_mlp='LayerNorm') converts; for this one use jln.batch_norm(x, ..., "
            "channel_axis=-1) in float32.",
        )
    norm = _inner(m, "norm", "LayerNorm", fn)
    spec, p = C._conv_layer_norm(norm, fn)
    return C.Spec("LayerNorm", {}, spec.nnx_sizes, {**spec.options, **_names("norm.", p)}), p


def _conv_stable_audio3(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    if not m.force_fp32:
        raise C._unsupported(
            m, fn, "force_fp32=False computes op by op in the input's dtype (no float32 statistics), "
            "while jln's RMSNorm conventions take the statistics in float32",
            "Build it with force_fp32=True (its default), or run it in float32.",
        )
    w = m.gamma
    if w.ndim != 1:
        raise C._unsupported(m, fn, f"its gamma has shape {tuple(w.shape)}", "Use a 1-D gamma.")
    p = {"scale": to_jax(w, "gamma", fn)}
    opts = dict(eps=float(m.eps), convention="torch", axis=-1, use_scale=True, param_dtype=C._param_dtype(p),
                torch_names=(("weight", "gamma"),))
    return C.Spec("RMSNorm", {}, (int(w.shape[0]),), opts), p


# --------------------------------------------------------------------------- the table


def _of(package: str, recognise: Any) -> Any:
    """``recognise`` for classes of ``package`` only: a transformers GroupNorm subclass is never
    compared (nor diffusers imported) against a diffusers reference, and the other way round."""
    return lambda m: type(m).__module__.split(".")[0] == package and recognise(m)


LAYOUTS: dict[str, C.Layout] = {"LocalResponseNorm": C.Layout("LocalResponseNorm", lambda p: {})}
_GN = BATCH_LAYOUTS["GroupNorm"]
_PE = ((f"{_T}.pe_audio.modeling_pe_audio", "PeAudioMaskedGroupNorm"),
       (f"{_T}.pe_audio_video.modeling_pe_audio_video", "PeAudioVideoMaskedGroupNorm"),
       (f"{_T}.pe_video.modeling_pe_video", "PeVideoMaskedGroupNorm"))

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter("torch.nn.LocalResponseNorm", "LocalResponseNorm", C._torch_nn("LocalResponseNorm"), _conv_lrn,
                LAYOUTS["LocalResponseNorm"]),
    C.Converter(
        "diffusers CosmosCausalGroupNorm and its copies (one group: per frame)",
        "GroupNorm(frame_axis=2 for one group, torch_names norm.*)",
        _of("diffusers", computes_as(((f"{_D}.autoencoders.autoencoder_kl_cosmos", "CosmosCausalGroupNorm"),),
                                     ("norm", "num_groups"))),
        _wrapped_group_norm("norm", lambda m: m.num_groups == 1),
        _GN,
    ),
    C.Converter(
        "diffusers MochiChunkedGroupNorm3D and its copies (per frame; the chunks change no number)",
        "GroupNorm(frame_axis=2, torch_names norm_layer.*)",
        _of("diffusers", computes_as(((f"{_D}.autoencoders.autoencoder_kl_mochi", "MochiChunkedGroupNorm3D"),),
                                     ("norm_layer",))),
        _wrapped_group_norm("norm_layer", lambda m: True),
        _GN,
    ),
    C.Converter(
        "diffusers KVAECachedGroupNorm and its copies (called as (x): the cache dict is not filled)",
        "GroupNorm(torch_names norm_layer.*)",
        _of("diffusers", computes_as(((f"{_D}.autoencoders.autoencoder_kl_kvae_video", "KVAECachedGroupNorm"),),
                                     ("norm_layer",))),
        _wrapped_group_norm("norm_layer", lambda m: False),
        _GN,
    ),
    C.Converter(
        "diffusers MiniMaxH3VideoGroupNorm and its copies (per frame)",
        "GroupNorm(frame_axis=2)",
        _of("diffusers", computes_as(((f"{_D}.autoencoders.autoencoder_kl_minimax_h3", "MiniMaxH3VideoGroupNorm"),),
                                     ("num_groups",), base="GroupNorm")),
        _conv_minimax,
        _GN,
    ),
    C.Converter(
        "transformers BitGroupNormActivation and its copies (hidden_act relu, silu or gelu)",
        "GroupNorm(activation=...)",
        _of("transformers", computes_as(((f"{_T}.bit.modeling_bit", "BitGroupNormActivation"),),
                                        ("num_groups", "activation"), base="GroupNorm")),
        _conv_bit,
        _GN,
    ),
    C.Converter(
        "transformers PeAudioMaskedGroupNorm / PeAudioVideoMaskedGroupNorm / PeVideoMaskedGroupNorm and their "
        "copies: the unmasked call (padding_mask=None) only",
        "GroupNorm (called as (x); it takes no padding_mask)",
        _of("transformers", computes_as(_PE, ("num_groups",), base="GroupNorm")),
        _conv_group_norm,
        _GN,
    ),
    C.Converter(
        "diffusers VidTokLayerNorm and its copies (LayerNorm over the channels of NC... input)",
        "LayerNorm(axis=1, torch_names norm.*)",
        _of("diffusers", computes_as(((f"{_D}.autoencoders.autoencoder_vidtok", "VidTokLayerNorm"),), ("norm",))),
        _conv_vidtok,
        C.LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "transformers PatchTSMixerNormLayer and its copies (its LayerNorm path)",
        "LayerNorm(torch_names norm.*)",
        _of("transformers", computes_as(((f"{_T}.patchtsmixer.modeling_patchtsmixer", "PatchTSMixerNormLayer"),),
                                        ("norm_mlp", "norm"))),
        _conv_patchtsmixer_norm,
        C.LAYOUTS["LayerNorm"],
    ),
    C.Converter(
        "diffusers StableAudio3RMSNorm and its copies (force_fp32=True)",
        "RMSNorm(convention='torch', torch_names weight -> gamma)",
        _of("diffusers", computes_as(((f"{_D}.transformers.transformer_stable_audio3", "StableAudio3RMSNorm"),),
                                     ("gamma", "eps", "force_fp32"))),
        _conv_stable_audio3,
        C.LAYOUTS["RMSNorm"],
    ),
)
