"""The adaptive norms' module kinds: the seed's ``AdaptiveLayerNorm``, DiT's ``AdaLNZero`` and
the SD3/Flux ``AdaLNContinuous``, and the diffusers variants ``AdaLNZeroJoint``, ``AdaLNScale`` and
``AdaLNSingle`` (the conditioned norms of model files are in :mod:`.conditioned`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _modules as M
from jln import _validate
from jln._modules import (
    BIAS_INIT,
    COMPUTE,
    COND_ACTIVATIONS,
    DENSE_RNGS,
    DISTRIBUTED,
    EPS,
    FEATURES,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    SCALE_INIT,
    USE_BIAS,
    USE_SCALE,
    Kind,
    Option,
    Params,
    Stats,
    activate,
    cast_in,
    cast_out,
    check_activation,
    compute_dtype,
    cond_features,
    dense,
    dense_inits,
    dense_specs,
    distributed,
    literal,
    make_config,
    norm_affine_specs,
    record,
    silu,
    zeros,
)
from jln.families.adaptive.function import (
    adaptive_layer_norm,
    adaptive_rms_norm,
    resolve_order,
    torch_broadcast,
)

Array = jax.Array

MODULATED = "array like ``x``, dtype ``x.dtype`` (or ``dtype``)."


def _check_adaptive_layer_norm(cfg: Any) -> None:
    fn = "jln AdaptiveLayerNorm"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "proj_kernel_init", "proj_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    names = resolve_order(cfg.order, fn)
    if not {"shift", "scale"} <= set(names):
        raise ValueError(
            f"{fn}: `order` must name a 'shift' and a 'scale' chunk (e.g. 'seed', "
            f"'dit_final', 'continuous'); received {cfg.order!r} = {names}."
        )
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


#: tensor parallelism of the adaptive norms (the feature axis split over ``axis_name``)
ADAPTIVE_DISTRIBUTED = (
    DISTRIBUTED[0].but(doc="tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last "
                       "axis split over ``axis_name``: ``features`` is then the local size d / n, the "
                       "norm's statistics span the devices, and the Dense must produce each device's "
                       "local block of every chunk: :func:`jln.shard_chunks` lays out a global kernel "
                       "that way; the condition is replicated over ``axis_name``."),
    DISTRIBUTED[1],
)
AdaptiveLayerNormConfig = make_config(
    "AdaptiveLayerNormConfig",
    (FEATURES, EPS, Option("order", "ChunkOrder", "seed", "chunk order of ``proj(cond)``; ``\"seed\"`` = (scale, "
                           "shift) = (gamma, beta)."),
     USE_SCALE.but(doc="the LayerNorm's own ``scale``."), USE_BIAS.but(doc="the LayerNorm's own ``bias``."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED, SCALE_INIT.but(doc="the LayerNorm's ``scale`` initializer; ``None``: ones."),
     BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros."),
     *dense_inits("proj", "torch ``nn.Linear``'s, U(+-1/sqrt(cond_features))")),
    _check_adaptive_layer_norm,
)


def adaptive_layer_norm_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    features = cfg.features
    k = len(resolve_order(cfg.order, "jln AdaptiveLayerNorm"))
    return {
        "proj": dense_specs(cond_features, k * features, kernel_init=cfg.proj_kernel_init,
                            bias_init=cfg.proj_bias_init),
        "norm": norm_affine_specs((features,), use_scale=cfg.use_scale, use_bias=cfg.use_bias,
                                  scale_init=cfg.scale_init, bias_init=cfg.bias_init),
    }


def apply_adaptive_layer_norm(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta``, ``(gamma, beta) = proj(cond)``."""
    fn = "jln AdaptiveLayerNorm"
    _validate.check_floating(x, fn)
    dt = compute_dtype(cfg.dtype, x)
    xi = cast_in(x, cfg.dtype)
    emb = dense(params["proj"], cond, dt, fn, "cond")
    norm = params["norm"]
    y, _ = adaptive_layer_norm(
        xi, emb, norm.get("scale"), norm.get("bias"), order=cfg.order, eps=cfg.eps, impl=cfg.impl,
        **distributed(cfg),
    )
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, -1, fn)


#: adaLN-Zero's chunk count -> (chunk order, the chunks returned after the modulated x)
ZERO_LAYOUTS: dict[int, tuple[str, tuple[str, ...]]] = {
    6: ("dit", ("gate_msa", "shift_mlp", "scale_mlp", "gate_mlp")),
    3: ("dit_single", ("gate_msa",)),
    9: ("sd35_x", ("gate_msa", "shift_mlp", "scale_mlp", "gate_mlp", "*x2", "gate_msa2")),
    4: ("lumina_zero", ("gate_msa", "scale_mlp", "gate_mlp")),
}
#: the norms an adaptive module may use: LayerNorm, diffusers' RMSNorm with torch's rounding
#: after each op, or (Mochi) diffusers' RMSNorm on float32 x, modulated in float32
ZERO_NORM_TYPES = ("layer_norm", "rms_norm", "fp32_rms_norm")


