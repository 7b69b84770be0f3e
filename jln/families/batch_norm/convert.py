"""torch -> jln converters of the batch-statistics norms: ``torch.nn.BatchNorm*d``/``SyncBatchNorm``,
``InstanceNorm*d``, ``GroupNorm`` and the model files' GroupNorm wrappers (per-frame video
GroupNorms, GroupNorm + activation), and transformers' ``DetrFrozenBatchNorm2d`` and its copies. The
running statistics travel in the ``"batch_stats"`` collection; the layouts write them back, so the
state_dict loads strictly.
"""

from __future__ import annotations

import sys
from typing import Any

import jax.numpy as jnp

from jln import _convert as C

_BUFFERS = ("running_mean", "running_var")


def _stats(m: Any, fn: str, counter: bool) -> C.Params:
    out: C.Params = {}
    if getattr(m, "running_mean", None) is None:
        return out
    for name in _BUFFERS:
        out[name] = C.to_jax(getattr(m, name), name, fn)
    if counter:
        nbt = getattr(m, "num_batches_tracked", None)
        out["num_batches_tracked"] = jnp.asarray(0 if nbt is None else int(nbt.item()), jnp.int32)
    return out


def _check_affine(m: Any, fn: str) -> None:
    if m.affine and m.bias is None:
        raise C.unsupported(m, fn, "it has a weight but no bias (bias=False)",
                           "jln's batch-statistics modules take both or neither (affine=False).")


def _momentum(m: Any) -> float | None:
    return None if m.momentum is None else float(m.momentum)


def _conv_batch_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    _check_affine(m, fn)
    p = C.affine(m, fn)
    stats = _stats(m, fn, counter=True)
    opts = dict(eps=float(m.eps), momentum=_momentum(m), affine=bool(m.affine),
                track_running_stats=bool(m.track_running_stats), param_dtype=C.param_dtype({**p, **{
                    k: v for k, v in stats.items() if k != "num_batches_tracked"}}))
    return C.Spec("BatchNorm", {}, (int(m.num_features),), opts, collections=True), {"params": p, "batch_stats": stats}


def strided_batch_norm(bn: Any, fn: str, prefix: str) -> tuple[C.Spec, C.Params]:
    """A torch ``BatchNorm1d`` ``bn``, held at ``prefix`` and called on ``(B, ..., C)`` input
    transposed to ``(B, C, ...)`` (a strided view: torch's element-wise fallback) ->
    ``BatchNorm(channel_axis=-1, convention="strided")`` with the class's tensor names."""
    if not C.torch_nn("BatchNorm1d")(bn):
        raise C.unsupported(bn, fn, f"its `{prefix.rstrip('.')}` is a {type(bn).__name__}, not a torch.nn.BatchNorm1d",
                            "jln converts this class when it holds torch's own BatchNorm1d.")
    spec, variables = _conv_batch_norm(bn, fn)
    keys = [*_sd_batch({**variables["params"], **variables["batch_stats"]})]
    opts = {**spec.options, "channel_axis": -1, "convention": "strided"}
    if keys:
        opts["torch_names"] = tuple((k, prefix + k) for k in keys)
    return C.Spec("BatchNorm", {}, spec.nnx_sizes, opts, collections=True), variables


