"""The ``DyT`` module kind: its options, parameters (``alpha``, ``scale``, ``bias``) and the
call of :func:`jln.dyt` that both faces make."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _validate
from jln._modules import (
    AXIS,
    BIAS_INIT,
    DTYPE,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    NUM_FEATURES,
    PARAM_DTYPE,
    SCALE_INIT,
    USE_BIAS,
    USE_SCALE,
    Kind,
    Option,
    Params,
    ParamSpec,
    Stats,
    cast_in,
    cast_out,
    constant,
    literal,
    make_config,
    norm_affine_specs,
)
from jln.families.dyt.function import dyt
from jln.families.dyt.spec import ALIASES, resolve_convention

Array = jax.Array


def _check_dyt(cfg: Any) -> None:
    fn = "jln DyT"
    resolve_convention(cfg.convention, fn)
    a = cfg.init_alpha
    ok = isinstance(a, (int, float, np.floating, np.integer)) and not isinstance(a, (bool, np.bool_))
    if not ok or not math.isfinite(float(a)):
        raise (TypeError if not ok else ValueError)(
            f"{fn}: `init_alpha` must be a finite Python float (alpha's initial value: 0.5 in the paper "
            f"and Liger, 4.0 in diffusers' DynamicTanh); received {a!r}."
        )
    object.__setattr__(cfg, "init_alpha", float(a))
    _validate.check_inits(cfg, fn)
    if isinstance(cfg.axis, list):
        object.__setattr__(cfg, "axis", tuple(cfg.axis))
    if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
        raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


DyTConfig = make_config(
    "DyTConfig",
    (Option("init_alpha", "float", 0.5, "initial value of the scalar ``alpha`` (0.5: the paper's and Liger's "
            "default; diffusers' ``DynamicTanh`` uses 4.0)."),
     Option("convention", literal(ALIASES), "torch", "``\"torch\"`` (alias ``\"diffusers\"``): op by op in the "
            "operands' promoted dtype, as torch evaluates the module; ``\"float32\"`` (alias ``\"liger\"``): "
            "float32 throughout, rounded once to ``x.dtype``. See :func:`jln.dyt`."),
     AXIS.but(doc="axis or axes of the features; ``scale`` and ``bias`` have the shape of ``x`` there."),
     USE_SCALE.but(doc="learnable per-feature ``scale`` (the paper's gamma)."),
     USE_BIAS.but(doc="learnable per-feature ``bias`` (the paper's beta; Liger's ``beta=True``)."),
     DTYPE.but(doc="``None``: the convention's output dtype; else ``x`` is cast to it first and the output "
               "returned in it."),
     PARAM_DTYPE, SCALE_INIT, BIAS_INIT),
    _check_dyt,
)


def dyt_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    # alpha is [1], as torch stores it (its dtype promotes as a dimensioned tensor's)
    return {"alpha": ParamSpec((1,), constant(cfg.init_alpha)),
            **norm_affine_specs(features, use_scale=cfg.use_scale, use_bias=cfg.use_bias,
                                scale_init=cfg.scale_init, bias_init=cfg.bias_init)}


def apply_dyt(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.dyt(x, alpha, scale, bias, ...)`` with the module's options and dtype rule."""
    y = dyt(cast_in(x, cfg.dtype), params["alpha"], params.get("scale"), params.get("bias"), axis=cfg.axis,
            convention=cfg.convention)
    return cast_out(y, cfg.dtype), None


DYT = Kind(
    "DyT", DyTConfig, dyt_specs, apply_dyt, ("x",),
    doc="Dynamic Tanh (Zhu et al. 2025), LayerNorm's normalization-free replacement: ``scale * tanh(alpha "
        "* x) + bias`` with one learned scalar ``alpha`` (shape ``[1]``, as torch's) and per-feature "
        "``scale`` (ones) and ``bias`` (zeros).\n\nCalls :func:`jln.dyt`; ``convention`` picks diffusers' "
        "``DynamicTanh`` rounding (op by op) or Liger's ``LigerDyT`` (float32, rounded once).",
    returns="(``__call__(x)``): array of ``x.shape``; dtype as :func:`jln.dyt` (or ``dtype``).",
    raises="TypeError, ValueError: a non-finite ``init_alpha``, an unknown ``convention``; as "
           ":func:`jln.dyt` otherwise (NNX: also an ``x`` whose shape at ``axis`` is not ``num_features``).",
    examples=(LINEN_IMPORTS + "  >>> x = jnp.ones((2, 8))\n  >>> m = jnn.DyT()\n  >>> variables = "
              "m.init(jax.random.key(0), x)\n  >>> variables[\"params\"][\"alpha\"]\n  Array([0.5], dtype=float32)\n"
              "  >>> m.apply(variables, x).shape\n  (2, 8)",
              NNX_IMPORTS + "  >>> m = jnnx.DyT(8, init_alpha=4.0, use_bias=False)\n  >>> m.alpha[...]\n"
              "  Array([4.], dtype=float32)\n  >>> m(jnp.ones((2, 8))).shape\n  (2, 8)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES,),
)