def _check_ada_ln_zero(cfg: Any) -> None:
    fn = "jln AdaLNZero"
    _validate.check_inits(cfg, fn, ("linear_kernel_init", "linear_bias_init", "scale_init", "bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    if cfg.num_chunks not in ZERO_LAYOUTS:
        raise ValueError(
            f"{fn}: `num_chunks` must be 6 (DiT / AdaLayerNormZero), 3 (AdaLayerNormZeroSingle), "
            f"9 (SD35AdaLayerNormZeroX) or 4 (LuminaRMSNormZero / MochiRMSNormZero); received "
            f"{cfg.num_chunks!r}."
        )
    _validate.check_choice(cfg.norm_type, "norm_type", ZERO_NORM_TYPES, fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNZeroConfig = make_config(
    "AdaLNZeroConfig",
    (FEATURES, Option("num_chunks", "int", 6, "6 (DiT order: shift_msa, scale_msa, gate_msa, shift_mlp, "
                      "scale_mlp, gate_mlp), 3 (shift_msa, scale_msa, gate_msa), 9 (DiT's six, then "
                      "shift_msa2, scale_msa2, gate_msa2: SD3.5's second attention) or 4 (scale_msa, "
                      "gate_msa, scale_mlp, gate_mlp: Lumina, Mochi; no shifts)."),
     EPS.but(default=1e-6, doc="the norm's eps (DiT: 1e-6)."), USE_BIAS.but(doc="the Dense ``linear``'s bias."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED, *dense_inits("linear", "zeros (adaLN-Zero)"),
     Option("norm_type", literal(ZERO_NORM_TYPES), "layer_norm", "``\"layer_norm\"``; ``\"rms_norm\"`` (diffusers' RMSNorm, "
            "then torch's rounding after each op: Lumina); ``\"fp32_rms_norm\"`` (diffusers' RMSNorm on "
            "float32 ``x``, modulated in float32 and rounded once to ``x.dtype``: Mochi)."),
     Option("elementwise_affine", "bool", False, "the norm's own ``scale`` (and a LayerNorm's ``bias``): "
            "Lumina's RMSNorm has one."),
     SCALE_INIT.but(doc="the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones."),
     BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros.")),
    _check_ada_ln_zero,
)


def _norm_params_specs(cfg: Any, features: int, norm_type: str, ln_bias: bool = True) -> dict[str, Any]:
    """The adaptive norm's own affine (``norm/scale`` and, for a LayerNorm with ``ln_bias``,
    ``norm/bias``) when ``cfg.elementwise_affine``; else nothing."""
    if not cfg.elementwise_affine:
        return {}
    bias = ln_bias and norm_type == "layer_norm"
    return {"norm": norm_affine_specs((features,), use_bias=bias, scale_init=cfg.scale_init, bias_init=cfg.bias_init)}


def ada_ln_zero_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    features = cfg.features
    kernel, bias = cfg.linear_kernel_init or zeros, cfg.linear_bias_init or zeros
    return {"linear": dense_specs(cond_features, cfg.num_chunks * features, use_bias=cfg.use_bias,
                                  kernel_init=kernel, bias_init=bias),
            **_norm_params_specs(cfg, features, cfg.norm_type)}


def modulated_norm(
    xi: Array, h: Array, cfg: Any, norm: Params, *, order: Any, norm_type: str,
    use: tuple[str | None, str | None] | None = None,
) -> tuple[Array, dict[str, Array]]:
    """``norm(xi)`` modulated by chunks of ``h``: :func:`jln.adaptive_layer_norm`, or
    :func:`jln.adaptive_rms_norm` in diffusers' convention (``fp32_rms_norm``: modulated in
    float32)."""
    if norm_type == "layer_norm":
        return adaptive_layer_norm(
            xi, h, norm.get("scale"), norm.get("bias"), order=order, use=use, eps=cfg.eps, impl=cfg.impl,
            **distributed(cfg),
        )
    return adaptive_rms_norm(
        xi, h, norm.get("scale"), order=order, use=use, eps=cfg.eps, convention="diffusers",
        modulation="float32" if norm_type == "fp32_rms_norm" else "rounded", impl=cfg.impl, **distributed(cfg),
    )


def apply_ada_ln_zero(params: Params, x: Array, emb: Array, cfg: Any) -> tuple[tuple[Array, ...], Stats]:
    """adaLN-Zero: ``chunks = linear(SiLU(emb))``; ``norm(x) * (1 + scale_msa) + shift_msa``."""
    fn = "jln AdaLNZero"
    _validate.check_floating(x, fn)
    _validate.check_floating(emb, fn, "emb")
    # diffusers runs the projection in the condition's dtype (its gates come back in it)
    dt = compute_dtype(cfg.dtype, emb)
    xi = cast_in(x, cfg.dtype)
    h = dense(params["linear"], silu(emb).astype(dt), dt, fn, "emb")
    order, rest = ZERO_LAYOUTS[cfg.num_chunks]
    norm = params.get("norm", {})
    y, ch = modulated_norm(xi, h, cfg, norm, order=order, norm_type=cfg.norm_type)
    if "*x2" in rest:  # SD3.5: the same normed x, modulated by the second attention's chunks
        ch = dict(ch)
        ch["*x2"], _ = modulated_norm(
            xi, h, cfg, norm, order=order, norm_type=cfg.norm_type, use=("shift_msa2", "scale_msa2"),
        )
        ch["*x2"] = cast_out(ch["*x2"], cfg.dtype)
    y = cast_out(y, cfg.dtype)
    stats = record(cfg.monitor, xi, y, -1, fn)
    return (y, *(ch[n] for n in rest)), stats


NORM_TYPES = ("layer_norm", "rms_norm")


#: where :class:`AdaLNContinuous`'s projection runs: in ``x``'s dtype (diffusers
#: ``AdaLayerNormContinuous`` casts ``SiLU(cond)`` to it) or in the condition's own
PROJECT_IN = ("x", "cond")


def _check_ada_ln_continuous(cfg: Any) -> None:
    fn = "jln AdaLNContinuous"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    _validate.check_choice(cfg.norm_type, "norm_type", NORM_TYPES, fn)
    _validate.check_choice(cfg.project_in, "project_in", PROJECT_IN, fn)
    names = resolve_order(cfg.order, fn)
    if not names or not set(names) <= {"shift", "scale"}:
        raise ValueError(
            f"{fn}: `order` must name a 'scale' and/or a 'shift' chunk (e.g. "
            f"'continuous' = (scale, shift), 'dit_final' = (shift, scale), ('shift',)); received "
            f"{cfg.order!r} = {names}."
        )
    check_activation(cfg.activation, fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNContinuousConfig = make_config(
    "AdaLNContinuousConfig",
    (FEATURES, EPS.but(doc="the norm's eps (1e-5)."),
     Option("elementwise_affine", "bool", True, "the norm's own ``scale`` (and ``bias`` for layer_norm)."),
     USE_BIAS.but(doc="the Dense bias and the LayerNorm bias (diffusers' ``bias``)."),
     Option("norm_type", literal(NORM_TYPES), "layer_norm", "``\"layer_norm\"`` or ``\"rms_norm\"`` (diffusers' RMSNorm)."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED,
     SCALE_INIT.but(doc="the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones."),
     BIAS_INIT.but(doc="the norm's ``bias`` initializer; ``None``: zeros."),
     *dense_inits("linear", "torch ``nn.Linear``'s"),
     Option("order", "ChunkOrder", "continuous", "chunk order of ``linear(SiLU(cond))``: ``\"continuous\"`` "
            "(scale, shift: diffusers ``AdaLayerNormContinuous``, ``AdaLayerNorm``), ``\"dit_final\"`` "
            "(shift, scale: ``AdaLayerNorm(chunk_dim=1)``) or ``(\"scale\", \"shift\")``-like tuples."),
     Option("project_in", literal(PROJECT_IN), "x", "the dtype the Dense runs in: ``\"x\"`` (``SiLU(cond)`` cast to "
            "``x``'s dtype, as ``AdaLayerNormContinuous``) or ``\"cond\"`` (the condition's own, as "
            "``AdaLayerNorm`` and Qwen2.5-Omni's ``AdaLayerNormZero_Final``)."),
     Option("activation", literal(COND_ACTIVATIONS, optional=True), "silu", "the activation applied to ``cond`` before ``linear``: "
            "``\"silu\"`` (diffusers), ``None`` (CogView4's final norm) or another of "
            "``jln._modules.COND_ACTIVATIONS``."),
     ),
    _check_ada_ln_continuous,
)


def ada_ln_continuous_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    features = cfg.features
    k = len(resolve_order(cfg.order, "jln AdaLNContinuous"))
    specs: dict[str, Any] = {"linear": dense_specs(cond_features, k * features, use_bias=cfg.use_bias,
                                                   kernel_init=cfg.linear_kernel_init,
                                                   bias_init=cfg.linear_bias_init)}
    # diffusers: `bias` switches the Linear's and the LayerNorm's bias; its RMSNorm has none
    return {**specs, **_norm_params_specs(cfg, features, cfg.norm_type, ln_bias=cfg.use_bias)}


def apply_ada_ln_continuous(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """SD3/Flux ``norm_out``: ``(scale, shift) = linear(SiLU(cond))``; ``norm(x) * (1 + scale) + shift``."""
    fn = "jln AdaLNContinuous"
    _validate.check_floating(x, fn)
    _validate.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, x if cfg.project_in == "x" else cond)
    xi = cast_in(x, cfg.dtype)
    h = dense(params["linear"], activate(cfg.activation, cond).astype(dt), dt, fn, "cond")
    y, _ = modulated_norm(xi, h, cfg, params.get("norm", {}), order=cfg.order, norm_type=cfg.norm_type)
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, -1, fn)



ADAPTIVE_LAYER_NORM = Kind(
    "AdaptiveLayerNorm", AdaptiveLayerNormConfig, adaptive_layer_norm_specs, apply_adaptive_layer_norm,
    ("x", "cond"),
    doc="The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta`` with ``(gamma, beta) = proj(cond)``.\n\n"
        "``proj`` is a Dense ``cond_features -> 2 * features`` (torch ``nn.Linear``); the LayerNorm "
        "has its own affine (``norm/scale``, ``norm/bias``). Calls :func:`jln.adaptive_layer_norm` "
        "(norm and modulation in one fused body).",
    returns="(``__call__(x, cond)``): ``x [B, ..., d]`` modulated by ``cond [B, c]`` (broadcast over "
            "the token axes) or ``cond`` with ``x``'s leading shape; " + MODULATED,
    raises="TypeError, ValueError: non-floating inputs, mismatched feature sizes, a bad ``order``, "
           "an initializer that is not callable (NNX: a random one without ``rngs``).",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaptiveLayerNorm(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 8)",
              NNX_IMPORTS + "  >>> m = jnnx.AdaptiveLayerNorm(3, 8, rngs=nnx.Rngs(0))\n  >>> m(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3))).shape\n  (2, 5, 8)"),
    rngs_doc=DENSE_RNGS, shapes=(cond_features("cond", "proj/kernel"),), positional=1,
)
ADA_LN_ZERO = Kind(
    "AdaLNZero", AdaLNZeroConfig, ada_ln_zero_specs, apply_ada_ln_zero, ("x", "emb"), output="tuple[jax.Array, ...]",
    doc="DiT's adaLN-Zero (diffusers ``AdaLayerNormZero`` / ``AdaLayerNormZeroSingle`` / "
        "``SD35AdaLayerNormZeroX`` / ``LuminaRMSNormZero`` / ``MochiRMSNormZero``, Qwen2.5-Omni's "
        "``AdaLayerNormZero``).\n\n"
        "``chunks = linear(SiLU(emb))`` with ``linear`` zero-initialised (the block starts as the "
        "identity), run in ``emb``'s dtype; ``x_mod = norm(x) * (1 + scale_msa) + shift_msa`` with "
        "a LayerNorm of eps 1e-6 and no affine by default (``norm_type``, ``elementwise_affine``: "
        "diffusers' RMSNorm, as :func:`jln.adaptive_rms_norm`).",
    returns="(``__call__(x, emb)``): ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp)`` for 6 "
            "chunks, ``(x_mod, gate_msa)`` for 3, ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, "
            "x_mod2, gate_msa2)`` for 9 (``x_mod2``: the same normed ``x`` modulated by ``shift_msa2``, "
            "``scale_msa2``), ``(x_mod, gate_msa, scale_mlp, gate_mlp)`` for 4; ``x_mod`` like ``x``, "
            "the others ``[B, d]``.",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes, ``num_chunks`` not 3, 4, 6 or "
           "9, an unknown ``norm_type``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNZero(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 8))\n  >>> len(m.apply(m.init(jax.random.key(0), x, c), x, c))\n  5",
              NNX_IMPORTS + "  >>> x_mod, *rest = jnnx.AdaLNZero(8, 8)(jnp.ones((2, 5, 8)), jnp.ones((2, 8)))\n"
              "  >>> x_mod.shape, len(rest)\n  ((2, 5, 8), 4)"),
    rngs_doc="``nnx.Rngs``, needed only by a random ``linear_kernel_init``/``linear_bias_init`` (the "
             "default zero init takes no key).",
    shapes=(cond_features("emb", "linear/kernel"),), positional=1,
)
ADA_LN_CONTINUOUS = Kind(
    "AdaLNContinuous", AdaLNContinuousConfig, ada_ln_continuous_specs, apply_ada_ln_continuous, ("x", "cond"),
    doc="SD3/Flux final-layer norm (diffusers ``AdaLayerNormContinuous``; also ``AdaLayerNorm`` and "
        "Qwen2.5-Omni's ``AdaLayerNormZero_Final`` through ``order`` and ``project_in``).\n\n"
        "``(scale, shift) = linear(SiLU(cond))`` (that order by default; ``activation`` replaces or drops the "
        "SiLU, an ``order`` of one chunk gives ``norm(x) + shift`` or ``norm(x) * (1 + scale)``); ``norm(x) * (1 + scale) + shift``, "
        "``norm`` a LayerNorm (``jln.adaptive_layer_norm``) or diffusers' RMSNorm "
        "(``jln.rms_norm(convention=\"diffusers\")`` then ``jln.modulate``).",
    returns="(``__call__(x, cond)``, ``cond`` also as ``temb=``, diffusers' keyword): " + MODULATED,
    raises="TypeError, ValueError: as :class:`AdaptiveLayerNorm`; an unknown ``norm_type``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNContinuous(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 8)",
              NNX_IMPORTS + "  >>> jnnx.AdaLNContinuous(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))).shape\n  (2, 5, 8)"),
    rngs_doc=DENSE_RNGS, shapes=(cond_features("cond", "linear/kernel"),), positional=1,
    input_aliases=(("cond", "temb"),),
)


# --------------------------------------------------------------------------- AdaLNZeroJoint


def _check_joint(cfg: Any) -> None:
    fn = "jln AdaLNZeroJoint"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    if cfg.num_chunks not in (6, 12):
        raise ValueError(f"{fn}: `num_chunks` must be 6 (CogVideoX) or 12 (CogView3-Plus); received "
                         f"{cfg.num_chunks!r}.")
    if cfg.layout is not None:
        _validate.check_choice(cfg.layout, "layout", tuple(JOINT_LAYOUTS), fn)
        if JOINT_LAYOUTS[cfg.layout][0] != cfg.num_chunks:
            raise ValueError(f"{fn}: layout={cfg.layout!r} splits the projection into "
                             f"{JOINT_LAYOUTS[cfg.layout][0]} chunks; received num_chunks={cfg.num_chunks}.")
    M.check_activation(cfg.activation, fn)
    if cfg.num_chunks == 12 and cfg.elementwise_affine:
        raise ValueError(f"{fn}: num_chunks=12 (CogView3-Plus: two LayerNorms without affine) takes "
                         f"elementwise_affine=False.")
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


_DIT12_AFTER = (("gate_msa", "shift_mlp", "scale_mlp", "gate_mlp"),
                ("c_gate_msa", "c_shift_mlp", "c_scale_mlp", "c_gate_mlp"))
#: layout -> (chunk count, order, the x and context chunk pairs (shift, scale), the chunks
#: returned after x, after context; ``*`` marks a gate returned as ``[B, 1, d]``)
JOINT_LAYOUTS: dict[str, tuple[int, str, tuple[str, str], tuple[str, str], tuple[str, ...], tuple[str, ...]]] = {
    "cogvideox": (6, "cogvideox", ("shift", "scale"), ("enc_shift", "enc_scale"), (), ("*gate", "*enc_gate")),
    "cogview3plus": (12, "cogview3plus", ("shift_msa", "scale_msa"), ("c_shift_msa", "c_scale_msa"), *_DIT12_AFTER),
    # CogView4 / GLM-Image: the image's and the text's chunks interleaved
    "cogview4": (12, "cogview4", ("shift_msa", "scale_msa"), ("c_shift_msa", "c_scale_msa"), *_DIT12_AFTER),
    # EasyAnimate: CogVideoX's chunks, the gates returned as [B, d]
    "easyanimate": (6, "cogvideox", ("shift", "scale"), ("enc_shift", "enc_scale"), (), ("gate", "enc_gate")),
}
#: the layout of ``layout=None``, by chunk count
_DEFAULT_LAYOUT = {6: "cogvideox", 12: "cogview3plus"}


AdaLNZeroJointConfig = make_config(
    "AdaLNZeroJointConfig",
    (FEATURES, EPS, Option("elementwise_affine", "bool", True, "the LayerNorm's own ``scale`` and ``bias``."),
     USE_BIAS.but(doc="the Dense ``linear``'s bias."), *COMPUTE, *ADAPTIVE_DISTRIBUTED,
     SCALE_INIT.but(doc="the LayerNorm's ``scale`` initializer; ``None``: ones."),
     BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros."),
     *dense_inits("linear", "torch ``nn.Linear``'s"),
     Option("num_chunks", "int", 6, "6 (CogVideoX: shift, scale, gate, enc_shift, enc_scale, enc_gate) or 12 "
            "(CogView3-Plus: DiT's six for ``x``, then for ``context``; LayerNorms without affine)."),
     Option("layout", literal(JOINT_LAYOUTS, optional=True), None, "how the chunks are laid out and returned: ``None`` (by "
            "``num_chunks``: ``\"cogvideox\"`` or ``\"cogview3plus\"``), ``\"cogview4\"`` (12 chunks, the "
            "image's and the text's interleaved: CogView4, GLM-Image) or ``\"easyanimate\"`` (CogVideoX's six, "
            "gates returned ``[B, d]``)."),
     Option("activation", literal(COND_ACTIVATIONS, optional=True), "silu", "applied to ``emb`` before ``linear``: ``\"silu\"``; "
            "``None`` for CogView4 / GLM-Image.")),
    _check_joint,
)


def joint_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    specs: dict[str, Any] = {"linear": dense_specs(cond_features, cfg.num_chunks * cfg.features, use_bias=cfg.use_bias,
                                                   kernel_init=cfg.linear_kernel_init,
                                                   bias_init=cfg.linear_bias_init)}
    return {**specs, **_norm_params_specs(cfg, cfg.features, "layer_norm")}


def _token_axis(g: Array) -> Array:
    """``g[:, None, :]``: a per-example chunk with a token axis."""
    return g.reshape(g.shape[:-1] + (1,) + g.shape[-1:])


def apply_joint(params: Params, x: Array, context: Array, emb: Array, cfg: Any) -> tuple[tuple[Array, ...], Stats]:
    """CogVideoX: ``(shift, scale, gate, enc_shift, enc_scale, enc_gate) = linear(SiLU(emb))``;
    the one LayerNorm modulates ``x`` and ``context`` with their own chunks."""
    fn = "jln AdaLNZeroJoint"
    for v, name in ((x, "x"), (context, "context"), (emb, "emb")):
        _validate.check_floating(v, fn, name)
    dt = compute_dtype(cfg.dtype, emb)
    xi, ci = cast_in(x, cfg.dtype), cast_in(context, cfg.dtype)
    h = dense(params["linear"], M.activate(cfg.activation, emb).astype(dt), dt, fn, "emb")
    norm = params.get("norm", {})
    _, order, use_x, use_c, after_x, after_c = JOINT_LAYOUTS[cfg.layout or _DEFAULT_LAYOUT[cfg.num_chunks]]
    y, ch = modulated_norm(xi, h, cfg, norm, order=order, norm_type="layer_norm", use=use_x)
    c, _ = modulated_norm(ci, h, cfg, norm, order=order, norm_type="layer_norm", use=use_c)
    y, c = cast_out(y, cfg.dtype), cast_out(c, cfg.dtype)
    stats = record(cfg.monitor, xi, y, -1, fn)

    def out(n: str) -> Array:
        return _token_axis(ch[n[1:]]) if n.startswith("*") else ch[n]

    if cfg.num_chunks == 6:  # CogVideoX and EasyAnimate return both streams first
        return (y, c, *(out(n) for n in after_c)), stats
    return (y, *(out(n) for n in after_x), c, *(out(n) for n in after_c)), stats


ADA_LN_ZERO_JOINT = Kind(
    "AdaLNZeroJoint", AdaLNZeroJointConfig, joint_specs, apply_joint, ("x", "context", "emb"),
    output="tuple[jax.Array, ...]",
    doc="adaLN-Zero over two token streams sharing one LayerNorm (diffusers ``CogVideoXLayerNormZero``; "
        "``CogView3PlusAdaLayerNormZeroTextImage`` with ``num_chunks=12``).\n\n"
        "``(shift, scale, gate, enc_shift, enc_scale, enc_gate) = linear(SiLU(emb))`` in ``emb``'s "
        "dtype; ``x_mod = LN(x) * (1 + scale) + shift`` and ``context_mod = LN(context) * (1 + enc_scale) "
        "+ enc_shift`` (LayerNorm with affine, eps 1e-5), as :func:`jln.adaptive_layer_norm`. ``layout`` "
        "and ``activation`` give CogView4's / GLM-Image's (interleaved chunks, no SiLU) and EasyAnimate's.",
    returns="(``__call__(x, context, emb)``): ``(x_mod, context_mod, gate, enc_gate)`` with ``[B, 1, d]`` "
            "gates (6 chunks; ``[B, d]`` with ``layout=\"easyanimate\"``); ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, context_mod, c_gate_msa, "
            "c_shift_mlp, c_scale_mlp, c_gate_mlp)`` with ``[B, d]`` chunks (12).",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes, an initializer that is not "
           "callable.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNZeroJoint(features=8)\n  >>> x, t, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3, 8)), jnp.ones((2, 4))\n  >>> [o.shape for o in m.apply(m.init("
              "jax.random.key(0), x, t, c), x, t, c)][2]\n  (2, 1, 8)",
              NNX_IMPORTS + "  >>> m = jnnx.AdaLNZeroJoint(4, 8, rngs=nnx.Rngs(0))\n  >>> len(m(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3, 8)), jnp.ones((2, 4))))\n  4"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    shapes=(cond_features("emb", "linear/kernel", input=2),),
    positional=1,
)

# --------------------------------------------------------------------------- AdaLNScale


#: how :class:`AdaLNScale`'s scale meets ``x``: over the token axes (a ``[B, c]`` condition
#: broadcast as ``[B, 1, ..., d]``), or as diffusers writes it, ``(1 + scale)[:, None]`` under
#: torch's broadcasting
SCALE_BROADCASTS = ("tokens", "torch")


def _check_scale(cfg: Any) -> None:
    fn = "jln AdaLNScale"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    if cfg.out_features is not None:
        object.__setattr__(cfg, "out_features", _validate.check_positive(cfg.out_features, "out_features", fn))
    _validate.check_choice(cfg.norm_type, "norm_type", ZERO_NORM_TYPES, fn)
    _validate.check_choice(cfg.broadcast, "broadcast", SCALE_BROADCASTS, fn)
    if cfg.norm_type == "fp32_rms_norm" and cfg.elementwise_affine:
        raise ValueError(
            f"{fn}: norm_type='fp32_rms_norm' (Mochi's modulated RMSNorm) has no weight; build it "
            f"with elementwise_affine=False."
        )
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNScaleConfig = make_config(
    "AdaLNScaleConfig",
    (FEATURES, EPS.but(doc="the norm's eps (1e-5)."),
     Option("elementwise_affine", "bool", True, "the norm's own ``scale`` (and ``bias`` for layer_norm)."),
     USE_BIAS.but(doc="the Dense biases and the LayerNorm bias (diffusers' ``bias``)."),
     Option("norm_type", literal(ZERO_NORM_TYPES), "layer_norm", "``\"layer_norm\"``, ``\"rms_norm\"`` (diffusers' RMSNorm) or "
            "``\"fp32_rms_norm\"`` (Mochi: float32 norm and modulation, one rounding)."),
     Option("out_features", "int | None", None, "with a size, a Dense ``linear_2`` (``features -> "
            "out_features``) after the modulation (Lumina's ``out_dim``)."),
     Option("broadcast", literal(SCALE_BROADCASTS), "tokens", "``\"tokens\"``: a ``[B, c]`` condition scales "
            "every token of ``x [B, ..., d]``; ``\"torch\"``: as diffusers' ``(1 + scale)[:, None]`` under "
            "torch's broadcasting, whatever the ranks (a 3-D ``cond [B, L', c]`` against ``x [B, L, d]`` "
            "gives ``[B, B, L, d]``, as torch): what ``jln.interop.from_torch`` builds."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED,
     SCALE_INIT.but(doc="the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones."),
     BIAS_INIT.but(doc="the norm's ``bias`` initializer; ``None``: zeros."),
     *dense_inits("linear", "torch ``nn.Linear``'s")),
    _check_scale,
)


def scale_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    def lin(n_in: int, n_out: int) -> dict[str, Any]:
        return dense_specs(n_in, n_out, use_bias=cfg.use_bias, kernel_init=cfg.linear_kernel_init,
                           bias_init=cfg.linear_bias_init)

    specs: dict[str, Any] = {"linear_1": lin(cond_features, cfg.features)}
    specs.update(_norm_params_specs(cfg, cfg.features, cfg.norm_type, ln_bias=cfg.use_bias))
    if cfg.out_features is not None:
        specs["linear_2"] = lin(cfg.features, cfg.out_features)
    return specs


def apply_scale(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """``norm(x) * (1 + linear_1(SiLU(cond)))``, then ``linear_2``."""
    fn = "jln AdaLNScale"
    _validate.check_floating(x, fn)
    _validate.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, x)  # diffusers casts SiLU(cond) to x's dtype
    xi = cast_in(x, cfg.dtype)
    h = dense(params["linear_1"], silu(cond).astype(dt), dt, fn, "cond")
    if cfg.broadcast == "torch":
        xi, h, _ = torch_broadcast(xi, h, fn)
    y, _ = modulated_norm(xi, h, cfg, params.get("norm", {}), order="scale_only", norm_type=cfg.norm_type)
    if "linear_2" in params:
        y = dense(params["linear_2"], y, y.dtype, fn, "the modulated x")
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, -1, fn)


ADA_LN_SCALE = Kind(
    "AdaLNScale", AdaLNScaleConfig, scale_specs, apply_scale, ("x", "cond"),
    doc="Scale-only adaptive norm (diffusers ``LuminaLayerNormContinuous``, ``MochiLayerNormContinuous``).\n\n"
        "``scale = linear_1(SiLU(cond))`` (in ``x``'s dtype); ``norm(x) * (1 + scale)``, then the optional "
        "``linear_2``. ``norm`` is a LayerNorm (:func:`jln.adaptive_layer_norm`) or diffusers' RMSNorm "
        "(:func:`jln.adaptive_rms_norm`, ``fp32_rms_norm``: Mochi's float32 modulation).",
    returns="(``__call__(x, cond)``): array like ``x`` (last axis ``out_features`` with ``linear_2``).",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes, an unknown ``norm_type``, "
           "``fp32_rms_norm`` with ``elementwise_affine``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNScale(features=8, out_features=3)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 3)",
              NNX_IMPORTS + "  >>> jnnx.AdaLNScale(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))).shape\n  (2, 5, 8)"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    shapes=(cond_features("cond", "linear_1/kernel"),),
    positional=1,
)

# --------------------------------------------------------------------------- AdaLNSingle

#: PixArt's sinusoidal projection width (diffusers ``Timesteps(num_channels=256)``)
TIME_CHANNELS = 256


def timestep_embedding(t: Array, channels: int = TIME_CHANNELS, *, max_period: float = 10000.0) -> Array:
    """diffusers' ``get_timestep_embedding(t, channels, flip_sin_to_cos=True,
    downscale_freq_shift=0)`` in float32: ``[cos(t * f), sin(t * f)]`` with
    ``f = exp(-log(max_period) * arange(channels // 2) / (channels // 2))``, each op rounded
    to float32 as torch evaluates it (sin and cos may differ from torch's in the last bit)."""
    f32 = jnp.float32
    half = channels // 2
    # the frequencies are constants: torch's float32 exponent, its exp correctly rounded (torch's
    # own exp agrees on 126 of PixArt's 128; XLA's float32 exp on 111)
    exponent = (np.float32(-math.log(max_period)) * np.arange(half, dtype=np.float32)) / np.float32(half)
    freqs = jnp.asarray(np.exp(exponent.astype(np.float64)).astype(np.float32))
    arg = t.astype(f32)[:, None] * freqs[None, :]
    emb = jnp.concatenate([jnp.cos(arg), jnp.sin(arg)], axis=-1)
    if channels % 2:
        emb = jnp.pad(emb, ((0, 0), (0, 1)))
    return emb


def _check_single(cfg: Any) -> None:
    fn = "jln AdaLNSingle"
    _validate.check_inits(cfg, fn, ("kernel_init", "bias_init"))
    _validate.set_positive(cfg, ("features", "num_chunks"), fn)
    if cfg.use_additional_conditions and cfg.features % 3:
        raise ValueError(
            f"{fn}: with use_additional_conditions the resolution (2 values) and aspect ratio embed "
            f"into features // 3 each and must add up to `features`, so `features` must be a multiple "
            f"of 3; received {cfg.features}."
        )
    _validate.check_module_options(cfg, fn)


AdaLNSingleConfig = make_config(
    "AdaLNSingleConfig",
    (FEATURES.but(doc="d, the embedding size (PixArt's ``embedding_dim``)."),
     Option("use_additional_conditions", "bool", False, "embed the resolution and aspect ratio too "
            "(PixArt-alpha at 1024 px)."),
     *COMPUTE, *M.INITS,
     Option("num_chunks", "int", 6, "modulation chunks ``linear`` produces (PixArt: 6; LTX-2's "
            "``num_mod_params``).")),
    _check_single,
)


def single_specs(cfg: Any) -> dict[str, Any]:
    d = cfg.features

    def mlp(n_out: int) -> dict[str, Any]:
        return {"linear_1": dense_specs(TIME_CHANNELS, n_out, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init),
                "linear_2": dense_specs(n_out, n_out, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)}

    emb = {"timestep_embedder": mlp(d)}
    if cfg.use_additional_conditions:
        emb.update(resolution_embedder=mlp(d // 3), aspect_ratio_embedder=mlp(d // 3))
    return {"emb": emb, "linear": dense_specs(d, cfg.num_chunks * d, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)}


def _mlp(p: Params, v: Array, dt: Any, fn: str) -> Array:
    return dense(p["linear_2"], silu(dense(p["linear_1"], v, dt, fn)), dt, fn)


def as_dtype(value: Any, name: str, fn: str) -> jnp.dtype | None:
    """A JAX/NumPy dtype, or a torch dtype (``torch.bfloat16``) as the same JAX dtype; ``None``
    stays ``None``."""
    if value is None:
        return None
    if type(value).__module__ == "torch":  # a torch.dtype: "torch.bfloat16"
        value = str(value).removeprefix("torch.")
    try:
        return jnp.dtype(value)
    except TypeError:
        raise TypeError(f"{fn}: `{name}` must be a dtype (JAX's, NumPy's or torch's) or None; received "
                        f"{value!r}.") from None


def apply_single(
    params: Params, timestep: Array, cfg: Any, added_cond_kwargs: Mapping[str, Any] | None = None,
    batch_size: int | None = None, hidden_dtype: Any = None, resolution: Array | None = None,
    aspect_ratio: Array | None = None,
) -> tuple[tuple[Array, Array], Stats]:
    """PixArt's adaLN-single: ``cond = MLP(sinusoid(t))`` (+ the size embeddings);
    returns ``(linear(SiLU(cond)), cond)``. Called as diffusers' ``forward(timestep,
    added_cond_kwargs=None, batch_size=None, hidden_dtype=None)``; ``resolution`` and
    ``aspect_ratio`` may also come as keywords of their own."""
    fn = "jln AdaLNSingle"
    if added_cond_kwargs is not None and not isinstance(added_cond_kwargs, Mapping):
        raise TypeError(f"{fn}: `added_cond_kwargs` (the second argument, as diffusers') must be a dict "
                        f"{{'resolution': ..., 'aspect_ratio': ...}} or None; received a "
                        f"{type(added_cond_kwargs).__name__}. Pass resolution= and aspect_ratio= by keyword.")
    if added_cond_kwargs:
        unknown = sorted(set(added_cond_kwargs) - {"resolution", "aspect_ratio"})
        if unknown:
            raise TypeError(f"{fn}: `added_cond_kwargs` takes 'resolution' and 'aspect_ratio' (diffusers'); "
                            f"received {unknown}.")
        if (resolution is not None and "resolution" in added_cond_kwargs) or (
                aspect_ratio is not None and "aspect_ratio" in added_cond_kwargs):
            raise TypeError(f"{fn}: pass the size conditions once, in `added_cond_kwargs` or as keywords.")
        resolution = added_cond_kwargs.get("resolution", resolution)
        aspect_ratio = added_cond_kwargs.get("aspect_ratio", aspect_ratio)
    t = jnp.asarray(timestep)
    if t.ndim != 1:
        raise ValueError(f"{fn}: `timestep` must be 1-D [B] (one per example); received shape {tuple(t.shape)}.")
    # diffusers casts the float32 sinusoid to `hidden_dtype` (None: kept float32)
    dt = jnp.dtype(as_dtype(hidden_dtype, "hidden_dtype", fn) or cfg.dtype or jnp.float32)
    e = params["emb"]
    cond = _mlp(e["timestep_embedder"], timestep_embedding(t).astype(dt), dt, fn)
    if cfg.use_additional_conditions:
        if resolution is None or aspect_ratio is None:
            raise ValueError(f"{fn}: use_additional_conditions=True needs `resolution` [B, 2] and "
                             f"`aspect_ratio` [B, 1]; received resolution={resolution!r}, "
                             f"aspect_ratio={aspect_ratio!r}.")
        b = t.shape[0] if batch_size is None else _validate.check_positive(batch_size, "batch_size", fn)
        sizes = [
            _mlp(e[name], timestep_embedding(jnp.asarray(v).reshape(-1)).astype(dt), dt, fn).reshape(b, -1)
            for name, v in (("resolution_embedder", resolution), ("aspect_ratio_embedder", aspect_ratio))
        ]
        extra = jnp.concatenate(sizes, axis=1)
        if extra.shape[1] != cond.shape[1]:
            raise ValueError(f"{fn}: `resolution` and `aspect_ratio` must hold 2 and 1 values per example; "
                             f"received shapes {jnp.shape(resolution)} and {jnp.shape(aspect_ratio)}.")
        if cond.shape[0] not in (1, extra.shape[0]):
            raise ValueError(f"{fn}: {cond.shape[0]} timesteps do not broadcast against the size conditions of "
                             f"batch_size={b}.")
        cond = (cond + extra.astype(cond.dtype)).astype(cond.dtype)
    out = dense(params["linear"], silu(cond), cond.dtype, fn)
    return (out, cond), None


ADA_LN_SINGLE = Kind(
    "AdaLNSingle", AdaLNSingleConfig, single_specs, apply_single, ("timestep",), output="tuple[jax.Array, jax.Array]",
    doc="PixArt's adaLN-single (diffusers ``AdaLayerNormSingle``): the one timestep embedding that "
        "all blocks' ``scale_shift_table`` modulations share; it normalizes nothing itself.\n\n"
        "``cond = linear_2(SiLU(linear_1(sinusoid(t))))`` (the sinusoid of 256 channels, cos then sin, "
        "in float32, cast to ``hidden_dtype``), plus the resolution and aspect-ratio embeddings with "
        "``use_additional_conditions``; returns ``(linear(SiLU(cond)), cond)``, the ``[B, 6d]`` "
        "modulation and the embedded timestep.",
    returns="(``__call__(timestep, added_cond_kwargs=None, batch_size=None, hidden_dtype=None)``, diffusers' "
            "arguments): ``([B, num_chunks * features], [B, features])`` in ``hidden_dtype`` (a JAX or a torch "
            "dtype; default ``dtype``, else float32). ``added_cond_kwargs`` holds ``resolution`` ``[B, 2]`` and "
            "``aspect_ratio`` ``[B, 1]`` (with ``use_additional_conditions``; also taken as keywords of their own).",
    raises="ValueError: a ``timestep`` that is not 1-D, missing or misshapen size conditions, "
           "``features`` not a multiple of 3 with ``use_additional_conditions``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNSingle(features=8)\n  >>> t = jnp.array([1.0, 500.0])\n  >>> "
              "[o.shape for o in m.apply(m.init(jax.random.key(0), t), t)]\n  [(2, 48), (2, 8)]",
              NNX_IMPORTS + "  >>> m = jnnx.AdaLNSingle(8, rngs=nnx.Rngs(0))\n  >>> [o.shape for o in "
              "m(jnp.array([1.0, 500.0]))]\n  [(2, 48), (2, 8)]"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    call_options=(("added_cond_kwargs", None, "Mapping[str, Any] | None"), ("batch_size", None, "int | None"),
                  ("hidden_dtype", None, "Any"), ("resolution", None, "jax.Array | None"),
                  ("aspect_ratio", None, "jax.Array | None")),
    positional=1,
)