def _conv_patchtst(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    return strided_batch_norm(m.batchnorm, fn, "batchnorm.")


def _conv_instance_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    _check_affine(m, fn)
    p = C.affine(m, fn)
    stats = _stats(m, fn, counter=False) if m.track_running_stats else {}
    opts = dict(eps=float(m.eps), momentum=_momentum(m), affine=bool(m.affine),
                track_running_stats=bool(m.track_running_stats), param_dtype=C.param_dtype({**p, **stats}))
    return C.Spec("InstanceNorm", {}, (int(m.num_features),), opts, collections=True), {"params": p, "batch_stats": stats}


def _conv_group_norm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    p = C.affine(m, fn)
    opts = dict(num_groups=int(m.num_groups), num_channels=int(m.num_channels), eps=float(m.eps),
                affine=bool(m.affine), param_dtype=C.param_dtype(p))
    return C.Spec("GroupNorm", {}, (), opts, collections=True), {"params": p, "batch_stats": {}}


def _conv_frozen(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    p: C.Params = {}  # torch's four buffers are state here too, never trained
    stats = {"scale": C.to_jax(m.weight, "weight", fn), "bias": C.to_jax(m.bias, "bias", fn), **_stats(m, fn, counter=False)}
    dtypes = {str(v.dtype) for v in stats.values()}
    if len(dtypes) != 1:
        raise C.unsupported(m, fn, f"its four buffers have different dtypes {sorted(dtypes)}",
                           "Cast the module to one dtype first (module.float()).")
    # the 1e-5 is the constant in DetrFrozenBatchNorm2d.forward (whose code the recogniser checked)
    opts = dict(eps=1e-5, param_dtype=C.param_dtype(stats))
    return C.Spec("FrozenBatchNorm", {}, (int(m.weight.shape[0]),), opts, collections=True), {"params": p, "batch_stats": stats}


def _sd_batch(p: C.Params) -> dict[str, Any]:
    """``scale``/``bias`` -> ``weight``/``bias``, the running statistics under torch's names."""
    out = {}
    if "scale" in p:
        out["weight"] = p["scale"]
    if "bias" in p:
        out["bias"] = p["bias"]
    for name in (*_BUFFERS, "num_batches_tracked"):
        if name in p:
            out[name] = p[name]
    return out


def _sd_instance(p: C.Params) -> dict[str, Any]:
    """As :func:`_sd_batch`, plus torch's ``num_batches_tracked`` buffer, which InstanceNorm
    holds with running statistics but never advances (always 0)."""
    out = _sd_batch(p)
    if "running_mean" in p:
        out["num_batches_tracked"] = jnp.zeros((), jnp.int32)
    return out


_FROZEN_ATTRS = ("weight", "bias", "running_mean", "running_var")


def _group_norm(norm: Any, fn: str, **options: Any) -> tuple[C.Spec, C.Params]:
    """torch ``GroupNorm`` ``norm`` (its parameters and options) with ``options`` added."""
    spec, variables = _conv_group_norm(norm, fn)
    return C.Spec("GroupNorm", {}, (), {**spec.options, **options}, collections=True), variables


def _wrapped_group_norm(attr: str, per_frame: Any) -> Any:
    """A class holding a torch GroupNorm at ``attr``; ``per_frame(m)``: it normalizes each frame
    of ``[N, C, T, H, W]`` input on its own."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        norm = C.inner(m, attr, "GroupNorm", fn)
        spec, variables = _group_norm(norm, fn, frame_axis=2 if per_frame(m) else None)
        names = C.torch_names(attr + ".", variables["params"])
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
        raise C.unsupported(
            m, fn, f"its activation is {type(m.activation).__name__}; jln's GroupNorm applies ReLU, SiLU or "
            f"GELU (erf) computed in float32 and rounded once, as torch's own modules do",
            "Build it with hidden_act 'relu', 'silu' or 'gelu', or convert the GroupNorm alone "
            "(torch.nn.GroupNorm) and apply the activation yourself.",
        )
    return _group_norm(m, fn, activation=act)


_PATCHTST = ((f"{C.T}.patchtst.modeling_patchtst", "PatchTSTBatchNorm"),
             (f"{C.T}.patchtsmixer.modeling_patchtsmixer", "PatchTSMixerBatchNorm"))

_PE = ((f"{C.T}.pe_audio.modeling_pe_audio", "PeAudioMaskedGroupNorm"),
       (f"{C.T}.pe_audio_video.modeling_pe_audio_video", "PeAudioVideoMaskedGroupNorm"),
       (f"{C.T}.pe_video.modeling_pe_video", "PeVideoMaskedGroupNorm"))


LAYOUTS: dict[str, C.Layout] = {
    "BatchNorm": C.Layout("BatchNorm", _sd_batch),
    "InstanceNorm": C.Layout("InstanceNorm", _sd_instance),
    "GroupNorm": C.Layout("GroupNorm", _sd_batch),
    "FrozenBatchNorm": C.Layout("FrozenBatchNorm", _sd_batch),
}

CONVERTERS: tuple[C.Converter, ...] = (
    *(C.Converter(f"torch.nn.{c}", "BatchNorm", C.torch_nn(c), _conv_batch_norm, LAYOUTS["BatchNorm"])
      for c in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")),
    C.Converter("torch.nn.SyncBatchNorm", "BatchNorm (set axis_name= to synchronise under shard_map/pmap)",
              C.torch_nn("SyncBatchNorm"), _conv_batch_norm, LAYOUTS["BatchNorm"]),
    *(C.Converter(f"torch.nn.{c}", "InstanceNorm", C.torch_nn(c), _conv_instance_norm, LAYOUTS["InstanceNorm"])
      for c in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")),
    C.Converter("torch.nn.GroupNorm", "GroupNorm", C.torch_nn("GroupNorm"), _conv_group_norm, LAYOUTS["GroupNorm"]),
    C.Converter(
        "transformers DetrFrozenBatchNorm2d, and any transformers class whose code is its (Conditional/"
        "Deformable DETR, RT-DETR, Table Transformer, Grounding DINO, D-FINE...)",
        "FrozenBatchNorm",
        C.hf_norm(("DetrFrozenBatchNorm2d",), "detr", _FROZEN_ATTRS),
        _conv_frozen,
        LAYOUTS["FrozenBatchNorm"],
    ),
    C.Converter(
        "transformers PatchTSTBatchNorm / PatchTSMixerBatchNorm and their copies (BatchNorm1d on the "
        "transposed, strided (B, L, C) input)",
        "BatchNorm(channel_axis=-1, convention='strided', torch_names batchnorm.*)",
        C.of_package("transformers", C.computes_as(_PATCHTST, ("batchnorm",))),
        _conv_patchtst,
        LAYOUTS["BatchNorm"],
    ),
    C.Converter(
        "diffusers CosmosCausalGroupNorm and its copies (one group: per frame)",
        "GroupNorm(frame_axis=2 for one group, torch_names norm.*)",
        C.of_package("diffusers", C.computes_as(((f"{C.D}.autoencoders.autoencoder_kl_cosmos", "CosmosCausalGroupNorm"),),
                                     ("norm", "num_groups"))),
        _wrapped_group_norm("norm", lambda m: m.num_groups == 1),
        LAYOUTS["GroupNorm"],
    ),
    C.Converter(
        "diffusers MochiChunkedGroupNorm3D and its copies (per frame; the chunks change no number)",
        "GroupNorm(frame_axis=2, torch_names norm_layer.*)",
        C.of_package("diffusers", C.computes_as(((f"{C.D}.autoencoders.autoencoder_kl_mochi", "MochiChunkedGroupNorm3D"),),
                                     ("norm_layer",))),
        _wrapped_group_norm("norm_layer", lambda m: True),
        LAYOUTS["GroupNorm"],
    ),
    C.Converter(
        "diffusers KVAECachedGroupNorm and its copies (called as (x): the cache dict is not filled)",
        "GroupNorm(torch_names norm_layer.*)",
        C.of_package("diffusers", C.computes_as(((f"{C.D}.autoencoders.autoencoder_kl_kvae_video", "KVAECachedGroupNorm"),),
                                     ("norm_layer",))),
        _wrapped_group_norm("norm_layer", lambda m: False),
        LAYOUTS["GroupNorm"],
    ),
    C.Converter(
        "diffusers MiniMaxH3VideoGroupNorm and its copies (per frame)",
        "GroupNorm(frame_axis=2)",
        C.of_package("diffusers", C.computes_as(((f"{C.D}.autoencoders.autoencoder_kl_minimax_h3", "MiniMaxH3VideoGroupNorm"),),
                                     ("num_groups",), base="GroupNorm")),
        _conv_minimax,
        LAYOUTS["GroupNorm"],
    ),
    C.Converter(
        "transformers BitGroupNormActivation and its copies (hidden_act relu, silu or gelu)",
        "GroupNorm(activation=...)",
        C.of_package("transformers", C.computes_as(((f"{C.T}.bit.modeling_bit", "BitGroupNormActivation"),),
                                        ("num_groups", "activation"), base="GroupNorm")),
        _conv_bit,
        LAYOUTS["GroupNorm"],
    ),
    C.Converter(
        "transformers PeAudioMaskedGroupNorm / PeAudioVideoMaskedGroupNorm / PeVideoMaskedGroupNorm and their "
        "copies",
        "GroupNorm (called as torch's: (x) or (x, padding_mask=...))",
        C.of_package("transformers", C.computes_as(_PE, ("num_groups",), base="GroupNorm")),
        _conv_group_norm,
        LAYOUTS["GroupNorm"],
    ),
)

#: Classes recognised by computation but not reproduced (:data:`jln._convert.NearMisses`)
NEAR_MISSES: C.NearMisses = (
)
