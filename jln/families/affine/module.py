"""The module kinds of the elementwise affine: ``Affine`` (learned ``scale`` and ``bias``,
MobileBERT's ``NoNorm``) and ``Standardize`` (fixed ``mean`` and ``inv_std`` held as state,
Phi-4-multimodal's audio ``MeanVarianceNormLayer``). Both call only :func:`jln.affine`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _modules as M
from jln import _validate
from jln.families.affine.function import affine
from jln.families.batch_norm.module import StateSpec

Array = jax.Array


def _check(fn: str) -> Any:
    def check(cfg: Any) -> None:
        if hasattr(cfg, "scale_init"):
            _validate.check_inits(cfg, fn)
        if isinstance(cfg.axis, list):
            object.__setattr__(cfg, "axis", tuple(cfg.axis))
        if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
            raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")

    return check


_AXIS = M.AXIS.but(doc="axis or axes of the features; the per-feature tensors have the shape of ``x`` there.")
_DTYPE = M.DTYPE.but(doc="``None``: the operands' promoted dtype (torch's); else ``x`` is cast to it first and "
                     "the output returned in it.")

AffineConfig = M.make_config(
    "AffineConfig",
    (_AXIS,
     M.USE_SCALE.but(doc="learnable per-feature ``scale`` (torch's ``weight``)."),
     M.USE_BIAS.but(doc="learnable per-feature ``bias``."),
     _DTYPE, M.PARAM_DTYPE, M.SCALE_INIT, M.BIAS_INIT),
    _check("jln Affine"),
)
StandardizeConfig = M.make_config(
    "StandardizeConfig",
    (_AXIS, _DTYPE, M.PARAM_DTYPE.but(doc="dtype of the two buffers ``mean`` and ``inv_std`` (float32).")),
    _check("jln Standardize"),
)


def affine_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, M.ParamSpec]:
    return M.norm_affine_specs(features, use_scale=cfg.use_scale, use_bias=cfg.use_bias,
                               scale_init=cfg.scale_init, bias_init=cfg.bias_init)


def standardize_state(cfg: Any, features: tuple[int, ...]) -> dict[str, StateSpec]:
    """``mean`` (zeros) and ``inv_std`` (ones): torch's buffers, never trained nor updated."""
    return {"mean": StateSpec(features, M.zeros), "inv_std": StateSpec(features, M.ones)}


def apply_affine(params: M.Params, x: Array, cfg: Any) -> tuple[Array, M.Stats]:
    """``jln.affine(x, scale, bias)`` with the module's options and dtype rule."""
    y = affine(M.cast_in(x, cfg.dtype), params.get("scale"), params.get("bias"), axis=cfg.axis)
    return M.cast_out(y, cfg.dtype), None


def apply_standardize(params: M.Params, x: Array, cfg: Any, *, state: dict[str, Any], training: bool) -> Any:
    """``jln.affine(x, inv_std, center=mean)``; nothing is updated, in training or not."""
    y = affine(M.cast_in(x, cfg.dtype), state["inv_std"], center=state["mean"], axis=cfg.axis)
    return (M.cast_out(y, cfg.dtype), None), None


AFFINE = M.Kind(
    "Affine", AffineConfig, affine_specs, apply_affine, ("x",),
    doc="A per-feature elementwise affine, ``x * scale + bias``, with torch's op-by-op rounding: "
        "transformers' MobileBERT ``NoNorm`` (``scale`` is its ``weight``).\n\nCalls :func:`jln.affine`; "
        "learnable ``scale`` (ones) and ``bias`` (zeros). Nothing is normalized: no statistics, no eps.",
    returns="(``__call__(x)``): array of ``x.shape``; dtype promoted from ``x``'s and the parameters' "
            "(bfloat16 ``x`` with float32 parameters: float32, as torch), or ``dtype``.",
    raises="TypeError, ValueError: as :func:`jln.affine` (NNX: also an ``x`` whose shape at ``axis`` is "
           "not ``num_features``).",
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.ones((2, 8))\n  >>> m = jnn.Affine()\n  >>> variables = "
              "m.init(jax.random.key(0), x)\n  >>> variables[\"params\"][\"scale\"].shape\n  (8,)\n"
              "  >>> m.apply(variables, x).shape\n  (2, 8)",
              M.NNX_IMPORTS + "  >>> m = jnnx.Affine(8, use_bias=False)\n  >>> m(jnp.ones((2, 8))).shape\n"
              "  (2, 8)"),
    rngs_doc=M.NORM_RNGS, shapes=(M.NUM_FEATURES,),
)
STANDARDIZE = M.Kind(
    "Standardize", StandardizeConfig, lambda cfg, n: {}, apply_standardize, ("x",),
    doc="A fixed per-feature standardization, ``(x - mean) * inv_std``, with torch's op-by-op rounding: "
        "transformers' Phi-4-multimodal ``Phi4MultimodalAudioMeanVarianceNormLayer`` (``global_mean``, "
        "``global_invstd``).\n\nCalls :func:`jln.affine` with ``center=mean``. Both are buffers in torch, "
        "so here they are state, never trained nor updated: ``mean`` (zeros) and ``inv_std`` (ones) in "
        "linen's ``\"batch_stats\"`` collection, as ``nnx.BatchStat`` in NNX (an optimizer over "
        "``nnx.Param`` leaves them frozen). Nothing is computed from ``x``'s statistics.",
    returns="(``__call__(x)``): array of ``x.shape``; dtype promoted from ``x``'s and the buffers' "
            "(bfloat16 ``x`` with float32 buffers: float32, as torch), or ``dtype``.",
    raises="TypeError, ValueError: as :func:`jln.affine` (NNX: also an ``x`` whose shape at ``axis`` is "
           "not ``num_features``).",
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.ones((2, 80))\n  >>> m = jnn.Standardize()\n  >>> v = "
              "m.init(jax.random.key(0), x)\n  >>> sorted(v[\"batch_stats\"])\n  ['inv_std', 'mean']\n"
              "  >>> m.apply(v, x).shape\n  (2, 80)",
              M.NNX_IMPORTS + "  >>> m = jnnx.Standardize(80)\n  >>> m(jnp.ones((2, 80))).shape\n  (2, 80)"),
    rngs_doc="unused (ones and zeros initializers); accepted for symmetry.", shapes=(M.NUM_FEATURES,),
    state=standardize_state,
)
