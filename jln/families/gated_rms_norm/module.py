"""The ``GatedRMSNorm`` module kind: its options, parameters and the call of
:func:`jln.gated_rms_norm` that both faces make."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jln import _validate
from jln._modules import (
    AXIS,
    COMPUTE,
    DISTRIBUTED,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    NUM_FEATURES,
    SCALE_INIT,
    USE_SCALE,
    Kind,
    Option,
    Params,
    ParamSpec,
    Stats,
    cast_in,
    cast_out,
    distributed,
    literal,
    make_config,
    ones,
    param_spec,
    record,
)
from jln.families.gated_rms_norm.function import gated_rms_norm
from jln.families.gated_rms_norm.spec import ACTIVATIONS, ALIASES, resolve_convention

Array = jax.Array


def _check_gated_rms_norm(cfg: Any) -> None:
    fn = "jln GatedRMSNorm"
    resolve_convention(cfg.convention, fn)
    _validate.check_choice(cfg.activation, "activation", ACTIVATIONS, fn)
    _validate.check_eps(cfg.eps, fn)
    if cfg.group_size is not None:
        object.__setattr__(cfg, "group_size", _validate.check_positive(cfg.group_size, "group_size", fn))
    if cfg.norm_before_gate is not None and not isinstance(cfg.norm_before_gate, (bool, np.bool_)):
        raise TypeError(f"{fn}: `norm_before_gate` must be True, False or None; received {cfg.norm_before_gate!r}.")
    _validate.check_inits(cfg, fn, ("scale_init",))
    _validate.check_module_options(cfg, fn)


GatedRMSNormConfig = make_config(
    "GatedRMSNormConfig",
    (EPS.but(default=1e-6, doc="added to the mean square (transformers' default 1e-6)."),
     Option("convention", literal(ALIASES), "mamba", "``\"mamba\"``, ``\"qwen3_next\"`` or ``\"float32\"`` (or an "
            "alias): the cast order of :func:`jln.gated_rms_norm`. With ``dtype=None`` the output dtype is "
            "the convention's (``\"mamba\"``: bf16 x with float32 scale gives float32)."),
     Option("group_size", "int | None", None, "statistics per group of this many channels (``None``: the "
            "whole row)."),
     Option("norm_before_gate", "bool | None", None, "``None``: the convention's gate order."),
     Option("activation", literal(ACTIVATIONS), "silu", "the gate's activation, ``\"silu\"`` or ``\"sigmoid\"``."),
     AXIS, USE_SCALE.but(doc="learnable ``scale``."), *COMPUTE, *DISTRIBUTED, SCALE_INIT),
    _check_gated_rms_norm,
)


def gated_rms_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    return {"scale": param_spec(features, cfg.scale_init, ones)} if cfg.use_scale else {}


def apply_gated_rms_norm(params: Params, x: Array, cfg: Any, gate: Array | None = None) -> tuple[Array, Stats]:
    """``jln.gated_rms_norm(x, gate, scale, ...)`` with the module's dtype rule and monitor."""
    xi = cast_in(x, cfg.dtype)
    g = None if gate is None else cast_in(gate, cfg.dtype)
    y = gated_rms_norm(
        xi, g, params.get("scale"), axis=cfg.axis, eps=cfg.eps, group_size=cfg.group_size,
        norm_before_gate=cfg.norm_before_gate, convention=cfg.convention, activation=cfg.activation,
        impl=cfg.impl, **distributed(cfg),
    )
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, cfg.axis, "jln GatedRMSNorm")



GATED_RMS_NORM = Kind(
    "GatedRMSNorm", GatedRMSNormConfig, gated_rms_norm_specs, apply_gated_rms_norm, ("x",),
    call_options=(("gate", None, "jax.Array | None"),),
    doc="Gated RMSNorm (Mamba-2, hybrid SSMs): ``rms_norm(x * silu(gate)) * scale`` or "
        "``rms_norm(x) * scale * silu(gate)``.\n\n"
        "The gate order, groups and exact cast order of each convention are those of "
        ":func:`jln.gated_rms_norm`; ``gate`` (x's shape) is optional at the call.",
    returns="(``__call__(x, gate=None)``): array of ``x.shape``, dtype by the convention (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.gated_rms_norm`; otherwise as :class:`LayerNorm`.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.GatedRMSNorm(group_size=2)\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x, x).shape\n  (2, 4)",
              NNX_IMPORTS + "  >>> jnnx.GatedRMSNorm(4, convention=\"qwen3_next\")(jnp.ones((2, 4)), jnp.zeros((2, 4)))[0]\n"
              "  Array([0., 0., 0., 0.], dtype=float32)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES,),
)
