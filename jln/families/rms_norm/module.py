"""The ``RMSNorm`` module kind: its options, parameters and the call of :func:`jln.rms_norm`
that both faces make."""

from __future__ import annotations

from typing import Any

import jax

from jln import _validate
from jln._modules import (
    AXIS,
    BIAS_INIT,
    COMPUTE,
    DISTRIBUTED,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    NUM_FEATURES_OR_NONE,
    SCALE_INIT,
    TORCH_NAMES,
    USE_BIAS,
    USE_SCALE,
    Kind,
    Option,
    Params,
    ParamSpec,
    Stats,
    apply_norm,
    literal,
    make_config,
    norm_affine_specs,
    ones,
    zeros,
)
from jln.families.rms_norm.function import rms_norm
from jln.families.rms_norm.spec import ALIASES, resolve_convention

Array = jax.Array


def _canonical(cfg: Any) -> str:
    """The convention's canonical name (``"qwen2"`` -> ``"llama"``)."""
    return resolve_convention(cfg.convention, "jln RMSNorm")


def _check_rms_norm(cfg: Any) -> None:
    fn = "jln RMSNorm"
    resolve_convention(cfg.convention, fn)
    _validate.check_torch_names(cfg, fn)
    _validate.check_inits(cfg, fn)
    if cfg.eps is not None:
        _validate.check_eps(cfg.eps, fn)
    if cfg.use_bias and (_canonical(cfg) != "diffusers" or not cfg.use_scale):
        raise ValueError(
            f"{fn}: use_bias=True is only defined for convention='diffusers' with "
            f"use_scale=True (diffusers' RMSNorm with bias); received "
            f"convention={cfg.convention!r}, use_scale={cfg.use_scale}."
        )
    _validate.check_module_options(cfg, fn)


RMSNormConfig = make_config(
    "RMSNormConfig",
    (EPS.but(type="float | None", default=None, doc="``None`` takes the convention's default (torch: "
             "``finfo(float32).eps``)."),
     Option("convention", literal(ALIASES), "torch", "``\"torch\"``, ``\"llama\"``, ``\"gemma\"``, ``\"t5\"``, "
            "``\"diffusers\"``, ``\"seed\"``, ``\"eager\"``, ``\"round_rstd\"``, ``\"input_scaled\"`` or "
            "``\"gemma_rounded\"`` (cast order and eps default as :func:`jln.rms_norm`); ``\"input_scaled\"`` and "
            "``\"gemma_rounded\"`` also initialise ``scale`` to 0; "
            "``\"gemma\"`` initialises ``scale`` to 0 (it multiplies by ``1 + scale``). With "
            "``dtype=None`` the output dtype is the convention's (``\"llama\"``: bf16 x with float32 "
            "scale gives float32)."),
     AXIS, USE_SCALE.but(doc="learnable ``scale``."),
     USE_BIAS.but(default=False, doc="learnable ``bias`` (``convention=\"diffusers\"`` only)."), *COMPUTE,
     *DISTRIBUTED, SCALE_INIT.but(doc="as :class:`LayerNorm`'s; ``None``: the convention's identity (ones, "
                                  "zeros for ``\"gemma\"``, ``\"input_scaled\"`` and ``\"gemma_rounded\"``)."), BIAS_INIT, TORCH_NAMES),
    _check_rms_norm, canonical=property(_canonical),
)


def rms_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    # Gemma multiplies by (1 + scale), so its identity weight is 0.
    return norm_affine_specs(features, use_scale=cfg.use_scale, use_bias=cfg.use_bias, scale_init=cfg.scale_init,
                             bias_init=cfg.bias_init, default_scale=zeros if _canonical(cfg) in ("gemma", "input_scaled", "gemma_rounded") else ones)


def apply_rms_norm(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.rms_norm(x, scale, convention=...)`` with the module's dtype rule and monitor."""
    return apply_norm(rms_norm, params, x, cfg, "jln RMSNorm", convention=cfg.convention)



RMS_NORM = Kind(
    "RMSNorm", RMSNormConfig, rms_norm_specs, apply_rms_norm, ("x",),
    doc="RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.\n\n"
        "The exact cast order and eps default of each convention are those of :func:`jln.rms_norm`.",
    returns="(``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside "
           "the diffusers convention; otherwise as :class:`LayerNorm`.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.RMSNorm(convention=\"llama\")\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x).dtype\n  dtype('float32')",
              NNX_IMPORTS + "  >>> jnnx.RMSNorm(4, convention=\"gemma\").scale[...]\n  Array([0., 0., 0., 0.], "
              "dtype=float32)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES_OR_NONE,), flax_twin=True,
)
